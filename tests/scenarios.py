"""Scenarios: drive a paged_kv implementation on given inputs and return plain data.

The public tests run them in-process on your implementation; the hidden grader runs the very same
functions inside its sandbox on other inputs, and runs them on the reference to get the expected
answers. So a scenario takes only JSON-like inputs (ints, lists, dicts) and returns only plain data:
ints, floats, strings, None, lists, dicts and float64 / int64 numpy arrays. Errors that the contract
specifies (MemoryError, ValueError) are recorded as data, not raised; NotImplementedError is raised,
so a test can say "not implemented yet".
"""
import numbers
import sys
import types

import numpy as np

import transformer_lab as tl

_PARAMS = {}


# ------------------------------------------------------------------------------------- helpers
def config(cfg=None):
    """A Config from a dict of its fields (None: TINY)."""
    return tl.TINY if cfg is None else tl.Config(**cfg)


def params(cfg, seed):
    key = (cfg, seed)
    if key not in _PARAMS:
        _PARAMS[key] = tl.init_params(cfg, seed)
    return _PARAMS[key]


def error_kind(e):
    """The contract's name for an error: subclasses count as their standard base."""
    for base in (MemoryError, ValueError, IndexError, KeyError, TypeError, AttributeError):
        if isinstance(e, base):
            return base.__name__
    return "Exception"


def attempt(fn, *args):
    """(result, error): the error as {"kind", "message"} instead of raised, except NotImplementedError."""
    try:
        return fn(*args), None
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001  (any bug of the implementation is data here)
        return None, {"kind": error_kind(e), "message": str(e)[:300]}


def as_int(x):
    """Plain int from an implementation's integer (Python or numpy); anything else is a type name."""
    if isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)):
        return int(x)
    return "not an integer: " + type(x).__name__


def as_array(x):
    """A float64 copy of an implementation's array-like output."""
    return np.array(x, dtype=np.float64, copy=True)


def observe(fn, *args):
    """One observation of the state as a plain int; a failing observation is recorded, not raised."""
    value, error = attempt(fn, *args)
    return as_int(value) if error is None else "error: " + error["kind"]


def pool_state(pool):
    """Everything the contract lets anyone observe about a pool."""
    return {
        "refcounts": [observe(pool.refcount, b) for b in range(pool.n_blocks)],
        "n_used": observe(lambda: pool.n_used),
        "n_free": observe(lambda: pool.n_free),
        "peak_used": observe(lambda: pool.peak_used),
        "n_copies": observe(lambda: pool.n_copies),
    }


def seq_state(seqs):
    return {"tables": [[as_int(b) for b in s.blocks] for s in seqs], "lengths": [as_int(s.length) for s in seqs]}


