"""Part 2: paged KV and the paged step (PagedSequence, paged_step).

Every script is checked against the contiguous baseline (the lab's `forward` with one KVCache per
sequence) and the table invariants; the tests add hand-worked block tables and error cases."""
import numpy as np
import pytest

from support import SMALL, close, equal, run, tables, tokens, where

pytestmark = pytest.mark.paged_step
SECTION = "Part 2: paged KV and the paged step"


def step(seqs, *chunks, as_numpy=False):
    return ["step", list(seqs), [list(c) for c in chunks]] + ([True] if as_numpy else [])


def fragmented(n_allocs, freed):
    """Pool actions that leave blocks in use by 'other sequences' (held by the test itself)."""
    return [["alloc"]] * n_allocs + [["decref", b] for b in freed]


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_prefill_matches_the_contiguous_forward(pk, block_size):
    run(pk, [["new"], step([0], tokens(11, 1))], block_size, n_blocks=16, section=SECTION)


@pytest.mark.parametrize("block_size", [2, 5])
def test_decode_steps_match_the_contiguous_forward(pk, block_size):
    actions = [["new"], step([0], tokens(6, 2))] + [step([0], [t]) for t in tokens(7, 3)]
    run(pk, actions, block_size, section=SECTION)


def test_batches_mixing_prefill_and_decode(pk):
    actions = [["new"], ["new"], ["new"],
               step([0, 1, 2], tokens(3, 4), tokens(8, 5), [7]),
               step([0, 1, 2], [1], [2], [3]),
               step([1, 0], [9], tokens(5, 6)),          # list order is not index order
               step([2], tokens(4, 7))]
    run(pk, actions, block_size=4, n_blocks=16, section=SECTION)


def test_chunked_prefill_equals_one_shot(pk):
    prompt = tokens(13, 8)
    actions = [["new"], ["new"], step([0], prompt),
               step([1], prompt[:5]), step([1], prompt[5:6]), step([1], prompt[6:])]
    records = run(pk, actions, block_size=4, section=SECTION)
    chunked = np.concatenate([records[i]["result"][0] for i in (3, 4, 5)])
    close("logits of the prompt fed in chunks of 5, 1, 7 (concatenated) vs fed at once",
          records[2]["result"][0], chunked, 1e-10, SECTION)


def test_lecture_demo1_block_tables(pk):
    """The lecture's demo 1 (paper fig. 6): blocks 1 and 3 are held elsewhere, block size 4."""
    actions = fragmented(5, (0, 2, 4)) + [["new"], step([0], np.arange(7) + 10), step([0], [99]), step([0], [99])]
    records = run(pk, actions, block_size=4, n_blocks=8, section=SECTION)
    why = "lowest free block first; a new block only when the last one is full"
    for i, expected in zip((9, 10, 11), ([0, 2], [0, 2], [0, 2, 4])):
        tables(records, i, [expected], 4, SECTION, why)


def test_block_tables_on_a_fragmented_pool(pk):
    """Blocks 0, 2, 3 held elsewhere; sequences reserve in list order, each taking the lowest free."""
    actions = fragmented(6, (1, 4, 5)) + [["new"], ["new"], step([0, 1], tokens(3, 9), tokens(2, 10)),
                                          step([0, 1], [5], [6]), step([0], [7]), step([1, 0], [1], [2])]
    records = run(pk, actions, block_size=2, n_blocks=10, section=SECTION)
    expected = {11: [[1, 4], [5]], 12: [[1, 4], [5, 6]], 13: [[1, 4, 7], [5, 6]], 14: [[1, 4, 7], [5, 6]]}
    for i, table in expected.items():
        tables(records, i, table, 2, SECTION, "lowest free block first, sequences in list order")


def test_table_length_at_block_boundaries(pk):
    actions = [["new"], step([0], tokens(3, 11))] + [step([0], [t]) for t in tokens(6, 12)]
    records = run(pk, actions, block_size=4, section=SECTION)
    got = [len(r["tables"][0]) for r in records[1:]]
    equal("table length after lengths 3, 4, 5, 6, 7, 8, 9 (block size 4: ceil(length / 4))",
          [1, 1, 2, 2, 2, 2, 3], got, SECTION)


def test_kv_is_stored_through_the_block_table(pk):
    """pool.k[layer, blocks[p // B], p % B] holds position p's key: read straight from storage."""
    v = SMALL["vocab"]
    actions = fragmented(4, (1, 2)) + [["new"], ["new"], step([0, 1], tokens(5, 13, v), tokens(3, 14, v)),
                                       step([0, 1], [4], tokens(4, 15, v))]
    run(pk, actions, block_size=3, n_blocks=12, cfg=SMALL, section=SECTION, record_kv=True)


def test_reserve_makes_room_without_changing_length(pk):
    actions = [["new"], ["reserve", 0, 5], ["reserve", 0, 3], ["reserve", 0, 0], ["reserve", 0, -1],
               step([0], tokens(5, 16)), ["reserve", 0, 9]]
    errors = {3: ("ValueError", "reserve(0): n must be >= 1"), 4: ("ValueError", "reserve(-1): n must be >= 1")}
    records = run(pk, actions, block_size=4, n_blocks=8, section=SECTION, errors=errors)
    tables(records, 1, [[0, 1]], 4, SECTION, "reserve(5) with block size 4 needs 2 blocks")
    equal("length after reserve(5) (reserve does not change length)", [0], records[1]["lengths"], SECTION)
    tables(records, 2, [[0, 1]], 4, SECTION, "reserve(3): capacity 8 >= 0 + 3 already")
    tables(records, 5, [[0, 1]], 4, SECTION, "a step of 5 tokens uses the 2 blocks already reserved")
    tables(records, 6, [[0, 1, 2, 3]], 4, SECTION, "reserve(9) at length 5: capacity >= 14 needs 4 blocks")


