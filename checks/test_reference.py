"""The reference solution (solution/paged_kv.py) against the contract.

Expected values come from elsewhere, never from the code under test: logits from the contiguous
`forward` + `KVCache` of the lab, block tables from the selftest's `Model` and `CacheModel`
(grader/selftest/contract_model.py, models written from the contract), errors and counts from the contract.
"""
import copy
import math
import types
from collections import Counter
from functools import lru_cache

import numpy as np
import pytest

import paged_kv as pk
import transformer_lab as tl
from grader.selftest.contract_model import CacheModel, Model, eviction_order
from transformer_lab import TINY, Config, KVCache, forward

ODD = Config(vocab=97, d_model=37, n_layers=3, n_heads=3, d_head=8, d_ff=50, max_len=64)
CONFIGS = [pytest.param(TINY, id="TINY"), pytest.param(ODD, id="ODD")]
BLOCK_SIZES = [1, 3, 5, 7, 16, 64]


@lru_cache(maxsize=None)
def params(cfg):
    return tl.init_params(cfg, seed=0)


def toks(cfg, n, seed):
    return np.random.default_rng(seed).integers(0, cfg.vocab, n)


def assert_close(got, expected, tol, what):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    err = float(np.max(np.abs(got - expected)))
    assert err <= tol, f"{what}: max |got - expected| = {err:.3e} > {tol:.0e}"


def snapshot(pool, seqs):
    return {"tables": [list(s.blocks) for s in seqs], "lengths": [s.length for s in seqs],
            "refcounts": [pool.refcount(b) for b in range(pool.n_blocks)], "n_used": pool.n_used,
            "n_free": pool.n_free, "peak_used": pool.peak_used, "n_copies": pool.n_copies,
            "k": pool.k.copy(), "v": pool.v.copy()}


def assert_unchanged(before, pool, seqs, what):
    after = snapshot(pool, seqs)
    for key in ("k", "v"):
        assert np.array_equal(before[key], after[key]), f"{what} changed the pool's {key} storage"
    for key in sorted(before.keys() - {"k", "v"}):
        assert before[key] == after[key], f"{what} changed {key}: before {before[key]}, after {after[key]}"


def fill(pool, n_free):
    """Allocate blocks (held by no sequence) until exactly n_free are left; returns them."""
    held = [pool.alloc() for _ in range(pool.n_free - n_free)]
    assert pool.n_free == n_free
    return held


class Shadowed:
    """A paged sequence and its contiguous shadow (a KVCache that sees the same tokens)."""

    def __init__(self, pool, cfg, seq=None, shadow=None):
        self.cfg, self.seq = cfg, seq if seq is not None else pk.PagedSequence(pool)
        self.shadow = shadow if shadow is not None else KVCache(cfg, 1)

    def expect(self, chunk):
        return forward(params(self.cfg), self.cfg, np.asarray(chunk)[None], cache=self.shadow)[0]

    def fork(self):
        return Shadowed(None, self.cfg, self.seq.fork(), copy.deepcopy(self.shadow))


def step_and_compare(cfg, items, what):
    """items: [(Shadowed, chunk)]; paged_step vs each shadow's contiguous forward, to 1e-10."""
    outs = pk.paged_step(params(cfg), cfg, [s.seq for s, _ in items], [c for _, c in items])
    assert len(outs) == len(items)
    for i, ((s, c), out) in enumerate(zip(items, outs)):
        assert_close(out, s.expect(c), 1e-10, f"{what}: logits of sequence {i} vs contiguous forward")
    return outs


def pool_for(cfg, bs, tokens):
    return pk.BlockPool(cfg, n_blocks=math.ceil(tokens / bs) + 4, block_size=bs)


# ================================================================== paged_step vs forward
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_prefill_matches_forward(cfg, bs):
    L = min(cfg.max_len, 2 * bs + 1)
    pool = pool_for(cfg, bs, L)
    seq = pk.PagedSequence(pool)
    (out,) = pk.paged_step(params(cfg), cfg, [seq], [toks(cfg, L, 1)])
    assert_close(out, forward(params(cfg), cfg, toks(cfg, L, 1)[None])[0], 1e-10, f"prefill of {L}")
    assert seq.length == L and len(seq.blocks) == math.ceil(L / bs)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_chunked_prefill_equals_one_shot(cfg, bs):
    L = min(cfg.max_len, 3 * bs + 2)
    prompt, rng = toks(cfg, L, 2), np.random.default_rng(bs)
    cuts = np.sort(rng.choice(np.arange(1, L), size=min(4, L - 1), replace=False))
    pool = pool_for(cfg, bs, L)
    seq = pk.PagedSequence(pool)
    outs = [pk.paged_step(params(cfg), cfg, [seq], [c])[0] for c in np.split(prompt, cuts)]
    assert_close(np.concatenate(outs), forward(params(cfg), cfg, prompt[None])[0], 1e-10,
                 f"prefill in chunks cut at {cuts.tolist()} vs one shot")


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_decode_matches_forward(cfg, bs):
    P, n_dec = 5, min(bs + 3, cfg.max_len - 5)        # crosses at least one block boundary
    pool = pool_for(cfg, bs, P + n_dec)
    s = Shadowed(pool, cfg)
    out = step_and_compare(cfg, [(s, toks(cfg, P, 3))], "prefill")[0]
    for t in range(n_dec):
        out = step_and_compare(cfg, [(s, [int(np.argmax(out[-1]))])], f"decode {t}")[0]
        assert len(s.seq.blocks) == math.ceil(s.seq.length / bs)
    assert s.seq.length == P + n_dec


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_mixed_batches_of_prefill_and_decode(cfg, bs):
    rng = np.random.default_rng(bs + cfg.vocab)
    n_blocks = 4 * math.ceil(cfg.max_len / bs) + 4
    pool, model = pk.BlockPool(cfg, n_blocks=n_blocks, block_size=bs), Model(n_blocks, bs)
    seqs = []
    for step in range(12):
        if step in (0, 2, 5, 9):                       # new sequences join while others decode
            seqs.append(Shadowed(pool, cfg))
            model.new(len(seqs) - 1)
        items = []
        for i in rng.permutation(len(seqs)):
            room = cfg.max_len - seqs[i].seq.length
            n = 1 if seqs[i].seq.length and rng.random() < 0.6 else int(rng.integers(1, 2 * bs + 2))
            if min(n, room) > 0:
                items.append((i, rng.integers(0, cfg.vocab, min(n, room))))
        step_and_compare(cfg, [(seqs[i], c) for i, c in items], f"mixed step {step}")
        model.step([(i, len(c)) for i, c in items])
        assert [s.seq.blocks for s in seqs] == [model.tables[i] for i in range(len(seqs))], f"step {step}"


@pytest.mark.parametrize("cfg,bs", [pytest.param(cfg, bs, id=f"{name}-{bs}")
                                    for cfg, name in ((TINY, "TINY"), (ODD, "ODD"))
                                    for bs in BLOCK_SIZES if 3 * bs < cfg.max_len])    # 3 blocks + 1 token
def test_tables_out_of_order_after_frees_and_reused_blocks(cfg, bs):
    pool, model = pk.BlockPool(cfg, n_blocks=8, block_size=bs), Model(8, bs)
    a, b, c = (Shadowed(pool, cfg) for _ in range(3))
    for key, s in zip("abc", (a, b, c)):
        model.new(key)
        step_and_compare(cfg, [(s, toks(cfg, bs, ord(key)))], f"prefill {key}")
        model.step([(key, bs)])
    for key, s in (("a", a), ("b", b)):
        s.seq.free()
        model.free_seq(key)
    a.shadow = KVCache(cfg, 1)                          # a freed sequence is used again
    step_and_compare(cfg, [(c, toks(cfg, 2 * bs, 5)), (a, toks(cfg, bs, 6))], "c grows, a reused")
    model.step([("c", 2 * bs), ("a", bs)])
    assert c.seq.blocks == model.tables["c"] == [2, 0, 1], f"table of c: {c.seq.blocks}"
    assert a.seq.blocks == model.tables["a"] == [3]
    step_and_compare(cfg, [(c, [1]), (a, [2])], "decode over reused blocks")


