"""Part 2: paged KV and the paged step (PagedSequence, paged_step).

Each test is a short story on your own objects: a SideBySide bench (side_by_side.py) holds your
BlockPool and PagedSequences and, beside each sequence, the lab's contiguous KVCache fed the same
tokens. `bench.step` runs your paged_step and checks the logits and lengths against those twins and
the tables' shape (ceil(length / B) distinct blocks each). Expected block tables are by allocation
order: [0, 2] means "the 1st and 3rd blocks a correct pool hands out here", so which ids your
allocator picks (Part 1) does not matter. Nothing here forks or frees (Part 4)."""
import numpy as np
import pytest

from side_by_side import SMALL, SideBySide, fail
from support import close, equal, tokens

pytestmark = pytest.mark.paged_step


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_prefill_matches_the_contiguous_forward(pk, block_size):
    bench = SideBySide(pk, block_size)
    bench.step([bench.new_sequence()], [tokens(11, 1)])


@pytest.mark.parametrize("block_size", [2, 5])
def test_decode_steps_match_the_contiguous_forward(pk, block_size):
    bench = SideBySide(pk, block_size)
    seq = bench.new_sequence()
    bench.step([seq], [tokens(6, 2)])
    for t in tokens(7, 3):
        bench.step([seq], [[t]])


def test_batches_mixing_prefill_and_decode(pk):
    bench = SideBySide(pk, block_size=4)
    a, b, c = bench.new_sequence(), bench.new_sequence(), bench.new_sequence()
    bench.step([a, b, c], [tokens(3, 4), tokens(8, 5), [7]])
    bench.step([a, b, c], [[1], [2], [3]])
    bench.step([b, a], [[9], tokens(5, 6)])          # list order is not creation order
    bench.step([c], [tokens(4, 7)])


def test_chunked_prefill_equals_one_shot(pk):
    bench = SideBySide(pk, block_size=4)
    whole, pieces, prompt = bench.new_sequence(), bench.new_sequence(), tokens(13, 8)
    [at_once] = bench.step([whole], [prompt])
    chunked = np.concatenate([bench.step([pieces], [c])[0] for c in (prompt[:5], prompt[5:6], prompt[6:])])
    close("logits of the prompt fed in chunks of 5, 1, 7 (concatenated) vs fed at once", at_once, chunked, 1e-10)


def test_logits_come_from_pool_storage(pk):
    """The test overwrites position 2 of one sequence in pool.k / pool.v: its next step must attend
    over what is stored there, so its logits differ from a sequence with the same tokens."""
    bench = SideBySide(pk, block_size=4, n_blocks=8)
    poked, untouched, prompt = bench.new_sequence(), bench.new_sequence(), tokens(6, 31)
    bench.step([poked, untouched], [prompt, prompt])
    bench.overwrite(poked, position=2, seed=5)
    got_poked, got_untouched = bench.step([poked, untouched], [[3], [3]])
    if np.max(np.abs(got_poked - got_untouched)) < 1e-6:
        fail("seq 0's K/V at position 2 were overwritten in pool storage, yet its next logits equal seq 1's, "
             "which holds the same tokens untouched: paged_step must attend over the K/V stored in pool.k / "
             "pool.v through the block table, not over a copy kept elsewhere")


def test_lecture_demo1_block_tables(pk):
    """The lecture's demo 1 (paper fig. 6): of 5 blocks taken, the 1st, 3rd and 5th were given back;
    block size 4. A 7-token prompt, then two decodes: [0, 2], [0, 2], [0, 2, 4]."""
    bench = SideBySide(pk, block_size=4, n_blocks=8, held=5, given_back=(0, 2, 4))
    seq = bench.new_sequence()
    for chunk, table in ((np.arange(7) + 10, [0, 2]), ([99], [0, 2]), ([99], [0, 2, 4])):
        bench.step([seq], [chunk])
        bench.tables([table], "a new block only when the last one is full")


