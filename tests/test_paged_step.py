"""Part 2: paged KV and the paged step (PagedSequence, paged_step).

Every script is checked against the contiguous baseline (the lab's `forward` with one KVCache per
sequence) and the tables' shape; the tests add hand-worked block tables and error cases. Nothing
here forks or frees (Part 4). Block tables are compared by allocation order: an expected [0, 2]
means "the 1st and 3rd blocks a correct pool hands out here", so whichever ids your allocator picks
(Part 1), only the order in which paged_step asks for blocks matters."""
import numpy as np
import pytest

import scenarios as sc
from support import SMALL, close, equal, fail, run_steps, succeeded, tables, tokens, where

pytestmark = pytest.mark.paged_step
SECTION = "Part 2: paged KV and the paged step"


def step(seqs, *chunks, as_numpy=False):
    return ["step", list(seqs), [list(c) for c in chunks]] + ([True] if as_numpy else [])


def used_pool(n_allocs, released=()):
    """The test takes blocks (held by 'other sequences') and gives some back: a pool in use."""
    return [["alloc"]] * n_allocs + [["release", h] for h in released]


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_prefill_matches_the_contiguous_forward(pk, block_size):
    run_steps(pk, [["new"], step([0], tokens(11, 1))], block_size, n_blocks=16, section=SECTION)


@pytest.mark.parametrize("block_size", [2, 5])
def test_decode_steps_match_the_contiguous_forward(pk, block_size):
    actions = [["new"], step([0], tokens(6, 2))] + [step([0], [t]) for t in tokens(7, 3)]
    run_steps(pk, actions, block_size, section=SECTION)


def test_batches_mixing_prefill_and_decode(pk):
    actions = [["new"], ["new"], ["new"],
               step([0, 1, 2], tokens(3, 4), tokens(8, 5), [7]),
               step([0, 1, 2], [1], [2], [3]),
               step([1, 0], [9], tokens(5, 6)),          # list order is not index order
               step([2], tokens(4, 7))]
    run_steps(pk, actions, block_size=4, n_blocks=16, section=SECTION)


def test_chunked_prefill_equals_one_shot(pk):
    prompt = tokens(13, 8)
    actions = [["new"], ["new"], step([0], prompt),
               step([1], prompt[:5]), step([1], prompt[5:6]), step([1], prompt[6:])]
    records = run_steps(pk, actions, block_size=4, section=SECTION)["records"]
    chunked = np.concatenate([records[i]["result"][0] for i in (3, 4, 5)])
    close("logits of the prompt fed in chunks of 5, 1, 7 (concatenated) vs fed at once",
          records[2]["result"][0], chunked, 1e-10, SECTION)


def test_logits_come_from_pool_storage(pk):
    """The test overwrites position 2 of seq 0 in pool.k / pool.v: the next step must read it there
    (the contiguous baseline cannot know, so the logits are compared with the same step on a copy of
    the sequence that was not overwritten: they must differ)."""
    prompt = tokens(6, 31)
    actions = [["new"], ["new"], step([0, 1], prompt, prompt), ["poke", 0, 2, 5], step([0, 1], [3], [3])]
    records = sc.step_script(pk, n_blocks=8, block_size=4, actions=actions)["records"]
    for i in range(len(records)):
        succeeded(records, i, SECTION)
    poked, untouched = records[-1]["result"]
    if np.max(np.abs(poked - untouched)) < 1e-6:
        fail(f"{where(records, 4)}: seq 0's K/V at position 2 were overwritten in pool storage, yet its logits equal "
             "seq 1's, which holds the same tokens untouched: paged_step must attend over the K/V stored in "
             "pool.k / pool.v through the block table, not over a copy kept elsewhere", SECTION)


def test_lecture_demo1_block_tables(pk):
    """The lecture's demo 1 (paper fig. 6): of 5 blocks taken, the 1st, 3rd and 5th were given back;
    block size 4. With a correct pool the table is [0, 2], then [0, 2], then [0, 2, 4]."""
    actions = used_pool(5, (0, 2, 4)) + [["new"], step([0], np.arange(7) + 10), step([0], [99]), step([0], [99])]
    result = run_steps(pk, actions, block_size=4, n_blocks=8, section=SECTION)
    why = "a new block only when the last one is full"
    for i, expected in zip((9, 10, 11), ([0, 2], [0, 2], [0, 2, 4])):
        tables(result, i, [expected], 4, SECTION, why)