# ================================================================== block tables and lecture demo 1
def test_lecture_demo1_table():
    pool = pk.BlockPool(TINY, n_blocks=8, block_size=4)
    junk = [pool.alloc() for _ in range(5)]
    assert junk == [0, 1, 2, 3, 4]
    for b in (junk[0], junk[2], junk[4]):
        pool.decref(b)
    seq, rows = pk.PagedSequence(pool), []
    for chunk in (np.arange(7) + 10, np.array([99]), np.array([99])):
        pk.paged_step(params(TINY), TINY, [seq], [chunk])
        rows.append((str(seq.blocks), f"{seq.length - (len(seq.blocks) - 1) * 4}/4"))
    assert rows == [("[0, 2]", "3/4"), ("[0, 2]", "4/4"), ("[0, 2, 4]", "1/4")]


def test_handed_out_ids_are_python_ints():
    pool = pk.BlockPool(ODD, n_blocks=8, block_size=3)
    assert type(pool.alloc()) is int
    assert type(pool.copy_block(np.int64(0))) is int
    seq = pk.PagedSequence(pool)
    pk.paged_step(params(ODD), ODD, [seq], [np.array([1, 2, 3, 4], dtype=np.int32)])
    child = seq.fork()
    pk.paged_step(params(ODD), ODD, [child], [np.array([5])])            # copy-on-write
    for s in (seq, child):
        assert all(type(b) is int for b in s.blocks), f"block table {s.blocks!r} holds non-int ids"


def test_numpy_integer_ids_accepted():
    pool = pk.BlockPool(ODD, n_blocks=4, block_size=3)
    b = pool.alloc()
    pool.incref(np.int64(b))
    assert pool.refcount(np.int32(b)) == 2
    c = pool.copy_block(np.uint8(b))
    pool.decref(np.uint16(b))
    assert (pool.refcount(np.int64(b)), pool.refcount(np.int64(c)), pool.n_copies) == (1, 1, 1)


# ================================================================== errors: nothing changes
def busy(cfg=ODD, n_blocks=8, bs=3):
    """A pool in use: a (7 tokens, 3 blocks) forked into b (CoW'd), c freed. Blocks 0, 1 shared."""
    pool = pk.BlockPool(cfg, n_blocks=n_blocks, block_size=bs)
    a, c = pk.PagedSequence(pool), pk.PagedSequence(pool)
    pk.paged_step(params(cfg), cfg, [a], [toks(cfg, 7, 0)])
    b = a.fork()
    pk.paged_step(params(cfg), cfg, [b, c], [[4], toks(cfg, 3, 1)])
    c.free()
    assert (a.blocks, b.blocks, pool.n_copies, pool.n_free) == ([0, 1, 2], [0, 1, 3], 1, 4)
    return pool, [a, b, c]


def test_alloc_on_full_pool():
    pool, seqs = busy()
    fill(pool, 0)
    before = snapshot(pool, seqs)
    with pytest.raises(MemoryError):
        pool.alloc()
    assert_unchanged(before, pool, seqs, "alloc on a full pool")


@pytest.mark.parametrize("b", [0, 2, np.int64(3)], ids=str)
def test_copy_block_on_full_pool(b):
    pool, seqs = busy()
    fill(pool, 0)
    before = snapshot(pool, seqs)
    with pytest.raises(MemoryError):
        pool.copy_block(b)
    assert_unchanged(before, pool, seqs, "copy_block on a full pool")


BAD_IDS = [-1, -8, -9, 8, 9, 1000, np.int64(-1), np.int64(8), np.uint64(2**63), 2**70, -2**70]


@pytest.mark.parametrize("method", ["incref", "decref", "refcount", "copy_block"])
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
@pytest.mark.parametrize("full", [False, True], ids=["", "full"])
def test_id_outside_pool_is_value_error(method, bad, full):
    pool, seqs = busy()
    if full:
        fill(pool, 0)
    before = snapshot(pool, seqs)
    with pytest.raises(ValueError):
        getattr(pool, method)(bad)
    assert_unchanged(before, pool, seqs, f"{method}({bad!r})")


@pytest.mark.parametrize("method", ["incref", "decref", "copy_block"])
@pytest.mark.parametrize("free_id", [4, 7, np.int64(5)], ids=repr)
def test_free_block_is_value_error(method, free_id):
    pool, seqs = busy()
    before = snapshot(pool, seqs)
    with pytest.raises(ValueError):
        getattr(pool, method)(free_id)
    assert_unchanged(before, pool, seqs, f"{method} of free block {free_id}")


def test_refcounts_of_busy_pool():
    pool, _ = busy()
    assert [pool.refcount(b) for b in range(8)] == [2, 2, 1, 1, 0, 0, 0, 0]
    assert (pool.n_used, pool.n_free, pool.peak_used) == (4, 4, 5)


def test_double_free_is_value_error():
    pool, seqs = busy()
    pool.decref(2)                                     # a's last block: refcount 1 -> free
    before = snapshot(pool, seqs)
    with pytest.raises(ValueError):
        pool.decref(2)
    assert_unchanged(before, pool, seqs, "decref of a block just freed")


@pytest.mark.parametrize("n", [0, -1, -5])
def test_reserve_needs_positive_n(n):
    pool, seqs = busy()
    before = snapshot(pool, seqs)
    with pytest.raises(ValueError):
        seqs[0].reserve(n)
    assert_unchanged(before, pool, seqs, f"reserve({n})")


@pytest.mark.parametrize("n,need", [(1, 1), (2, 1), (3, 2), (6, 3)])
def test_reserve_all_or_nothing_counts_the_copy(n, need):
    """a has 7 tokens in blocks [0, 1, 2] of size 3 and block 2 is shared with a fork: reserving n
    tokens needs one copy plus ceil((7 + n) / 3) - 3 new blocks."""
    pool, seqs = busy()
    a = seqs[0]
    d = a.fork()
    seqs.append(d)
    held = fill(pool, need - 1)
    before = snapshot(pool, seqs)
    with pytest.raises(MemoryError):
        a.reserve(n)
    assert_unchanged(before, pool, seqs, f"reserve({n}) with {need - 1} free blocks")
    pool.decref(held[-1])                                # now exactly `need` free
    a.reserve(n)
    assert (pool.n_free, pool.n_copies, a.length) == (0, 2, 7)
    assert len(a.blocks) == math.ceil((7 + n) / 3) and a.blocks[:2] == [0, 1] and a.blocks[2] != 2
    assert d.blocks == [0, 1, 2] and pool.refcount(2) == 1


def test_reserve_of_fresh_sequence_does_not_fit():
    pool, seqs = busy()
    s = pk.PagedSequence(pool)
    seqs.append(s)
    before = snapshot(pool, seqs)
    with pytest.raises(MemoryError):
        s.reserve(13)                                    # 5 blocks of 3, 4 free
    assert_unchanged(before, pool, seqs, "reserve(13) with 4 free blocks")
    s.reserve(12)
    assert (s.blocks, s.length, pool.n_free) == ([4, 5, 6, 7], 0, 0)