def gathered_kv(seq):
    """K and V of every written position, read straight from pool storage through the block table
    (the contract's layout), so a wrong copy or a write into a shared block shows up in the data."""
    pool, B = seq.pool, seq.pool.block_size
    pos = np.arange(seq.length)
    blocks = np.array([int(b) for b in seq.blocks], dtype=np.int64)[pos // B] if seq.length else np.zeros(0, int)
    return as_array(np.asarray(pool.k)[:, blocks, pos % B]), as_array(np.asarray(pool.v)[:, blocks, pos % B])


def fill_storage(pool, seed):
    """Random K/V in every block, so copies, reads of stale slots and wrong layers are visible."""
    rng = np.random.default_rng(seed)
    pool.k[...] = rng.standard_normal(np.shape(pool.k))
    pool.v[...] = rng.standard_normal(np.shape(pool.v))


# ------------------------------------------------------------------------------ Part 1 scenarios
def pool_layout(pk, cfg=None, n_blocks=8, block_size=4):
    """A new pool: its attributes and storage."""
    cfg = config(cfg)
    pool = pk.BlockPool(cfg, n_blocks, block_size)
    k, v = np.asarray(pool.k), np.asarray(pool.v)
    return {
        "n_blocks": as_int(pool.n_blocks), "block_size": as_int(pool.block_size), "same_cfg": pool.cfg == cfg,
        "k_shape": list(k.shape), "v_shape": list(v.shape), "k_dtype": str(k.dtype), "v_dtype": str(v.dtype),
        "zeros": bool(not k.any() and not v.any()), "distinct": k is not v and not np.shares_memory(k, v),
        **pool_state(pool),
    }


def pool_script(pk, cfg=None, n_blocks=8, block_size=4, ops=(), fill_seed=None):
    """Run allocator operations; after each, the result (or error) and the whole pool state.

    ops: ["alloc"], ["incref", b], ["decref", b], ["refcount", b], ["copy", b], ["data", b]
    ("data" returns the block's K and V in every layer, read from storage).
    """
    cfg = config(cfg)
    pool = pk.BlockPool(cfg, n_blocks, block_size)
    if fill_seed is not None:
        fill_storage(pool, fill_seed)
    calls = {"alloc": pool.alloc, "incref": pool.incref, "decref": pool.decref,
             "refcount": pool.refcount, "copy": pool.copy_block,
             "data": lambda b: {"k": as_array(np.asarray(pool.k)[:, b]), "v": as_array(np.asarray(pool.v)[:, b])}}
    records = []
    for op, *args in ops:
        result, error = attempt(calls[op], *args)
        if op in ("alloc", "copy", "refcount") and error is None:
            result = as_int(result)
        records.append({"op": [op, *args], "result": result, "error": error, **pool_state(pool)})
    return records


# ------------------------------------------------------------------------- Part 2 and 4 scenarios
def sequence_script(pk, cfg=None, param_seed=0, n_blocks=16, block_size=4, actions=(), record_kv=False):
    """Run sequences through a pool; after each action, its result (or error) and the full state.

    actions: ["new"], ["step", [seq indices], [chunks], as_numpy?], ["fork", i], ["free", i],
    ["reserve", i, n], ["write", i, layer, start, n, seed] (random K/V), ["read", i, layer, length],
    and pool operations ["alloc"], ["incref", b], ["decref", b] to shape the pool.
    A step's result is its list of logits arrays; "new"/"fork" return the new sequence's index.
    """
    cfg = config(cfg)
    prm = params(cfg, param_seed)
    pool = pk.BlockPool(cfg, n_blocks, block_size)
    seqs = []

    def new():
        seqs.append(pk.PagedSequence(pool))
        return len(seqs) - 1

    def fork(i):
        seqs.append(seqs[i].fork())
        return len(seqs) - 1

    def write(i, layer, start, n, seed):
        k, v = np.random.default_rng(seed).standard_normal((2, n, cfg.n_heads, cfg.d_head))
        seqs[i].write(layer, start, k, v)

    def read(i, layer, length):
        k, v = seqs[i].read(layer, length)
        return {"k": as_array(k), "v": as_array(v)}

    def step(idx, chunks, as_numpy=False):
        chunks = [np.array(c, dtype=np.int64) for c in chunks] if as_numpy else [list(c) for c in chunks]
        outs = pk.paged_step(prm, cfg, [seqs[i] for i in idx], chunks)
        return [as_array(o) for o in outs]

    calls = {"new": new, "fork": fork, "step": step, "free": lambda i: seqs[i].free(),
             "reserve": lambda i, n: seqs[i].reserve(n), "write": write, "read": read,
             "alloc": lambda: as_int(pool.alloc()),
             "incref": pool.incref, "decref": pool.decref}
    records = []
    for op, *args in actions:
        result, error = attempt(calls[op], *args)
        rec = {"op": [op, *args], "result": result, "error": error, **seq_state(seqs), **pool_state(pool)}
        if record_kv:
            rec["kv"] = [dict(zip("kv", gathered_kv(s))) for s in seqs]
        records.append(rec)
    return records


# ------------------------------------------------------------------------------ Part 3 scenario
def blockwise_inputs(cfg, n_blocks, block_size, seed, case):
    """The storage and query of a blockwise case: random in every block, layer and slot, so reading
    a stale slot, a wrong layer or a wrong block changes the answer."""
    rng = np.random.default_rng(seed)
    shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)
    pool = types.SimpleNamespace(k=rng.standard_normal(shape) * 2.0, v=rng.standard_normal(shape),
                                 block_size=block_size, cfg=cfg)
    q = np.random.default_rng(case["q_seed"]).standard_normal((cfg.n_heads, cfg.d_head))
    if "q_scale" in case:       # optional: large scores, where a softmax without its max overflows
        q = q * case["q_scale"]
    return pool, q


