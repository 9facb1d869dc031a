"""Part 4, sharing and copy-on-write, on hidden inputs. Two kinds of scripts, both judged by the
contract's rules on the submission's own tables and refcounts (rules.sharing_violation):
- "grow" scripts advance sequences with reserve plus K/V the test stores itself through the tables,
  so no paged_step is involved, and every sequence's K/V must read back as the test stored it;
- "step" scripts use paged_step, and must give the same logits and K/V as the same implementation
  without sharing (each fork a new sequence that prefills its parent's tokens in its parent's chunks):
  a second run, a step_script in a worker of its own (inputs.sharing_case, scenarios.unshared_script).
  Their sequences start with a grow (the test's blocks and K/V) and then step by at most a block, so
  how many blocks an empty sequence or a chunk of many blocks takes (Part 2's count) is not asked here.
The drivers run with the tokens (and beam scores) chosen by the test, not drawn from the logits, and
are judged on the pool they leave after every step; their prefill is the test's grow (scenarios._StepWatch). Everything runs on TINY with an ample pool:
which ids the allocator picks, the pool's counters and Part 2's logits are not Part 4's.
Each check's cases but its last are the same for every seed (inputs.core_rng); the last is drawn."""
from grader.hidden.inputs import ODD_BLOCK_SIZES, Case, core_rng, pick, sharing_case, tokens
from grader.hidden.judges import beam_judge, naming_part2, sampling_judge, sharing_judge


def seed(rng):
    return int(rng.integers(1 << 30))


def grow(rng, i, n):
    return ["grow", i, n, seed(rng)]


def partial(rng, B, most=3):
    """A length that leaves the last block partly filled."""
    return int(rng.integers(1, most + 1)) * B + int(rng.integers(1, B))


def fork_case(rng, B, first):
    actions = [["new"], grow(rng, 0, first), ["fork", 0], ["fork", 0], ["fork", 2],
               grow(rng, 3, 1), ["fork", 3], ["new"], ["fork", 5], grow(rng, 6, 2), ["fork", 1]]
    return sharing_case(f"block size {B}, {first} positions", actions, block_size=B)


def plan_fork(rng):
    """Forks of a partly filled table, of a full one, of an empty sequence, of forks: the same shapes for
    every seed (block sizes 3 and 4, lengths 7 and 8), then one drawn."""
    core = core_rng("copy_on_write.fork")
    cases = [fork_case(core, 3, 7), fork_case(core, 4, 8)]
    B = 5
    actions = [["new"], grow(core, 0, 2 * B + 1), ["fork", 0], ["fork", 1],
               grow(core, 2, 1), grow(core, 0, 2), ["fork", 2], grow(core, 3, B)]
    cases.append(sharing_case(f"forks of forks, block size {B}", actions, block_size=B))
    B = pick(rng, (2, 5, 6, 8))
    return cases + [fork_case(rng, B, int(rng.integers(1, 4 * B)))]


def when_case(rng, B, part_len, full):
    actions = [["new"], ["new"], grow(rng, 0, part_len), grow(rng, 1, full),
               ["fork", 0], ["fork", 1],
               grow(rng, 2, 1), grow(rng, 0, 1),                      # one copy, then in place
               ["reserve", 3, 1], grow(rng, 3, 1), grow(rng, 1, 1),   # a full shared block: no copy
               ["fork", 2], grow(rng, 4, B), grow(rng, 2, 2),
               ["fork", 1], ["reserve", 5, 1],
               ["fork", 0], ["reserve", 6, B + 1]]                   # a copy, then a new block after it
    return sharing_case(f"block size {B}", actions, block_size=B)


def plan_copy_when_needed(rng):
    B, core = pick(rng, (5, 6, 7)), core_rng("copy_on_write.copy_when_needed")
    return [when_case(core, 3, 4, 3), when_case(core, 4, 10, 8), when_case(core, 2, 3, 4),
            when_case(rng, B, partial(rng, B, 2), int(rng.integers(1, 3)) * B)]


def holders_case(rng, n, B, length, sizes):
    actions = [["new"], grow(rng, 0, length)] + [["fork", 0]] * (n - 1)
    actions += [grow(rng, i, size) for i, size in sizes]
    return sharing_case(f"{n} holders, block size {B}", actions, block_size=B)


def plan_n_minus_1(rng):
    """n holders of a partly filled block write in turn: n - 1 copies, the last writes in place."""
    core = core_rng("copy_on_write.n_minus_1")
    cases = [holders_case(core, 2, 4, 6, [(1, 1), (0, 3)]),
             holders_case(core, 4, 5, 7, [(2, 1), (0, 6), (3, 2), (1, 1)]),
             holders_case(core, 3, 16, 17, [(0, 1), (2, 16), (1, 2)])]
    n, B = 5, 3
    actions = [["new"], grow(core, 0, 2 * B + 2)] + [["fork", 0]] * (n - 1)
    order = [3, 0, 4, 1, 2]
    actions += [grow(core, i, 1) for i in order] + [grow(core, i, 1) for i in order[::-1]]
    cases.append(sharing_case(f"{n} holders writing a token each, twice, block size {B}", actions, block_size=B))
    n, B = int(rng.integers(3, 6)), pick(rng, (4, 5, 7))
    order = rng.permutation(n).tolist()
    return cases + [holders_case(rng, n, B, partial(rng, B), [(i, int(rng.integers(1, B + 2))) for i in order])]


def data_case(rng, B):
    actions = [["new"], grow(rng, 0, 2 * B + 1), ["fork", 0], ["fork", 0], grow(rng, 1, 1), grow(rng, 0, B),
               ["fork", 1], grow(rng, 3, 2), grow(rng, 2, 1), ["free", 1], grow(rng, 3, B + 1), ["free", 0],
               ["new"], grow(rng, 4, 3 * B - 1), grow(rng, 2, 1)]
    return sharing_case(f"block size {B}", actions, block_size=B)


