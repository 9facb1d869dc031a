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
which ids the allocator picks, the pool's counters and Part 2's logits are not Part 4's."""
from grader.hidden.inputs import ODD_BLOCK_SIZES, Case, pick, sharing_case, tokens
from grader.hidden.judges import beam_judge, sampling_judge, sharing_judge


def seed(rng):
    return int(rng.integers(1 << 30))


def grow(rng, i, n):
    return ["grow", i, n, seed(rng)]


def partial(rng, B, most=3):
    """A length that leaves the last block partly filled."""
    return int(rng.integers(1, most + 1)) * B + int(rng.integers(1, B))


def plan_fork(rng):
    cases = []
    for B in (pick(rng, (2, 3, 5)), pick(rng, (4, 8))):
        actions = [["new"], grow(rng, 0, int(rng.integers(1, 4 * B))), ["fork", 0], ["fork", 0], ["fork", 2],
                   grow(rng, 3, 1), ["fork", 3], ["new"], ["fork", 5], grow(rng, 6, 2), ["fork", 1]]
        cases.append(sharing_case(f"block size {B}", actions, block_size=B))
    B = pick(rng, (3, 4, 5))
    actions = [["new"], grow(rng, 0, partial(rng, B)), ["fork", 0], ["fork", 1],
               grow(rng, 2, 1), grow(rng, 0, 2), ["fork", 2], grow(rng, 3, B)]
    cases.append(sharing_case(f"forks of forks, block size {B}", actions, block_size=B))
    return cases


def plan_copy_when_needed(rng):
    cases = []
    for B in (pick(rng, (3, 5)), pick(rng, (4, 6, 7))):
        full = int(rng.integers(1, 3)) * B
        actions = [["new"], ["new"], grow(rng, 0, partial(rng, B, 2)), grow(rng, 1, full),
                   ["fork", 0], ["fork", 1],
                   grow(rng, 2, 1), grow(rng, 0, 1),                      # one copy, then in place
                   grow(rng, 3, 1), grow(rng, 1, 1),                      # a full shared block: no copy
                   ["fork", 2], grow(rng, 4, B), grow(rng, 2, 2),
                   ["fork", 1], ["reserve", 5, 1]]
        cases.append(sharing_case(f"block size {B}", actions, block_size=B))
    return cases


def plan_n_minus_1(rng):
    cases = []
    for n in (2, int(rng.integers(3, 6))):
        B = pick(rng, (4, 5, 16))
        actions = [["new"], grow(rng, 0, partial(rng, B))] + [["fork", 0]] * (n - 1)
        actions += [grow(rng, i, int(rng.integers(1, B + 2))) for i in rng.permutation(n).tolist()]
        cases.append(sharing_case(f"{n} holders, block size {B}", actions, block_size=B))
    n, B = int(rng.integers(3, 7)), pick(rng, (3, 5, 7))
    actions = [["new"], grow(rng, 0, partial(rng, B))] + [["fork", 0]] * (n - 1)
    order = rng.permutation(n).tolist()
    actions += [grow(rng, i, 1) for i in order] + [grow(rng, i, 1) for i in order[::-1]]
    cases.append(sharing_case(f"{n} holders writing a token each, twice, block size {B}", actions, block_size=B))
    return cases


def plan_copied_data(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (5, 7)), pick(rng, (4, 9))):
        actions = [["new"], grow(rng, 0, 2 * B + 1), ["fork", 0], ["fork", 0], grow(rng, 1, 1), grow(rng, 0, B),
                   ["fork", 1], grow(rng, 3, 2), grow(rng, 2, 1), ["free", 1], grow(rng, 3, B + 1), ["free", 0],
                   ["new"], grow(rng, 4, 3 * B - 1), grow(rng, 2, 1)]
        cases.append(sharing_case(f"block size {B}", actions, block_size=B))
    return cases


def plan_free(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (4, 5, 9))):
        actions = [["new"], ["free", 0], grow(rng, 0, int(rng.integers(2, 4 * B))), ["fork", 0],
                   ["fork", 1], grow(rng, 1, 1), ["free", 0], grow(rng, 2, 2),
                   ["free", 1], ["free", 1], grow(rng, 1, int(rng.integers(1, 3 * B))),
                   ["free", 2], ["free", 1], ["new"], grow(rng, 3, 3), grow(rng, 0, B)]
        cases.append(sharing_case(f"block size {B}", actions, block_size=B))
    B = pick(rng, (3, 4))
    actions = [["new"], grow(rng, 0, partial(rng, B)), ["fork", 0], ["free", 0],
               grow(rng, 1, 1), ["fork", 1], ["free", 1], grow(rng, 0, 3), grow(rng, 0, 1), grow(rng, 2, 1)]
    cases.append(sharing_case(f"free after fork, block size {B}", actions, block_size=B))
    return cases


def plan_sharing_invariance(rng):
    cases = []
    for B in (pick(rng, (2, 3, 5)), pick(rng, (4, 7, 16))):
        actions = [["new"], grow(rng, 0, int(rng.integers(B, 4 * B))), ["fork", 0], ["fork", 0]]
        actions += [["step", [2, 0, 1], [tokens(rng, 1), tokens(rng, int(rng.integers(1, B + 1))), tokens(rng, 2)]]]
        actions += [["fork", 1], ["free", 0], ["step", [3, 1], [tokens(rng, B), tokens(rng, 1)]]]
        actions += [["fork", 3], ["step", [4, 2, 3], [tokens(rng, 1)] * 3], ["free", 2], ["new"], grow(rng, 5, 2 * B),
                    ["step", [5, 4], [tokens(rng, 1), tokens(rng, 1)]]]
        cases.append(sharing_case(f"block size {B}", actions, block_size=B, twin=True))
    return cases


def plan_parallel_sampling(rng):
    cases = []
    for n in (2, int(rng.integers(3, 5)), int(rng.integers(5, 7))):
        B = pick(rng, ODD_BLOCK_SIZES[1:12])
        cases.append(Case(f"{n} samples, block size {B}", "sampling", {
            "cfg": None, "param_seed": int(rng.integers(1 << 20)), "prompt": tokens(rng, int(rng.integers(B, 60))),
            "n": n, "max_new": int(rng.integers(4, 16)), "temperature": float(rng.uniform(0.6, 1.5)),
            "seed": seed(rng), "n_blocks": 200, "block_size": B, "choose_seed": seed(rng)}))
    return cases


def plan_beam_search(rng):
    cases = []
    for k in (2, int(rng.integers(3, 5)), int(rng.integers(5, 7))):
        B = pick(rng, ODD_BLOCK_SIZES[1:12])
        cases.append(Case(f"beam width {k}, block size {B}", "beams", {
            "cfg": None, "param_seed": int(rng.integers(1 << 20)), "prompt": tokens(rng, int(rng.integers(B, 40))),
            "k": k, "steps": int(rng.integers(4, 12)), "n_blocks": 300, "block_size": B, "choose_seed": seed(rng)}))
    return cases


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
JUDGES = {
    "copy_on_write.fork": sharing_judge,
    "copy_on_write.copy_when_needed": sharing_judge,
    "copy_on_write.n_minus_1": sharing_judge,
    "copy_on_write.copied_data": sharing_judge,
    "copy_on_write.free": sharing_judge,
    "copy_on_write.sharing_invariance": sharing_judge,
    "copy_on_write.parallel_sampling": sampling_judge,
    "copy_on_write.beam_search": beam_judge,
}


def test_copy_on_write(case, judge):
    judge(case)