def test_step_all_or_nothing_even_when_first_sequence_fits():
    pool, seqs = busy()
    x, y = pk.PagedSequence(pool), pk.PagedSequence(pool)
    seqs += [x, y]
    before = snapshot(pool, seqs)
    with pytest.raises(MemoryError):                   # x needs 1 block, y 4: 5 > 4 free
        pk.paged_step(params(ODD), ODD, [x, y], [toks(ODD, 2, 1), toks(ODD, 10, 2)])
    assert_unchanged(before, pool, seqs, "a step that does not fit")
    pk.paged_step(params(ODD), ODD, [x, y], [toks(ODD, 2, 1), toks(ODD, 9, 2)])   # exactly 4: fits
    assert (x.blocks, y.blocks, pool.n_free) == ([4], [5, 6, 7], 0)


@pytest.mark.parametrize("bs", [3, 16])
@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("grow", [False, True], ids=["in-block", "new-block"])
def test_n_forks_need_n_minus_1_copies(bs, n, grow):
    """n sequences share a partly filled last block; one step on all of them needs n - 1 copies
    (the last writer finds refcount 1) plus one new block each if the chunk passes the block."""
    cfg = ODD
    P, chunk = bs + 1, (bs if grow else 1)
    need = (n - 1) + (n if grow else 0)
    pool = pk.BlockPool(cfg, n_blocks=2 + need + 1, block_size=bs)
    first = Shadowed(pool, cfg)
    step_and_compare(cfg, [(first, toks(cfg, P, 7))], "prompt")
    group = [first] + [first.fork() for _ in range(n - 1)]
    held = fill(pool, need - 1)
    seqs = [s.seq for s in group]
    before = snapshot(pool, seqs)
    chunks = [toks(cfg, chunk, 20 + i) for i in range(n)]
    with pytest.raises(MemoryError):
        pk.paged_step(params(cfg), cfg, seqs, chunks)
    assert_unchanged(before, pool, seqs, f"step needing {need} blocks with {need - 1} free")
    pool.decref(held[-1])
    step_and_compare(cfg, list(zip(group, chunks)), f"{n} forks, exactly {need} free")
    assert (pool.n_copies, pool.n_free) == (n - 1, 0)
    assert len({s.blocks[1] for s in seqs}) == n, "each fork must end with its own second block"


def test_step_with_some_of_the_sharers():
    """3 holders of a partial block, 2 of them in the step: both copy (refcount 3 -> 2 -> 1)."""
    pool = pk.BlockPool(ODD, n_blocks=5, block_size=3)
    a = Shadowed(pool, ODD)
    step_and_compare(ODD, [(a, toks(ODD, 4, 8))], "prompt")
    b, c = a.fork(), a.fork()
    held = fill(pool, 1)
    before = snapshot(pool, [a.seq, b.seq, c.seq])
    with pytest.raises(MemoryError):
        pk.paged_step(params(ODD), ODD, [a.seq, b.seq], [[1], [2]])
    assert_unchanged(before, pool, [a.seq, b.seq, c.seq], "2 copies needed, 1 free")
    pool.decref(held[-1])
    step_and_compare(ODD, [(a, [1]), (b, [2])], "2 of 3 sharers")
    assert (pool.n_copies, c.seq.blocks, pool.refcount(1)) == (2, [0, 1], 1)
    step_and_compare(ODD, [(c, [3])], "the last sharer writes in place")
    assert (pool.n_copies, c.seq.blocks) == (2, [0, 1])


def _bad_steps(cfg):
    good = list(toks(cfg, 3, 3))            # a (7 tokens) or b (8) with 3 more needs a new block
    return {
        "fewer chunks": lambda a, b: ([a, b], [good]),
        "more chunks": lambda a, b: ([a], [good, good]),
        "empty list chunk": lambda a, b: ([a], [[]]),
        "empty array chunk": lambda a, b: ([a, b], [good, np.array([], dtype=np.int64)]),
        "token -1": lambda a, b: ([a], [[3, -1]]),
        "token vocab": lambda a, b: ([a], [[cfg.vocab]]),
        "np token vocab": lambda a, b: ([a], [np.array([1, cfg.vocab])]),
        "np token -1": lambda a, b: ([a], [np.array([-1], dtype=np.int32)]),
        "np scalar vocab": lambda a, b: ([a], [[np.int64(cfg.vocab)]]),
        "uint64 2**63": lambda a, b: ([a], [np.array([2**63], dtype=np.uint64)]),
        "python 2**70": lambda a, b: ([a], [[2**70]]),
        "python -2**70": lambda a, b: ([a], [[-2**70]]),
        "bad token in 2nd seq": lambda a, b: ([a, b], [good, [cfg.vocab + 5]]),
        "passes max_len": lambda a, b: ([a, b], [good, toks(cfg, cfg.max_len - b.length + 1, 4)]),
    }


@pytest.mark.parametrize("case", list(_bad_steps(ODD)))
@pytest.mark.parametrize("full", [False, True], ids=["", "full"])
def test_bad_step_is_value_error_and_changes_nothing(case, full):
    pool, seqs = busy()
    a, b = seqs[:2]
    if full:                         # the valid part alone would need a copy-on-write: MemoryError
        fill(pool, 0)
    before = snapshot(pool, seqs)
    step_seqs, chunks = _bad_steps(ODD)[case](a, b)
    with pytest.raises(ValueError):
        pk.paged_step(params(ODD), ODD, step_seqs, chunks)
    assert_unchanged(before, pool, seqs, f"paged_step with {case}")


def test_full_pool_step_is_memory_error():
    """The premise of the `full` cases above: the same step with valid input runs out."""
    pool, seqs = busy()
    fill(pool, 0)
    before = snapshot(pool, seqs)
    with pytest.raises(MemoryError):
        pk.paged_step(params(ODD), ODD, seqs[:1], [list(toks(ODD, 3, 3))])
    assert_unchanged(before, pool, seqs, "valid step on a full pool")


def test_reaching_max_len_exactly_is_fine():
    cfg, bs = ODD, 5
    pool = pool_for(cfg, bs, cfg.max_len)
    s = Shadowed(pool, cfg)
    step_and_compare(cfg, [(s, toks(cfg, cfg.max_len - 2, 9))], "prompt")
    before = snapshot(pool, [s.seq])
    with pytest.raises(ValueError):
        pk.paged_step(params(cfg), cfg, [s.seq], [[1, 2, 3]])
    assert_unchanged(before, pool, [s.seq], "a chunk passing max_len")
    step_and_compare(cfg, [(s, [1, 2])], "reaching max_len")
    assert s.seq.length == cfg.max_len
    with pytest.raises(ValueError):
        pk.paged_step(params(cfg), cfg, [s.seq], [[1]])


def test_empty_step():
    pool, seqs = busy()
    before = snapshot(pool, seqs)
    assert pk.paged_step(params(ODD), ODD, [], []) == []
    assert_unchanged(before, pool, seqs, "paged_step([], [])")


@pytest.mark.parametrize("chunk", [[1, 2], (1, 2), np.array([1, 2], dtype=np.uint8),
                                   [np.int64(1), np.int16(2)], np.array([1, 2], dtype=np.int32)], ids=repr)
def test_chunk_types(chunk):
    pool = pk.BlockPool(ODD, n_blocks=2, block_size=4)
    (out,) = pk.paged_step(params(ODD), ODD, [pk.PagedSequence(pool)], [chunk])
    assert_close(out, forward(params(ODD), ODD, np.array([[1, 2]]))[0], 1e-10, f"chunk {chunk!r}")


