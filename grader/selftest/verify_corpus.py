"""Verify the selftest corpus in-process, against the contract and the reference.

    python -m grader.selftest.verify_corpus [--only mutants|variants|hostile] [-v]

This runs on the trusted side and imports OUR OWN corpus (mutants of the reference, correct variants we
wrote): never a student's file. It checks, independently of the grader:

  * the reference passes every check below (the checks encode the contract);
  * every mutant fails its `witness` check (one of this file's, or a hidden check: a registry id, judged in
    process at seed 0), which belongs to the mutant's own part, and the mutant's
    source really differs from the reference (each edit's `find` occurs exactly once); one that names
    its checks (an allocator whose only bug is the order) fails no other check of its part;
  * every correct variant passes every check (tables, refcounts, logits to 1e-10, blockwise to 1e-12,
    errors, copy counts, the two drivers identical to the baseline and to the reference), its random
    differential runs agree with the reference and with the contract model (contract_model.py, the
    one checks/test_reference proves the reference against), and the slow variant's slowdown against
    the reference on a typical workload is measured (every variant's with -v);
  * every hostile submission builds (its text compiles) from its base; hostiles are never run here.

Exit status 0 when everything holds.
"""
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # before numpy: steadier timings, as in the sandbox
import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LAB = os.path.join(REPO, "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)
if REPO not in sys.path:
    sys.path.insert(0, REPO)
if os.path.join(REPO, "tests") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "tests"))     # scenarios: Part 3's storage, as the tests hand it over

import registry  # noqa: E402    the parts, which are bonus
import scenarios  # noqa: E402
import transformer_lab as tl  # noqa: E402

from grader.selftest import mutants as mutants_mod  # noqa: E402
from grader.selftest.contract_model import CacheModel, Model, eviction_order  # noqa: E402

VARIANTS_DIR = os.path.join(HERE, "variants")
FUZZ_SEEDS = 40          # random differential runs per variant

# ------------------------------------------------------------------------------------ fixtures
TINY = tl.TINY
ODD = tl.Config(vocab=61, d_model=24, n_layers=3, n_heads=3, d_head=8, d_ff=40, max_len=48)
ONE = tl.Config(vocab=32, d_model=16, n_layers=1, n_heads=2, d_head=8, d_ff=32, max_len=40)
SMALL = tl.Config(vocab=40, d_model=16, n_layers=2, n_heads=2, d_head=8, d_ff=24, max_len=24)
_PARAMS = {}


def params(cfg, seed=0):
    if (cfg, seed) not in _PARAMS:
        _PARAMS[(cfg, seed)] = tl.init_params(cfg, seed)
    return _PARAMS[(cfg, seed)]


_TOKS, _CONTIGUOUS = {}, {}


def toks(n, cfg=TINY, seed=0):
    """n tokens drawn from the seed (drawn once; a fresh list each call, as a check may change it)."""
    key = (n, cfg.vocab, seed)
    if key not in _TOKS:
        _TOKS[key] = tuple(int(t) for t in np.random.default_rng(1000 + seed).integers(0, cfg.vocab, n))
    return list(_TOKS[key])


def contiguous(cfg, chunks, seed=0):
    """Logits of the contiguous forward over successive chunks (a KVCache of batch 1). The expected
    answer does not depend on the code under test, so it is computed once per input, not per mutant."""
    key = (cfg, seed, tuple(tuple(int(t) for t in c) for c in chunks))
    if key not in _CONTIGUOUS:
        cache = tl.KVCache(cfg, 1)
        _CONTIGUOUS[key] = [tl.forward(params(cfg, seed), cfg, np.array(c, dtype=np.int64)[None], cache=cache)[0]
                            for c in chunks]
    return list(_CONTIGUOUS[key])


