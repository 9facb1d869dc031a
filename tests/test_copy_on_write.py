"""Part 4: sharing and copy-on-write (fork, lazy copy in reserve, free, and the lab's drivers).

Scripts are checked against the contiguous baseline (a fork is a deep copy of the parent's
KVCache there), the invariants (each block's refcount = the number of tables holding it), and
hand-worked tables; the drivers against their own pool=None baselines."""
import math

import numpy as np
import pytest

import decoding
import scenarios as sc
from support import close, equal, run, tables, tokens, unchanged, where

pytestmark = pytest.mark.copy_on_write
SECTION = "Part 4: sharing and copy-on-write"
B = 4                      # block size of the scripts: a 10-token prompt fills [0, 1] and half of 2


def step(seqs, *chunks):
    return ["step", list(seqs), [list(c) for c in chunks]]


def prompt10():
    return [["new"], step([0], tokens(10, 40))]


def test_fork_shares_every_block(pk):
    actions = prompt10() + [["fork", 0], ["fork", 1], ["new"], ["fork", 3]]
    records = run(pk, actions, B, section=SECTION)
    tables(records, 3, [[0, 1, 2]] * 3, B, SECTION, "fork shares the whole table")
    tables(records, 5, [[0, 1, 2]] * 3 + [[], []], B, SECTION, "forking an empty sequence gives an empty one")
    equal(f"{where(records, 3)}: refcounts of blocks 0, 1, 2 (three holders each)",
          [3, 3, 3], records[3]["refcounts"][:3], SECTION)
    equal(f"{where(records, 3)}: n_used, n_copies (fork allocates and copies nothing)",
          (3, 0), (records[3]["n_used"], records[3]["n_copies"]), SECTION)


def test_writing_into_a_shared_partial_block_copies_it(pk):
    """seq 1 writes first: block 2 (2 of 4 slots, refcount 2) is copied to block 3; then seq 0
    finds block 2 with refcount 1 and writes in place."""
    actions = prompt10() + [["fork", 0], step([1], [5]), step([0], [6])]
    records = run(pk, actions, B, section=SECTION)
    tables(records, 3, [[0, 1, 2], [0, 1, 3]], B, SECTION, "seq 1's shared, partly filled last block is copied")
    equal(f"{where(records, 3)}: refcounts of blocks 0-3", [2, 2, 1, 1], records[3]["refcounts"][:4], SECTION)
    equal(f"{where(records, 3)}: n_copies", 1, records[3]["n_copies"], SECTION)
    tables(records, 4, [[0, 1, 2], [0, 1, 3]], B, SECTION, "block 2 now has refcount 1: written in place")
    equal(f"{where(records, 4)}: n_copies (no copy when the refcount is 1)", 1, records[4]["n_copies"], SECTION)


def test_a_full_shared_last_block_is_never_copied(pk):
    actions = [["new"], step([0], tokens(8, 41)), ["fork", 0], step([1], [5]), step([0], [6])]
    records = run(pk, actions, B, section=SECTION)
    tables(records, 4, [[0, 1, 3], [0, 1, 2]], B, SECTION, "a full last block stays shared; new tokens go to new blocks")
    equal("n_copies (8 tokens fill 2 blocks: nothing to copy)", 0, records[-1]["n_copies"], SECTION)


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("together", [True, False], ids=["one step", "one step each"])
def test_n_forks_make_n_minus_1_copies(pk, n, together):
    """The first n - 1 writers each copy block 2 (taking 3, 4, ...); the last writes in place."""
    forks = [["fork", 0]] * (n - 1)
    writes = [step(range(n), *[[7]] * n)] if together else [step([i], [7]) for i in range(n)]
    records = run(pk, prompt10() + forks + writes, B, section=SECTION)
    expected = [[0, 1, 3 + i] for i in range(n - 1)] + [[0, 1, 2]]
    tables(records, len(records) - 1, expected, B, SECTION, f"{n} holders of block 2 write, in list order")
    equal(f"n_copies after {n} sequences sharing a partly filled block each wrote one token",
          n - 1, records[-1]["n_copies"], SECTION)


def test_copies_when_only_some_holders_write(pk):
    """Three holders of block 2, two of them write: both copy (each still sees refcount > 1)."""
    actions = prompt10() + [["fork", 0], ["fork", 0], step([2, 1], [1], [2])]
    records = run(pk, actions, B, section=SECTION)
    tables(records, 4, [[0, 1, 2], [0, 1, 4], [0, 1, 3]], B, SECTION, "seq 2 copies first, then seq 1")
    equal("n_copies", 2, records[-1]["n_copies"], SECTION)


def test_copy_on_write_happens_in_reserve(pk):
    actions = prompt10() + [["fork", 0], ["reserve", 1, 1], ["reserve", 0, 2]]
    records = run(pk, actions, B, section=SECTION)
    tables(records, 3, [[0, 1, 2], [0, 1, 3]], B, SECTION, "reserve copies a shared, partly filled last block")
    equal(f"{where(records, 3)}: n_copies, length of seq 1", (1, 10),
          (records[3]["n_copies"], records[3]["lengths"][1]), SECTION)
    tables(records, 4, [[0, 1, 2], [0, 1, 3]], B, SECTION, "seq 0's block 2 is no longer shared: no copy")


