"""Part 4, sharing and copy-on-write, on hidden inputs: fork, lazy copies, the copies' data, free,
and the two drivers, all against the reference."""
from grader.hidden.inputs import ODD_BLOCK_SIZES, Case, decodes, pick, random_config, script, tokens
from grader.hidden.judges import script_judge


def with_kv(case):
    case.inputs["record_kv"] = True
    return case


def plan_fork(rng):
    cases = []
    for B in (pick(rng, (2, 3, 5)), pick(rng, (4, 8))):
        actions = [["new"], ["step", [0], [tokens(rng, int(rng.integers(1, 4 * B)))]], ["fork", 0], ["fork", 0],
                   ["fork", 2], ["step", [3], [tokens(rng, 1)]], ["fork", 3], ["new"], ["fork", 5]]
        cases.append(script(f"block size {B}", actions, block_size=B))
    return cases


def plan_copy_when_needed(rng):
    cases = []
    for B in (pick(rng, (3, 5)), pick(rng, (4, 6, 7))):
        partial = int(rng.integers(1, 3)) * B + int(rng.integers(1, B))
        full = int(rng.integers(1, 3)) * B
        actions = [["new"], ["new"], ["step", [0, 1], [tokens(rng, partial), tokens(rng, full)]],
                   ["fork", 0], ["fork", 1],
                   ["step", [2], [tokens(rng, 1)]], ["step", [0], [tokens(rng, 1)]],     # one copy, then in place
                   ["step", [3, 1], [tokens(rng, 1), tokens(rng, 1)]],                   # full block: no copy
                   ["fork", 2], ["step", [4, 2], [tokens(rng, B), tokens(rng, 2)]],
                   ["fork", 1], ["reserve", 5, 1], ["reserve", 5, 1]]
        cases.append(script(f"block size {B}", actions, block_size=B))
    return cases


def plan_n_minus_1(rng):
    cases = []
    for n in (2, int(rng.integers(3, 6)), int(rng.integers(5, 8))):
        B = pick(rng, (4, 5, 16))
        prompt = int(rng.integers(1, 4)) * B + int(rng.integers(1, B))
        actions = [["new"], ["step", [0], [tokens(rng, prompt)]]] + [["fork", 0]] * (n - 1)
        order = rng.permutation(n).tolist()
        actions += [["step", order[: n // 2 + 1], [tokens(rng, 1) for _ in order[: n // 2 + 1]]],
                    ["step", order[n // 2 + 1:] or [0], [tokens(rng, 1) for _ in (order[n // 2 + 1:] or [0])]]]
        actions += decodes(rng, n, 3)
        cases.append(script(f"{n} samples, block size {B}", actions, block_size=B, n_blocks=80))
    return cases


def plan_copied_data(rng):
    cases = []
    for i, cfg in enumerate([None, random_config(rng)]):
        B = pick(rng, (2, 3, 5, 7))
        actions = [["new"], ["step", [0], [tokens(rng, 2 * B + 1, cfg)]], ["fork", 0], ["fork", 0],
                   ["step", [1, 0], [tokens(rng, 1, cfg), tokens(rng, B, cfg)]], ["fork", 1],
                   ["step", [3, 2], [tokens(rng, 2, cfg), tokens(rng, 1, cfg)]]] + decodes(rng, 4, 3, cfg)
        cases.append(with_kv(script(f"Config {i}, block size {B}", actions, cfg=cfg, block_size=B)))
    return cases


def plan_free(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (4, 5, 9))):
        actions = [["new"], ["free", 0], ["step", [0], [tokens(rng, int(rng.integers(2, 4 * B)))]], ["fork", 0],
                   ["fork", 1], ["step", [1], [tokens(rng, 1)]], ["free", 0], ["step", [2], [tokens(rng, 2)]],
                   ["free", 1], ["free", 1], ["step", [1], [tokens(rng, int(rng.integers(1, 3 * B)))]],
                   ["free", 2], ["free", 1], ["new"], ["step", [3, 0], [tokens(rng, 3), tokens(rng, B)]]]
        cases.append(script(f"block size {B}", actions, block_size=B, n_blocks=24))
    return cases


def plan_parallel_sampling(rng):
    cases = []
    for n in (1, int(rng.integers(2, 4)), int(rng.integers(4, 7))):
        B = pick(rng, ODD_BLOCK_SIZES[1:12])
        cfg = None if n != 1 else random_config(rng)
        cases.append(Case(f"{n} samples, block size {B}", "sampling", {
            "cfg": cfg, "param_seed": int(rng.integers(1 << 20)), "prompt": tokens(rng, int(rng.integers(1, 60)), cfg),
            "n": n, "max_new": int(rng.integers(4, 16)), "temperature": float(rng.uniform(0.6, 1.5)),
            "seed": int(rng.integers(1 << 30)), "n_blocks": 200, "block_size": B}))
    return cases


def plan_beam_search(rng):
    cases = []
    for k in (2, int(rng.integers(3, 5)), int(rng.integers(5, 7))):
        B = pick(rng, ODD_BLOCK_SIZES[1:12])
        cases.append(Case(f"beam width {k}, block size {B}", "beams", {
            "cfg": None, "param_seed": int(rng.integers(1 << 20)), "prompt": tokens(rng, int(rng.integers(1, 40))),
            "k": k, "steps": int(rng.integers(4, 12)), "n_blocks": 300, "block_size": B}))
    return cases


PLANS = {
    "copy_on_write.fork": plan_fork,
    "copy_on_write.copy_when_needed": plan_copy_when_needed,
    "copy_on_write.n_minus_1": plan_n_minus_1,
    "copy_on_write.copied_data": plan_copied_data,
    "copy_on_write.free": plan_free,
    "copy_on_write.parallel_sampling": plan_parallel_sampling,
    "copy_on_write.beam_search": plan_beam_search,
}
JUDGES = {check: script_judge for check in list(PLANS)[:5]}


def test_copy_on_write(case, judge):
    judge(case)