def test_block_tables_in_list_order(pk):
    """The test holds blocks 0 and 1 and takes block 6 mid-way: sequences reserve in list order (b
    before a in the last step), each taking the next block the pool hands out."""
    bench = SideBySide(pk, block_size=2, held=2)
    a, b = bench.new_sequence(), bench.new_sequence()
    why = "a block only when needed, sequences in list order"
    bench.step([a, b], [tokens(3, 9), tokens(2, 10)])
    bench.tables([[2, 3], [4]], why)
    bench.step([a, b], [[5], [6]])
    bench.tables([[2, 3], [4, 5]], why)
    bench.take(1)
    bench.step([a], [[7]])
    bench.tables([[2, 3, 7], [4, 5]], why)
    bench.step([b, a], [[1, 2], [2, 3]])
    bench.tables([[2, 3, 7, 9], [4, 5, 8]], why)


def test_a_table_out_of_order(pk):
    """The test holds blocks 0-2 and gives back blocks 0 and 1 once a's blocks are 3 and 4: a's next
    blocks lie before its first ones (its table is [3, 4, 0, 1]), as after frees and copies. Steps
    and read go through the table in its order, not in the order of the ids."""
    bench = SideBySide(pk, block_size=2, n_blocks=8, held=3)
    a = bench.new_sequence()
    bench.step([a], [tokens(4, 32)])
    bench.give_back(0)
    bench.give_back(1)
    for t in tokens(4, 33):
        bench.step([a], [[t]])
    bench.kv_stored()
    bench.read_matches(a)


def test_table_length_at_block_boundaries(pk):
    bench = SideBySide(pk, block_size=4)
    seq = bench.new_sequence()
    sizes = []
    for chunk in [tokens(3, 11)] + [[t] for t in tokens(6, 12)]:
        bench.step([seq], [chunk])
        sizes.append(len(seq.blocks))
    equal("table length after lengths 3, 4, 5, 6, 7, 8, 9 (block size 4: ceil(length / 4))",
          [1, 1, 2, 2, 2, 2, 3], sizes)


def test_kv_is_stored_through_the_block_table(pk):
    """pool.k[layer, blocks[p // B], p % B] holds position p's key: read straight from storage."""
    bench = SideBySide(pk, block_size=3, n_blocks=12, cfg=SMALL, held=1)
    a, b, vocab = bench.new_sequence(), bench.new_sequence(), SMALL["vocab"]
    bench.step([a, b], [tokens(5, 13, vocab), tokens(3, 14, vocab)])
    bench.kv_stored()
    bench.take(1)
    bench.step([a, b], [[4], tokens(4, 15, vocab)])
    bench.kv_stored()


def test_storage_is_not_assumed_zero(pk):
    """Blocks given back keep their old data, so a step must not read slots it did not write: the test
    fills the whole storage with random K/V before the sequences start."""
    bench = SideBySide(pk, block_size=4, n_blocks=8, fill_seed=5)
    a, b = bench.new_sequence(), bench.new_sequence()
    for seqs, chunks in (([a, b], [tokens(9, 28), tokens(2, 29)]), ([b], [tokens(7, 30)]), ([b], [[4]])):
        bench.step(seqs, chunks)
        bench.kv_stored()


def test_reserve_makes_room_without_changing_length(pk):
    bench = SideBySide(pk, block_size=4, n_blocks=8)
    seq = bench.new_sequence()
    bench.reserve(seq, 5)
    bench.tables([[0, 1]], "reserve(5) with block size 4 needs 2 blocks")
    equal("length after reserve(5) (reserve does not change length)", 0, seq.length)
    bench.reserve(seq, 3)
    bench.tables([[0, 1]], "reserve(3): capacity 8 >= 0 + 3 already")
    bench.raises(ValueError, "reserve(0): n must be >= 1", seq.reserve, 0)
    bench.raises(ValueError, "reserve(-1): n must be >= 1", seq.reserve, -1)
    bench.step([seq], [tokens(5, 16)])
    bench.tables([[0, 1]], "a step of 5 tokens uses the 2 blocks already reserved")
    bench.reserve(seq, 9)
    bench.tables([[0, 1, 2, 3]], "reserve(9) at length 5: capacity >= 14 needs 4 blocks")