# ================================================================== blockwise attention
def duck_seq(cfg, bs, length, seed, spare=2):
    """A sequence with no methods: a pool namespace with random storage, a shuffled block table
    (plus `spare` extra entries), and the unused slots of the last block full of huge values."""
    rng = np.random.default_rng(seed)
    n_used = math.ceil(length / bs)
    n_blocks = n_used + spare + 3
    shape = (cfg.n_layers, n_blocks, bs, cfg.n_heads, cfg.d_head)
    k, v = rng.standard_normal(shape), rng.standard_normal(shape)
    table = [int(b) for b in rng.permutation(n_blocks)[:n_used + spare]]
    fill_ = length - (n_used - 1) * bs
    k[:, table[n_used - 1], fill_:] = 1e6
    v[:, table[n_used - 1], fill_:] = 1e6
    for b in table[n_used:]:
        k[:, b], v[:, b] = 1e6, -1e6
    pool = types.SimpleNamespace(k=k, v=v, block_size=bs, cfg=cfg)
    return types.SimpleNamespace(pool=pool, blocks=table, length=length), rng


@pytest.mark.parametrize("bs,L", sorted({(bs, k * bs + d) for bs in (1, 3, 5, 7, 16) for k in (1, 2, 3)
                                         for d in (-1, 0, 1) if k * bs + d >= 1}))   # k*B-1, k*B, k*B+1