def test_block_tables_in_list_order(pk):
    """Blocks 0 and 1 are held by the test, block 6 taken mid-way: sequences reserve in list order
    (seq 1 before seq 0 in the last step), each taking the next block the pool hands out."""
    actions = used_pool(2) + [["new"], ["new"], step([0, 1], tokens(3, 9), tokens(2, 10)),
                              step([0, 1], [5], [6]), ["alloc"], step([0], [7]), step([1, 0], [1, 2], [2, 3])]
    result = run_steps(pk, actions, block_size=2, n_blocks=16, section=SECTION)
    expected = {4: [[2, 3], [4]], 5: [[2, 3], [4, 5]], 7: [[2, 3, 7], [4, 5]], 8: [[2, 3, 7, 9], [4, 5, 8]]}
    for i, table in expected.items():
        tables(result, i, table, 2, SECTION, "a block only when needed, sequences in list order")


def test_table_length_at_block_boundaries(pk):
    actions = [["new"], step([0], tokens(3, 11))] + [step([0], [t]) for t in tokens(6, 12)]
    records = run_steps(pk, actions, block_size=4, section=SECTION)["records"]
    got = [len(r["tables"][0]) for r in records[1:]]
    equal("table length after lengths 3, 4, 5, 6, 7, 8, 9 (block size 4: ceil(length / 4))",
          [1, 1, 2, 2, 2, 2, 3], got, SECTION)


def test_kv_is_stored_through_the_block_table(pk):
    """pool.k[layer, blocks[p // B], p % B] holds position p's key: read straight from storage."""
    v = SMALL["vocab"]
    actions = used_pool(1) + [["new"], ["new"], step([0, 1], tokens(5, 13, v), tokens(3, 14, v)), ["alloc"],
                              step([0, 1], [4], tokens(4, 15, v))]
    run_steps(pk, actions, block_size=3, n_blocks=12, cfg=SMALL, section=SECTION, record_kv=True)


def test_reserve_makes_room_without_changing_length(pk):
    actions = [["new"], ["reserve", 0, 5], ["reserve", 0, 3], ["reserve", 0, 0], ["reserve", 0, -1],
               step([0], tokens(5, 16)), ["reserve", 0, 9]]
    errors = {3: ("ValueError", "reserve(0): n must be >= 1"), 4: ("ValueError", "reserve(-1): n must be >= 1")}
    result = run_steps(pk, actions, block_size=4, n_blocks=8, section=SECTION, errors=errors)
    tables(result, 1, [[0, 1]], 4, SECTION, "reserve(5) with block size 4 needs 2 blocks")
    equal("length after reserve(5) (reserve does not change length)", [0], result["records"][1]["lengths"], SECTION)
    tables(result, 2, [[0, 1]], 4, SECTION, "reserve(3): capacity 8 >= 0 + 3 already")
    tables(result, 5, [[0, 1]], 4, SECTION, "a step of 5 tokens uses the 2 blocks already reserved")
    tables(result, 6, [[0, 1, 2, 3]], 4, SECTION, "reserve(9) at length 5: capacity >= 14 needs 4 blocks")


def test_write_and_read_through_the_table(pk):
    """write puts K/V at pool.k[layer, blocks[p // B], p % B]; read gathers them back, also past the
    length, up to the capacity (paged_step reads the chunk it has just written)."""
    actions = used_pool(1) + [["new"], step([0], tokens(3, 17)), ["reserve", 0, 4],
                              ["write", 0, 1, 3, 4, 9], ["read", 0, 1, 7]]
    records = run_steps(pk, actions, block_size=2, n_blocks=8, section=SECTION)["records"]
    k, v = np.random.default_rng(9).standard_normal((2, 4, 4, 16))
    close("read(layer 1, 7)['k'][3:7] vs what write(layer 1, start 3) wrote", k, records[-1]["result"]["k"][3:], 0.0,
          SECTION)
    close("read(layer 1, 7)['v'][3:7] vs what write(layer 1, start 3) wrote", v, records[-1]["result"]["v"][3:], 0.0,
          SECTION)


def test_reserve_that_does_not_fit_changes_nothing(pk):
    result = run_steps(pk, [["new"], ["reserve", 0, 13], ["reserve", 0, 8]], block_size=4, n_blocks=3,
                       section=SECTION, errors={1: ("MemoryError", "13 tokens need 4 blocks, the pool has 3")})
    tables(result, 2, [[0, 1]], 4, SECTION, "8 tokens need 2 blocks")


def test_a_step_that_does_not_fit_changes_nothing(pk):
    """seq 0's token fits, seq 1's prefill does not (the test took blocks until one is missing): all
    or nothing. Then the same step with one token less for seq 1 fits exactly."""
    actions = [["new"], ["new"], step([0], tokens(6, 17)),
               ["miss", [0, 1], [tokens(3, 18), tokens(9, 19)]],
               ["fit", [0, 1], [tokens(3, 18), tokens(8, 19)]]]
    # the last step needs exactly the free blocks: it succeeds, and its logits show nothing was half done
    run_steps(pk, actions, block_size=4, n_blocks=12, section=SECTION,
              errors={3: ("MemoryError", "the step needs one block more than is free")})