def test_write_and_read_through_the_table(pk):
    """write puts K/V at pool.k[layer, blocks[p // B], p % B]; read gathers them back, also past the
    length, up to the capacity (paged_step reads the chunk it has just written)."""
    bench = SideBySide(pk, block_size=2, n_blocks=8, held=1)
    seq = bench.new_sequence()
    bench.step([seq], [tokens(3, 17)])
    bench.reserve(seq, 4)
    k, v = np.random.default_rng(9).standard_normal((2, 4, 4, 16))
    bench.succeeds(seq.write, 1, 3, k, v)
    _, (k_read, v_read) = bench.succeeds(seq.read, 1, 7)
    close("read(layer 1, 7)[0][3:7] (K) vs what write(layer 1, start 3) wrote", k, np.asarray(k_read)[3:], 0.0)
    close("read(layer 1, 7)[1][3:7] (V) vs what write(layer 1, start 3) wrote", v, np.asarray(v_read)[3:], 0.0)


def test_reserve_that_does_not_fit_changes_nothing(pk):
    bench = SideBySide(pk, block_size=4, n_blocks=3)
    seq = bench.new_sequence()
    bench.raises(MemoryError, "13 tokens need 4 blocks, the pool has 3", seq.reserve, 13)
    bench.reserve(seq, 8)
    bench.tables([[0, 1]], "8 tokens need 2 blocks")


def test_a_step_that_does_not_fit_changes_nothing(pk):
    """a's 3 tokens fit, b's prefill does not: all or nothing. Then the same step with one token less
    for b fits exactly, and its logits show nothing was half done."""
    bench = SideBySide(pk, block_size=4, n_blocks=12)
    a, b = bench.new_sequence(), bench.new_sequence()
    bench.step([a], [tokens(6, 17)])
    bench.leave_free(3)      # the step needs 4: a's 9th token starts a block, b's 9 tokens take 3
    bench.raises(MemoryError, "the step needs one block more than is free", pk.paged_step, bench.params, bench.cfg,
                 [a, b], [tokens(3, 18), tokens(9, 19)])
    bench.step([a, b], [tokens(3, 18), tokens(8, 19)])      # needs 3: 1 for a, 2 for b


def test_a_step_that_needs_exactly_the_free_blocks_succeeds(pk):
    bench = SideBySide(pk, block_size=4, n_blocks=12)
    a, b = bench.new_sequence(), bench.new_sequence()
    bench.step([a, b], [tokens(8, 20), tokens(7, 21)])
    bench.leave_free(1)      # a is full (8 of 8) and needs a block, b has 7 of 8 slots filled and needs none
    bench.step([a, b], [[1], [1]])
    bench.raises(MemoryError, "a needs one block more than is free", pk.paged_step, bench.params, bench.cfg,
                 [a], [[2, 3, 4, 5]])


@pytest.mark.parametrize("holders", [2, 3])
@pytest.mark.parametrize("fits", [True, False])
def test_a_step_counts_the_copy_it_makes(pk, holders, fits):
    """The test holds extra references to a's last block (5 tokens, block size 4: partly filled), so
    writing into it needs a copy: the step needs 1 copy + 1 new block for b. With one block less,
    MemoryError and nothing changes (not even the copy): Part 2's count, tested without fork. With
    exactly that free it succeeds (the copy itself is Part 4's: this half waits for fork)."""
    bench = SideBySide(pk, block_size=4, n_blocks=12)
    a, b = bench.new_sequence(), bench.new_sequence()
    bench.step([a, b], [tokens(5, 22), tokens(4, 23)])
    for _ in range(holders - 1):
        bench.share_last_block(a)
    bench.leave_free(2 if fits else 1)
    if fits:
        bench.needs_copy_on_write()         # the step copies: with fork (Part 4) only; the count is Part 2's
        bench.step([a, b], [[1], [2, 3]])
    else:
        bench.raises(MemoryError, "the copy and the new block need 2 blocks, 1 is free", pk.paged_step,
                     bench.params, bench.cfg, [a, b], [[1], [2, 3]])