def test_blockwise_attention_equals_attention_core(bs, L):
    cfg = ODD
    seq, rng = duck_seq(cfg, bs, L, seed=bs * 100 + L)
    pos = np.arange(L)
    table = np.array(seq.blocks)
    for layer in range(cfg.n_layers):
        q = rng.standard_normal((cfg.n_heads, cfg.d_head))
        K = seq.pool.k[layer, table[pos // bs], pos % bs]
        V = seq.pool.v[layer, table[pos // bs], pos % bs]
        expected = tl.attention_core(q[None, None], K, V, L - 1)[0, 0]
        assert_close(pk.blockwise_attention(q, seq, layer), expected, 1e-12,
                     f"blockwise attention, length {L}, block size {bs}, layer {layer}, table {seq.blocks}")


def test_blockwise_attention_on_real_sequence():
    pool = pk.BlockPool(TINY, n_blocks=16, block_size=8)
    s = pk.PagedSequence(pool)
    pk.paged_step(params(TINY), TINY, [s], [toks(TINY, 33, 1)])
    q = np.random.default_rng(0).standard_normal((TINY.n_heads, TINY.d_head))
    for layer in range(TINY.n_layers):
        K, V = s.read(layer, s.length)
        assert_close(pk.blockwise_attention(q, s, layer),
                     tl.attention_core(q[None, None], K, V, s.length - 1)[0, 0], 1e-12, f"layer {layer}")


def test_blockwise_attention_rejects_length_0():
    seq, rng = duck_seq(ODD, 4, 1, seed=0)
    seq.length = 0
    with pytest.raises(ValueError):
        pk.blockwise_attention(rng.standard_normal((ODD.n_heads, ODD.d_head)), seq, 0)


# ================================================================== fork, copy-on-write, free
def test_fork_shares_every_block():
    pool, (a, b, _) = busy()
    used, refs = pool.n_used, [pool.refcount(x) for x in range(8)]
    child = a.fork()
    assert (child.blocks, child.length, child.pool) == ([0, 1, 2], 7, pool)
    assert child.blocks is not a.blocks
    assert [pool.refcount(x) for x in range(8)] == [r + (x in (0, 1, 2)) for x, r in enumerate(refs)]
    assert pool.n_used == used


@pytest.mark.parametrize("bs", [3, 4, 16])
def test_copy_when_last_block_partial_and_shared(bs):
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=6, block_size=bs)
    a = Shadowed(pool, cfg)
    step_and_compare(cfg, [(a, toks(cfg, bs + 1, 1))], "prompt")
    b = a.fork()
    kv_b = [b.seq.read(layer, b.seq.length) for layer in range(cfg.n_layers)]
    step_and_compare(cfg, [(a, [5])], "parent after fork")
    assert (pool.n_copies, a.seq.blocks, b.seq.blocks) == (1, [0, 2], [0, 1])
    assert np.array_equal(pool.k[:, 2, 0], pool.k[:, 1, 0]) and np.array_equal(pool.v[:, 2, 0], pool.v[:, 1, 0]), \
        "the copy must hold the shared block's K and V in every layer"
    assert (pool.refcount(0), pool.refcount(1), pool.refcount(2)) == (2, 1, 1)
    for layer in range(cfg.n_layers):                 # the sharer's KV was not touched
        K, V = b.seq.read(layer, b.seq.length)
        assert np.array_equal(K, kv_b[layer][0]) and np.array_equal(V, kv_b[layer][1])
    step_and_compare(cfg, [(b, [6])], "child writes in place")
    assert (pool.n_copies, b.seq.blocks) == (1, [0, 1])


@pytest.mark.parametrize("bs", [1, 3, 16])
def test_no_copy_for_full_shared_block(bs):
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=6, block_size=bs)
    a = Shadowed(pool, cfg)
    step_and_compare(cfg, [(a, toks(cfg, 2 * bs, 1))], "prompt")
    b = a.fork()
    step_and_compare(cfg, [(a, [5]), (b, [6])], "both after fork")
    assert pool.n_copies == 0
    assert (a.seq.blocks, b.seq.blocks) == ([0, 1, 2], [0, 1, 3])


@pytest.mark.parametrize("bs", [4, 16])
@pytest.mark.parametrize("n", [2, 3, 6])
def test_n_samples_make_n_minus_1_copies(bs, n):
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=20, block_size=bs)
    first = Shadowed(pool, cfg)
    step_and_compare(cfg, [(first, toks(cfg, 2 * bs + 1, 2))], "prompt")
    group = [first] + [first.fork() for _ in range(n - 1)]
    for t in range(bs + 1):
        step_and_compare(cfg, [(s, [(t + i) % cfg.vocab]) for i, s in enumerate(group)], f"sample step {t}")
    assert pool.n_copies == n - 1
    for s in group:
        s.seq.free()
    assert (pool.n_used, pool.n_free) == (0, 20)


def test_copy_block_copies_every_layer():
    pool, seqs = busy()
    rng = np.random.default_rng(0)
    pool.k[:], pool.v[:] = rng.standard_normal(pool.k.shape), rng.standard_normal(pool.v.shape)
    new = pool.copy_block(1)
    assert (new, pool.refcount(1), pool.refcount(new), pool.n_copies) == (4, 2, 1, 2)
    assert np.array_equal(pool.k[:, new], pool.k[:, 1]) and np.array_equal(pool.v[:, new], pool.v[:, 1])


def test_free_returns_blocks_and_sequence_is_reusable():
    pool, (a, b, c) = busy()
    a.free()
    assert (a.blocks, a.length) == ([], 0)
    assert [pool.refcount(x) for x in range(8)] == [1, 1, 0, 1, 0, 0, 0, 0]
    b.free()
    assert (pool.n_used, pool.n_free, pool.peak_used) == (0, 8, 5)
    before = snapshot(pool, [a, b, c])
    c.free()                                           # empty (already freed): no-op
    pk.PagedSequence(pool).free()
    assert_unchanged(before, pool, [a, b, c], "free of an empty sequence")
    s = Shadowed(pool, ODD, seq=a)
    step_and_compare(ODD, [(s, toks(ODD, 8, 11))], "a freed sequence reused")
    assert a.blocks == [0, 1, 2]


# ================================================================== random operations: invariants
RANDOM_SETUPS = [pytest.param(ODD, 3, 14, id="ODD-bs3-14"), pytest.param(ODD, 5, 9, id="ODD-bs5-9"),
                 pytest.param(ODD, 1, 40, id="ODD-bs1-40"), pytest.param(ODD, 7, 8, id="ODD-bs7-8"),
                 pytest.param(ODD, 16, 10, id="ODD-bs16-10"), pytest.param(TINY, 16, 7, id="TINY-bs16-7")]


@pytest.mark.parametrize("cfg,bs,n_blocks", RANDOM_SETUPS)
@pytest.mark.parametrize("seed", range(4))
def test_random_operations_keep_invariants(cfg, bs, n_blocks, seed):
    rng = np.random.default_rng(seed)
    pool, model = pk.BlockPool(cfg, n_blocks=n_blocks, block_size=bs), Model(n_blocks, bs)
    live, dead, peak, events = {}, [], 0, Counter()   # live: key -> Shadowed

    def new_key():
        events["keys"] += 1
        return events["keys"]

    for op_index in range(400):
        op = rng.choice(["new", "step", "step", "step", "step", "fork", "free", "free"])
        if op == "new" and len(live) < 6:
            key = new_key()
            s = dead.pop() if dead and rng.random() < 0.5 else pk.PagedSequence(pool)
            live[key] = Shadowed(pool, cfg, seq=s)
            model.new(key)
        elif op == "fork" and 0 < len(live) < 8:
            key = list(live)[rng.integers(len(live))]
            child = new_key()
            live[child] = live[key].fork()
            model.fork(key, child)
        elif op == "free" and live:
            key = list(live)[rng.integers(len(live))]
            live[key].seq.free()
            model.free_seq(key)
            dead.append(live.pop(key).seq)
        elif op == "step" and live:
            keys = [k for k in live if live[k].seq.length < cfg.max_len]
            keys = [keys[i] for i in rng.permutation(len(keys))[:rng.integers(1, 4)]]
            items = []
            for k in keys:
                room = cfg.max_len - live[k].seq.length
                n = 1 if live[k].seq.length and rng.random() < 0.5 else int(rng.integers(1, 2 * bs + 2))
                items.append((k, rng.integers(0, cfg.vocab, min(n, room))))
            try:
                model.step([(k, len(c)) for k, c in items])
            except MemoryError:
                events["MemoryError"] += 1
                seqs = [s.seq for s in live.values()]
                before = snapshot(pool, seqs)
                with pytest.raises(MemoryError):
                    pk.paged_step(params(cfg), cfg, [live[k].seq for k, _ in items], [c for _, c in items])
                assert_unchanged(before, pool, seqs, f"op {op_index}: a step that runs out")
            else:
                step_and_compare(cfg, [(live[k], c) for k, c in items], f"op {op_index}")
        peak = max(peak, pool.n_used)
        check_invariants(pool, model, live, peak, f"after op {op_index} ({op})")
    for s in live.values():
        s.seq.free()
    assert (pool.n_used, pool.n_free) == (0, n_blocks)
    assert all(pool.refcount(b) == 0 for b in range(n_blocks)), "blocks left in use after freeing all"
    assert events["MemoryError"] > 0, "the run never exhausted the pool: make the pool smaller"
    assert bs == 1 or pool.n_copies > 0, "the run never copied on write"


def check_invariants(pool, model, live, peak, what):
    holders = Counter(b for s in live.values() for b in s.seq.blocks)
    refs = [pool.refcount(b) for b in range(pool.n_blocks)]
    assert refs == [holders[b] for b in range(pool.n_blocks)], f"{what}: refcounts vs block tables holding them"
    assert refs == model.ref, f"{what}: refcounts {refs}, model {model.ref}"
    assert pool.n_used == sum(r > 0 for r in refs) and pool.n_used + pool.n_free == pool.n_blocks, \
        f"{what}: n_used {pool.n_used}, n_free {pool.n_free}, refcounts {refs}"
    assert pool.peak_used == peak == model.peak, f"{what}: peak_used {pool.peak_used}, seen {peak}, model {model.peak}"
    assert pool.n_copies == model.copies, f"{what}: n_copies {pool.n_copies}, model {model.copies}"
    for key, s in live.items():
        assert s.seq.blocks == model.tables[key], f"{what}: table of {key} {s.seq.blocks}, model {model.tables[key]}"
        assert s.seq.length == model.lengths[key] == s.shadow.length, f"{what}: length of {key}"
        assert len(s.seq.blocks) == math.ceil(s.seq.length / pool.block_size), f"{what}: table size of {key}"


# ================================================================== Part 5 (bonus): the prefix cache
# Block ids below are worked out by hand from the contract: lowest free block first, the cache's own
# reference, the lookup cap, recency from insert (deepest first, so block 0 of a use ends newest).
def request(cfg, pool, cache, prompt, computed=None):
    """A new request prefilled through the cache; its logits must be the contiguous forward's logits
    of the positions it computed (`computed` of them, when given)."""
    s = Shadowed(pool, cfg)
    out = pk.cached_prefill(params(cfg), cfg, s.seq, prompt, cache)
    full = s.expect(prompt)
    if computed is not None:
        assert len(out) == computed, f"computed {len(out)} positions, expected {computed}"
    assert_close(out, full[len(prompt) - len(out):], 1e-10, f"cached prefill of {len(prompt)} tokens")
    return s


def cache_snapshot(pool, cache, seqs):
    return {**snapshot(pool, seqs), "n_cached": cache.n_cached, "n_hit_tokens": cache.n_hit_tokens}


def assert_cache_unchanged(before, pool, cache, seqs, what):
    assert_unchanged({k: v for k, v in before.items() if k not in ("n_cached", "n_hit_tokens")}, pool, seqs, what)
    assert (cache.n_cached, cache.n_hit_tokens) == (before["n_cached"], before["n_hit_tokens"]), \
        f"{what} changed the cache's n_cached or n_hit_tokens"


def two_prompts(cfg=ODD, bs=4):
    """A (13 tokens) and B: A's first 8 tokens, then 5 of its own."""
    a = toks(cfg, 13, 50)
    b = np.concatenate([a[:8], toks(cfg, 5, 51)])
    return a, b


def test_first_request_caches_its_full_blocks():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    assert (cache.pool, cache.n_hit_tokens, cache.n_cached) == (pool, 0, 0)
    a = request(ODD, pool, cache, two_prompts()[0], computed=13)
    assert a.seq.blocks == [0, 1, 2, 3] and a.seq.length == 13
    assert cache.n_cached == 3, "13 tokens of block size 4: 3 full blocks cached, not the partial 4th"
    assert [pool.refcount(b) for b in range(5)] == [2, 2, 2, 1, 0]
    a.seq.free()
    assert (pool.n_used, cache.n_cached) == (3, 3), "the cache's own reference keeps its blocks in use"
    assert [pool.refcount(b) for b in range(5)] == [1, 1, 1, 0, 0]


def test_second_request_reuses_the_shared_prefix():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    pa, pb = two_prompts()
    a = request(ODD, pool, cache, pa)
    b = request(ODD, pool, cache, pb, computed=5)                  # 8 tokens = blocks 0, 1 of A hit
    assert b.seq.blocks == [0, 1, 4, 5] and b.seq.length == 13
    assert cache.n_hit_tokens == 8
    assert cache.n_cached == 4, "B's third block (A's 8 tokens + 4 of its own) is a new key"
    assert [pool.refcount(x) for x in range(6)] == [3, 3, 2, 1, 2, 1]
    for s in (a, b):                                               # both decode on, still equal to forward
        for t in range(5):
            step_and_compare(ODD, [(s, [(3 * t + 1) % ODD.vocab])], "decode after a cached prefill")
    assert pool.n_copies == 0, "no block was shared partly filled: no copy-on-write"


def test_same_block_content_after_a_different_prefix_misses():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    pa = toks(ODD, 13, 52)
    request(ODD, pool, cache, pa)
    other = np.concatenate([toks(ODD, 4, 53), pa[4:]])             # blocks 1, 2 of A after another block 0
    assert other[0:4].tolist() != pa[0:4].tolist()
    assert cache.lookup(other) == []
    assert cache.lookup(np.concatenate([pa[:4], other])) == [0], "only block 0's key matches"
    request(ODD, pool, cache, other, computed=13)


@pytest.mark.parametrize("n,hits", [(0, []), (1, []), (4, []), (5, [0]), (8, [0]), (9, [0, 1]), (11, [0, 1]),
                                    (12, [0, 1]), (13, [0, 1, 2]), (20, [0, 1, 2])])
def test_lookup_is_capped_to_leave_a_token(n, hits):
    """A's 12 tokens fill blocks 0, 1, 2 (all cached); tokens = A's first n (plus A's 13th token
    and more when n > 12): at most (n - 1) // 4 blocks."""
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    prompt = toks(ODD, 20, 54)
    request(ODD, pool, cache, prompt[:12])
    assert cache.n_cached == 3
    assert cache.lookup(prompt[:n]) == hits
    assert cache.lookup(list(prompt[:n])) == hits, "a list of numpy integers is the same key"
    assert cache.lookup([int(t) for t in prompt[:n]]) == hits, "a list of Python ints is the same key"


def test_fully_cached_prompt_recomputes_its_last_block():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    prompt = toks(ODD, 12, 55)
    request(ODD, pool, cache, prompt)                              # blocks 0, 1, 2, all cached
    again = request(ODD, pool, cache, prompt, computed=4)          # hits 0, 1; block 2 recomputed
    assert again.seq.blocks == [0, 1, 3] and cache.n_hit_tokens == 8
    assert cache.n_cached == 3 and pool.refcount(3) == 1, "the recomputed block's key is cached already"
    assert pool.n_copies == 0


def test_lookup_changes_nothing():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    pa, pb = two_prompts()
    for p in (pa, pb):
        request(ODD, pool, cache, p).seq.free()
    before = cache_snapshot(pool, cache, [])
    for p in (pa, pb, pa[:9], pa):
        cache.lookup(p)
    assert_cache_unchanged(before, pool, cache, [], "lookup")
    # A (freed) left 0, 1, 2 cached; B hit 0, 1 and cached its block 3 (A's 3 was free again).
    # Recency after B: 2, 3, 1, 0 (B's use: 3, then 1, then 0)
    assert eviction_order(pool, cache) == [2, 3, 1, 0], "lookup must not change recency"


def test_insert_counts_new_blocks_and_takes_a_reference():
    cfg, bs = ODD, 4
    pool = pk.BlockPool(cfg, n_blocks=16, block_size=bs)
    cache = pk.PrefixCache(pool)
    prompt = toks(cfg, 12, 56)
    s, t = pk.PagedSequence(pool), pk.PagedSequence(pool)
    pk.paged_step(params(cfg), cfg, [s, t], [prompt[:10], prompt[:10]])
    assert (s.blocks, t.blocks) == ([0, 1, 2], [3, 4, 5])
    assert cache.insert(prompt[:10], s.blocks) == 2, "10 tokens: 2 full blocks"
    assert [pool.refcount(b) for b in range(6)] == [2, 2, 1, 1, 1, 1]
    assert cache.insert(prompt[:10], s.blocks) == 0
    assert cache.insert(prompt[:10], t.blocks) == 0, "the keys are cached: t's blocks are not taken"
    assert [pool.refcount(b) for b in range(6)] == [2, 2, 1, 1, 1, 1]
    pk.paged_step(params(cfg), cfg, [t], [prompt[10:12]])          # t's third block is full now
    assert cache.insert(prompt[:12], t.blocks) == 1
    assert cache.lookup(np.append(prompt[:12], 1)) == [0, 1, 5], "one chain across two sequences' blocks"
    assert cache.n_cached == 3 and cache.n_hit_tokens == 0, "only cached_prefill counts hit tokens"
    assert cache.insert(prompt[:3], [7]) == 0 and cache.insert([], []) == 0, "no full block: nothing"


def test_insert_skips_a_block_that_caches_another_key():
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=8, block_size=4)
    cache = pk.PrefixCache(pool)
    t1, t2 = toks(cfg, 8, 57), toks(cfg, 8, 58)
    s = pk.PagedSequence(pool)
    pk.paged_step(params(cfg), cfg, [s], [t1])
    assert cache.insert(t1, s.blocks) == 2                          # blocks 0, 1
    extra = pool.alloc()
    assert extra == 2
    assert cache.insert(t2, [0, extra]) == 1, "block 0 caches t1's key: t2's block 0 is not cached"
    assert (pool.refcount(0), pool.refcount(2), cache.n_cached) == (2, 2, 3)
    assert cache.lookup(np.append(t2, 1)) == [], "t2's block 0 key is not cached"
    assert cache.lookup(np.append(t1, 1)) == [0, 1]


