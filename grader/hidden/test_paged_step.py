"""Part 2, paged KV and the paged step, on hidden inputs. Scripts use paged_step, reserve, write and
read on a pool the test shapes with blocks of its own, never fork or free (Part 4). Judged on what
Part 2 owns (rules.part2_view): logits (1e-10), lengths, errors, all-or-nothing, and the block tables
with every block named by its place in the allocation order (by lifetime once the test gives a block
back mid-way), so any allocator gives the same view.

Every check has core cases that are the same for every student (inputs.core_rng: block sizes,
lengths, chunk sizes, table orders, which blocks the test takes and gives back, tokens, the K/V the
test stores, the model's weights), then one case drawn from the student's seed. So whether a bug is
caught, and what it costs, does not depend on the seed (grader/selftest/coverage.py reports what the
core cases reach; a drawn case counts once the core cases pass, score.counted)."""
import numpy as np

from grader.hidden.inputs import (ODD_BLOCK_SIZES, Case, core_rng, decodes, interleaved, pick, prefill_all,
                                  random_config, step_case, tokens)
from grader.hidden.judges import PART2_FIELDS, part2_judge, replays_judge

SMALL_CFG = {"vocab": 211, "d_model": 6, "n_layers": 3, "n_heads": 1, "d_head": 2, "d_ff": 8, "max_len": 100}
WIDE_CFG = {"vocab": 197, "d_model": 24, "n_layers": 1, "n_heads": 4, "d_head": 7, "d_ff": 33, "max_len": 150}


def seed(rng):
    return int(rng.integers(1 << 30))


def edged(rng, n, vocab=256):
    """n tokens with the first and last ids of the vocabulary among them (where n allows)."""
    out = tokens(rng, n, {"vocab": vocab})
    for k, t in zip(rng.permutation(n)[:2].tolist(), (0, vocab - 1)):
        out[k] = t
    return out


def taken(n):
    """The test takes n blocks first, so the sequences' blocks do not start at the pool's first."""
    return [["alloc"]] * n


def prefill_case(rng, name, B, lengths, held=0, **kw):
    actions = taken(held) + [["new"] for _ in lengths] + [["step", list(range(len(lengths))),
                                                           [edged(rng, n) for n in lengths]]]
    return step_case(name, actions, block_size=B, param_seed=seed(rng), **kw)