@pytest.mark.parametrize("fits", [True, False])
def test_n_holders_writing_need_n_minus_1_copies(pk, fits):
    """Three sequences hold a's blocks (the test gives b and c a's table, as fork would) and each
    writes a token into the partly filled last one: the first two to write copy it, the last writes
    in place, so the step needs 2 blocks, not 3."""
    bench = SideBySide(pk, block_size=4, n_blocks=12)
    a = bench.new_sequence()
    bench.step([a], [tokens(5, 24)])
    b, c = bench.mirror(a), bench.mirror(a)
    bench.leave_free(2 if fits else 1)
    if fits:
        bench.needs_copy_on_write()
        bench.step([a, b, c], [[1], [2], [3]])
    else:
        bench.raises(MemoryError, "2 copies are needed and 1 block is free", pk.paged_step, bench.params, bench.cfg,
                     [a, b, c], [[1], [2], [3]])


OK = [1, 2, 3, 4]            # a holds 5 tokens in 2 blocks of 4: these 4 need a third block
BAD_CHUNKS = {
    "fewer chunks than sequences": [OK],
    "an empty chunk": [OK, []],
    "a token id equal to vocab": [OK, [SMALL["vocab"]]],
    "a negative token id": [OK, [-1]],
    "b would pass max_len": [OK, [1] * 13],
    "a would pass max_len": [[1] * 8, [1]],
    "empty chunk, as numpy": [np.array(OK), np.array([], dtype=np.int64)],
}


@pytest.mark.parametrize("case", BAD_CHUNKS)
def test_bad_input_is_a_value_error_before_anything_changes(pk, case):
    """SMALL has vocab 40 and max_len 12; a holds 5 tokens. a's chunk is valid and needs a new block,
    so a step that starts working before it has checked b's leaves a trace."""
    bench = SideBySide(pk, block_size=4, n_blocks=8, cfg=SMALL)
    a, b = bench.new_sequence(), bench.new_sequence()
    bench.step([a], [tokens(5, 22, vocab=SMALL["vocab"])])
    bench.raises(ValueError, case, pk.paged_step, bench.params, bench.cfg, [a, b], BAD_CHUNKS[case])


def test_value_error_comes_before_memory_error(pk):
    """The pool has 2 blocks: each of these steps would also run out of memory."""
    bench = SideBySide(pk, block_size=4, n_blocks=2, cfg=SMALL)
    a, b = bench.new_sequence(), bench.new_sequence()
    bench.raises(ValueError, "a token id equal to vocab, in a step that would not fit", pk.paged_step,
                 bench.params, bench.cfg, [a, b], [[1] * 9, [SMALL["vocab"]]])
    bench.raises(ValueError, "13 tokens pass max_len 12, in a step that would not fit", pk.paged_step,
                 bench.params, bench.cfg, [a, b], [[1] * 9, [1] * 13])


def test_max_len_exactly_and_the_empty_step(pk):
    bench = SideBySide(pk, block_size=5, n_blocks=8, cfg=SMALL)
    a, b, vocab = bench.new_sequence(), bench.new_sequence(), SMALL["vocab"]
    equal("the result of paged_step(params, cfg, [], [])", [], bench.step([], []))
    bench.step([a], [tokens(12, 23, vocab)])
    bench.raises(ValueError, "a is at max_len = 12", pk.paged_step, bench.params, bench.cfg, [a], [[1]])
    bench.step([b], [tokens(11, 24, vocab)])
    bench.step([b], [[2]])


def test_numpy_chunks_and_numpy_token_ids(pk):
    bench = SideBySide(pk, block_size=4)
    a, b, c, prompt = bench.new_sequence(), bench.new_sequence(), bench.new_sequence(), tokens(6, 25)
    [want] = bench.step([a], [prompt])
    [as_array] = bench.step([b], [prompt], as_numpy=True)
    [as_ints] = bench.step([c], [[np.int64(t) for t in prompt]])
    close("logits of a numpy chunk vs the same prompt as a list of Python ints", want, as_array, 1e-10)
    close("logits of a list of np.int64 vs the same prompt as a list of Python ints", want, as_ints, 1e-10)
    bench.step([a, b, c], [[3], [3], [np.int32(3)]])
