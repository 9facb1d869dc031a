"""Part 2, paged KV and the paged step, on hidden inputs. Scripts use paged_step, reserve, write and
read on a pool the test shapes with blocks of its own, never fork or free (Part 4). Judged on what
Part 2 owns (rules.part2_view): logits (1e-10), lengths, errors, all-or-nothing, and the block tables
with every block named by its place in the allocation order, so any allocator gives the same view."""
from grader.hidden.inputs import (ODD_BLOCK_SIZES, decodes, interleaved, pick, prefill_all, random_config, step_case,
                                  tokens)
from grader.hidden.judges import PART2_FIELDS, part2_judge


def taken(rng, most=4):
    """The test takes a few blocks first, so the sequences' blocks do not start at the pool's first."""
    return [["alloc"]] * int(rng.integers(1, most + 1))


def plan_prefill(rng):
    cases = []
    for B in (pick(rng, (3, 5, 7)), 16, pick(rng, (1, 2, 9, 13))):
        lengths = [int(x) for x in rng.integers(1, 60, int(rng.integers(1, 4)))]
        cases.append(step_case(f"block size {B}", taken(rng) + prefill_all(rng, lengths), block_size=B,
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
        cases.append(step_case(f"block size {B}", actions, block_size=B))
    return cases


def plan_decode_batches(rng):
    cases = []
    for B in (pick(rng, (2, 3, 5)), pick(rng, (4, 7, 16))):
        lengths = [int(x) for x in rng.integers(1, 40, 3)]
        actions = prefill_all(rng, lengths) + interleaved(rng, 3, 12)
        actions += [["new"], ["step", [1, 3, 0], [tokens(rng, 1), tokens(rng, 17), tokens(rng, 5)]]]
        actions += decodes(rng, 4, 3)
        # the test overwrites a stored position: the next logits must be computed from pool storage
        actions += [["poke", 1, int(rng.integers(0, lengths[1])), int(rng.integers(1 << 30))]] + decodes(rng, 4, 3)
        cases.append(step_case(f"block size {B}", actions, block_size=B, n_blocks=256))     # ample: logits, not room
    actions = prefill_all(rng, [int(rng.integers(1, 30)) for _ in range(2)], None) + decodes(rng, 2, 20)
    cases.append(step_case("a long decode", actions, block_size=pick(rng, (3, 5)), n_blocks=48))
    return cases


def plan_tables(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (4, 5, 7))):
        n = 64
        held = int(rng.integers(8, 20))                 # setup: blocks taken, some given back (a used pool)
        actions = [["alloc"]] * held + [["release", h] for h in rng.permutation(held)[: held // 2].tolist()]
        actions += prefill_all(rng, [int(x) for x in rng.integers(1, 12, 3)]) + interleaved(rng, 3, 8)
        actions += [["new"], ["step", [3], [tokens(rng, int(rng.integers(6, 15)))]]] + interleaved(rng, 4, 6)
        actions += [["read", i, layer, -1] for i in (0, 2, 3) for layer in (0, 1)]
        grow = int(rng.integers(1, 2 * B + 1))          # write and read past the length, within capacity
        actions += [["reserve", 2, grow]] + [["write", 2, layer, -1, grow, int(rng.integers(1 << 30))]
                                             for layer in (0, 1)]
        actions += [["read", 2, layer, -grow - 1] for layer in (0, 1)]
        cases.append(step_case(f"fragmented pool, block size {B}", _lengths_filled(actions, B), n_blocks=n,
                               block_size=B, record_kv=True))
    return cases


def _lengths_filled(actions, B):
    """Reads and writes at the sequence's length (-1), or past it by k (-k-1): the lengths are the
    script's own (each step adds its chunk), so they are the same for every implementation."""
    lengths, out = [], []
    for a in actions:
        if a[0] == "new":
            lengths.append(0)
        elif a[0] == "step":
            for i, c in zip(a[1], a[2]):
                lengths[i] += len(c)
        elif a[0] == "read" and a[3] < 0:
            a = ["read", a[1], a[2], lengths[a[1]] - a[3] - 1]
        elif a[0] == "write" and a[3] < 0:
            a = ["write", a[1], a[2], lengths[a[1]], *a[4:]]
        out.append(a)
    return out


def plan_configs(rng):
    cases = []
    for i in range(4):
        cfg = random_config(rng)
        B = pick(rng, ODD_BLOCK_SIZES)
        lengths = [int(x) for x in rng.integers(1, 50, 2)]
        actions = taken(rng, 2) + prefill_all(rng, lengths, cfg) + interleaved(rng, 2, 6, cfg)
        cases.append(step_case(f"Config {i}, block size {B}", actions, cfg=cfg, block_size=B, n_blocks=130 // B + 12,
                               param_seed=int(rng.integers(1 << 20)), record_kv=True))
    return cases


def plan_all_or_nothing(rng):
    cases = []
    for B in (pick(rng, (2, 3)), pick(rng, (4, 5))):
        first = int(rng.integers(1, 2 * B))
        actions = [["new"], ["new"], ["step", [0], [tokens(rng, first)]]]
        # seq 0's token fits, seq 1's prefill does not: the whole step must leave everything as it was
        actions += [["miss", [0, 1], [tokens(rng, 1), tokens(rng, int(rng.integers(2, 4)) * B)]]]
        actions += [["step", [0, 1], [tokens(rng, 1), tokens(rng, B)]]]     # what the pool still has is usable
        actions += [["reserve", 1, 40 * B], ["miss", [1, 0], [tokens(rng, B + 1), tokens(rng, 2)]]]
        # seq 1's last block is full, so whether its last step fits is the count's alone: a partly filled
        # one would also ask whether copy-on-write (Part 4) copies a block nobody shares
        actions += [["step", [1], [tokens(rng, 1)]]]
        cases.append(step_case(f"block size {B}", actions, n_blocks=40, block_size=B))
    B = pick(rng, (3, 4, 5))
    actions = [["new"], ["new"], ["step", [0, 1], [tokens(rng, B + 1), tokens(rng, 2 * B)]], ["share", 0],
               ["miss", [1, 0], [tokens(rng, 1), tokens(rng, 1)]]]
    cases.append(step_case(f"a copy that does not fit, block size {B}", actions, n_blocks=24, block_size=B))
    cases.append(bare_reserve_case(rng))
    return cases


def bare_reserve_case(rng):
    """reserve alone, one block short while some are free: it must take none of them (a reserve that
    allocates block by block keeps what it got); then one that fits with a block to spare, and a
    step into it (an exact fit is exact_count's, which holds blocks by the pool's own n_free: here an
    n_free off by one, Part 1's, would refuse it)."""
    B, held, free = pick(rng, (2, 3, 4, 5)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    L = B + int(rng.integers(1, B))                     # two blocks, the second partly filled
    short = (free + 2) * B - L + int(rng.integers(1, B + 1))     # needs free + 1 new blocks
    actions = [["alloc"]] * held + [["new"], ["step", [0], [tokens(rng, L)]],
                                    ["reserve", 0, short], ["reserve", 0, max(1, short - 2 * B)],
                                    ["step", [0], [tokens(rng, 1)]]]
    return step_case(f"a reserve that does not fit, block size {B}", actions, n_blocks=held + 2 + free, block_size=B)


def plan_exact_count(rng):
    cases = []
    for B in (pick(rng, (3, 4, 5)), pick(rng, (6, 7))):
        lengths = [int(rng.integers(1, 3 * B)) for _ in range(3)]
        step = [[0, 1, 2], [tokens(rng, int(rng.integers(1, 2 * B))) for _ in range(3)]]
        cases.append(step_case(f"three sequences, block size {B}", prefill_all(rng, lengths) + [["fit", *step]],
                               n_blocks=40, block_size=B))
    B = pick(rng, (3, 4, 5))
    partial = B + int(rng.integers(1, B))
    for shares in (1, 2):
        actions = [["new"], ["new"], ["step", [0, 1], [tokens(rng, partial), tokens(rng, B - 1)]]]
        actions += [["share", 0]] * shares + [["fit", [0, 1], [tokens(rng, 1), tokens(rng, 2)]]]
        cases.append(step_case(f"a copy counted, {shares + 1} holders, block size {B}", actions, n_blocks=24,
                               block_size=B))
    holders = int(rng.integers(3, 5))        # sequences sharing one partly filled block all write: n - 1 copies
    actions = [["new"], ["step", [0], [tokens(rng, partial)]]] + [["mirror", 0]] * (holders - 1)
    actions += [["fit", list(rng.permutation(holders).tolist()), [tokens(rng, 1) for _ in range(holders)]]]
    cases.append(step_case(f"{holders} holders of one block write, block size {B}", actions, n_blocks=24,
                           block_size=B))
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
    full = [["new"], ["new"], ["step", [0], [tokens(rng, 2 * B, small)]], ["take_rest"]]     # whatever n_free says
    full += [["step", [1], [tokens(rng, B, small)]], ["step", [1], [[V]]], ["step", [0, 1], [[1], [-1]]],
             ["step", [0], [tokens(rng, L, small)]], ["step", [0], [[V - 1]]]]
    return [step_case("bad tokens and lengths", actions, cfg=small, block_size=B, n_blocks=40),
            step_case("bad input on a full pool", full, cfg=small, block_size=B, n_blocks=8)]


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
_TABLES = ("paged_step.tables", "paged_step.configs")
JUDGES = {check: part2_judge(PART2_FIELDS["tables" if check in _TABLES else "logits"]) for check in PLANS}


def test_paged_step(case, judge):
    judge(case)
