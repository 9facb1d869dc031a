"""Part 2, paged KV and the paged step, on hidden inputs: logits, tables, lengths and pool state after
every action must match the reference's (logits to 1e-10, the rest exactly)."""
from grader.hidden.inputs import (ODD_BLOCK_SIZES, decodes, fits_exactly, fragment, pick, prefill_all,
                                  random_config, replay, script, tokens)
from grader.hidden.judges import script_judge


def plan_prefill(rng):
    cases = []
    for B in (pick(rng, (3, 5, 7)), 16, pick(rng, (1, 2, 9, 13))):
        lengths = [int(x) for x in rng.integers(1, 60, int(rng.integers(1, 4)))]
        cases.append(script(f"block size {B}", prefill_all(rng, lengths), block_size=B,
                            param_seed=int(rng.integers(1 << 20))))
    return cases


def plan_chunked_prefill(rng):
    cases = []
    for B in (pick(rng, (3, 4, 6)), pick(rng, (8, 11, 16)), 1):
        prompt = tokens(rng, int(rng.integers(20, 70)))
        actions, at = [["new"]], 0
        while at < len(prompt):
            size = int(rng.integers(1, 14))
            actions.append(["step", [0], [prompt[at:at + size]]])
            at += size
        cases.append(script(f"block size {B}", actions, block_size=B))
    return cases


def plan_decode_batches(rng):
    cases = []
    for B in (pick(rng, (2, 3, 5)), pick(rng, (4, 7, 16))):
        lengths = [int(x) for x in rng.integers(1, 40, 3)]
        actions = prefill_all(rng, lengths) + decodes(rng, 3, 12)
        actions += [["new"], ["step", [1, 3, 0], [tokens(rng, 1), tokens(rng, 17), tokens(rng, 5)]]]
        actions += decodes(rng, 4, 6)
        cases.append(script(f"block size {B}", actions, block_size=B))
    actions = prefill_all(rng, [int(rng.integers(1, 30)) for _ in range(2)], None) + decodes(rng, 2, 20)
    cases.append(script("a long decode", actions, block_size=pick(rng, (3, 5)), n_blocks=48))
    return cases


def plan_tables(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (4, 5, 7))):
        n = 64
        actions = fragment(rng, n, keep=int(rng.integers(8, 20)))
        actions += prefill_all(rng, [int(x) for x in rng.integers(1, 12, 3)]) + decodes(rng, 3, 8)
        actions += [["free", 1], ["new"], ["step", [3], [tokens(rng, int(rng.integers(6, 15)))]]]
        actions += decodes(rng, 4, 6)
        lengths = replay(None, n, B, actions)[-1]["lengths"]
        actions += [["read", i, layer, lengths[i]] for i in (0, 2, 3) for layer in (0, 1)]
        grow = int(rng.integers(1, 2 * B + 1))              # write and read past the length, within capacity
        actions += [["reserve", 2, grow]] + [["write", 2, layer, lengths[2], grow, int(rng.integers(1 << 30))]
                                             for layer in (0, 1)]
        actions += [["read", 2, layer, lengths[2] + grow] for layer in (0, 1)]
        cases.append(script(f"fragmented pool, block size {B}", actions, n_blocks=n, block_size=B))
    return cases


def plan_configs(rng):
    cases = []
    for i in range(4):
        cfg = random_config(rng)
        B = pick(rng, ODD_BLOCK_SIZES)
        lengths = [int(x) for x in rng.integers(1, 50, 2)]
        actions = prefill_all(rng, lengths, cfg) + decodes(rng, 2, 6, cfg)
        cases.append(script(f"Config {i}, block size {B}", actions, cfg=cfg, block_size=B, n_blocks=130 // B + 6,
                            param_seed=int(rng.integers(1 << 20))))
    return cases