def insert_setup():
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=8, block_size=4)
    cache = pk.PrefixCache(pool)
    prompt = toks(cfg, 9, 59)
    s = pk.PagedSequence(pool)
    pk.paged_step(params(cfg), cfg, [s], [prompt])                 # blocks 0, 1, 2 (2 full)
    return pool, cache, prompt, s


@pytest.mark.parametrize("blocks", [[0], [], [0, 5], [5, 1], [0, 8], [0, -1], [-8, 1], [0, np.int64(6)]], ids=str)
def test_insert_errors_change_nothing(blocks):
    """Too short a table (9 tokens: 2 full blocks), or a free (5, 6) or invalid (8, -1, -8) id
    among the blocks it would cache: ValueError, even when the other block is fine."""
    pool, cache, prompt, s = insert_setup()
    before = cache_snapshot(pool, cache, [s])
    with pytest.raises(ValueError):
        cache.insert(prompt, blocks)
    assert_cache_unchanged(before, pool, cache, [s], f"insert(9 tokens, {blocks})")
    assert cache.lookup(prompt) == []


def test_insert_checks_only_the_blocks_it_would_cache():
    pool, cache, prompt, s = insert_setup()
    assert cache.insert(prompt, s.blocks) == 2
    assert cache.insert(prompt, [0, 5]) == 0, "both keys are cached: block 5 (free) is never used"
    assert cache.insert(prompt, [np.int64(0), np.int32(1), 2, 99]) == 0, "entries past the full blocks are ignored"
    assert (pool.refcount(0), pool.refcount(1), pool.refcount(5)) == (2, 2, 0)


def test_recency_order_and_eviction_tail_first():
    """A (13 tokens) caches 0, 1, 2: recency (oldest first) 2, 1, 0. B (A still live) hits 0, 1 and
    caches 4: its use counts 4, then 1, then 0: order 2, 4, 1, 0. After both are freed, C = A's
    first 4 tokens + 5 more hits 0 and gets blocks 3 and 5 (the lowest free), caching 3."""
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    pa, pb = two_prompts()
    a = request(ODD, pool, cache, pa)
    b = request(ODD, pool, cache, pb)
    a.seq.free()
    b.seq.free()
    assert [pool.refcount(x) for x in range(6)] == [1, 1, 1, 0, 1, 0]
    c = request(ODD, pool, cache, np.concatenate([pa[:4], toks(ODD, 5, 60)]), computed=5)
    assert c.seq.blocks == [0, 3, 5]
    c.seq.free()
    # C's use: 3 (new), then 0. Order now: 2, 4, 1, 3, 0
    assert eviction_order(pool, cache) == [2, 4, 1, 3, 0]
    assert (pool.n_used, cache.n_cached) == (0, 0)