def load(text, tag):
    """Import a paged_kv.py text as a fresh module (our own corpus only)."""
    d = tempfile.mkdtemp(prefix=f"selftest-{tag}-")
    path = os.path.join(d, "paged_kv.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(f"paged_kv_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------- helpers
class Fail(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def _short(args):
    return "(" + ", ".join("params" if isinstance(a, dict) else "cfg" if isinstance(a, tl.Config)
                           else repr(a)[:60] for a in args) + ")"


def raises(kind, fn, *args):
    """fn(*args) must raise `kind` (a subclass counts); returns nothing, fails otherwise."""
    try:
        got = fn(*args)
    except kind:
        return
    except Exception as e:  # noqa: BLE001
        raise Fail(f"{getattr(fn, '__name__', fn)}{_short(args)}: expected {kind.__name__}, got {type(e).__name__}: {e}")
    raise Fail(f"{getattr(fn, '__name__', fn)}{_short(args)}: expected {kind.__name__}, returned {repr(got)[:80]}")


def ints(xs):
    return [int(x) for x in xs]


def pool_state(pool):
    return {"ref": [int(pool.refcount(b)) for b in range(pool.n_blocks)], "n_used": int(pool.n_used),
            "n_free": int(pool.n_free), "peak": int(pool.peak_used), "n_copies": int(pool.n_copies)}


def state(pool, seqs):
    return {**pool_state(pool), "tables": [ints(s.blocks) for s in seqs], "lengths": [int(s.length) for s in seqs]}


def close(got, want, tol, what):
    got = np.asarray(got)
    check(type(got) is np.ndarray and got.dtype.kind == "f", f"{what}: not a float array ({type(got).__name__})")
    check(got.shape == np.shape(want), f"{what}: shape {got.shape}, expected {np.shape(want)}")
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    check(np.all(np.isfinite(got)) and err <= tol, f"{what}: max |difference| {err:.3g} > {tol:g}")


def fragment(pool, keep):
    """Alloc every block, then free all but `keep`: tables built on this pool are not monotone."""
    got = [pool.alloc() for _ in range(pool.n_blocks)]
    for b in got:
        if b not in keep:
            pool.decref(b)


def unchanged(before, pool, seqs, what):
    after = state(pool, seqs)
    check(after == before, f"{what}: state changed from {before} to {after}")


CHECKS = {}   # name -> (part, function(pk, ref))
BONUS_PARTS = tuple(p.id for p in registry.bonus())   # checked only in a module that defines the bonus


def register(part):
    def deco(fn):
        CHECKS[fn.__name__] = (part, fn)
        return fn
    return deco


# ================================================================== Part 1: the block allocator
@register("allocator")
def a_fresh(pk, ref):
    for cfg in (TINY, ODD, ONE):
        pool = pk.BlockPool(cfg, 5, 3)
        check(pool.cfg == cfg and pool.n_blocks == 5 and pool.block_size == 3, "attributes cfg/n_blocks/block_size")
        shape = (cfg.n_layers, 5, 3, cfg.n_heads, cfg.d_head)
        for name in ("k", "v"):
            a = getattr(pool, name)
            check(np.shape(a) == shape, f"pool.{name}.shape {np.shape(a)}, expected {shape}")
            check(np.asarray(a).dtype == np.float64, f"pool.{name}.dtype {np.asarray(a).dtype}")
            check(not np.asarray(a).any(), f"pool.{name} not zeros")
        check(not np.shares_memory(pool.k, pool.v), "k and v share memory")
        check(pool_state(pool) == {"ref": [0] * 5, "n_used": 0, "n_free": 5, "peak": 0, "n_copies": 0},
              f"fresh pool state {pool_state(pool)}")


@register("allocator")
def a_order(pk, ref):
    pool = pk.BlockPool(TINY, 8, 4)
    first = ints(pool.alloc() for _ in range(5))
    check(first == [0, 1, 2, 3, 4], f"fresh allocs {first}, expected [0, 1, 2, 3, 4]")
    for b in (4, 0, 2):
        pool.decref(b)
    again = ints(pool.alloc() for _ in range(4))
    check(again == [0, 2, 4, 5], f"after decref 4, 0, 2: allocs {again}, expected [0, 2, 4, 5] (lowest free first)")
    pool.decref(3)
    pool.decref(1)
    check(int(pool.alloc()) == 1, "after decref 3, 1: alloc is not 1")
    # the lecture's demo 1
    pool = pk.BlockPool(TINY, 8, 4)
    junk = [pool.alloc() for _ in range(5)]
    for b in (junk[0], junk[2], junk[4]):
        pool.decref(b)
    seq = pk.PagedSequence(pool)
    pk.paged_step(params(TINY), TINY, [seq], [np.arange(7) + 10])
    for _ in range(2):
        pk.paged_step(params(TINY), TINY, [seq], [np.array([99])])
    check(ints(seq.blocks) == [0, 2, 4], f"demo 1 table {ints(seq.blocks)}, expected [0, 2, 4]")
    # a small pool: freed blocks must come back
    pool = pk.BlockPool(TINY, 3, 2)
    for _ in range(5):
        b = pool.alloc()
        pool.decref(b)
    check(ints(pool.alloc() for _ in range(3)) == [0, 1, 2], "a 3-block pool cannot hand out its 3 blocks after frees")
    # copy_block takes the lowest free block too
    pool = pk.BlockPool(TINY, 6, 3)
    for _ in range(4):
        pool.alloc()
    pool.decref(2)
    pool.decref(1)
    check(int(pool.copy_block(3)) == 1, "after decref 2, 1: copy_block(3) does not take block 1, the lowest free")


@register("allocator")
def a_refcount(pk, ref):
    """Refcounts and n_used on the ids the pool hands out, whichever free block it picks (the order is
    a_order's): every Part 1 witness but a_order holds for any allocation order."""
    pool = pk.BlockPool(TINY, 4, 4)
    b = pool.alloc()
    pool.incref(b)
    pool.incref(b)
    check(int(pool.refcount(b)) == 3 and int(pool.n_used) == 1, f"after 2 increfs: refcount {pool.refcount(b)}, "
          f"n_used {pool.n_used} (expected 3, 1)")
    pool.decref(b)
    pool.decref(b)
    check(int(pool.refcount(b)) == 1 and int(pool.n_used) == 1 and int(pool.n_free) == 3,
          f"after 2 decrefs: refcount {pool.refcount(b)}, n_used {pool.n_used}, n_free {pool.n_free} (expected 1, 1, 3)")
    check(int(pool.alloc()) != int(b), "a block with refcount 1 was handed out again")
    pool.decref(b)
    check(int(pool.refcount(b)) == 0 and int(pool.n_used) == 1 and int(pool.n_free) == 3,
          f"after the last decref: refcount {pool.refcount(b)}, n_used {pool.n_used} (expected 0, 1)")
    check(int(b) in ints(pool.alloc() for _ in range(3)), "the freed block is not handed out again")


@register("allocator")
def a_counts_peak(pk, ref):
    pool = pk.BlockPool(TINY, 6, 4)
    ids = [pool.alloc() for _ in range(4)]
    check((pool.n_used, pool.n_free, pool.peak_used) == (4, 2, 4), f"after 4 allocs: n_used/n_free/peak "
          f"{pool.n_used}/{pool.n_free}/{pool.peak_used}, expected 4/2/4")
    pool.incref(ids[0])
    pool.decref(ids[1])
    pool.decref(ids[2])
    check((pool.n_used, pool.n_free, pool.peak_used) == (2, 4, 4), f"after incref #0, decref #1, #2: n_used/n_free/peak "
          f"{pool.n_used}/{pool.n_free}/{pool.peak_used}, expected 2/4/4")
    more = [pool.alloc()]
    check((pool.n_used, pool.peak_used) == (3, 4), f"after one more alloc: n_used/peak {pool.n_used}/{pool.peak_used}, "
          "expected 3/4")
    more += [pool.alloc() for _ in range(3)]
    check((pool.n_used, pool.n_free, pool.peak_used) == (6, 0, 6), "full pool: n_used/n_free/peak "
          f"{pool.n_used}/{pool.n_free}/{pool.peak_used}, expected 6/0/6")
    for b in [ids[0], ids[0], ids[3], *more]:
        pool.decref(b)
    check((pool.n_used, pool.n_free, pool.peak_used) == (0, 6, 6), "emptied pool: n_used/n_free/peak "
          f"{pool.n_used}/{pool.n_free}/{pool.peak_used}, expected 0/6/6")


@register("allocator")
def a_exhaust(pk, ref):
    pool = pk.BlockPool(TINY, 3, 4)
    got = ints(pool.alloc() for _ in range(3))
    check(sorted(got) == [0, 1, 2], f"allocs {got}: not the pool's 3 blocks")
    before = pool_state(pool)
    raises(MemoryError, pool.alloc)
    raises(MemoryError, pool.alloc)
    check(pool_state(pool) == before, f"failed alloc changed the pool: {before} -> {pool_state(pool)}")
    pool.decref(got[1])
    check(int(pool.alloc()) == got[1], "after a failed alloc and a free, alloc is not the freed block (the only free one)")


@register("allocator")
def a_copy(pk, ref):
    """copy_block's ids, refcounts and n_copies (the data it copies is Part 4's: c_copy_data; which free
    block it takes is a_order's)."""
    pool = pk.BlockPool(ODD, 6, 3)
    a, b = ints((pool.alloc(), pool.alloc()))
    pool.decref(a)
    new = int(pool.copy_block(b))
    want = [0] * 6
    want[b] = want[new] = 1
    st = pool_state(pool)
    check(new != b and st == {"ref": want, "n_used": 2, "n_free": 4, "peak": 2, "n_copies": 1},
          f"copy_block({b}) returned {new}: {st} (a free block, source refcount must stay 1, n_copies 1)")
    pool.incref(b)
    new2 = int(pool.copy_block(b))
    want[b], st = 2, pool_state(pool)
    if new2 not in (b, new):
        want[new2] = 1
    check(new2 not in (b, new) and st == {"ref": want, "n_used": 3, "n_free": 3, "peak": 3, "n_copies": 2},
          f"copy of a shared block: returned {new2}, {st}")


@register("allocator")
def a_copy_full(pk, ref):
    pool = pk.BlockPool(TINY, 2, 4)
    pool.alloc(), pool.alloc()
    pool.k[:, 1] = 1.0
    before, k = pool_state(pool), np.array(pool.k)
    raises(MemoryError, pool.copy_block, 0)
    check(pool_state(pool) == before and np.array_equal(pool.k, k), f"copy on a full pool changed state: {before} -> "
          f"{pool_state(pool)}")
    for bad in (-1, 2, 7):
        raises(ValueError, pool.copy_block, bad)   # a bad id is a ValueError first, even on a full pool
    check(pool_state(pool) == before, "copy_block of a bad id changed the pool")


@register("allocator")
def a_bad_ids(pk, ref):
    pool = pk.BlockPool(TINY, 4, 4)
    for _ in range(4):
        pool.alloc()
    before = pool_state(pool)
    for fn in (pool.incref, pool.decref, pool.refcount, pool.copy_block):
        for b in (-1, -4, 4, 5, np.int64(-1), np.int64(4)):
            raises(ValueError, fn, b)
    check(pool_state(pool) == before, f"bad ids changed the pool: {before} -> {pool_state(pool)}")
    pool.incref(np.int64(2))
    check(int(pool.refcount(np.int32(2))) == 2, "numpy integer ids not accepted")
    pool.decref(np.int64(2))
    check(pool_state(pool) == before, "incref/decref with numpy ids")


@register("allocator")
def a_free_block_ops(pk, ref):
    pool = pk.BlockPool(TINY, 4, 4)
    a, b = ints((pool.alloc(), pool.alloc()))
    pool.decref(b)
    never = min({0, 1, 2, 3} - {a, b})
    before = pool_state(pool)
    for fn in (pool.incref, pool.decref, pool.copy_block):
        raises(ValueError, fn, b)        # b was given back: free
        raises(ValueError, fn, never)    # never allocated
    check(int(pool.refcount(b)) == 0 and int(pool.refcount(never)) == 0, "refcount of a free block is not 0")
    check(pool_state(pool) == before, f"operations on free blocks changed the pool: {before} -> {pool_state(pool)}")
    check(sorted([a, *ints(pool.alloc() for _ in range(3))]) == [0, 1, 2, 3], "the free blocks are not handed out")


@register("allocator")
def a_double_free(pk, ref):
    pool = pk.BlockPool(TINY, 3, 4)
    b = pool.alloc()
    pool.decref(b)
    before = pool_state(pool)
    raises(ValueError, pool.decref, b)
    check(pool_state(pool) == before, f"double free changed the pool: {before} -> {pool_state(pool)}")
    check(sorted(ints(pool.alloc() for _ in range(3))) == [0, 1, 2], "free list corrupted by a double free")
    raises(MemoryError, pool.alloc)


# ============================================================ Part 2: paged KV and the paged step
def _equiv_run(pk, cfg, B, seed):
    """Several sequences on a fragmented pool: prefill together, then mixed decode/chunk steps.
    Returns logits per sequence per step, and the state after each step."""
    prm = params(cfg, seed)
    lens = sorted({5, 1, B, 2 * B + 1, 3 if B > 1 else 2})
    lens = [min(L, cfg.max_len - 10) for L in lens]
    rounds = 4
    need = sum(math.ceil((L + 2 * rounds) / B) for L in lens) + 4
    pool = pk.BlockPool(cfg, need, B)
    fragment(pool, keep={1, 3})
    seqs = [pk.PagedSequence(pool) for _ in lens]
    chunks = [[toks(L, cfg, seed + i)] for i, L in enumerate(lens)]
    outs = [[] for _ in lens]
    states = []
    step_chunks = [c[0] for c in chunks]
    for r in range(rounds + 1):
        got = pk.paged_step(prm, cfg, seqs, step_chunks)
        check(isinstance(got, list) and len(got) == len(seqs), f"paged_step returned {type(got).__name__} of "
              f"{len(got) if hasattr(got, '__len__') else '?'} for {len(seqs)} sequences")
        for i, o in enumerate(got):
            outs[i].append(np.asarray(o))
        states.append(state(pool, seqs))
        step_chunks = [toks(1 + (i + r) % 2, cfg, 50 + 7 * r + i) for i in range(len(lens))]
        for i, c in enumerate(step_chunks):
            chunks[i].append(c)
    return outs, states, chunks, pool.block_size


_REF_RUNS = {}


def _ref_equiv_states(ref, cfg, B, seed):
    """The reference's states of _equiv_run, run once per reference module and input (not per mutant)."""
    key = (ref, cfg, B, seed)
    if key not in _REF_RUNS:
        _REF_RUNS[key] = _equiv_run(ref, cfg, B, seed)[1]
    return _REF_RUNS[key]


@register("paged_step")
def p_equiv(pk, ref):
    for cfg, seed in ((TINY, 0), (ODD, 1), (ONE, 2)):
        for B in (1, 3, 4, 16):
            outs, states, chunks, _ = _equiv_run(pk, cfg, B, seed)
            ref_states = _ref_equiv_states(ref, cfg, B, seed)
            for i, seq_chunks in enumerate(chunks):
                want = contiguous(cfg, seq_chunks, seed)[:len(outs[i])]
                for r, (o, w) in enumerate(zip(outs[i], want)):
                    close(o, w, 1e-10, f"cfg {cfg.n_layers}L/{cfg.n_heads}H/{cfg.d_head}Dh, B={B}, seq {i}, step {r} logits")
            for r, (s, w) in enumerate(zip(states, ref_states)):
                for L, t in zip(s["lengths"], s["tables"]):
                    check(len(t) == math.ceil(L / B), f"B={B} step {r}: length {L} with {len(t)} blocks")
                check(s == w, f"cfg {cfg.n_layers}L, B={B}, step {r}: state {s}, reference {w}")


@register("paged_step")
def p_boundaries(pk, ref):
    prm = params(TINY)
    for L0 in range(1, 10):
        pool = pk.BlockPool(TINY, 8, 4)
        seq = pk.PagedSequence(pool)
        chunks = [toks(L0, seed=L0)] + [[t] for t in toks(5, seed=100 + L0)]
        want = contiguous(TINY, chunks)
        for r, c in enumerate(chunks):
            out = pk.paged_step(prm, TINY, [seq], [c])
            L = int(seq.length)
            check(L == sum(len(x) for x in chunks[:r + 1]), f"length {L} after step {r} of prefill {L0}")
            check(len(seq.blocks) == math.ceil(L / 4) and int(pool.n_used) == math.ceil(L / 4),
                  f"length {L}, block size 4: {len(seq.blocks)} blocks, n_used {pool.n_used} (expected {math.ceil(L / 4)})")
            close(out[0], want[r], 1e-10, f"prefill {L0}, step {r}")


@register("paged_step")
def p_batch_order(pk, ref):
    prm = params(TINY)
    pool = pk.BlockPool(TINY, 16, 4)
    seqs = [pk.PagedSequence(pool) for _ in range(3)]
    chunks = [[toks(7, seed=1)], [toks(2, seed=2)], [toks(5, seed=3)]]
    for r in range(3):
        step = [c[r] for c in chunks]
        outs = pk.paged_step(prm, TINY, seqs, step)
        for i, (o, c) in enumerate(zip(outs, step)):
            check(np.shape(o) == (len(c), TINY.vocab), f"output {i} has shape {np.shape(o)}, expected {(len(c), TINY.vocab)}")
            close(o, contiguous(TINY, chunks[i][:r + 1])[r], 1e-10, f"step {r} output {i}")
        if r == 0:
            check([ints(s.blocks) for s in seqs] == [[0, 1], [2], [3, 4]],
                  f"tables {[ints(s.blocks) for s in seqs]}, expected [[0, 1], [2], [3, 4]] (list order, lowest first)")
        for i, L in enumerate((1, 1, 1) if r == 0 else (3, 3, 3)):
            chunks[i].append(toks(L, seed=10 * r + i))
    check([ints(s.blocks) for s in seqs] == [[0, 1, 5], [2, 6], [3, 4, 7]],
          f"tables {[ints(s.blocks) for s in seqs]}, expected [[0, 1, 5], [2, 6], [3, 4, 7]]")


def _shared(pk, n_blocks, prompt_len, n_seqs, B=4):
    prm = params(TINY)
    pool = pk.BlockPool(TINY, n_blocks, B)
    first = pk.PagedSequence(pool)
    prompt = toks(prompt_len, seed=9)
    pk.paged_step(prm, TINY, [first], [prompt])
    seqs = [first] + [first.fork() for _ in range(n_seqs - 1)]
    return pool, seqs, prompt


@register("paged_step")
def p_atomic(pk, ref):
    prm = params(TINY)
    pool = pk.BlockPool(TINY, 6, 4)
    a, b = pk.PagedSequence(pool), pk.PagedSequence(pool)
    pk.paged_step(prm, TINY, [a, b], [toks(4, seed=1), toks(4, seed=2)])
    before = state(pool, [a, b])
    raises(MemoryError, pk.paged_step, prm, TINY, [a, b], [toks(8, seed=3), toks(12, seed=4)])
    unchanged(before, pool, [a, b], "a step short of blocks")
    out = pk.paged_step(prm, TINY, [a, b], [toks(8, seed=3), [5]])
    close(out[0], contiguous(TINY, [toks(4, seed=1), toks(8, seed=3)])[1], 1e-10, "the step after a failed one")
    # copies count too: 3 sequences share a partial block, 1 free block, 2 copies needed
    pool, seqs, prompt = _shared(pk, 3, 6, 3)
    before = state(pool, seqs)
    raises(MemoryError, pk.paged_step, prm, TINY, seqs, [[1], [2], [3]])
    unchanged(before, pool, seqs, "3 sharers, 1 free block")
    raises(MemoryError, pk.paged_step, prm, TINY, seqs[:2], [[1], [2]])
    unchanged(before, pool, seqs, "2 of 3 sharers, 1 free block")
    out = pk.paged_step(prm, TINY, seqs[1:2], [[2]])
    close(out[0], contiguous(TINY, [prompt, [2]])[1], 1e-10, "one sharer after failed steps")


@register("paged_step")
def p_exact_count(pk, ref):
    prm = params(TINY)
    pool = pk.BlockPool(TINY, 5, 4)
    a, b = pk.PagedSequence(pool), pk.PagedSequence(pool)
    pk.paged_step(prm, TINY, [a], [toks(6, seed=1)])
    out = pk.paged_step(prm, TINY, [a, b], [toks(2, seed=2), toks(9, seed=3)])     # needs exactly the 3 free blocks
    close(out[1], contiguous(TINY, [toks(9, seed=3)])[0], 1e-10, "step that fits exactly")
    check(int(pool.n_free) == 0, "n_free after an exact step")
    pool, seqs, prompt = _shared(pk, 4, 6, 3)        # 2 free, 3 sharers of a partial block: n - 1 = 2 copies
    outs = pk.paged_step(prm, TINY, seqs, [[1], [2], [3]])
    check(int(pool.n_copies) == 2 and int(pool.n_free) == 0, f"3 sharers, 2 free: n_copies {pool.n_copies}, "
          f"n_free {pool.n_free} (expected 2, 0)")
    for t, o in zip((1, 2, 3), outs):
        close(o, contiguous(TINY, [prompt, [t]])[1], 1e-10, f"sharer decoding {t}")
    pool, seqs, prompt = _shared(pk, 5, 8, 3)        # full last block: 3 new blocks, 0 copies
    outs = pk.paged_step(prm, TINY, seqs, [[1], [2], [3]])
    check(int(pool.n_copies) == 0 and int(pool.n_free) == 0, f"full shared block: n_copies {pool.n_copies}")


@register("paged_step")
def p_validation(pk, ref):
    cfg, prm = SMALL, params(SMALL)
    pool = pk.BlockPool(cfg, 16, 4)
    a, b = pk.PagedSequence(pool), pk.PagedSequence(pool)
    pa, pb = toks(20, cfg, 1), toks(3, cfg, 2)
    pk.paged_step(prm, cfg, [a, b], [pa, pb])
    check(pk.paged_step(prm, cfg, [], []) == [], "paged_step([], []) is not []")
    before = state(pool, [a, b])
    bad = [([a], [[cfg.vocab]], "token == vocab"), ([b], [[-1]], "token -1"),
           ([b, a], [[1], [39, cfg.vocab]], "token == vocab in the second sequence"),
           ([b, a], [[1, 2, 3], []], "an empty chunk (second)"), ([a], [[]], "an empty chunk"),
           ([b, a], [np.array([1, 2, 3]), np.zeros(0, dtype=np.int64)], "an empty int64 chunk (second)"),
           ([a, b], [[1]], "2 sequences, 1 chunk"), ([a], [[1], [2]], "1 sequence, 2 chunks"),
           ([b, a], [[1, 2], [1, 2, 3, 4, 5]], "second sequence passes max_len"),
           ([b], [list(range(22))], "passes max_len")]
    for seqs, chunks, what in bad:
        raises(ValueError, pk.paged_step, prm, cfg, seqs, chunks)
        unchanged(before, pool, [a, b], f"bad input ({what})")
    out = pk.paged_step(prm, cfg, [a, b], [np.array([1, 2, 3, 4], dtype=np.int32), [np.int64(5), 6]])
    close(out[0], contiguous(cfg, [pa, [1, 2, 3, 4]])[1], 1e-10, "reaching max_len exactly")
    close(out[1], contiguous(cfg, [pb, [5, 6]])[1], 1e-10, "numpy integer tokens")
    check(int(a.length) == cfg.max_len, f"length {a.length} after reaching max_len")
    before = state(pool, [a, b])
    raises(ValueError, pk.paged_step, prm, cfg, [a], [[1]])
    while int(pool.n_free):
        pool.alloc()
    before = state(pool, [a, b])
    for chunks in ([[-1]], [[cfg.vocab]], [list(range(20))], [[]], [np.zeros(0, dtype=np.int64)]):
        raises(ValueError, pk.paged_step, prm, cfg, [b], chunks)     # ValueError before MemoryError
        unchanged(before, pool, [a, b], "bad input on a full pool")
    raises(MemoryError, pk.paged_step, prm, cfg, [b], [[1, 2, 3, 4]])
    unchanged(before, pool, [a, b], "a step on a full pool")


@register("paged_step")
def p_reserve(pk, ref):
    pool = pk.BlockPool(TINY, 4, 4)
    s = pk.PagedSequence(pool)
    raises(ValueError, s.reserve, 0)
    raises(ValueError, s.reserve, -2)
    check(state(pool, [s])["tables"] == [[]] and int(pool.n_used) == 0, "reserve(0) changed something")
    s.reserve(5)
    check(ints(s.blocks) == [0, 1] and int(s.length) == 0, f"reserve(5): table {ints(s.blocks)}, length {s.length}")
    s.reserve(3)
    check(ints(s.blocks) == [0, 1], "reserve within capacity allocated")
    pool.alloc()
    before = state(pool, [s])
    raises(MemoryError, s.reserve, 13)
    unchanged(before, pool, [s], "reserve that does not fit")
    s.reserve(12)
    check(ints(s.blocks) == [0, 1, 3], f"reserve(12) table {ints(s.blocks)}")


@register("paged_step")
def p_write_read(pk, ref):
    cfg = ODD
    pool = pk.BlockPool(cfg, 8, 3)
    fragment(pool, keep={0, 2})
    s = pk.PagedSequence(pool)
    s.reserve(7)
    blocks = ints(s.blocks)
    check(blocks == [1, 3, 4], f"table {blocks}, expected [1, 3, 4]")
    rng = np.random.default_rng(3)
    k, v = rng.standard_normal((2, 7, cfg.n_heads, cfg.d_head))
    s.write(1, 0, k, v)
    for i in range(7):
        check(np.array_equal(pool.k[1, blocks[i // 3], i % 3], k[i]) and np.array_equal(pool.v[1, blocks[i // 3], i % 3], v[i]),
              f"position {i} not stored at block {blocks[i // 3]} slot {i % 3}")
    K, V = s.read(1, 7)
    check(np.array_equal(K, k) and np.array_equal(V, v), "read does not return what write stored")
    K, V = s.read(1, 9)
    check(np.shape(K) == (9, cfg.n_heads, cfg.d_head) and np.array_equal(K[:7], k), "read up to capacity")
    k2 = rng.standard_normal((4, cfg.n_heads, cfg.d_head))
    s.write(1, 3, k2, k2)
    K, _ = s.read(1, 7)
    check(np.array_equal(K[:3], k[:3]) and np.array_equal(K[3:], k2), "write at start 3")
    check(not np.asarray(pool.k[0]).any() and not np.asarray(pool.k[2]).any(), "write touched another layer")


# ================================================================== Part 3: blockwise attention
def _fake_seq(cfg, n_blocks, B, table, L, seed):
    """A sequence as Part 3's tests hand it over: storage that serves one block per index
    (scenarios.OneBlockAtATime); `raw` holds the plain arrays for the expected answer."""
    rng = np.random.default_rng(seed)
    shape = (cfg.n_layers, n_blocks, B, cfg.n_heads, cfg.d_head)
    raw = types.SimpleNamespace(k=rng.standard_normal(shape) * 2.0, v=rng.standard_normal(shape),
                                block_size=B, cfg=cfg)
    refused = []
    return types.SimpleNamespace(pool=scenarios.served_one_block_at_a_time(raw, refused), blocks=list(table),
                                 length=L, raw=raw)


_B_CASES = []


def _b_cases():
    """(cfg, B, table, L, raw storage, layer, q, expected) for b_equiv: the expected answer from the
    lab's attention_core, computed once, not per mutant."""
    if not _B_CASES:
        for cfg in (TINY, ODD):
            for B in (1, 3, 4, 5, 16):
                n = 12
                for L in sorted({1, B - 1, B, B + 1, 2 * B, 2 * B + 1, 3 * B - 1}):
                    if L < 1 or math.ceil(L / B) > n:
                        continue
                    nb = math.ceil(L / B)
                    rng = np.random.default_rng(L * 100 + B)
                    table = [int(x) for x in rng.permutation(n)[:nb]]
                    if nb >= 2 and table == sorted(table):
                        table = table[::-1]
                    raw = _fake_seq(cfg, n, B, table, L, seed=L + B).raw
                    pos = np.arange(L)
                    blocks = np.array(table)[pos // B]
                    for layer in range(cfg.n_layers):
                        q = rng.standard_normal((cfg.n_heads, cfg.d_head))
                        K, V = raw.k[layer, blocks, pos % B], raw.v[layer, blocks, pos % B]
                        _B_CASES.append((cfg, B, table, L, raw, layer, q,
                                         tl.attention_core(q[None, None], K, V, L - 1)[0, 0]))
    return _B_CASES


@register("blockwise_attention")
def b_equiv(pk, ref):
    for cfg, B, table, L, raw, layer, q, want in _b_cases():
        own = types.SimpleNamespace(k=raw.k.copy(), v=raw.v.copy(), block_size=B, cfg=cfg)   # its own copy
        seq = types.SimpleNamespace(pool=scenarios.served_one_block_at_a_time(own, []), blocks=list(table), length=L)
        try:
            got = pk.blockwise_attention(q.copy(), seq, layer)
        except Exception as e:  # noqa: BLE001
            raise Fail(f"d_head {cfg.d_head}, B={B}, length {L}, layer {layer}: {type(e).__name__}: {e}")
        close(got, want, 1e-12, f"d_head {cfg.d_head}, B={B}, length {L}, table {table}, layer {layer}")
    seq = _fake_seq(TINY, 4, 4, [1, 0, 2], 10, seed=3)          # large scores: each head needs its own maximum
    q = np.random.default_rng(7).standard_normal((TINY.n_heads, TINY.d_head)) * 3000.0
    K, V = seq.raw.k[0, [1, 1, 1, 1, 0, 0, 0, 0, 2, 2], [0, 1, 2, 3] * 2 + [0, 1]], \
        seq.raw.v[0, [1, 1, 1, 1, 0, 0, 0, 0, 2, 2], [0, 1, 2, 3] * 2 + [0, 1]]
    close(pk.blockwise_attention(q, seq, 0), tl.attention_core(q[None, None], K, V, 9)[0, 0], 1e-12, "scores of ~10000")


@register("blockwise_attention")
def b_empty(pk, ref):
    seq = _fake_seq(TINY, 4, 4, [], 0, 1)
    raises(ValueError, pk.blockwise_attention, np.ones((4, 16)), seq, 0)


# ============================================================ Part 4: sharing and copy-on-write
@register("copy_on_write")
def c_fork(pk, ref):
    pool, seqs, prompt = _shared(pk, 8, 6, 1)
    p = seqs[0]
    c = p.fork()
    check(c.pool is pool and ints(c.blocks) == [0, 1] and int(c.length) == 6,
          f"fork: child table {ints(c.blocks)}, length {c.length} (expected [0, 1], 6)")
    check(ints(p.blocks) == [0, 1] and int(p.length) == 6, "fork changed the parent")
    st = pool_state(pool)
    check(st["ref"][:2] == [2, 2] and st["n_used"] == 2 and st["n_copies"] == 0,
          f"after fork: refcounts {st['ref'][:3]}, n_used {st['n_used']}, n_copies {st['n_copies']} (expected [2, 2], 2, 0)")
    g = c.fork()
    check(ints(pool.refcount(b) for b in (0, 1)) == [3, 3] and ints(g.blocks) == [0, 1], "fork of a fork")
    e = pk.PagedSequence(pool).fork()
    check(ints(e.blocks) == [] and int(e.length) == 0, "fork of an empty sequence")


@register("copy_on_write")
def c_cow_step(pk, ref):
    prm = params(TINY)
    pool, seqs, prompt = _shared(pk, 10, 6, 3)
    out = pk.paged_step(prm, TINY, seqs, [[7], [8], [9]])
    tables = [ints(s.blocks) for s in seqs]
    st = pool_state(pool)
    check(st["n_copies"] == 2, f"3 sharers of a partial block decode: n_copies {st['n_copies']}, expected 2")
    check(tables == [[0, 2], [0, 3], [0, 1]], f"tables {tables}, expected [[0, 2], [0, 3], [0, 1]]")
    check(st["ref"][:5] == [3, 1, 1, 1, 0] and st["n_used"] == 4, f"refcounts {st['ref'][:5]}, n_used {st['n_used']}")
    hist = [[prompt, [t]] for t in (7, 8, 9)]
    for i, o in enumerate(out):
        close(o, contiguous(TINY, hist[i])[1], 1e-10, f"sharer {i} after copy-on-write")
    for r in range(3):
        step = [[1 + 10 * r + i] for i in range(3)]
        out = pk.paged_step(prm, TINY, seqs, step)
        for i, o in enumerate(out):
            hist[i].append(step[i])
            close(o, contiguous(TINY, hist[i])[-1], 1e-10, f"sharer {i}, decode {r + 2}")
    check(int(pool.n_copies) == 2, f"later decodes copied: n_copies {pool.n_copies}")
    tables = [ints(s.blocks) for s in seqs]
    check(tables == [[0, 2, 4], [0, 3, 5], [0, 1, 6]], f"tables {tables}, expected [[0, 2, 4], [0, 3, 5], [0, 1, 6]]")


@register("copy_on_write")
def c_full_block(pk, ref):
    prm = params(TINY)
    pool, seqs, prompt = _shared(pk, 8, 8, 3)
    out = pk.paged_step(prm, TINY, seqs, [[1], [2], [3]])
    check(int(pool.n_copies) == 0, f"a full shared block was copied: n_copies {pool.n_copies}")
    tables = [ints(s.blocks) for s in seqs]
    check(tables == [[0, 1, 2], [0, 1, 3], [0, 1, 4]], f"tables {tables}")
    check(ints(pool.refcount(b) for b in range(5)) == [3, 3, 1, 1, 1], "refcounts after a full-block step")
    for t, o in zip((1, 2, 3), out):
        close(o, contiguous(TINY, [prompt, [t]])[1], 1e-10, f"decode {t}")


@register("copy_on_write")
def c_sequential(pk, ref):
    prm = params(TINY)
    pool, (p, c), prompt = _shared(pk, 8, 5, 2)
    oc = pk.paged_step(prm, TINY, [c], [[4]])
    check(int(pool.n_copies) == 1 and ints(c.blocks) == [0, 2] and ints(p.blocks) == [0, 1],
          f"child's write: n_copies {pool.n_copies}, child {ints(c.blocks)}, parent {ints(p.blocks)}")
    op = pk.paged_step(prm, TINY, [p], [[5]])
    check(int(pool.n_copies) == 1 and ints(p.blocks) == [0, 1], f"last holder copied: n_copies {pool.n_copies}")
    close(oc[0], contiguous(TINY, [prompt, [4]])[1], 1e-10, "child")
    close(op[0], contiguous(TINY, [prompt, [5]])[1], 1e-10, "parent")


@register("copy_on_write")
def c_copy_data(pk, ref):
    """A copy holds its source's K and V in every layer (copy-on-write relies on it; Part 4 owns it)."""
    pool = pk.BlockPool(ODD, 6, 3)
    rng = np.random.default_rng(5)
    pool.k[...] = rng.standard_normal(pool.k.shape)
    pool.v[...] = rng.standard_normal(pool.v.shape)
    k1, v1 = np.array(pool.k[:, 1]), np.array(pool.v[:, 1])
    pool.alloc(), pool.alloc()
    pool.decref(0)
    new = int(pool.copy_block(1))
    check(np.array_equal(pool.k[:, new], k1) and np.array_equal(pool.v[:, new], v1),
          "copy_block: the new block's K and V differ from the source's in some layer "
          f"(K ok per layer {[bool(np.array_equal(pool.k[i, new], k1[i])) for i in range(3)]}, "
          f"V ok per layer {[bool(np.array_equal(pool.v[i, new], v1[i])) for i in range(3)]})")
    check(np.array_equal(pool.k[:, 1], k1) and np.array_equal(pool.v[:, 1], v1), "copy_block changed the source")


@register("copy_on_write")
def c_reserve_cow(pk, ref):
    pool, (p, c), prompt = _shared(pk, 8, 6, 2)
    c.reserve(1)
    check(ints(c.blocks) == [0, 2] and int(c.length) == 6 and int(pool.n_copies) == 1,
          f"reserve on a shared partial block: table {ints(c.blocks)}, length {c.length}, n_copies {pool.n_copies}")
    check(ints(pool.refcount(b) for b in range(3)) == [2, 1, 1], "refcounts after copy-on-write in reserve")
    check(np.array_equal(pool.k[:, 2, :2], pool.k[:, 1, :2]) and np.array_equal(pool.v[:, 2, :2], pool.v[:, 1, :2]),
          "the copied block's K/V differ from the shared block's")


@register("copy_on_write")
def c_free(pk, ref):
    prm = params(TINY)
    pool, (p, c), prompt = _shared(pk, 8, 6, 2)
    pk.paged_step(prm, TINY, [c], [[3]])
    c.free()
    check(ints(c.blocks) == [] and int(c.length) == 0, f"after free: table {ints(c.blocks)}, length {c.length}")
    check(ints(pool.refcount(b) for b in range(4)) == [1, 1, 0, 0] and int(pool.n_used) == 2,
          f"after freeing the child: refcounts {ints(pool.refcount(b) for b in range(4))}, n_used {pool.n_used}")
    c.free()
    check(int(pool.n_used) == 2, "free of an empty sequence changed the pool")
    out = pk.paged_step(prm, TINY, [p], [[9]])
    close(out[0], contiguous(TINY, [prompt, [9]])[1], 1e-10, "parent after the child was freed")
    p2 = toks(5, seed=77)
    out = pk.paged_step(prm, TINY, [c], [p2])
    check(ints(c.blocks) == [2, 3], f"reused sequence table {ints(c.blocks)}, expected [2, 3]")
    close(out[0], contiguous(TINY, [p2])[0], 1e-10, "reused sequence")
    g = p.fork()
    g.free()
    check(ints(pool.refcount(b) for b in range(2)) == [1, 1], "freeing a fresh fork released the parent's blocks")
    out = pk.paged_step(prm, TINY, [p], [[4]])
    close(out[0], contiguous(TINY, [prompt, [9], [4]])[2], 1e-10, "parent after a fork was freed")
    p.free(), c.free()
    check(pool_state(pool)["ref"] == [0] * 8 and int(pool.n_used) == 0 and int(pool.n_free) == 8, "everything freed")


def _drive(pk, fn, **kw):
    import decoding
    saved = sys.modules.get("paged_kv")
    sys.modules["paged_kv"] = pk
    try:
        return getattr(decoding, fn)(**kw)
    finally:
        if saved is None:
            sys.modules.pop("paged_kv", None)
        else:
            sys.modules["paged_kv"] = saved


_REF_DRIVERS = {}


def _drivers_paged(mod, prm, prompt):
    """Both drivers on `mod`'s pools: samples, stats and each pool's state."""
    pool, bpool = mod.BlockPool(TINY, 64, 4), mod.BlockPool(TINY, 64, 4)
    s, st = _drive(mod, "parallel_sample", params=prm, cfg=TINY, prompt=prompt, n=3, max_new=6,
                   temperature=0.8, seed=3, pool=pool)
    b, bst = _drive(mod, "beam_search", params=prm, cfg=TINY, prompt=prompt, k=3, steps=5, pool=bpool)
    return s, st, pool_state(pool), b, bst, pool_state(bpool)


@register("copy_on_write")
def c_drivers(pk, ref):
    prm = params(TINY)
    prompt = toks(10, seed=4)
    s, st, ps, b, bst, bps = _drivers_paged(pk, prm, prompt)
    if ref not in _REF_DRIVERS:     # the reference's runs and the contiguous baseline: once, not per mutant
        _REF_DRIVERS[ref] = (_drivers_paged(ref, prm, prompt), (
            _drive(ref, "parallel_sample", params=prm, cfg=TINY, prompt=prompt, n=3, max_new=6, temperature=0.8,
                   seed=3, pool=None)[0],
            _drive(ref, "beam_search", params=prm, cfg=TINY, prompt=prompt, k=3, steps=5, pool=None)[0]))
    (rs, rst, rps, rb, rbst, rbps), (base_s, base_b) = _REF_DRIVERS[ref]
    check(s == base_s == rs, f"parallel_sample samples {s}, baseline {base_s}")
    check(st == rst and ps == rps, f"parallel_sample stats {st} / pool {ps}, reference {rst} / {rps}")
    check([t for _, t in b] == [t for _, t in base_b] == [t for _, t in rb], "beam_search beams differ")
    check(np.allclose([x for x, _ in b], [x for x, _ in base_b], rtol=0, atol=1e-9), "beam scores differ")
    check(bst == rbst and bps == rbps, f"beam_search stats {bst} / pool {bps}, reference {rbst} / {rbps}")


# ====================================================== Part 5 (bonus): the prefix cache
def writes(pk, part):
    """Whether a module defines a top-level name of the part (a bonus part is checked only then)."""
    return any(hasattr(pk, name) for name in registry.top_names(part))


def _prefill(pk, cfg, pool, cache, prompt, expect_rows=None):
    """A new request prefilled through the cache; its logits must be the contiguous forward's rows of
    the positions it computed."""
    seq = pk.PagedSequence(pool)
    out = np.asarray(pk.cached_prefill(params(cfg), cfg, seq, list(prompt), cache))
    if expect_rows is not None:
        check(len(out) == expect_rows, f"cached_prefill of {len(prompt)} tokens computed {len(out)} rows, "
                                       f"expected {expect_rows}")
    close(out, contiguous(cfg, [prompt])[0][len(prompt) - len(out):], 1e-10, f"logits of a cached prefill of "
                                                                           f"{len(prompt)} tokens")
    return seq


def _own_blocks(pk, pool, tokens, seed=0):
    """The test's own sequence: blocks from pool.alloc, random K/V stored in them (no paged_step)."""
    blocks = [pool.alloc() for _ in range(-(-len(tokens) // pool.block_size))]
    rng = np.random.default_rng(seed)
    for i, b in enumerate(blocks):
        pool.k[:, b] = rng.standard_normal(pool.k[:, b].shape)
        pool.v[:, b] = rng.standard_normal(pool.v[:, b].shape)
    return [int(b) for b in blocks]


def _release(pool, blocks):
    for b in blocks:
        pool.decref(b)


@register("prefix_cache")
def pc_hits(pk, ref):
    """Hits, rows computed, n_hit_tokens and the lookup cap (hand-worked, block size 4)."""
    pool = pk.BlockPool(ODD, 16, 4)
    cache = pk.PrefixCache(pool)
    A = toks(13, ODD, 50)
    a = _prefill(pk, ODD, pool, cache, A, 13)
    check(ints(a.blocks) == [0, 1, 2, 3], f"first request's table {ints(a.blocks)}")
    b = _prefill(pk, ODD, pool, cache, A[:8] + toks(5, ODD, 51), 5)
    check(ints(b.blocks) == [0, 1, 4, 5] and int(cache.n_hit_tokens) == 8,
          f"second request: table {ints(b.blocks)}, n_hit_tokens {cache.n_hit_tokens} (expected [0, 1, 4, 5], 8)")
    for n, hits in ((4, []), (5, [0]), (8, [0]), (12, [0, 1]), (13, [0, 1, 2]), (14, [0, 1, 2])):
        got = ints(cache.lookup(A[:n] + toks(1, ODD, 52) * (n == 14)))
        check(got == hits, f"lookup of {n} tokens: {got}, expected {hits}")
    c = _prefill(pk, ODD, pool, cache, A[:12], 4)
    check(ints(c.blocks)[:2] == [0, 1] and int(cache.n_hit_tokens) == 16,
          f"a prompt cached whole: table {ints(c.blocks)}, n_hit_tokens {cache.n_hit_tokens}")


@register("prefix_cache")
def pc_keys(pk, ref):
    """Whole-prefix keys, insert's count, the cache's one reference, a block caching one key only."""
    pool = pk.BlockPool(ODD, 24, 4)
    cache = pk.PrefixCache(pool)
    P, Q, R, Y, Z = (toks(4, ODD, 60 + i) for i in range(5))
    X = [(P[0] + 1) % ODD.vocab] + P[1:]
    t = toks(1, ODD, 66)
    a = _own_blocks(pk, pool, P + Q + R + t, 1)                        # 0 1 2 3
    check(int(cache.insert(P + Q + R + t, a)) == 3, "insert of 13 tokens must cache its 3 full blocks")
    check([pool.refcount(b) for b in a] == [2, 2, 2, 1], f"refcounts {[pool.refcount(b) for b in a]}: the cache "
                                                           "holds one reference on each block it caches")
    check(ints(cache.lookup(X + Q + R + t)) == [], "the same blocks after another first block must not match")
    check(ints(cache.lookup(P + Q + R + t)) == [0, 1, 2], "lookup of P Q R t")
    c = _own_blocks(pk, pool, X + Q + R, 2)                             # 4 5 6
    check(int(cache.insert(X + Q + R, c)) == 3, "insert of X Q R: its 3 keys are new")
    check(ints(cache.lookup(X + Q + R + t)) == c, f"lookup of X Q R t: {ints(cache.lookup(X + Q + R + t))}")
    d = _own_blocks(pk, pool, Y + Z, 3)                                 # 7 8
    check(int(cache.insert(Y + Z, [a[0], d[1]])) == 1 and pool.refcount(a[0]) == 2,
          "a block that caches one key is not cached under another")
    check(int(cache.insert(P + Q + R + t, a)) == 0 and int(cache.n_cached) == 7, "keys cached already: nothing new")


@register("prefix_cache")
def pc_logits(pk, ref):
    """Cached prefills give the contiguous forward's logits, and read the K/V stored in the hit blocks:
    after the test overwrites a cached block, the logits equal the reference's on the same storage."""
    outs = {}
    for name, mod in (("impl", pk), ("ref", ref)):
        pool = mod.BlockPool(ODD, 20, 3)
        cache = mod.PrefixCache(pool)
        S = toks(10, ODD, 70)
        seqs = [_prefill(mod, ODD, pool, cache, S + q) for q in ([1, 2], [3, 4, 5], [1, 2, 6, 7, 8])]
        for s in seqs[:2]:
            _release(pool, s.blocks)
            s.blocks, s.length = [], 0
        rng = np.random.default_rng(71)
        for b in (0, 1):                                   # blocks 0 and 1 cache S's first 6 tokens
            pool.k[:, b] = rng.standard_normal(pool.k[:, b].shape)
        seq = mod.PagedSequence(pool)
        outs[name] = np.asarray(mod.cached_prefill(params(ODD), ODD, seq, S + [9], cache))
    close(outs["impl"], outs["ref"], 1e-10, "a cached prefill after the test overwrote two cached blocks")


@register("prefix_cache")
def pc_eviction(pk, ref):
    """Recency from insert (a use counts the deepest block first), lookup changes nothing, evict takes
    the least recently used blocks only the cache holds, returns how many, and never cascades."""
    pool = pk.BlockPool(ODD, 16, 4)
    cache = pk.PrefixCache(pool)
    A = toks(13, ODD, 80)
    a = _prefill(pk, ODD, pool, cache, A)                              # 0 1 2 (3): recency 2 1 0
    b = _prefill(pk, ODD, pool, cache, A[:8] + toks(5, ODD, 81))       # 0 1 4 5: 4 new; use 4 1 0 -> 2 4 1 0
    for s in (a, b):
        _release(pool, s.blocks)
    cache.lookup(A)
    cache.lookup(A[:9])
    c = _prefill(pk, ODD, pool, cache, A[:4] + toks(5, ODD, 82))       # 0 3 5: 3 new; use 3 0 -> 2 4 1 3 0
    check(ints(c.blocks) == [0, 3, 5], f"third request's table {ints(c.blocks)}, expected [0, 3, 5]")
    check(int(cache.evict(0)) == 0 and int(cache.evict(1)) == 1 and pool.refcount(2) == 0,
          "evict(1) must release the least recently used block, 2")
    _release(pool, c.blocks)
    check(eviction_order(pool, cache) == [4, 1, 3, 0], "eviction order after the third request")
    # no cascade: P Q cached by s (freed), P Q R by t, which holds its blocks
    P, Q, R = (toks(4, ODD, 83 + i) for i in range(3))
    s = _own_blocks(pk, pool, P + Q)
    cache.insert(P + Q, s)
    t = _own_blocks(pk, pool, P + Q + R)
    check(int(cache.insert(P + Q + R, t)) == 1, "insert of P Q R: only its third key is new")
    _release(pool, s)
    check(int(cache.evict(10)) == 2 and int(cache.n_cached) == 1 and pool.refcount(t[2]) == 2,
          "evict(10) releases the 2 blocks only the cache holds; P Q R's block stays cached (no cascade)")
    # a skipped key: the cached blocks of the other full blocks still count as used, those before it too
    pool = pk.BlockPool(ODD, 16, 4)
    cache = pk.PrefixCache(pool)
    P, Q, R, X, Y, W, Z = (toks(4, ODD, 100 + i) for i in range(7))
    a, x = _own_blocks(pk, pool, P + Q + R), _own_blocks(pk, pool, X + Y)   # 0 1 2, 3 4
    cache.insert(P + Q + R, a)
    cache.insert(X + Y, x)                                                     # 2 1 0 4 3
    c = _own_blocks(pk, pool, P + W + Z)                                       # 5 6 7
    check(int(cache.insert(P + W + Z, [a[0], x[1], c[2]])) == 1, "insert of P W Z with P W's block caching X Y: "
                                                                 "P W is skipped, P W Z cached")
    for s in (a, x, c):
        _release(pool, s)
    got = eviction_order(pool, cache)
    check(got == [2, 1, 4, 3, 7, 0], f"eviction order {got} after an insert that skipped a key, expected "
                                     "[2, 1, 4, 3, 7, 0] (P W Z's use counts P's block 0 too)")


@register("prefix_cache")
def pc_exhaustion(pk, ref):
    """cached_prefill evicts exactly the shortfall, least recently used first and never a hit (not even
    the oldest block); a prompt that cannot fit raises MemoryError and changes nothing."""
    pool = pk.BlockPool(ODD, 10, 4)
    cache = pk.PrefixCache(pool)
    A, U = toks(13, ODD, 90), toks(9, ODD, 91)
    for prompt in (A, U):                                  # cached: 0 1 2 (A) and 3 4 (U): LRU 2 1 0 4 3
        s = _prefill(pk, ODD, pool, cache, prompt)
        _release(pool, s.blocks)
    held = [pool.alloc() for _ in range(3)]                # 2 free left
    seq = pk.PagedSequence(pool)
    before = state(pool, [seq])
    raises(MemoryError, pk.cached_prefill, params(ODD), ODD, seq, A[:4] + toks(25, ODD, 92), cache)   # 7 > 2 + 4
    unchanged(before, pool, [seq], "a cached prefill that does not fit")
    check(int(cache.n_cached) == 5, "a cached prefill that does not fit must evict nothing")
    b = _prefill(pk, ODD, pool, cache, A[:4] + toks(18, ODD, 93))     # needs 5: evicts 2 1 4, never the hit 0
    check(ints(b.blocks)[0] == 0 and sorted(ints(b.blocks)[1:]) == [1, 2, 4, 8, 9],
          f"table {ints(b.blocks)}: hit 0, then the 2 free blocks and the 3 oldest cached ones but the hit")
    check(pool.refcount(3) == 1, "block 3 (U's block 0, used after U's block 1) must stay cached")
    _release(pool, held)


@register("prefix_cache")
def pc_errors(pk, ref):
    """ValueError, nothing changed: a sequence that is not empty or on another pool, a free id among
    the blocks insert would cache, evict(-1)."""
    pool = pk.BlockPool(ODD, 12, 4)
    cache = pk.PrefixCache(pool)
    A = toks(9, ODD, 95)
    a = _prefill(pk, ODD, pool, cache, A)
    b = pool.alloc()                                       # the test's block, lent to the sequences below
    before = state(pool, [a])
    for kind in ("filled", "reserved", "other"):
        seq = pk.PagedSequence(pk.BlockPool(ODD, 4, 4) if kind == "other" else pool)
        if kind != "other":
            pool.incref(b)
            seq.blocks, seq.length = [b], 1 if kind == "filled" else 0
        raises(ValueError, pk.cached_prefill, params(ODD), ODD, seq, A, cache)
        if kind != "other":
            pool.decref(b)
        unchanged(before, pool, [a], f"cached_prefill on a {kind} sequence")
    T = toks(13, ODD, 96)
    own = _own_blocks(pk, pool, T)
    before = state(pool, [a])
    free = next(b for b in range(pool.n_blocks) if pool.refcount(b) == 0)
    raises(ValueError, cache.insert, T, [own[0], free, own[2]])
    raises(ValueError, cache.evict, -1)
    unchanged(before, pool, [a], "insert with a free block, evict(-1)")
    check(int(cache.n_cached) == 2, "a failed insert caches nothing")


# ====================================================== Part 6 (bonus): the swap space
def _made(pk, pool, blocks, length):
    """A sequence the test builds itself on `blocks` (no paged_step): a PagedSequence with its table set."""
    seq = pk.PagedSequence(pool)
    seq.blocks, seq.length = list(blocks), length
    return seq


def _seq(pk, pool, n, seed, shared=()):
    """n positions after the blocks `shared` (full ones, incref'd): blocks of its own from pool.alloc,
    random K/V in every slot of them."""
    for b in shared:
        pool.incref(b)
    own = _own_blocks(pk, pool, [0] * n, seed)
    return _made(pk, pool, list(shared) + own, len(shared) * pool.block_size + n)


def _fork(pk, seq):
    for b in seq.blocks:
        seq.pool.incref(b)
    return _made(pk, seq.pool, seq.blocks, seq.length)


def _kv(seq):
    """K and V of a sequence's positions, through its table."""
    B, pos = seq.pool.block_size, np.arange(seq.length)
    table = np.asarray(seq.blocks, dtype=np.int64)[pos // B]
    return np.asarray(seq.pool.k)[:, table, pos % B].copy(), np.asarray(seq.pool.v)[:, table, pos % B].copy()


def _space_state(pool, sp, seqs):
    return state(pool, seqs), (int(sp.n_free), int(sp.n_out), int(sp.n_in))


@register("swap")
def sw_layout(pk, ref):
    for cfg, n, B in ((TINY, 8, 4), (ODD, 3, 5), (ONE, 1, 1)):
        pool = pk.BlockPool(cfg, 4, B)
        sp = pk.SwapSpace(pool, n)
        check(sp.pool is pool and int(sp.n_blocks) == n, "SwapSpace's pool and n_blocks")
        want = (cfg.n_layers, n, B, cfg.n_heads, cfg.d_head)
        for name in ("k", "v"):
            a = np.asarray(getattr(sp, name))
            check(a.shape == want and a.dtype == np.float64 and not a.any(),
                  f"SwapSpace.{name}: shape {a.shape}, dtype {a.dtype}; want float64 zeros of {want}")
        check(sp.k is not sp.v and not np.shares_memory(sp.k, sp.v), "k and v are separate arrays")
        check((int(sp.n_free), int(sp.n_out), int(sp.n_in)) == (n, 0, 0), "a new space: n_free n_blocks, n_out = n_in = 0")


@register("swap")
def sw_out(pk, ref):
    """3 forks of 6 positions (B 4: blocks a b) and a 4th outside the group (hand-worked)."""
    pool = pk.BlockPool(ODD, 10, 4)
    sp = pk.SwapSpace(pool, 6)
    forks = [_seq(pk, pool, 6, 1)]
    forks += [_fork(pk, forks[0]) for _ in range(3)]
    a, b = forks[0].blocks
    sp.swap_out(forks[:3])
    check([(s.blocks, s.length) for s in forks[:3]] == [([], 0)] * 3, "swap_out empties every sequence of the group")
    check((pool.refcount(a), pool.refcount(b), pool.n_free) == (1, 1, 8),
          f"after swap_out: refcounts {pool.refcount(a)}, {pool.refcount(b)} and n_free {pool.n_free}; want 1, 1 "
          "(the fork outside keeps them) and 8")
    check((int(sp.n_free), int(sp.n_out), int(sp.n_in)) == (4, 2, 0),
          f"space n_free, n_out, n_in {sp.n_free, sp.n_out, sp.n_in}; want 4, 2, 0 (each distinct block once)")
    sp.swap_out([forks[3]])
    check(pool.n_free == 10 and (int(sp.n_free), int(sp.n_out)) == (2, 4),
          f"after the 4th: pool n_free {pool.n_free} (want 10), space n_free, n_out {sp.n_free, sp.n_out} (want 2, 4)")


@register("swap")
def sw_in(pk, ref):
    """Beams of one prompt (B 3) out in an order of their own on a fragmented pool: the blocks come back
    in order of first appearance, shared as they were, with the K/V they held after the pool reused and
    overwrote them; the next decode step gives the logits it gives without the swap."""
    def run(swap):
        pool = pk.BlockPool(ODD, 24, 3)
        held = [pool.alloc() for _ in range(2)]
        s0 = _seq(pk, pool, 7, 2)
        s1 = _seq(pk, pool, 4, 3, shared=s0.blocks[:2])
        s2 = _fork(pk, s1)
        group, kv = [s2, s0, s1], [_kv(s) for s in (s2, s0, s1)]
        if swap:
            sp = pk.SwapSpace(pool, 8)
            h = sp.swap_out(group)
            pool.decref(held[0])
            junk = [pool.alloc() for _ in range(pool.n_free)]
            for b in junk:
                pool.k[:, b], pool.v[:, b] = 7.0, -7.0
                pool.decref(b)
            group = sp.swap_in(h)
            check((int(sp.n_free), int(sp.n_out), int(sp.n_in)) == (8, 5, 5),
                  f"space n_free, n_out, n_in {sp.n_free, sp.n_out, sp.n_in}; want 8, 5, 5")
            # distinct in order of first appearance: s2's [p0 p1 x y], then s0's p2; the pool's free blocks
            # are 0 and 2 upwards (block 1 still held): 0, 2, 3, 4, 5
            check([list(map(int, s.blocks)) for s in group] == [[0, 2, 3, 4], [0, 2, 5], [0, 2, 3, 4]],
                  f"swap_in's tables {[s.blocks for s in group]}; want [[0, 2, 3, 4], [0, 2, 5], [0, 2, 3, 4]]")
            check([s.length for s in group] == [10, 7, 10], f"lengths {[s.length for s in group]}")
            check([pool.refcount(b) for b in (0, 2, 3, 4, 5)] == [3, 3, 2, 2, 1],
                  f"refcounts {[pool.refcount(b) for b in (0, 2, 3, 4, 5)]}; want [3, 3, 2, 2, 1]")
            for s, (k, v) in zip(group, kv):
                k2, v2 = _kv(s)
                check(np.array_equal(k, k2) and np.array_equal(v, v2), "the K/V a sequence held came back")
        return pk.paged_step(params(ODD), ODD, group, [[1], [2], [3]])
    for plain, swapped in zip(run(False), run(True)):
        close(swapped, plain, 1e-10, "the decode step after swap_in")


@register("swap")
def sw_atomic(pk, ref):
    """Exact fits count distinct blocks; what does not fit raises MemoryError and changes nothing, and a
    handle swap_in could not serve is still good."""
    pool = pk.BlockPool(ODD, 8, 2)
    sp = pk.SwapSpace(pool, 3)
    forks = [_seq(pk, pool, 3, 4)]
    forks += [_fork(pk, forks[0]) for _ in range(3)]
    other = _seq(pk, pool, 4, 5)
    h = sp.swap_out(forks)                      # 2 distinct blocks, 8 entries, 3 free: fits
    before = _space_state(pool, sp, forks + [other])
    raises(MemoryError, sp.swap_out, [other])   # 2 blocks, 1 free
    check(_space_state(pool, sp, forks + [other]) == before, "a swap_out that did not fit changed something")
    held = [pool.alloc() for _ in range(pool.n_free - 1)]
    before = _space_state(pool, sp, forks + [other])
    raises(MemoryError, sp.swap_in, h)          # 2 blocks, 1 free
    check(_space_state(pool, sp, forks + [other]) == before, "a swap_in that did not fit changed something")
    pool.decref(held.pop())
    back = sp.swap_in(h)                        # exactly 2 free: fits, 8 entries whatever
    check([s.length for s in back] == [3] * 4 and pool.n_free == 0, "the handle was still good after MemoryError")


@register("swap")
def sw_errors(pk, ref):
    pool = pk.BlockPool(ODD, 8, 2)
    sp = pk.SwapSpace(pool, 8)
    a, b = _seq(pk, pool, 3, 6), _seq(pk, pool, 2, 7)
    stranger = _made(pk, pk.BlockPool(ODD, 2, 2), [], 0)
    stranger.blocks, stranger.length = [stranger.pool.alloc()], 1
    before = _space_state(pool, sp, [a, b])
    for bad in ([], [a, a], [a, b, a], [a, stranger]):
        raises(ValueError, sp.swap_out, bad)
    for bad in (object(), pk.SwapSpace(pool, 1).swap_out([pk.PagedSequence(pool)])):
        raises(ValueError, sp.swap_in, bad)
    check(_space_state(pool, sp, [a, b]) == before, "a call that raised ValueError changed something")
    h = sp.swap_out([a])
    sp.swap_in(h)
    before = _space_state(pool, sp, [a, b])
    raises(ValueError, sp.swap_in, h)
    check(_space_state(pool, sp, [a, b]) == before, "swap_in of a used handle changed something")


def differential_cache(pk, ref, seed, n_actions=40):
    """Random requests (on shared prefixes), releases and evictions on both implementations: the
    same tables, refcounts, logits, errors, n_cached and n_hit_tokens after every action; hits,
    errors, evictions, refcounts and counters as the contract's CacheModel has them."""
    rng = np.random.default_rng(seed)
    B = int(rng.choice([1, 2, 3, 4, 5]))
    n_blocks = int(rng.integers(8, 24))
    bases = [toks(int(rng.integers(2, 5)) * B + int(rng.integers(0, B)), ODD, 200 + seed * 7 + i) for i in range(3)]
    world = {name: {"mod": mod, "pool": mod.BlockPool(ODD, n_blocks, B), "seqs": []} for name, mod in
             (("impl", pk), ("ref", ref))}
    for w in world.values():
        w["cache"] = w["mod"].PrefixCache(w["pool"])
    model = CacheModel(B)
    for n in range(n_actions):
        roll = rng.random()
        live = len(world["ref"]["seqs"])
        if roll < 0.5 or not live:
            base = bases[int(rng.integers(len(bases)))]
            prompt = base[:int(rng.integers(1, len(base) + 1))] + toks(int(rng.integers(0, 2 * B + 1)), ODD,
                                                                         int(rng.integers(1 << 20)))
            action = ("request", prompt[:ODD.max_len])
        elif roll < 0.75:
            action = ("release", int(rng.integers(live)))
        else:
            action = ("evict", int(rng.integers(0, 4)))
        mout = cache_model_act(model, world["ref"], action)
        got = {}
        for name, w in world.items():
            pool, cache, mod = w["pool"], w["cache"], w["mod"]
            try:
                if action[0] == "request":
                    seq = mod.PagedSequence(pool)
                    out = np.asarray(mod.cached_prefill(params(ODD), ODD, seq, action[1], cache))
                    w["seqs"].append(seq)
                    got[name] = (out, None)
                elif action[0] == "release":
                    seq = w["seqs"].pop(action[1])
                    _release(pool, seq.blocks)
                    got[name] = (None, None)
                else:
                    got[name] = (int(cache.evict(action[1])), None)
            except Exception as e:  # noqa: BLE001
                if action[0] == "request":
                    w["seqs"].append(mod.PagedSequence(pool))
                got[name] = (None, _kind(e))
        what = f"prefix cache seed {seed} (B={B}, {n_blocks} blocks), action {n} {action[0]}"
        (out, err), (rout, rerr) = got["impl"], got["ref"]
        check(err == rerr, f"{what}: error {err}, reference {rerr}")
        if isinstance(rout, np.ndarray):
            close(out, rout, 1e-10, f"{what} logits")
        else:
            check(out == rout, f"{what}: returned {out}, reference {rout}")
        st, rst = ({**state(w["pool"], w["seqs"]), "n_cached": int(w["cache"].n_cached),
                    "n_hit_tokens": int(w["cache"].n_hit_tokens)} for w in (world["impl"], world["ref"]))
        check(st == rst, f"{what}: state {st}, reference {rst}")
        cache_held_by_model(model, world["impl"], action, mout, err, out, what)


def _holders(pool, seqs):
    """How many of `seqs` hold each block of the pool."""
    held = [0] * pool.n_blocks
    for b in (int(b) for s in seqs for b in s.blocks):
        held[b] += 1
    return held


def cache_model_act(model, w, action):
    """The contract model's answer to `action`, before the implementations act: ("request", hits)
    or ("evict", victims), or ("error", "MemoryError"); a release changes only the holders."""
    pool, seqs = w["pool"], w["seqs"]
    held = _holders(pool, seqs[:action[1]] + seqs[action[1] + 1:] if action[0] == "release" else seqs)
    n_free = held.count(0) - sum(1 for b in model.block.values() if held[b] == 0)
    if action[0] == "request":
        try:
            return "request", model.request(action[1], n_free, held)[0]
        except MemoryError:
            return "error", "MemoryError"
    return ("evict", model.evict(action[1], held)) if action[0] == "evict" else ("release", None)


def cache_held_by_model(model, w, action, mout, err, out, what):
    """After the action: the error, the hits at the head of the new table, the count evicted, the
    cache's counters and every refcount (sequences' tables plus the cache's one reference) as the model."""
    kind, value = mout
    check(err == (value if kind == "error" else None), f"{what}: error {err}, contract model {mout}")
    if kind == "request" and err is None:
        table = ints(w["seqs"][-1].blocks)
        check(table[:len(value)] == value, f"{what}: table {table}, contract model's hits {value}")
        model.insert(action[1], table)
    if kind == "evict":
        check(out == len(value), f"{what}: evict returned {out}, contract model evicts {value}")
    pool, cache = w["pool"], w["cache"]
    held = _holders(pool, w["seqs"])
    cached = set(model.block.values())
    want = {"ref": [held[b] + (b in cached) for b in range(pool.n_blocks)], "n_cached": len(cached),
            "n_hit_tokens": model.hit_tokens}
    got = {"ref": [int(pool.refcount(b)) for b in range(pool.n_blocks)], "n_cached": int(cache.n_cached),
           "n_hit_tokens": int(cache.n_hit_tokens)}
    check(got == want, f"{what}: {got}, contract model {want}")


# ====================================================== differential fuzzing (variants only)
def _kind(e):
    for k in (MemoryError, ValueError):
        if isinstance(e, k):
            return k.__name__
    return type(e).__name__


def differential(pk, ref, seed, n_actions=40):
    """Random actions (new, step with valid or invalid chunks, fork, free, pool alloc/decref) applied to
    both implementations and the contract model; after each, the error kind, the logits and the whole
    state must agree."""
    rng = np.random.default_rng(seed)
    cfg = (ODD, ONE, SMALL, TINY)[seed % 4]
    B = int(rng.choice([1, 2, 3, 4, 5, 8]))
    n_blocks = int(rng.integers(6, 24))
    prm = params(cfg, seed % 3)
    world = {}
    for name, mod in (("impl", pk), ("ref", ref)):
        world[name] = {"pool": mod.BlockPool(cfg, n_blocks, B), "seqs": [], "junk": [], "mod": mod}
    model = Model(n_blocks, B)

    def act(w, action):
        pool, seqs, mod = w["pool"], w["seqs"], w["mod"]
        op = action[0]
        if op == "new":
            seqs.append(mod.PagedSequence(pool))
        elif op == "fork":
            seqs.append(seqs[action[1]].fork())
        elif op == "free":
            seqs[action[1]].free()
        elif op == "alloc":
            w["junk"].append(int(pool.alloc()))
        elif op == "decref":
            pool.decref(w["junk"].pop(action[1]))
        elif op == "step":
            outs = mod.paged_step(prm, cfg, [seqs[i] for i in action[1]], action[2])
            return [np.asarray(o) for o in outs]
        return None

    for n in range(n_actions):
        r = world["ref"]
        live = list(range(len(r["seqs"])))
        roll = rng.random()
        if roll < 0.12 or not live:
            action = ("new",)
        elif roll < 0.22:
            action = ("fork", int(rng.choice(live)))
        elif roll < 0.30:
            action = ("free", int(rng.choice(live)))
        elif roll < 0.36:
            action = ("alloc",)
        elif roll < 0.42 and r["junk"]:
            action = ("decref", int(rng.integers(len(r["junk"]))))
        else:
            idx = [int(i) for i in rng.permutation(live)[:int(rng.integers(1, len(live) + 1))]]
            chunks = []
            for i in idx:
                L = 1 if rng.random() < 0.6 else int(rng.integers(1, 9))
                c = [int(t) for t in rng.integers(0, cfg.vocab, L)]
                bad = rng.random()
                if bad < 0.04:
                    c[-1] = cfg.vocab
                elif bad < 0.08:
                    c = []
                elif bad < 0.10:
                    c = c * (cfg.max_len // max(1, len(c)) + 1)
                chunks.append(np.array(c, dtype=np.int64) if rng.random() < 0.5 else c)
            action = ("step", idx, chunks)
        merr = model_act(model, cfg, [int(s.length) for s in r["seqs"]], list(r["junk"]), action)
        got = {}
        for name in ("impl", "ref"):
            try:
                got[name] = (act(world[name], action), None)
            except Exception as e:  # noqa: BLE001
                got[name] = (None, _kind(e))
        (out, err), (rout, rerr) = got["impl"], got["ref"]
        what = f"seed {seed} (B={B}, {n_blocks} blocks), action {n} {action[0]}{action[1:2]}"
        check(err == rerr == merr, f"{what}: error {err}, reference {rerr}, contract model {merr}")
        held_by_model(world["impl"], model, what)
        if rout is not None:
            check(out is not None and len(out) == len(rout), f"{what}: {len(out or [])} outputs")
            for o, w in zip(out, rout):
                close(o, w, 1e-10, f"{what} logits")
        st, rst = (state(world[x]["pool"], world[x]["seqs"]) for x in ("impl", "ref"))
        check(st == rst, f"{what}: state {st}, reference {rst}")


def model_act(model, cfg, lengths, junk, action):
    """Apply `action` to the contract model (sequence i is key i); the error kind the contract
    demands, or None. A ValueError (bad chunk, past max_len) changes nothing, a MemoryError neither."""
    op = action[0]
    try:
        if op == "new":
            model.new(len(lengths))
        elif op == "fork":
            model.fork(action[1], len(lengths))
        elif op == "free":
            model.free_seq(action[1])
        elif op == "alloc":
            model.alloc()
        elif op == "decref":
            model.decref(junk[action[1]])
        elif op == "step":
            for i, c in zip(action[1], action[2]):
                if len(c) == 0 or lengths[i] + len(c) > cfg.max_len or not all(0 <= t < cfg.vocab for t in c):
                    return "ValueError"
            model.step([(i, len(c)) for i, c in zip(action[1], action[2])])
    except MemoryError:
        return "MemoryError"
    return None


def held_by_model(w, model, what):
    """The implementation's tables, lengths, refcounts and counters are the contract model's."""
    pool, seqs = w["pool"], w["seqs"]
    got = {"ref": [int(pool.refcount(b)) for b in range(pool.n_blocks)], "n_copies": int(pool.n_copies),
           "peak": int(pool.peak_used), "n_used": int(pool.n_used), "n_free": int(pool.n_free),
           "tables": [ints(s.blocks) for s in seqs], "lengths": [int(s.length) for s in seqs]}
    want = {"ref": model.ref, "n_copies": model.copies, "peak": model.peak, "n_used": sum(r > 0 for r in model.ref),
            "n_free": len(model.free), "tables": [model.tables[i] for i in range(len(seqs))],
            "lengths": [model.lengths[i] for i in range(len(seqs))]}
    check(got == want, f"{what}: state {got}, contract model {want}")


# ========================================================================================= driver
def run_checks(pk, ref, names=None, quiet=False):
    """{check name: None if it passed else the failure message}."""
    results = {}
    for name, (part, fn) in CHECKS.items():
        if names is not None and name not in names:
            continue
        if part in BONUS_PARTS and not writes(pk, part):
            continue                    # a bonus part not attempted: nothing of it to check
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                fn(pk, ref)
            results[name] = None
        except Fail as e:
            results[name] = str(e)
        except Exception as e:  # noqa: BLE001
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)), "?")
            results[name] = f"{type(e).__name__}: {str(e)[:200]} (at {where})"
    return results


def load_reference():
    return load(mutants_mod.reference_text(), "reference")


def verify_mutants(ref, verbose=False):
    problems, rows = [], []
    for m in mutants_mod.MUTANTS:
        try:
            text = mutants_mod.apply(m)
            pk = load(text, "mut_" + m.name)
        except Exception as e:  # noqa: BLE001
            problems.append(f"mutant {m.name}: cannot build/import: {type(e).__name__}: {e}")
            continue
        res = run_checks(pk, ref)
        if m.witness in registry.CHECKS:            # a hidden check as the witness: judged here, at seed 0
            res[m.witness] = hidden_verdict(pk, ref, m.witness)
        failed = {n: msg for n, msg in res.items() if msg is not None}
        own = [n for n in failed if part_of(n) == m.part]
        if not failed:
            problems.append(f"mutant {m.name}: passes every check (equivalent to the reference?)")
        elif not own:
            problems.append(f"mutant {m.name}: fails only checks of other parts ({sorted(failed)})")
        if part_of(m.witness) != m.part:
            problems.append(f"mutant {m.name}: witness {m.witness!r} is not a check of part {m.part}")
        elif m.witness not in failed:
            problems.append(f"mutant {m.name}: its witness {m.witness} passes")
        if m.checks and set(own) - {m.witness}:
            problems.append(f"mutant {m.name} names its checks ({', '.join(m.checks)}), yet fails its part's "
                            f"{sorted(set(own) - {m.witness})} too")
        rows.append((m, failed))
        if verbose:
            print(f"  {m.part:20s} {m.name:28s} fails {len(failed):2d} checks ({len(own)} own); "
                  f"{m.witness}: {failed.get(m.witness, 'PASSED')[:150]}")
    return problems, rows


def part_of(check):
    """The part of a check of this file, or of a hidden check (a registry id), else None."""
    if check in CHECKS:
        return CHECKS[check][0]
    return registry.CHECKS[check].part if check in registry.CHECKS else None


def hidden_verdict(pk, ref, check_id):
    """A hidden check judged in process at seed 0 (inprocess.py): None when every case passes, else the
    first message. The witness of a mutant whose part has no check of its own here: a new part needs no
    third suite (its hidden checks show the mutant differs from the reference where the contract says)."""
    from grader.selftest import inprocess
    return next((msg for msg in inprocess.judge_check(pk, ref, check_id, 0) if msg is not None), None)


def variant_paths():
    return sorted(os.path.join(VARIANTS_DIR, f) for f in os.listdir(VARIANTS_DIR)
                  if f.endswith(".py") and not f.startswith("_"))


def workload(pk):
    """A typical workload for timing, the lecture's demos 2-4 at reduced size: 4 sequences prefilled and
    decoded 20 times at block sizes 4 and 16, blockwise attention on each, parallel sampling (n=4,
    100-token prompt, 24 new tokens) and beam search (k=4, 64-token prompt, 16 steps)."""
    prm = params(TINY)
    rng = np.random.default_rng(1)
    for B in (4, 16):
        pool = pk.BlockPool(TINY, 260 // B + 8, B)
        seqs = [pk.PagedSequence(pool) for _ in range(4)]
        chunks = [rng.integers(0, 256, L) for L in (5, 17, 33, 64)]
        for _ in range(21):
            outs = pk.paged_step(prm, TINY, seqs, chunks)
            chunks = [np.array([int(np.argmax(o[-1]))]) for o in outs]
        for s in seqs:
            pk.blockwise_attention(rng.standard_normal((4, 16)), s, 1)
    _drive(pk, "parallel_sample", params=prm, cfg=TINY, prompt=rng.integers(0, 256, 100), n=4, max_new=24,
           temperature=1.0, seed=7, pool=pk.BlockPool(TINY, 256, 16))
    _drive(pk, "beam_search", params=prm, cfg=TINY, prompt=rng.integers(0, 256, 64), k=4, steps=16,
           pool=pk.BlockPool(TINY, 512, 16))


def timed(pk, repeat=3, warm_up=True):
    """Best of `repeat` runs of the workload in CPU seconds of this process (after a warm-up run, unless
    warm_up is False): CPU time is far less disturbed than wall time by other jobs sharing the machine."""
    best = float("inf")
    for i in range(repeat + warm_up):
        t = time.process_time()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            workload(pk)
        if i or not warm_up:
            best = min(best, time.process_time() - t)
    return best


def verify_variants(ref, verbose=False):
    problems, checked = [], []
    t_ref = timed(ref)
    timings = {}
    for path in variant_paths():
        name = os.path.basename(path)[:-3]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if not text.startswith("from decoding import beam_search, parallel_sample"):
            problems.append(f"variant {name}: does not start with the drivers' re-export line")
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                pk = load(text, "var_" + name)
        except Exception as e:  # noqa: BLE001
            problems.append(f"variant {name}: cannot import: {type(e).__name__}: {e}")
            continue
        checked.append(name)
        res = run_checks(pk, ref)
        failed = {n: msg for n, msg in res.items() if msg is not None}
        for n, msg in failed.items():
            problems.append(f"variant {name}: {n}: {msg}")
        for seed in range(FUZZ_SEEDS):
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    differential(pk, ref, seed)
                    if writes(pk, "prefix_cache"):
                        differential_cache(pk, ref, seed)
            except Exception as e:  # noqa: BLE001
                problems.append(f"variant {name}: differential: {type(e).__name__}: {e}")
                break
        if "slow" in name:                       # its 15-30x needs neither a warm-up nor a best of 3
            timings[name] = timed(pk, repeat=1, warm_up=False)
        elif verbose:                            # the others' 1-1.5x is for the curious: 5 s of make check
            timings[name] = timed(pk)
        if verbose:
            print(f"  {name:24s} {len(res) - len(failed)}/{len(res)} checks pass, {FUZZ_SEEDS} differential runs; workload "
                  f"{timings[name]:.2f} s = {timings[name] / t_ref:.1f}x the reference")
    return problems, t_ref, timings, checked


# mutants the contract model must catch on its own (the mutant as both "implementations", so the
# reference cannot): its checks in the differential runs are not vacuous
MODEL_CATCHES = ("alloc_lifo_reuse", "peak_counts_allocs", "cow_never", "fork_no_incref",
                 "recency_head_oldest", "evict_held_blocks", "hit_tokens_counts_blocks")


def verify_model_teeth():
    problems = []
    for m in (m for m in mutants_mod.MUTANTS if m.name in MODEL_CATCHES):
        pk = load(mutants_mod.apply(m), "teeth_" + m.name)
        run = differential_cache if m.part == "prefix_cache" else differential
        for seed in range(10):
            try:
                run(pk, pk, seed)
            except Fail as e:
                if "contract model" in str(e):
                    break
            except Exception:  # noqa: BLE001    the mutant upset the run some other way: not the model's catch
                pass
        else:
            problems.append(f"the contract model alone does not catch mutant {m.name} in 10 differential runs")
    if len(MODEL_CATCHES) != len({m.name for m in mutants_mod.MUTANTS} & set(MODEL_CATCHES)):
        problems.append(f"MODEL_CATCHES names a mutant that does not exist: {MODEL_CATCHES}")
    return problems


def verify_hostile(verbose=False):
    from grader.selftest import hostile
    problems = []
    mutant_names = {m.name for m in mutants_mod.MUTANTS}
    for h in hostile.HOSTILES:
        if h.base not in ("stubs", "solution") and h.base not in mutant_names:
            problems.append(f"hostile {h.name}: unknown base {h.base!r}")
            continue
        try:
            text = hostile.build(h)
            compile(text, f"{h.name}/paged_kv.py", "exec")
        except Exception as e:  # noqa: BLE001
            problems.append(f"hostile {h.name}: does not build: {type(e).__name__}: {e}")
    try:
        stubs = load(hostile.STUBS, "stubs")
        for name in ("BlockPool", "PagedSequence", "paged_step", "blockwise_attention", "beam_search",
                     "parallel_sample"):
            check(hasattr(stubs, name), f"stubs lack {name}")
        res = run_checks(stubs, load_reference())
        passing = [n for n, msg in res.items() if msg is None]
        if passing:
            problems.append(f"the stubs pass checks {passing}")
    except Exception as e:  # noqa: BLE001
        problems.append(f"stubs: {type(e).__name__}: {e}")
    if verbose:
        print(f"  {len(hostile.HOSTILES)} hostile submissions build")
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("mutants", "variants", "hostile"))
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    ref = load_reference()
    problems = []
    res = run_checks(ref, ref)
    bad = {n: m for n, m in res.items() if m}
    for n, m in bad.items():
        problems.append(f"the REFERENCE fails {n}: {m}")
    print(f"reference: {len(res) - len(bad)}/{len(res)} checks pass")
    if args.only in (None, "mutants"):
        p, rows = verify_mutants(ref, args.verbose)
        problems += p
        by_part = {}
        for m, failed in rows:
            ok = m.witness in failed
            by_part.setdefault(m.part, [0, 0])
            by_part[m.part][0] += ok
            by_part[m.part][1] += 1
        print("mutants: " + ", ".join(f"{part} {k}/{n}" for part, (k, n) in by_part.items())
              + f"; {sum(k for k, _ in by_part.values())}/{len(mutants_mod.MUTANTS)} shown wrong by their witness")
    if args.only in (None, "variants"):
        p, t_ref, timings, checked = verify_variants(ref, args.verbose)
        problems += p + verify_model_teeth()
        print(f"variants: {len(checked)} checked, {len({x.split(':')[0] for x in p})} with problems; "
              f"reference workload {t_ref:.2f} s; " + ", ".join(f"{n} {t / t_ref:.1f}x" for n, t in timings.items()))
    if args.only in (None, "hostile"):
        problems += verify_hostile(args.verbose)
    for p in problems:
        print("PROBLEM:", p)
    print(f"{'OK' if not problems else 'FAILED'} in {time.time() - t0:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