def plan_copied_data(rng):
    core = core_rng("copy_on_write.copied_data")
    return [data_case(core, B) for B in (2, 3, 5, 4)] + [data_case(rng, pick(rng, (6, 7, 9)))]


def free_case(rng, B, first, later):
    actions = [["new"], ["free", 0], grow(rng, 0, first), ["fork", 0],
               ["fork", 1], grow(rng, 1, 1), ["free", 0], grow(rng, 2, 2),
               ["free", 1], ["free", 1], grow(rng, 1, later),
               ["free", 2], ["free", 1], ["new"], grow(rng, 3, 3), grow(rng, 0, B)]
    return sharing_case(f"block size {B}", actions, block_size=B)


def plan_free(rng):
    core = core_rng("copy_on_write.free")
    cases = [free_case(core, 2, 5, 3), free_case(core, 4, 8, 9)]
    B = 3
    actions = [["new"], grow(core, 0, 2 * B + 1), ["fork", 0], ["free", 0],
               grow(core, 1, 1), ["fork", 1], ["free", 1], grow(core, 0, 3), grow(core, 0, 1), grow(core, 2, 1)]
    cases.append(sharing_case(f"free after fork, block size {B}", actions, block_size=B))
    B = pick(rng, (3, 5, 9))
    return cases + [free_case(rng, B, int(rng.integers(2, 4 * B)), int(rng.integers(1, 3 * B)))]


def invariance_case(rng, B, first, chunk):
    actions = [["new"], grow(rng, 0, first), ["fork", 0], ["fork", 0]]
    actions += [["step", [2, 0, 1], [tokens(rng, 1), tokens(rng, chunk), tokens(rng, 2)]]]
    actions += [["fork", 1], ["free", 0], ["step", [3, 1], [tokens(rng, B), tokens(rng, 1)]]]
    actions += [["fork", 3], ["step", [4, 2, 3], [tokens(rng, 1)] * 3], ["free", 2], ["new"], grow(rng, 5, 2 * B),
                ["step", [5, 4], [tokens(rng, 1), tokens(rng, 1)]]]
    return sharing_case(f"block size {B}", actions, block_size=B, twin=True)


def plan_sharing_invariance(rng):
    """Forks stepped by paged_step: the same logits and K/V as the same code without sharing (its twin,
    a second run graded as Part 2's paged_step.replays). In the core case a fork's chunk runs from its
    shared, partly filled last block into a new one: the copy comes first."""
    return [invariance_case(core_rng("copy_on_write.sharing_invariance"), 3, 7, 3), invariance_case(rng, 4, 8, 4)]


def sampling_case(rng, n, B, prompt_len, max_new):
    return Case(f"{n} samples, block size {B}, a {prompt_len}-token prompt", "sampling", {
        "cfg": None, "param_seed": int(rng.integers(1 << 20)), "prompt": tokens(rng, prompt_len),
        "n": n, "max_new": max_new, "temperature": float(rng.uniform(0.6, 1.5)),
        "seed": seed(rng), "n_blocks": 200, "block_size": B, "choose_seed": seed(rng)})


def plan_parallel_sampling(rng):
    """A prompt with a partly filled last block and one that fills whole blocks, then one drawn."""
    n, B = int(rng.integers(3, 7)), pick(rng, ODD_BLOCK_SIZES[1:12])
    core = core_rng("copy_on_write.parallel_sampling")
    return [sampling_case(core, 2, 4, 10, 7), sampling_case(core, 4, 5, 15, 9), sampling_case(core, 6, 3, 7, 12),
            sampling_case(rng, n, B, int(rng.integers(B, 60)), int(rng.integers(4, 16)))]


def beams_case(rng, k, B, prompt_len, steps):
    return Case(f"beam width {k}, block size {B}, a {prompt_len}-token prompt", "beams", {
        "cfg": None, "param_seed": int(rng.integers(1 << 20)), "prompt": tokens(rng, prompt_len),
        "k": k, "steps": steps, "n_blocks": 300, "block_size": B, "choose_seed": seed(rng)})


def plan_beam_search(rng):
    k, B = int(rng.integers(3, 7)), pick(rng, ODD_BLOCK_SIZES[1:12])
    core = core_rng("copy_on_write.beam_search")
    return [beams_case(core, 2, 3, 7, 8), beams_case(core, 4, 4, 12, 10), beams_case(core, 5, 2, 9, 6),
            beams_case(rng, k, B, int(rng.integers(B, 40)), int(rng.integers(4, 12)))]


PLANS = {
    "copy_on_write.fork": plan_fork,
    "copy_on_write.copy_when_needed": plan_copy_when_needed,
    "copy_on_write.n_minus_1": plan_n_minus_1,
    "copy_on_write.copied_data": plan_copied_data,
    "copy_on_write.free": plan_free,
    "copy_on_write.sharing_invariance": plan_sharing_invariance,
    "copy_on_write.parallel_sampling": plan_parallel_sampling,
    "copy_on_write.beam_search": plan_beam_search,
}
JUDGES = {check: naming_part2(judge) for check, judge in {
    "copy_on_write.fork": sharing_judge,
    "copy_on_write.copy_when_needed": sharing_judge,
    "copy_on_write.n_minus_1": sharing_judge,
    "copy_on_write.copied_data": sharing_judge,
    "copy_on_write.free": sharing_judge,
    "copy_on_write.sharing_invariance": sharing_judge,
    "copy_on_write.parallel_sampling": sampling_judge,
    "copy_on_write.beam_search": beam_judge,
}.items()}


def test_copy_on_write(case, judge):
    judge(case)