def test_evict_skips_blocks_a_sequence_holds():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    pa, pb = two_prompts()
    request(ODD, pool, cache, pa).seq.free()                       # 0, 1, 2 cached, only by the cache
    b = request(ODD, pool, cache, pb)                              # holds 0, 1 and its own 3 (cached), 4
    assert b.seq.blocks == [0, 1, 3, 4]
    assert cache.evict(0) == 0
    assert cache.evict(10) == 1 and pool.refcount(2) == 0, "only block 2 is held by the cache alone"
    assert cache.n_cached == 3 and cache.evict(np.int64(5)) == 0
    b.seq.free()
    assert eviction_order(pool, cache) == [3, 1, 0]


@pytest.mark.parametrize("n", [-1, -100, 1.0, 1.5, "1", None, True], ids=repr)
def test_evict_needs_an_integer_at_least_0(n):
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    request(ODD, pool, cache, two_prompts()[0]).seq.free()
    before = cache_snapshot(pool, cache, [])
    with pytest.raises(ValueError):
        cache.evict(n)
    assert_cache_unchanged(before, pool, cache, [], f"evict({n!r})")


def test_no_cascade_when_a_parent_is_evicted():
    """Two sequences prefilled the same 8 tokens P Q without the cache. s caches 0 under key P and 1
    under PQ, then is freed; t (blocks 2, 3) inserts: both keys are cached, t's blocks are not taken.
    evict(1) takes 1 (the tail). t grows by R into block 1 and inserts P Q R: P is cached (0), PQ and
    PQR are new (t's 3 and 1); t holds them, so the next evict(1) takes P's block 0 and leaves PQ, PQR
    cached but unreachable, until a request caches P again."""
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=8, block_size=4)
    cache = pk.PrefixCache(pool)
    prompt = toks(cfg, 13, 61)
    s, t = pk.PagedSequence(pool), pk.PagedSequence(pool)
    pk.paged_step(params(cfg), cfg, [s, t], [prompt[:8], prompt[:8]])
    assert (s.blocks, t.blocks) == ([0, 1], [2, 3])
    assert cache.insert(prompt[:8], s.blocks) == 2
    s.free()
    assert cache.insert(prompt[:8], t.blocks) == 0
    assert cache.evict(1) == 1 and pool.refcount(1) == 0 and pool.refcount(0) == 1, "the tail (block 1) first"
    pk.paged_step(params(cfg), cfg, [t], [prompt[8:12]])
    assert t.blocks == [2, 3, 1]
    assert cache.insert(prompt[:12], t.blocks) == 2, "PQ (block 3) and PQR (block 1) are new keys"
    assert cache.evict(1) == 1 and pool.refcount(0) == 0, "block 0 (key P) is the only one held by the cache alone"
    assert cache.n_cached == 2 and cache.lookup(prompt) == [], "no cascade: the children stay, unreachable"
    u = request(cfg, pool, cache, prompt, computed=13)             # recomputes all, caches block 0 under P
    assert u.seq.blocks == [0, 4, 5, 6] and cache.n_cached == 3
    assert cache.lookup(prompt) == [0, 3, 1], "P cached again: the old children are reachable"
    t.free()
    u.seq.free()
    # u's insert: 0 new (appended), then used PQR (1), PQ (3), P (0): order 1, 3, 0
    assert eviction_order(pool, cache) == [1, 3, 0]


def exhaustion_setup():
    """bs 4, 6 blocks: A (13 tokens) leaves 0, 1, 2 cached (recency 2, 1, 0) and 3 free blocks."""
    pool = pk.BlockPool(ODD, n_blocks=6, block_size=4)
    cache = pk.PrefixCache(pool)
    pa = toks(ODD, 40, 62)
    request(ODD, pool, cache, pa[:13]).seq.free()
    assert (pool.n_used, pool.n_free, pool.peak_used, cache.n_cached) == (3, 3, 4, 3)
    return pool, cache, pa


@pytest.mark.parametrize("L,blocks,left", [(16, [0, 3, 4, 5], [0, 1, 2]),     # 3 new blocks = 3 free: no eviction
                                           (17, [0, 2, 3, 4, 5], [0, 1]),     # 4: evict 2 (the oldest)
                                           (21, [0, 1, 2, 3, 4, 5], [0])])    # 5: evict 2, then 1
def test_cached_prefill_evicts_only_the_shortfall(L, blocks, left):
    """B = A's first 4 tokens + L - 4 of its own: hits block 0, needs ceil(L / 4) - 1 blocks."""
    pool, cache, pa = exhaustion_setup()
    pb = np.concatenate([pa[:4], toks(ODD, L - 4, 63)])
    b = request(ODD, pool, cache, pb, computed=L - 4)
    assert b.seq.blocks == blocks and pool.n_free == 0
    assert cache.lookup(pa[:13]) == left, "A's chain loses its tail first"
    assert cache.n_cached == len(left) + L // 4 - 1, "A's blocks left plus B's new full blocks"


@pytest.mark.parametrize("L", [25, 28])
def test_cached_prefill_out_of_memory_changes_nothing(L):
    """B needs ceil(L / 4) - 1 = 6 blocks: 3 free + 2 evictable (1, 2) = 5; evicting the hit (0)
    would make 6, but a hit is never evicted: MemoryError, and no eviction either."""
    pool, cache, pa = exhaustion_setup()
    pb = np.concatenate([pa[:4], toks(ODD, L - 4, 64)])
    seq = pk.PagedSequence(pool)
    before = cache_snapshot(pool, cache, [seq])
    with pytest.raises(MemoryError):
        pk.cached_prefill(params(ODD), ODD, seq, pb, cache)
    assert_cache_unchanged(before, pool, cache, [seq], f"cached_prefill of {L} tokens that does not fit")
    assert cache.lookup(pa[:13]) == [0, 1, 2]
    assert eviction_order(pool, cache) == [2, 1, 0], "recency unchanged by the failed prefill"


BAD_PROMPTS = {"token -1": [1, -1, 2], "token vocab": [1, ODD.vocab], "empty": [],
               "empty array": np.array([], dtype=np.int64), "passes max_len": toks(ODD, ODD.max_len + 1, 65),
               "2-D": np.ones((2, 3), dtype=np.int64)}


def bad_sequence(case, pool):
    """A sequence cached_prefill must refuse."""
    seq = pk.PagedSequence(pk.BlockPool(ODD, n_blocks=4, block_size=4) if case == "another pool" else pool)
    if case == "prefilled":
        pk.paged_step(params(ODD), ODD, [seq], [[1, 2, 3]])
    if case == "reserved":                           # length 0 but a block: not empty either
        seq.reserve(4)
    return seq


@pytest.mark.parametrize("case", list(BAD_PROMPTS) + ["prefilled", "reserved", "another pool"])
@pytest.mark.parametrize("full", [False, True], ids=["", "full"])
def test_bad_cached_prefill_is_value_error(case, full):
    """ValueError before anything changes, and before a MemoryError (`full`: nothing free, nothing
    evictable: the live request holds every cached block)."""
    pool = pk.BlockPool(ODD, n_blocks=8, block_size=4)
    cache = pk.PrefixCache(pool)
    a = request(ODD, pool, cache, toks(ODD, 13, 66))                # holds 0-3, caches 0-2
    seq = bad_sequence(case, pool)
    prompt = BAD_PROMPTS.get(case, [1, 2])
    if full:
        fill(pool, 0)
    seqs = [a.seq, seq]
    before = cache_snapshot(pool, cache, seqs)
    with pytest.raises(ValueError):
        pk.cached_prefill(params(ODD), ODD, seq, prompt, cache)
    assert_cache_unchanged(before, pool, cache, seqs, f"cached_prefill with {case}")