def test_reserve_that_does_not_fit_changes_nothing(pk):
    records = run(pk, [["new"], ["reserve", 0, 13], ["reserve", 0, 12]], block_size=4, n_blocks=3,
                  section=SECTION, errors={1: ("MemoryError", "13 tokens need 4 blocks, the pool has 3")})
    tables(records, 2, [[0, 1, 2]], 4, SECTION, "12 tokens need exactly the 3 blocks of the pool")


def test_a_step_that_does_not_fit_changes_nothing(pk):
    """seq 0 alone would fit; with seq 1 the step needs 4 blocks and 3 are free: all or nothing."""
    actions = [["new"], ["new"], step([0], tokens(6, 17)),
               step([0, 1], tokens(3, 18), tokens(9, 19)),
               step([0, 1], tokens(3, 18), tokens(8, 19))]
    # the last step needs exactly the 3 free blocks: it succeeds, and its logits show nothing was half done
    run(pk, actions, block_size=4, n_blocks=5, section=SECTION,
        errors={3: ("MemoryError", "the step needs 1 + 3 blocks, 3 are free")})


def test_a_step_that_needs_exactly_the_free_blocks_succeeds(pk):
    actions = [["new"], ["new"], step([0, 1], tokens(8, 20), tokens(7, 21)), step([0], [1]), step([1], [1])]
    # the last step succeeds: seq 1 has 7 of 8 slots filled, no new block needed
    records = run(pk, actions, block_size=4, n_blocks=4, section=SECTION,
                  errors={3: ("MemoryError", "seq 0 is full (8 of 8) and no block is free")})
    tables(records, 2, [[0, 1], [2, 3]], 4, SECTION, "8 and 7 tokens need exactly the 4 blocks of the pool")


OK = [1, 2, 3, 4]            # seq 0 holds 5 tokens in 2 blocks of 4: these 4 need a third block
BAD_STEPS = {
    "fewer chunks than sequences": step([0, 1], OK),
    "an empty chunk": step([0, 1], OK, []),
    "a token id equal to vocab": step([0, 1], OK, [SMALL["vocab"]]),
    "a negative token id": step([0, 1], OK, [-1]),
    "seq 1 would pass max_len": step([0, 1], OK, [1] * 13),
    "seq 0 would pass max_len": step([0, 1], [1] * 8, [1]),
    "empty chunk, as numpy": step([0, 1], OK, [], as_numpy=True),
}


@pytest.mark.parametrize("case", BAD_STEPS)
def test_bad_input_is_a_value_error_before_anything_changes(pk, case):
    """SMALL has vocab 40 and max_len 12; seq 0 holds 5 tokens. seq 0's chunk is valid and needs a
    new block, so a step that starts working before it has checked seq 1 leaves a trace."""
    actions = [["new"], ["new"], step([0], tokens(5, 22, vocab=SMALL["vocab"])), BAD_STEPS[case]]
    run(pk, actions, block_size=4, n_blocks=8, cfg=SMALL, section=SECTION, errors={3: ("ValueError", case)})


def test_value_error_comes_before_memory_error(pk):
    """The pool has 2 blocks: each of these steps would also run out of memory."""
    actions = [["new"], ["new"], step([0, 1], [1] * 9, [SMALL["vocab"]]), step([0, 1], [1] * 9, [1] * 13)]
    run(pk, actions, block_size=4, n_blocks=2, cfg=SMALL, section=SECTION,
        errors={2: ("ValueError", "a token id equal to vocab, in a step that would not fit"),
                3: ("ValueError", "13 tokens pass max_len 12, in a step that would not fit")})


def test_max_len_exactly_and_the_empty_step(pk):
    vocab = SMALL["vocab"]
    actions = [["new"], ["new"], step([]), step([0], tokens(12, 23, vocab)), step([0], [1]),
               step([1], tokens(11, 24, vocab)), step([1], [2])]
    records = run(pk, actions, block_size=5, n_blocks=8, cfg=SMALL, section=SECTION,
                  errors={4: ("ValueError", "seq 0 is at max_len = 12")})
    equal(f"{where(records, 2)}: the result of paged_step(params, cfg, [], [])", [], records[2]["result"], SECTION)


def test_numpy_chunks_and_numpy_token_ids(pk):
    prompt = tokens(6, 25)
    actions = [["new"], ["new"], ["new"], step([0], prompt), step([1], prompt, as_numpy=True),
               step([2], [np.int64(t) for t in prompt]), step([0, 1, 2], [3], [3], [np.int32(3)], as_numpy=False)]
    records = run(pk, actions, block_size=4, section=SECTION)
    for i in (4, 5):
        close(f"{where(records, i)}: logits vs the same prompt as a list of Python ints",
              records[3]["result"][0], records[i]["result"][0], 1e-10, SECTION)


def test_a_freed_sequence_starts_again_at_position_0(pk):
    actions = [["new"], step([0], tokens(6, 26)), ["free", 0], step([0], tokens(3, 27))]
    records = run(pk, actions, block_size=4, section=SECTION)
    tables(records, 3, [[0]], 4, SECTION, "after free() every block is free again; 3 tokens need block 0")


def test_storage_is_not_assumed_zero(pk):
    """Freed blocks keep their old data: a step must not read slots it did not write."""
    actions = [["new"], ["new"], step([0, 1], tokens(9, 28), tokens(2, 29)), ["free", 0],
               step([1], tokens(7, 30)), step([1], [4])]
    run(pk, actions, block_size=4, section=SECTION, record_kv=True)