def test_copied_blocks_hold_the_right_data_and_shared_data_is_untouched(pk):
    """Every sequence's K and V, read straight from pool storage through its table, equal its own
    contiguous cache after each action: a write into a shared block would show up in the others."""
    actions = prompt10() + [["fork", 0], ["fork", 0], step([0, 1, 2], [1], tokens(3, 42), [2]),
                            step([2, 0], tokens(6, 43), [3]), ["fork", 2], step([3, 1], [4], [5])]
    run(pk, actions, B, n_blocks=20, section=SECTION, record_kv=True)


@pytest.mark.parametrize("n_blocks, fits", [(5, True), (4, False)])
def test_a_step_counts_its_copies_exactly(pk, n_blocks, fits):
    """3 holders of the 3-block prompt each write 1 token: 2 copies (not 3)."""
    actions = prompt10() + [["fork", 0], ["fork", 0], step([0, 1, 2], [1], [2], [3])]
    run(pk, actions, B, n_blocks=n_blocks, section=SECTION,
        errors={} if fits else {4: ("MemoryError", "2 copies are needed and 1 block is free")})


@pytest.mark.parametrize("n_blocks, fits", [(6, True), (5, False)])
def test_a_step_counts_copies_and_new_blocks_together(pk, n_blocks, fits):
    """2 holders write 3 tokens each (length 13): seq 0 copies and adds a block, seq 1 (now alone
    on block 2) adds a block: 3 blocks."""
    actions = prompt10() + [["fork", 0], step([0, 1], [1, 2, 3], [4, 5, 6])]
    records = run(pk, actions, B, n_blocks=n_blocks, section=SECTION,
                  errors={} if fits else {3: ("MemoryError", "3 blocks are needed and 2 are free")})
    if fits:
        tables(records, 3, [[0, 1, 3, 4], [0, 1, 2, 5]], B, SECTION, "copy first, then new blocks, in list order")


def test_free_returns_blocks_and_a_freed_sequence_is_reused(pk):
    actions = prompt10() + [["fork", 0], ["free", 0], ["free", 0], step([1], [3]), ["free", 1],
                            step([0], tokens(5, 44))]
    records = run(pk, actions, B, section=SECTION)
    held = records[3]["tables"][1]
    equal(f"{where(records, 3)}: refcounts of seq 1's blocks {held} (seq 1 still holds them)",
          [1] * len(held), [records[3]["refcounts"][b] for b in held], SECTION)
    unchanged(records, 4, "free() on an empty sequence", SECTION, block_size=B)
    tables(records, 5, [[], [0, 1, 2]], B, SECTION, "seq 1 is the only holder of block 2 now: no copy")
    equal(f"{where(records, 6)}: n_used after freeing everything", 0, records[6]["n_used"], SECTION)
    tables(records, 7, [[0, 1], []], B, SECTION, "a freed sequence starts again from position 0")


# ----------------------------------------------------------------------------------- the drivers
def blocks_after_each_step(P, n, new, block_size):
    """Hand count for parallel sampling: the full prompt blocks stay shared, every later logical
    block (including the copied partial one) is one per sample."""
    shared = P // block_size
    return [math.ceil(P / block_size)] + [shared + n * (math.ceil((P + t) / block_size) - shared)
                                          for t in range(1, new)]


SAMPLING = [(100, 4, 16), (100, 2, 16), (37, 3, 5), (12, 3, 4)]


@pytest.mark.parametrize("P, n, block_size", SAMPLING, ids=[f"prompt{P}-n{n}-B{b}" for P, n, b in SAMPLING])
def test_parallel_sampling_shares_the_prompt(pk, P, n, block_size):
    """The lecture's demo 3 (prompt 100, block size 16: n - 1 copies) and smaller cases."""
    prompt, new = tokens(P, 45), 6
    got = sc.sampling(pk, None, 0, prompt, n, new, 1.0, 7, 64, block_size)
    baseline, _ = decoding.parallel_sample(sc.params(sc.config(None), 0), sc.config(None), np.array(prompt),
                                           n, new, 1.0, 7, pool=None)
    equal("samples vs parallel_sample(pool=None)", baseline, got["samples"], SECTION)
    equal(f"copy-on-write copies ({P} % {block_size} = {P % block_size})",
          n - 1 if P % block_size else 0, got["n_copies"], SECTION)
    equal("stats['blocks_used'] after the prefill and each step", blocks_after_each_step(P, n, new, block_size),
          got["blocks_used"], SECTION)
    equal("peak_used (the largest blocks_used)", max(got["blocks_used"]), got["peak_used"], SECTION)
    equal("n_used after every sample was freed", 0, got["n_used_after"], SECTION)


@pytest.mark.parametrize("k, P, block_size", [(2, 16, 4), (4, 13, 4), (3, 9, 16)])
def test_beam_search_matches_the_full_copy_baseline(pk, k, P, block_size):
    prompt, steps = tokens(P, 46), 8
    got = sc.beams(pk, None, 0, prompt, k, steps, 64, block_size)
    baseline, _ = decoding.beam_search(sc.params(sc.config(None), 0), sc.config(None), np.array(prompt), k, steps)
    equal("beam tokens vs beam_search(pool=None)", [t for _, t in baseline], got["tokens"], SECTION)
    close("beam scores vs beam_search(pool=None)", [s for s, _ in baseline], got["scores"], 1e-9, SECTION)
    over = [i for i, (u, s) in enumerate(zip(got["blocks_used"], got["blocks_unshared"])) if u > s]
    equal("steps where blocks_used > blocks_unshared (sharing never costs blocks)", [], over, SECTION)
    equal("peak_used >= every blocks_used", True, got["peak_used"] >= max(got["blocks_used"]), SECTION)
    equal("n_used after every beam was freed", 0, got["n_used_after"], SECTION)