def plan_all_or_nothing(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (4, 5))):
        n = int(rng.integers(8, 12))
        first = int(rng.integers(1, 2 * B))
        actions = [["new"], ["new"], ["step", [0], [tokens(rng, first)]]]
        # seq 0 fits, seq 1's prefill does not: the whole step must leave everything as it was
        actions += [["step", [0, 1], [tokens(rng, 1), tokens(rng, n * B)]]]
        actions += [["fork", 0], ["fork", 0], ["reserve", 2, (n - 2) * B], ["reserve", 1, (n - 1) * B]]
        actions += [["alloc"] for _ in range(n)]
        actions += [["step", [0, 2, 3], [tokens(rng, 1)] * 3], ["step", [1], [tokens(rng, B + 1)]]]
        actions += [["reserve", 1, n * B], ["decref", n - 1], ["step", [2], [tokens(rng, 1)]]]
        cases.append(script(f"block size {B}", actions, n_blocks=n, block_size=B))
    return cases


def plan_exact_count(rng):
    cases = []
    B = pick(rng, (3, 4, 5))
    forks = int(rng.integers(2, 5))
    prefix = [["new"], ["step", [0], [tokens(rng, B + int(rng.integers(1, B)))]]] + [["fork", 0]] * forks
    step = ["step", list(range(forks + 1)), [tokens(rng, 1) for _ in range(forks + 1)]]
    cases += [script(f"{forks} forks, exact fit", a, n_blocks=20, block_size=B)
              for a in fits_exactly(None, 20, B, prefix, step)]
    prefix = [["new"], ["new"], ["step", [0, 1], [tokens(rng, 2 * B - 1), tokens(rng, B)]], ["fork", 0]]
    step = ["step", [0, 1, 2], [tokens(rng, 2), tokens(rng, B + 1), tokens(rng, 1)]]
    cases += [script("mixed step, exact fit", a, n_blocks=20, block_size=B)
              for a in fits_exactly(None, 20, B, prefix, step)]
    return cases


def plan_bad_input(rng):
    small = random_config(rng, max_len=int(rng.integers(20, 40)))
    V, L, B = small["vocab"], small["max_len"], pick(rng, (3, 4, 5))
    ok = tokens(rng, 3, small)
    actions = [["new"], ["new"], ["step", [0], [ok]],
               ["step", [0, 1], [ok]], ["step", [0], [ok, ok]], ["step", [0], [[]]], ["step", [0, 1], [ok, []], True],
               ["step", [0], [[0, -1]]], ["step", [0, 1], [ok, [V]]], ["step", [1], [[V + 50]]],
               ["step", [1], [[-V]]], ["step", [1], [[5, V - 1 + 1]], True],
               ["step", [0], [tokens(rng, L - 2, small)]], ["step", [1], [tokens(rng, L + 1, small)]],
               ["step", [], []], ["step", [0], [tokens(rng, L - 3, small)], True],
               ["step", [0], [[1]]], ["step", [0], [[1]]], ["step", [1], [ok], True],
               ["reserve", 1, 0], ["reserve", 1, -2], ["reserve", 1, 1]]
    full = [["new"], ["new"], ["step", [0], [tokens(rng, 2 * B, small)]]] + [["alloc"]] * 8
    full += [["step", [1], [tokens(rng, B, small)]], ["step", [1], [[V]]], ["step", [0, 1], [[1], [-1]]],
             ["step", [0], [tokens(rng, L, small)]], ["step", [0], [[V - 1]]]]
    return [script("bad tokens and lengths", actions, cfg=small, block_size=B, n_blocks=40),
            script("bad input on a full pool", full, cfg=small, block_size=B, n_blocks=10)]


PLANS = {
    "paged_step.prefill": plan_prefill,
    "paged_step.chunked_prefill": plan_chunked_prefill,
    "paged_step.decode_batches": plan_decode_batches,
    "paged_step.tables": plan_tables,
    "paged_step.configs": plan_configs,
    "paged_step.all_or_nothing": plan_all_or_nothing,
    "paged_step.exact_count": plan_exact_count,
    "paged_step.bad_input": plan_bad_input,
}
JUDGES = dict.fromkeys(PLANS, script_judge)


def test_paged_step(case, judge):
    judge(case)