def plan_prefill(rng):
    core = core_rng("paged_step.prefill")
    cases = [prefill_case(core, "block size 1", 1, [5, 1], held=2),
             prefill_case(core, "block size 3: lengths 3, 7, 1", 3, [3, 7, 1]),
             prefill_case(core, "block size 4: lengths 4, 8, 11", 4, [4, 8, 11], held=1),
             prefill_case(core, "block size 16: lengths 5, 16, 17", 16, [5, 16, 17]),
             prefill_case(core, "block size 7: lengths 60, 6", 7, [60, 6], held=3, n_blocks=24)]
    B = pick(rng, ODD_BLOCK_SIZES)
    lengths = [int(x) for x in rng.integers(1, 60, int(rng.integers(1, 4)))]
    return cases + [prefill_case(rng, f"block size {B}", B, lengths, held=int(rng.integers(0, 4)),
                                 n_blocks=sum(-(-n // B) for n in lengths) + 8)]


def chunked(rng, name, B, sizes):
    prompt, actions, at = edged(rng, sum(sizes)), [["new"]], 0
    for size in sizes:
        actions.append(["step", [0], [prompt[at:at + size]]])
        at += size
    return step_case(name, actions, block_size=B, param_seed=seed(rng))


def plan_chunked_prefill(rng):
    core = core_rng("paged_step.chunked_prefill")
    cases = [chunked(core, "block size 1", 1, [3, 1, 2, 5]),
             chunked(core, "block size 4, chunks ending on block boundaries", 4, [4, 4, 3, 1, 8]),
             chunked(core, "block size 4, chunks across boundaries", 4, [3, 6, 5, 1, 2]),
             chunked(core, "block size 16, chunks inside one block", 16, [2, 5, 1, 7]),
             chunked(core, "block size 5, one token then 3 blocks at once", 5, [1, 15, 2])]
    B, sizes = pick(rng, (2, 3, 6, 8, 11)), [int(x) for x in rng.integers(1, 14, int(rng.integers(2, 6)))]
    return cases + [chunked(rng, f"block size {B}", B, sizes)]


def decode_case(rng, name, B, lengths, n_blocks=256, fixed=True):
    """Prefills, decodes over subsets in any order, a batch mixing decode and prefill, then the test
    overwrites a stored position: the next logits must be computed from pool storage."""
    actions = prefill_all(rng, lengths) + interleaved(rng, 3, 12, fixed=fixed)
    actions += [["new"], ["step", [1, 3, 0], [tokens(rng, 1), tokens(rng, 17), tokens(rng, 5)]]]
    actions += decodes(rng, 4, 3, fixed=fixed)
    actions += [["poke", 1, lengths[1] - 1, seed(rng)], ["poke", 3, 0, seed(rng)]] + decodes(rng, 4, 3, fixed=fixed)
    return step_case(name, actions, block_size=B, n_blocks=n_blocks)     # ample: logits, not room


def adopted_case(rng, name, B, n, order, steps, cfg=None, **kw):
    """The test gives seq 0 the K/V of n positions in blocks of its own, its table in `order`, and seq 1
    a prefill; then decodes and a chunk that crosses blocks read through the tables (every layer)."""
    vocab = (cfg or {}).get("vocab", 256)
    actions = [["alloc"], ["new"], ["new"], ["adopt", 0, n, seed(rng), order],
               ["step", [1], [tokens(rng, n + 1, cfg)]]]
    actions += [["read", 0, layer, n] for layer in range(_layers(cfg))]
    actions += decodes(rng, 2, steps, cfg, fixed=True) + [["step", [0, 1], [tokens(rng, B + 2, cfg), [vocab - 1]]]]
    return step_case(name, actions, cfg=cfg, block_size=B, param_seed=seed(rng), **kw)


def _layers(cfg):
    return (cfg or {}).get("n_layers", 2)


def plan_decode_batches(rng):
    core = core_rng("paged_step.decode_batches")
    cases = [decode_case(core, "block size 2", 2, [1, 9, 4]),
             decode_case(core, "block size 5", 5, [12, 5, 30]),
             step_case("a long decode, block size 3", prefill_all(core, [7, 1]) + decodes(core, 2, 20, fixed=True),
                       block_size=3, n_blocks=48),
             adopted_case(core, "a table in the order 2, 0, 1, block size 4", 4, 10, [2, 0, 1], 6),
             adopted_case(core, "a table in reverse, block size 1", 1, 5, [4, 3, 2, 1, 0], 3)]
    B = pick(rng, (2, 3, 4, 5, 7, 16))
    return cases + [decode_case(rng, f"block size {B}", B, [int(x) for x in rng.integers(1, 40, 3)], fixed=False)]


def released_case(rng, name, B, lengths, n_blocks=64):
    """A used pool (the test takes blocks and gives some back), prefills, decodes while the test takes
    blocks now and then, then the test gives back blocks it took before the sequences' (so the next
    ones the sequences get lie before theirs: tables out of order, whatever the allocator); reads of
    every sequence at every layer; then reserve, write and read past the length, within capacity."""
    held = 6 + 2 * B % 5
    actions = taken(held) + [["release", h] for h in (1, held - 2)]
    actions += prefill_all(rng, lengths) + interleaved(rng, 3, 6, fixed=True)
    actions += [["release", h] for h in (0, 2, held - 1)] + decodes(rng, 3, 2 * B + 2, fixed=True)
    actions += [["new"], ["step", [3], [tokens(rng, 2 * B + 1)]]]
    actions += [["read", i, layer, -1] for i in (0, 1, 2, 3) for layer in (0, 1)]
    grow = B + 1                                     # write and read past the length, within capacity
    actions += [["reserve", 2, grow]] + [["write", 2, layer, -1, grow, seed(rng)] for layer in (0, 1)]
    actions += [["read", 2, layer, -grow - 1] for layer in (0, 1)] + decodes(rng, 3, 2, fixed=True)
    return step_case(name, _lengths_filled(actions, B), n_blocks=n_blocks, block_size=B, record_kv=True)


def plan_tables(rng):
    core = core_rng("paged_step.tables")
    cases = [released_case(core, "blocks given back mid-way, block size 2", 2, [3, 1, 6]),
             released_case(core, "blocks given back mid-way, block size 5", 5, [9, 5, 12]),
             adopted_case(core, "a table in the order 1, 3, 0, 2, block size 3", 3, 11, [1, 3, 0, 2], 4,
                          record_kv=True),
             adopted_case(core, "a table in reverse, block size 2", 2, 7, [3, 2, 1, 0], 3, record_kv=True)]
    B = pick(rng, (2, 3, 4, 5, 7))
    held = int(rng.integers(8, 20))                 # setup: blocks taken, some given back (a used pool)
    actions = [["alloc"]] * held + [["release", h] for h in rng.permutation(held)[: held // 2].tolist()]
    actions += prefill_all(rng, [int(x) for x in rng.integers(1, 12, 3)]) + interleaved(rng, 3, 8)
    actions += [["new"], ["step", [3], [tokens(rng, int(rng.integers(6, 15)))]]] + interleaved(rng, 4, 6)
    actions += [["read", i, layer, -1] for i in (0, 2, 3) for layer in (0, 1)]
    return cases + [step_case(f"fragmented pool, block size {B}", _lengths_filled(actions, B), n_blocks=64,
                              block_size=B, record_kv=True)]


def _lengths_filled(actions, B):
    """Reads and writes at the sequence's length (-1), or past it by k (-k-1): the lengths are the
    script's own (each step adds its chunk, an adopt sets it), so they are the same for every
    implementation."""
    lengths, out = [], []
    for a in actions:
        if a[0] == "new":
            lengths.append(0)
        elif a[0] == "step":
            for i, c in zip(a[1], a[2]):
                lengths[i] += len(c)
        elif a[0] == "adopt":
            lengths[a[1]] = a[2]
        elif a[0] == "read" and a[3] < 0:
            a = ["read", a[1], a[2], lengths[a[1]] - a[3] - 1]
        elif a[0] == "write" and a[3] < 0:
            a = ["write", a[1], a[2], lengths[a[1]], *a[4:]]
        out.append(a)
    return out


def config_case(rng, name, cfg, B, lengths, n_blocks=None, record_kv=True, fixed=True):
    actions = [["alloc"]] + prefill_all(rng, lengths, cfg) + interleaved(rng, 2, 6, cfg, fixed=fixed)
    n_blocks = n_blocks or sum(-(-(n + 6) // B) for n in lengths) + 8
    return step_case(name, actions, cfg=cfg, block_size=B, n_blocks=n_blocks, param_seed=seed(rng),
                     record_kv=record_kv)


def plan_configs(rng):
    core = core_rng("paged_step.configs")
    cases = [config_case(core, "3 layers, 1 head of 2, block size 1", SMALL_CFG, 1, [9, 4]),
             config_case(core, "1 layer, 4 heads of 7, block size 64", WIDE_CFG, 64, [30, 1]),
             config_case(core, "3 layers, 1 head of 2, block size 13", SMALL_CFG, 13, [27, 13]),
             adopted_case(core, "a table in the order 2, 0, 1, 1 layer, block size 33", 33, 70, [2, 0, 1], 3,
                          cfg=WIDE_CFG, record_kv=True, n_blocks=12)]
    for i in range(2):
        cfg, B = random_config(rng), pick(rng, ODD_BLOCK_SIZES)
        cases.append(config_case(rng, f"Config {i}, block size {B}", cfg, B,
                                 [int(x) for x in rng.integers(1, 50, 2)], n_blocks=130 // B + 12, fixed=False))
    return cases


def plan_all_or_nothing(rng):
    cases, core = [], core_rng("paged_step.all_or_nothing")
    for B, first in ((2, 3), (5, 4)):
        actions = [["new"], ["new"], ["step", [0], [tokens(core, first)]]]
        # seq 0's token fits, seq 1's prefill does not: the whole step must leave everything as it was
        actions += [["miss", [0, 1], [tokens(core, 1), tokens(core, 3 * B)]]]
        actions += [["step", [0, 1], [tokens(core, 1), tokens(core, B)]]]     # what the pool still has is usable
        actions += [["reserve", 1, 40 * B], ["miss", [1, 0], [tokens(core, B + 1), tokens(core, 2)]]]
        # seq 1's last block is full, so whether its last step fits is the count's alone: a partly filled
        # one would also ask whether copy-on-write (Part 4) copies a block nobody shares
        actions += [["step", [1], [tokens(core, 1)]]]
        cases.append(step_case(f"block size {B}", actions, n_blocks=40, block_size=B))
    actions = [["new"], ["new"], ["step", [0, 1], [tokens(core, 5), tokens(core, 8)]], ["share", 0],
               ["miss", [1, 0], [tokens(core, 1), tokens(core, 1)]]]
    cases.append(step_case("a copy that does not fit, block size 4", actions, n_blocks=24, block_size=4))
    # seq 0 holds two blocks more than its step needs (a reserve ahead): they count as 0 new blocks, not
    # -2, so the two sequences that need a block each still do not fit in the one block left
    actions = [["new"], ["new"], ["new"], ["step", [0, 1, 2], [tokens(core, 1), tokens(core, 4), tokens(core, 8)]],
               ["reserve", 0, 11], ["miss", [1, 0, 2], [tokens(core, 1), tokens(core, 1), tokens(core, 2)]]]
    cases.append(step_case("room to spare beside two that need a block, block size 4", actions, n_blocks=24,
                           block_size=4))
    # a shared, partly filled first block: its copy counts as for any last block, so a step where another
    # sequence takes the one free block first must not start
    actions = [["new"], ["new"], ["step", [0, 1], [tokens(core, 2), tokens(core, 4)]], ["mirror", 0],
               ["miss", [1, 0, 2], [tokens(core, 1), tokens(core, 1), tokens(core, 1)]]]
    cases.append(step_case("a copy counted in a first block, block size 4", actions, n_blocks=24, block_size=4))
    cases.append(bare_reserve_case(core, 3, held=2, free=3, L=5, over=2))
    cases.append(bare_reserve_case(core, 1, held=1, free=2, L=2, over=1))
    B = pick(rng, (2, 3, 4, 5))
    cases.append(bare_reserve_case(rng, B, held=int(rng.integers(1, 4)), free=int(rng.integers(1, 5)),
                                   L=B + int(rng.integers(1, B + 1)), over=int(rng.integers(1, B + 1))))
    return cases


def bare_reserve_case(rng, B, held, free, L, over):
    """reserve alone, one block short while some are free: it must take none of them (a reserve that
    allocates block by block keeps what it got); then one that fits with a block to spare, and a
    step into it (an exact fit is exact_count's, which holds blocks by the pool's own n_free: here an
    n_free off by one, Part 1's, would refuse it)."""
    short = (free + 2) * B - L + over               # needs free + 1 new blocks
    actions = [["alloc"]] * held + [["new"], ["step", [0], [tokens(rng, L)]],
                                    ["reserve", 0, short], ["reserve", 0, max(1, short - 2 * B)],
                                    ["step", [0], [tokens(rng, 1)]]]
    return step_case(f"a reserve that does not fit, block size {B}", actions, n_blocks=held + 2 + free, block_size=B)


def plan_exact_count(rng):
    cases, core = [], core_rng("paged_step.exact_count")
    for B, lengths, sizes in ((3, [2, 3, 7], [1, 4, 2]), (6, [6, 1, 11], [6, 5, 7])):
        step = [[0, 1, 2], [tokens(core, n) for n in sizes]]
        cases.append(step_case(f"three sequences, block size {B}", prefill_all(core, lengths) + [["fit", *step]],
                               n_blocks=40, block_size=B))
    for B, partial in ((4, 6), (5, 9)):
        for shares in (1, 2):
            actions = [["new"], ["new"], ["step", [0, 1], [tokens(core, partial), tokens(core, B - 1)]]]
            actions += [["share", 0]] * shares + [["fit", [0, 1], [tokens(core, 1), tokens(core, 2)]]]
            cases.append(step_case(f"a copy counted, {shares + 1} holders, block size {B}", actions, n_blocks=24,
                                   block_size=B))
    B = 4       # forks of a full last block write into new blocks: no copy is due, so an exact fit fits
    actions = [["new"], ["step", [0], [tokens(core, 2 * B)]], ["mirror", 0],
               ["fit", [1, 0], [tokens(core, 1), tokens(core, 2)]]]
    cases.append(step_case(f"holders of a full block write, block size {B}", actions, n_blocks=24, block_size=B))
    holders, B = int(rng.integers(3, 6)), pick(rng, (3, 4, 5))      # all holders of one partly filled block write
    actions = [["new"], ["step", [0], [tokens(rng, B + 1)]]] + [["mirror", 0]] * (holders - 1)
    actions += [["fit", list(rng.permutation(holders).tolist()), [tokens(rng, 1) for _ in range(holders)]]]
    cases.append(step_case(f"{holders} holders of one block write, block size {B}", actions, n_blocks=24,
                           block_size=B))
    return cases


def plan_bad_input(rng):
    small = {"vocab": 229, "d_model": 8, "n_layers": 2, "n_heads": 2, "d_head": 3, "d_ff": 16, "max_len": 29}
    V, L, B = small["vocab"], small["max_len"], 4
    core = core_rng("paged_step.bad_input")
    ok = tokens(core, 3, small)
    actions = [["new"], ["new"], ["step", [0], [[0, V - 1, ok[0]]]],     # seq 0: 3 tokens, so ok needs a block
               ["step", [0, 1], [ok]], ["step", [0], [ok, ok]], ["step", [0], [[]]], ["step", [0, 1], [ok, []], True],
               ["step", [0], [[0, -1]]], ["step", [0, 1], [ok, [V]]], ["step", [1], [[V + 50]]],
               ["step", [1], [[-V]]], ["step", [1], [[5, V]], True],
               ["step", [0], [tokens(core, L - 2, small)]], ["step", [1], [tokens(core, L + 1, small)]],
               ["step", [], []], ["step", [0], [tokens(core, L - 3, small)], True],
               ["step", [0], [[1]]], ["step", [0], [[1]]], ["step", [1], [ok], True],
               ["reserve", 1, 0], ["reserve", 1, -2], ["reserve", 1, 1]]
    full = [["new"], ["new"], ["step", [0], [tokens(core, 2 * B, small)]], ["take_rest"]]     # whatever n_free says
    full += [["step", [1], [tokens(core, B, small)]], ["step", [1], [[V]]], ["step", [0, 1], [[1], [-1]]],
             ["step", [0], [tokens(core, L, small)]], ["step", [0], [[V - 1]]]]
    cases = [step_case("bad tokens and lengths", actions, cfg=small, block_size=B, n_blocks=40),
             step_case("bad input on a full pool", full, cfg=small, block_size=B, n_blocks=8)]
    drawn = {**random_config(rng, max_len=int(rng.integers(20, 40))), "n_layers": 2}   # (layers: configs' to vary)
    V, L, B = drawn["vocab"], drawn["max_len"], pick(rng, (3, 4, 5))
    ok = tokens(rng, 3, drawn)
    actions = [["new"], ["new"], ["step", [0], [ok]], ["step", [1], [[V]]], ["step", [0, 1], [[1], [-1]]],
               ["step", [1], [tokens(rng, L, drawn)]], ["step", [0], [tokens(rng, L - 2, drawn)]],
               ["step", [0], [[V - 1]]], ["reserve", 1, 0]]
    return cases + [step_case("bad input, another Config", actions, cfg=drawn, block_size=B, n_blocks=40)]


def plan_replays(rng):
    """One case per check of another part that compares a run of yours with a second run of your own
    (its twin: the same steps without sharing, without the cache): those runs, made of the reference's
    answers, judged against the reference (judges.replays_judge). So a twin is always a graded Part 2
    call: a step that answers it otherwise than any step_script costs Part 2 what it could hide."""
    from grader import rubric
    return [Case(f"the runs Part {rubric.registry.number(rubric.CHECKS[check].part)}'s check {check.split('.')[1]} "
                 "compares yours with", "replays", {"of": check}) for check in twinned_checks()]


def twinned_checks():
    """The graded checks whose cases have second runs (Case.second), of every other part, in order."""
    from grader import rubric
    from grader.hidden.conftest import _bound_checks
    rng = np.random.default_rng(0)          # (which cases have second runs does not depend on the seed)
    return [c for c, (plan, _) in _bound_checks().items() if c in rubric.CHECKS and c not in rubric.SWITCHED_OFF
            and not c.startswith("paged_step.") and any(case.second for case in plan(rng))]


PLANS = {
    "paged_step.prefill": plan_prefill,
    "paged_step.chunked_prefill": plan_chunked_prefill,
    "paged_step.decode_batches": plan_decode_batches,
    "paged_step.tables": plan_tables,
    "paged_step.configs": plan_configs,
    "paged_step.all_or_nothing": plan_all_or_nothing,
    "paged_step.exact_count": plan_exact_count,
    "paged_step.bad_input": plan_bad_input,
    "paged_step.replays": plan_replays,
}
_TABLES = ("paged_step.tables", "paged_step.configs")
JUDGES = {check: part2_judge(PART2_FIELDS["tables" if check in _TABLES else "logits"]) for check in PLANS}
JUDGES["paged_step.replays"] = replays_judge


def test_paged_step(case, judge):
    judge(case)