def test_full_pool_cached_prefill_is_memory_error():
    """The premise of the `full` cases above: a valid prompt on that pool runs out."""
    pool = pk.BlockPool(ODD, n_blocks=8, block_size=4)
    cache = pk.PrefixCache(pool)
    a = request(ODD, pool, cache, toks(ODD, 13, 66))
    fill(pool, 0)
    with pytest.raises(MemoryError):
        pk.cached_prefill(params(ODD), ODD, pk.PagedSequence(pool), [1, 2], cache)
    assert a.seq.blocks == [0, 1, 2, 3] and cache.n_cached == 3


def test_cached_prefill_accepts_numpy_and_lists():
    pool = pk.BlockPool(ODD, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    prompt = toks(ODD, 9, 67)
    request(ODD, pool, cache, prompt.astype(np.int32))
    request(ODD, pool, cache, [int(t) for t in prompt], computed=1)
    request(ODD, pool, cache, np.append(prompt, 3).astype(np.uint8), computed=2)
    assert cache.n_hit_tokens == 16


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("bs", [1, 3, 16])
def test_cached_prefill_matches_forward(cfg, bs):
    """Prompts sharing a system prompt of 2 blocks and a token: every cached prefill and every decode
    after it equals the contiguous forward; the hits are the system prompt's full blocks."""
    system = toks(cfg, 2 * bs + 1, 68)
    pool = pk.BlockPool(cfg, n_blocks=40 + 4 * cfg.max_len // bs, block_size=bs)
    cache = pk.PrefixCache(pool)
    live = []
    shared = len(system) // bs * bs                                # 2 * bs, or all 3 tokens when bs = 1
    for r in range(4):
        prompt = np.concatenate([system, [r], toks(cfg, 1 + r, 69 + r)])    # questions differ at once
        s = request(cfg, pool, cache, prompt, computed=len(prompt) - (shared if r else 0))
        live.append(s)
    assert cache.n_hit_tokens == 3 * shared
    for t in range(bs + 1):
        step_and_compare(cfg, [(s, [(t + i) % cfg.vocab]) for i, s in enumerate(live)], f"decode {t}")
    assert pool.n_copies == 0


def test_cached_blocks_survive_copy_on_write_untouched():
    """A cached prefill forked into 3 samples: the partly filled last block is copied (n - 1 = 2
    copies), the cached full blocks are neither copied nor written."""
    cfg = ODD
    pool = pk.BlockPool(cfg, n_blocks=16, block_size=4)
    cache = pk.PrefixCache(pool)
    prompt = toks(cfg, 10, 70)
    request(cfg, pool, cache, prompt).seq.free()
    a = request(cfg, pool, cache, prompt, computed=2)               # hits 0, 1
    kept = pool.k[:, [0, 1]].copy(), pool.v[:, [0, 1]].copy()
    group = [a, a.fork(), a.fork()]
    for t in range(6):
        step_and_compare(cfg, [(s, [t + i]) for i, s in enumerate(group)], f"sample step {t}")
    assert pool.n_copies == 2
    assert np.array_equal(pool.k[:, [0, 1]], kept[0]) and np.array_equal(pool.v[:, [0, 1]], kept[1])
    assert all(s.seq.blocks[:2] == [0, 1] for s in group)


@pytest.mark.parametrize("bs,n_blocks", [(1, 30), (3, 12), (4, 9), (8, 7)])
@pytest.mark.parametrize("seed", range(3))
def test_random_requests_against_a_model(bs, n_blocks, seed):
    """Requests on a few system prompts (some repeated whole), frees, decodes with eviction on
    shortfall, explicit evictions: hits, victims, refcounts (tables + the cache's one reference),
    n_hit_tokens and every logit checked against the model and the contiguous forward."""
    cfg, rng = ODD, np.random.default_rng(seed)
    pool, model = pk.BlockPool(cfg, n_blocks=n_blocks, block_size=bs), CacheModel(bs)
    cache = pk.PrefixCache(pool)
    systems = [toks(cfg, int(rng.integers(bs, 3 * bs + 2)), 100 + i) for i in range(3)]
    live, prompts, events = [], [], Counter()

    def holders():
        count = Counter(b for s in live for b in s.seq.blocks)
        return [count[b] for b in range(n_blocks)]

    def evict(n):
        expected = model.evict(n, holders())
        before = [pool.refcount(b) for b in range(n_blocks)]
        assert cache.evict(n) == len(expected)
        assert [b for b in range(n_blocks) if pool.refcount(b) < before[b]] == sorted(expected)

    for op_index in range(120):
        op = rng.choice(["request", "request", "request", "free", "decode", "decode", "evict"])
        if op == "request":
            if prompts and rng.random() < 0.25:
                prompt = prompts[rng.integers(len(prompts))]
            else:
                sys_prompt = systems[rng.integers(len(systems))]
                prompt = np.concatenate([sys_prompt[:rng.integers(1, len(sys_prompt) + 1)],
                                         rng.integers(0, cfg.vocab, rng.integers(0, 2 * bs + 1))])
                prompt = prompt[:cfg.max_len - 2 * bs]
            assert cache.lookup(prompt) == model.lookup(prompt), f"op {op_index}: lookup"
            try:
                hits, expected = model.request(prompt, pool.n_free, holders())
            except MemoryError:
                events["MemoryError"] += 1
                before = cache_snapshot(pool, cache, [s.seq for s in live])
                with pytest.raises(MemoryError):
                    pk.cached_prefill(params(cfg), cfg, pk.PagedSequence(pool), prompt, cache)
                assert_cache_unchanged(before, pool, cache, [s.seq for s in live], f"op {op_index}")
            else:
                events["evicted in prefill"] += bool(expected)
                s = request(cfg, pool, cache, prompt, computed=len(prompt) - len(hits) * bs)
                assert all(pool.refcount(b) == 0 or b in s.seq.blocks for b in expected)
                assert s.seq.blocks[:len(hits)] == hits
                live.append(s)
                prompts.append(prompt)
                model.insert(prompt, s.seq.blocks)
        elif op == "free" and live:
            live.pop(rng.integers(len(live))).seq.free()
        elif op == "decode" and live:
            s = live[rng.integers(len(live))]
            if s.seq.length < cfg.max_len:
                short = int(s.seq.length % bs == 0) - pool.n_free
                if short > 0:
                    evict(short)
                if int(s.seq.length % bs == 0) > pool.n_free:
                    events["decode MemoryError"] += 1
                    with pytest.raises(MemoryError):
                        pk.paged_step(params(cfg), cfg, [s.seq], [[1]])
                else:
                    step_and_compare(cfg, [(s, [int(rng.integers(cfg.vocab))])], f"op {op_index}: decode")
        elif op == "evict":
            evict(int(rng.integers(0, 3)))
        h = holders()
        cached = set(model.block.values())
        refs = [h[b] + (b in cached) for b in range(n_blocks)]
        assert [pool.refcount(b) for b in range(n_blocks)] == refs, \
            f"op {op_index} ({op}): refcounts vs tables plus the cache's reference"
        assert pool.n_free == refs.count(0), f"op {op_index}: n_free"
        assert cache.n_cached == len(cached) and cache.n_hit_tokens == model.hit_tokens, f"op {op_index}"
    assert events["MemoryError"] + events["evicted in prefill"] > 0, "the run never ran short: make the pool smaller"