def test_a_step_that_needs_exactly_the_free_blocks_succeeds(pk):
    actions = [["new"], ["new"], step([0, 1], tokens(8, 20), tokens(7, 21)), ["fit", [0, 1], [[1], [1]]],
               ["miss", [0], [[2, 3, 4, 5]]]]
    # seq 0 is full (8 of 8) and needs a block, seq 1 has 7 of 8 slots filled and needs none
    run_steps(pk, actions, block_size=4, n_blocks=12, section=SECTION,
              errors={4: ("MemoryError", "seq 0 needs one block more than is free")})


@pytest.mark.parametrize("holders", [2, 3])
def test_a_step_counts_the_copy_it_makes(pk, holders):
    """The test holds extra references to seq 0's last block (5 tokens, block size 4: partly filled),
    so writing into it needs a copy: the step needs 1 copy + 1 new block for seq 1. With exactly that
    free it succeeds; with one block less it raises MemoryError and changes nothing (not even the copy)."""
    prefix = [["new"], ["new"], step([0, 1], tokens(5, 22), tokens(4, 23))] + [["share", 0]] * (holders - 1)
    chunks = [[1], [2, 3]]
    run_steps(pk, prefix + [["fit", [0, 1], chunks]], block_size=4, n_blocks=12, section=SECTION)
    run_steps(pk, prefix + [["miss", [0, 1], chunks]], block_size=4, n_blocks=12, section=SECTION,
              errors={len(prefix): ("MemoryError", "the copy and the new block need 2 blocks, 1 is free")})


def test_n_holders_writing_need_n_minus_1_copies(pk):
    """Three sequences hold seq 0's blocks (the test gives seqs 1 and 2 seq 0's table, as fork would)
    and each writes a token into the partly filled last one: the first two to write copy it, the last
    writes in place, so the step needs 2 blocks, not 3."""
    prefix = [["new"], step([0], tokens(5, 24)), ["mirror", 0], ["mirror", 0]]
    step3 = [[0, 1, 2], [[1], [2], [3]]]
    run_steps(pk, prefix + [["fit", *step3]], block_size=4, n_blocks=12, section=SECTION)
    run_steps(pk, prefix + [["miss", *step3]], block_size=4, n_blocks=12, section=SECTION,
              errors={len(prefix): ("MemoryError", "2 copies are needed and 1 block is free")})


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
    run_steps(pk, actions, block_size=4, n_blocks=8, cfg=SMALL, section=SECTION, errors={3: ("ValueError", case)})


def test_value_error_comes_before_memory_error(pk):
    """The pool has 2 blocks: each of these steps would also run out of memory."""
    actions = [["new"], ["new"], step([0, 1], [1] * 9, [SMALL["vocab"]]), step([0, 1], [1] * 9, [1] * 13)]
    run_steps(pk, actions, block_size=4, n_blocks=2, cfg=SMALL, section=SECTION,
              errors={2: ("ValueError", "a token id equal to vocab, in a step that would not fit"),
                      3: ("ValueError", "13 tokens pass max_len 12, in a step that would not fit")})


def test_max_len_exactly_and_the_empty_step(pk):
    vocab = SMALL["vocab"]
    actions = [["new"], ["new"], step([]), step([0], tokens(12, 23, vocab)), step([0], [1]),
               step([1], tokens(11, 24, vocab)), step([1], [2])]
    records = run_steps(pk, actions, block_size=5, n_blocks=8, cfg=SMALL, section=SECTION,
                        errors={4: ("ValueError", "seq 0 is at max_len = 12")})["records"]
    equal(f"{where(records, 2)}: the result of paged_step(params, cfg, [], [])", [], records[2]["result"], SECTION)


def test_numpy_chunks_and_numpy_token_ids(pk):
    prompt = tokens(6, 25)
    actions = [["new"], ["new"], ["new"], step([0], prompt), step([1], prompt, as_numpy=True),
               step([2], [np.int64(t) for t in prompt]), step([0, 1, 2], [3], [3], [np.int32(3)], as_numpy=False)]
    records = run_steps(pk, actions, block_size=4, section=SECTION)["records"]
    for i in (4, 5):
        close(f"{where(records, i)}: logits vs the same prompt as a list of Python ints",
              records[3]["result"][0], records[i]["result"][0], 1e-10, SECTION)


def test_storage_is_not_assumed_zero(pk):
    """Blocks given back keep their old data, so a step must not read slots it did not write: the test
    fills the whole storage with random K/V before the sequences start."""
    actions = [["fill", 5], ["new"], ["new"], step([0, 1], tokens(9, 28), tokens(2, 29)),
               step([1], tokens(7, 30)), step([1], [4])]
    run_steps(pk, actions, block_size=4, n_blocks=8, section=SECTION, record_kv=True)