def blockwise(pk, cfg=None, n_blocks=8, block_size=4, cases=(), seed=0):
    """blockwise_attention on sequences the scenario builds itself from the contract's layout, so a
    broken allocator or paged_step cannot spoil this part. cases: {"table", "length", "layer", "q_seed"}
    and optionally "q_scale" (the query is multiplied by it).
    The object passed has only the attributes the contract lists: no methods at all."""
    cfg = config(cfg)
    out = []
    for case in cases:
        pool, q = blockwise_inputs(cfg, n_blocks, block_size, seed, case)
        seq = types.SimpleNamespace(pool=pool, blocks=list(case["table"]), length=case["length"])
        result, error = attempt(pk.blockwise_attention, q, seq, case["layer"])
        out.append({"out": None if error else as_array(result), "error": error})
    return out


# ---------------------------------------------------------------------------- Part 4: the drivers
def _drive(pk, fn, **kw):
    import decoding  # the lab's drivers use `paged_kv` from sys.modules: make it this implementation
    saved = sys.modules.get("paged_kv")
    sys.modules["paged_kv"] = pk
    try:
        return getattr(decoding, fn)(**kw)
    finally:
        if saved is not None:
            sys.modules["paged_kv"] = saved


def _pool_summary(pool):
    return {"n_copies": as_int(pool.n_copies), "peak_used": as_int(pool.peak_used), "n_used_after": as_int(pool.n_used)}


def sampling(pk, cfg=None, param_seed=0, prompt=(), n=2, max_new=8, temperature=1.0, seed=0,
             n_blocks=64, block_size=16):
    """parallel_sample on a fresh pool: samples, per-step block counts, copies, peak, leftovers."""
    cfg = config(cfg)
    pool = pk.BlockPool(cfg, n_blocks, block_size)
    samples, stats = _drive(pk, "parallel_sample", params=params(cfg, param_seed), cfg=cfg,
                            prompt=np.array(prompt, dtype=np.int64), n=n, max_new=max_new,
                            temperature=temperature, seed=seed, pool=pool)
    return {"samples": samples, "blocks_used": [as_int(u) for u in stats["blocks_used"]],
            "blocks_unshared": stats["blocks_unshared"], **_pool_summary(pool)}


def beams(pk, cfg=None, param_seed=0, prompt=(), k=2, steps=8, n_blocks=64, block_size=16):
    """beam_search on a fresh pool: beams (score, tokens), per-step block counts, copies, peak."""
    cfg = config(cfg)
    pool = pk.BlockPool(cfg, n_blocks, block_size)
    out, stats = _drive(pk, "beam_search", params=params(cfg, param_seed), cfg=cfg,
                        prompt=np.array(prompt, dtype=np.int64), k=k, steps=steps, pool=pool)
    return {"scores": [float(s) for s, _ in out], "tokens": [list(t) for _, t in out],
            "blocks_used": [as_int(u) for u in stats["blocks_used"]], "blocks_unshared": stats["blocks_unshared"],
            **_pool_summary(pool)}


def batch(pk, calls=()):
    """Several scenarios in one worker: [[name, inputs], ...] -> their results in order."""
    return [SCENARIOS[name](pk, **inputs) for name, inputs in calls]


SCENARIOS = {f.__name__: f for f in (pool_layout, pool_script, sequence_script, blockwise, sampling, beams, batch)}
