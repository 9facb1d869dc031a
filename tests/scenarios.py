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

import registry
import transformer_lab as tl

_PARAMS = {}


# ------------------------------------------------------------------------------------- helpers
def config(cfg=None):
    """A Config from a dict of its fields (None: TINY; a Config stays as it is)."""
    return tl.TINY if cfg is None else cfg if isinstance(cfg, tl.Config) else tl.Config(**cfg)


def params(cfg, seed):
    key = (cfg, seed)
    if key not in _PARAMS:
        _PARAMS[key] = tl.init_params(cfg, seed)
    return _PARAMS[key]


class _Unfinished(Exception):
    """A stub reached inside a step that needs another part's code (a copy needs copy_block): recorded
    as the error "NotImplementedError" for this action instead of ending the whole scenario."""


def error_kind(e):
    """The contract's name for an error: subclasses count as their standard base."""
    if isinstance(e, _Unfinished):
        return "NotImplementedError"
    for base in (MemoryError, ValueError, IndexError, KeyError, TypeError, AttributeError):
        if isinstance(e, base):
            return base.__name__
    return "Exception"


def attempt(fn, *args, **kwargs):
    """(result, error): the error as {"kind", "message"} instead of raised, except NotImplementedError.
    The message names the exception's own class first when it is not its kind (a ZeroDivisionError is
    of the kind "Exception", a custom subclass of MemoryError of "MemoryError")."""
    try:
        return fn(*args, **kwargs), None
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001  (any bug of the implementation is data here)
        return None, {"kind": error_kind(e), "message": error_message(e)}


def error_message(e):
    """The message feedback quotes for an exception: its class when that is not its kind, then str(e)."""
    text = str(e)
    if type(e).__name__ != error_kind(e):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text[:300]


class Unbuilt(Exception):
    """An object the scenario needs from another part could not be made at all (BlockPool(...)
    raised): the scenario stops there and says which, so a check names the part to fix first
    instead of a failure of its own. `batch` returns it as data: {"unbuilt": name, "kind": kind}."""

    def __init__(self, what, e):
        super().__init__(f"{what}(...) raised {type(e).__name__}: {str(e)[:300]}")
        self.what, self.kind, self.part = what, error_kind(e), UNBUILT[what]


# What a scenario may fail to build (a contract class) -> the part that owns it
UNBUILT = {n.dotted: p.number for p in registry.PARTS for n in p.names if n.kind == "class"}


def build(what, fn, *args):
    """fn(*args), one of UNBUILT's constructors; any error but a stub's NotImplementedError is Unbuilt."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001  (any bug of the implementation)
        raise Unbuilt(what, e) from None


def new_pool(pk, cfg, n_blocks, block_size):
    return build("BlockPool", pk.BlockPool, cfg, n_blocks, block_size)


def working_pool(pk, cfg, n_blocks, block_size, ledger=None):
    """A pool for Parts 2, 4 and 5 (and the drivers): new_pool, with its storage replaced by the test's
    float64 zeros of the contract's shape when it is not float64 (a float32 pool cannot hold the
    test's K/V or give float64 logits), or missing. The storage's dtype is Part 1's, charged by its
    own check (pool_layout), so it does not also cost every step and copy-on-write case.

    ledger: None (the public tests), or the source of a book of references the hidden grader sends
    with Part 4's and 5's calls. It stands in front of the pool only when refcount_probe or
    capacity_probe show, on a pool of its own, that incref, decref, refcount or n_free do not do
    what the contract says: those are Part 1's, charged by Part 1's checks, and Parts 4 and 5 are
    judged through them. A pool that passes both probes is always used as it is."""
    pool = _storage_float64(new_pool(pk, cfg, n_blocks, block_size), cfg, n_blocks, block_size)
    if ledger is None:
        return pool
    moves = copy_moves_references(pk, cfg)
    if refcount_probe(pk, cfg) is None and capacity_probe(pk, cfg) is None and not moves:
        return pool
    space = {}
    exec(compile(ledger, "ledger", "exec"), space)      # noqa: S102  (the grader's own source, sent as data)
    return space["Ledger"](pool, cfg, n_blocks, block_size, own_copies=moves)


def copy_moves_references(pk, cfg=None):
    """Whether pool.copy_block changes references it should not (the source's refcount, or the copy's
    other than 1), or raises or returns no block id (a stub's NotImplementedError aside), on a pool of
    its own (copy_probe): Part 1's, so the ledger then keeps the references and makes the copies the
    contract's way where the submission's are not (ledger.py)."""
    probe = copy_runs(pk, cfg)
    if isinstance(probe, dict) and set(probe) == {"error"}:
        return probe["error"] != "NotImplementedError"
    return isinstance(probe, dict) and (probe.get("source_delta") != 0 or probe.get("copy_refcount") != 1)


def _storage_float64(pool, cfg, n_blocks, block_size):
    """The pool, its k and v float64 zeros of the contract's shape when they are missing, not float64
    or of another shape: the storage's layout is Part 1's (pool_layout), not every step's."""
    shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)
    for name in ("k", "v"):
        try:
            if not hasattr(pool, name) or np.asarray(getattr(pool, name)).dtype != np.float64 \
                    or np.shape(getattr(pool, name)) != shape:
                setattr(pool, name, np.zeros(shape))
        except Exception:  # noqa: BLE001  (a storage the test cannot read or replace stays as it is)
            pass
    return pool


def fresh_sequence(pk, pool):
    """PagedSequence(pool) as a part other than Part 2 uses one: built by the implementation, then set
    empty through the contract's attributes (pool, blocks, length), so a constructor's bug, Part 2's,
    does not reach Parts 4, 5 and 6 through the test's own sequences (the test sets a sequence's state,
    as it does when it adopts or mirrors); through fork and swap_in it does, and sequence_probe names it."""
    seq = build("PagedSequence", pk.PagedSequence, pool)
    seq.pool, seq.blocks, seq.length = pool, [], 0
    return seq


def as_int(x):
    """Plain int from an implementation's integer (Python or numpy); anything else is a type name."""
    if type(x) is int:          # the common case, without the ABC's isinstance (read for every block, every step)
        return x
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


def refcounts(pool, n_blocks=None):
    """observe(pool.refcount, b) for every block (pool.n_blocks of them unless given): read after
    every action of every script, so in one pass when no call raises, else block by block."""
    ids = range(pool.n_blocks if n_blocks is None else n_blocks)
    try:
        return [as_int(pool.refcount(b)) for b in ids]
    except NotImplementedError:
        raise
    except Exception:  # noqa: BLE001  (observe says which block's call raised what)
        return [observe(pool.refcount, b) for b in ids]


def pool_state(pool):
    """Everything the contract lets anyone observe about a pool."""
    return {
        "refcounts": refcounts(pool),
        "n_used": observe(lambda: pool.n_used),
        "n_free": observe(lambda: pool.n_free),
        "peak_used": observe(lambda: pool.peak_used),
        "n_copies": observe(lambda: pool.n_copies),
    }


def seq_state(seqs):
    return {"tables": [[as_int(b) for b in s.blocks] for s in seqs], "lengths": [as_int(s.length) for s in seqs]}


def fill_storage(pool, seed):
    """Random K/V in every block, so copies, reads of stale slots and wrong layers are visible."""
    rng = np.random.default_rng(seed)
    pool.k[...] = rng.standard_normal(np.shape(pool.k))
    pool.v[...] = rng.standard_normal(np.shape(pool.v))


# ------------------------------------------------------------------------------ Part 1 scenarios
def pool_layout(pk, cfg=None, n_blocks=8, block_size=4):
    """A new pool: its attributes and storage."""
    cfg = config(cfg)
    pool = new_pool(pk, cfg, n_blocks, block_size)
    k, v = np.asarray(pool.k), np.asarray(pool.v)
    return {
        "n_blocks": as_int(pool.n_blocks), "block_size": as_int(pool.block_size), "same_cfg": pool.cfg == cfg,
        "k_shape": list(k.shape), "v_shape": list(v.shape), "k_dtype": str(k.dtype), "v_dtype": str(v.dtype),
        "zeros": bool(not k.any() and not v.any()), "distinct": k is not v and not np.shares_memory(k, v),
        **pool_state(pool),
    }


def pool_script(pk, cfg=None, n_blocks=8, block_size=4, ops=()):
    """Run allocator operations; after each, the block it was given, its result (or error) and the
    whole pool state. Blocks are named the way the test knows them (PoolBook.resolve), never by an id
    only a lowest-free-first pool would hand out, so every allocation order runs the same script.

    ops: ["alloc"], and ["incref", x], ["decref", x], ["refcount", x], ["copy", x] where x names a
    block: k (an int) = handle k, the block that the k-th alloc or copy_block that succeeded returned
    (from 0); ["id", b] = the id b itself (for ids outside the pool); "freed" = a block the test gave
    back; "unused" = a block no call has returned yet; ["int64", k] or ["int32", k] = handle k passed
    as a numpy integer of that type.
    """
    run = PoolRun(pk, cfg, n_blocks, block_size)
    for op in ops:
        run.call(op)
    return run.records


class PoolRun:
    """pool_script one call at a time (Part 1's public tests call it directly): `call(op)` runs one
    op of pool_script's form and returns its record, also appended to `records`."""

    def __init__(self, pk, cfg=None, n_blocks=8, block_size=4):
        self.pool = new_pool(pk, config(cfg), n_blocks, block_size)
        self.book, self.records = PoolBook(n_blocks), []
        self.calls = {"alloc": self.pool.alloc, "incref": self.pool.incref, "decref": self.pool.decref,
                      "refcount": self.pool.refcount, "copy": self.pool.copy_block}

    def call(self, op_and_args):
        op, *args = op_and_args
        block = self.book.resolve(args[0]) if args else None
        result, error = attempt(self.calls[op], *([block] if args else []))
        if op in ("alloc", "copy", "refcount") and error is None:
            result = as_int(result)
        block = None if block is None else as_int(block)
        self.book.note(op, block, result, error)
        self.records.append({"op": [op, *args], "block": block, "result": result, "error": error,
                             **pool_state(self.pool)})
        return self.records[-1]


class PoolBook:
    """What the test knows about a pool script's blocks without asking the pool: the id each handle
    names (what the k-th alloc or copy_block that succeeded returned), and the references the test
    holds on each id by the contract's rules applied to the calls that succeeded (alloc and copy 1,
    incref + 1, decref - 1). So the test knows a block is free without trusting the pool's refcount:
    it holds no reference on it. The scenario resolves its block specs with it; the judges replay it
    on the records, to check what the scenario passed and to name blocks by handle (rules.pool_view)."""

    def __init__(self, n_blocks):
        self.n_blocks = n_blocks
        self.handles = []           # handle k -> what the call returned (an id, if the pool is right)
        self.latest = {}            # id -> its latest handle (an id handed out again gets a newer one)
        self.refs = {}              # id -> references the test holds on it
        self.given_back = []        # ids whose last reference the test gave back, oldest first

    def valid(self, b):
        return type(b) is int and 0 <= b < self.n_blocks

    def holds(self, b):
        return self.refs.get(b, 0) > 0

    def n_held(self):
        return sum(1 for r in self.refs.values() if r > 0)

    def resolve(self, spec):
        """The block a spec names now (see pool_script). "freed" is the block given back most recently
        that is still free, "unused" the lowest id no call returned; each falls back on the other,
        then on n_blocks (outside the pool, when every block is held), so either is always an id the
        test holds no reference on. A handle the script has not made yet names nothing (None)."""
        if type(spec) is int:
            return self.handles[spec] if 0 <= spec < len(self.handles) else None
        if isinstance(spec, list) and spec[0] == "id":
            return spec[1]
        if isinstance(spec, list) and spec[0] in ("int64", "int32"):
            b = self.resolve(spec[1])
            return np.dtype(spec[0]).type(b) if type(b) is int else b
        if spec not in ("freed", "unused"):
            raise ValueError(f"not a block spec: {spec!r}")
        freed = [b for b in reversed(self.given_back) if not self.holds(b)]
        unused = [b for b in range(self.n_blocks) if b not in self.latest and not self.holds(b)]
        first, second = (freed, unused) if spec == "freed" else (unused, freed)
        return (first or second or [self.n_blocks])[0]

    def note(self, op, block, result, error):
        """Account for one call as it went (block: the id it was given; result: what it returned)."""
        if error is not None:
            return
        if op in ("alloc", "copy"):
            self.handles.append(result)
            if self.valid(result):
                self.latest[result] = len(self.handles) - 1
            block, op = result, "incref"
        if self.valid(block) and op in ("incref", "decref"):
            self.refs[block] = self.refs.get(block, 0) + (1 if op == "incref" else -1)
            if self.refs[block] == 0:
                self.given_back.append(block)

    def by_handle(self, refcounts):
        """A pool's refcounts (a list by id) per handle: the refcount of the id a handle names while it
        is that id's latest handle, else 0 (the block was handed out again, under a newer handle)."""
        return [refcounts[b] if self.latest.get(b) == k else 0 for k, b in enumerate(self.handles)]

    def unallocated(self, refcounts):
        """The refcounts other than 0 among the ids no call has returned (the contract: all free)."""
        return [r for b, r in enumerate(refcounts) if b not in self.latest and r != 0]


def random_pool_ops(rng, n_blocks, length, weights):
    """A random allocator script by handle, valid or deliberately not, drawn from the contract's rules
    alone: the references the test holds per handle decide which calls are valid, so no pool is
    needed to draw it. weights: relative weights of "alloc", "incref", "decref", "copy", "refcount"
    (of a block the test holds) and "bad" (a call on an id outside the pool or on a free block)."""
    kinds = list(weights)
    p = np.array([weights[k] for k in kinds], dtype=float)
    refs, peak, ops = [], 0, []        # refs: per handle; peak: the most blocks held at once so far
    for _ in range(length):
        held = [h for h, r in enumerate(refs) if r > 0]
        kind = kinds[int(rng.choice(len(kinds), p=p / p.sum()))]
        if kind == "bad":
            bad = [["id", -1], ["id", n_blocks], ["id", n_blocks + 7], ["id", -n_blocks]]
            if len(held) < n_blocks:    # a free block: one given back, or one no call returned, where a lowest-first
                # pool has one (it has handed out exactly the ids below its peak)
                bad += ["freed"] * (peak > len(held)) + ["unused"] * (peak < n_blocks)
            op = [str(rng.choice(["incref", "decref", "copy", "refcount"])), bad[int(rng.integers(len(bad)))]]
        elif kind == "alloc":
            op = ["alloc"]
        elif held:
            op = [kind, held[int(rng.integers(len(held)))]]
        else:
            op = ["refcount", "unused" if peak < n_blocks else "freed"]
        if (op[0] == "alloc" or (op[0] == "copy" and type(op[1]) is int)) and len(held) < n_blocks:
            refs.append(1)
            peak = max(peak, len(held) + 1)
        elif op[0] in ("incref", "decref") and type(op[1]) is int:
            refs[op[1]] += 1 if op[0] == "incref" else -1
        ops.append(op)
    return ops


# ------------------------------------------------------------------------- Part 2 and 4 scenarios
def gathered_kv(seq, pool=None):
    """K and V of every written position, read straight from pool storage through the block table
    (the contract's layout), so a wrong copy or a write into a shared block shows up in the data.
    {"k", "v"} arrays [n_layers, length, H, Dh], or {"short": [length, blocks, block size]} when the
    table holds too few blocks for the length (then there is nothing to read). pool: the script's own
    (every sequence of it is of that pool), so a sequence its constructor left without one (Part 2's,
    named by sequence_probe) is read all the same."""
    pool = seq.pool if pool is None else pool
    B = pool.block_size
    length, table = as_int(seq.length), [as_int(b) for b in seq.blocks]
    if not isinstance(length, int) or not all(isinstance(b, int) for b in table):
        return {"short": [-1, len(table), B]}
    if len(table) < -(-length // B) or any(not 0 <= b < np.shape(pool.k)[1] for b in table[:-(-length // B)]):
        return {"short": [length, len(table), B]}
    pos = np.arange(length)
    blocks = np.array(table, dtype=np.int64)[pos // B] if length else np.zeros(0, np.int64)
    return {"k": as_array(np.asarray(pool.k)[:, blocks, pos % B]), "v": as_array(np.asarray(pool.v)[:, blocks, pos % B])}


def put_kv(pool, table, start, n, seed, lo=0, hi=None):
    """What a step stores, put there by the test: random K and V for positions start..start+n-1 in
    every layer, at pool.k[layer, table[p // B], p % B]; only the lo..hi-1-th of them when given (a
    grow stored in pieces: the same values). False when the table is too short."""
    B, hi = pool.block_size, n if hi is None else hi
    if len(table) * B < start + hi:
        return False
    cfg = pool.cfg
    k, v = np.random.default_rng(seed).standard_normal((2, cfg.n_layers, n, cfg.n_heads, cfg.d_head))
    pos = np.arange(start + lo, start + hi)
    blocks = np.array([int(b) for b in table], dtype=np.int64)[pos // B]
    pool.k[:, blocks, pos % B] = k[:, lo:hi]
    pool.v[:, blocks, pos % B] = v[:, lo:hi]
    return True


def adopted(pool, seq, n, seed, order):
    """seq, given by the test the K/V of n positions in blocks it takes (pool.alloc), its table in
    `order` (a permutation of them: any order, as frees and copies leave tables), through the
    contract's attributes (blocks, length), as a step would have left them."""
    blocks = [pool.alloc() for _ in order]
    seq.blocks, seq.length = [blocks[k] for k in order], n
    put_kv(pool, [as_int(b) for b in seq.blocks], 0, n, seed)
    return seq


def alloc_order(pk, cfg=None, n_blocks=16, block_size=4, setup=(), ledger=None):
    """The ids a fresh pool of this implementation hands out, in order until it is full, after the
    test's own pool actions `setup`: Part 2 names a block by its place in this order, so which id the
    allocator picks (Part 1's business) cannot change Part 2's verdict. The pool is made as the
    script's own is (working_pool: with the ledger when it stands in there)."""
    cfg = config(cfg)
    pool = working_pool(pk, cfg, n_blocks, block_size, ledger)
    held = []
    for op, *args in setup:
        _pool_action(pool, held, op, args)
    order = []
    for _ in range(n_blocks):
        b, error = attempt(pool.alloc)
        if error is not None or not isinstance(as_int(b), int) or as_int(b) in order:
            break
        order.append(as_int(b))
    return order


def _pool_action(pool, held, op, args):
    """The test's own pool actions, by handle (the index of the test's alloc), never by raw id."""
    if op == "alloc":
        held.append(pool.alloc())
        return len(held) - 1
    if op == "release":
        return pool.decref(held[args[0]])
    if op == "fill":
        return fill_storage(pool, args[0])
    raise ValueError(f"not a pool action: {op}")


def copy_probe(pk, cfg=None):
    """What pool.copy_block does on a pool of random K/V of its own: the source's refcount change, the
    copy's refcount, and whether the copy holds the source's K and V in every layer. A failing
    copy-on-write check says so when it is not what the contract says (copy-on-write relies on it)."""
    cfg = config(cfg)
    pool = _storage_float64(new_pool(pk, cfg, 4, 3), cfg, 4, 3)     # (a missing storage is pool_layout's)
    fill_storage(pool, 11)

    def run():
        src = pool.alloc()
        before = as_int(pool.refcount(src))
        new = pool.copy_block(src)
        same = all(np.array_equal(np.asarray(a)[:, as_int(new)], np.asarray(a)[:, as_int(src)]) for a in (pool.k, pool.v))
        return {"source_delta": as_int(pool.refcount(src)) - before, "copy_refcount": as_int(pool.refcount(new)),
                "copies_data": bool(same)}
    result, error = attempt(run)
    return result if error is None else {"error": error["kind"]}


def capacity_probe(pk, cfg=None):
    """Whether n_free says what alloc hands out, on a pool of 5 blocks of its own: before and after
    each alloc until alloc raises MemoryError, and after a decref of one block of the full pool, which
    the next alloc hands out again.
    None when it does; "n_free" when not; the error's kind when a call raised otherwise. A Part 2
    step counts its blocks on n_free, so a step that ran out names Part 1 when this is not None."""
    cfg = config(cfg)
    pool = new_pool(pk, cfg, 5, 2)

    def run():
        got = []
        for _ in range(6):
            if as_int(pool.n_free) != 5 - len(got):
                return "n_free"
            try:
                got.append(pool.alloc())
            except MemoryError:
                break
        if len(got) != 5:
            return "n_free"
        pool.decref(got[-1])
        if as_int(pool.n_free) != 1:
            return "n_free"
        again, error = attempt(pool.alloc)        # the block given back is handed out again
        return None if error is None and as_int(again) == as_int(got[-1]) else "n_free"
    result, error = attempt(run)
    return result if error is None else error["kind"]


REFCOUNT_CALLS = ("refcount", "incref", "decref")


def refcount_probe(pk, cfg=None):
    """What incref, decref and refcount do on a pool of its own: every block's refcount 0 at first;
    two blocks alloc hands out (of 5: the pool is never full) go 1, 2, 3, 2, 1, 0, the others staying
    0 all along; ids 5 and -1 are a ValueError. None when they do what the contract says, else the
    first call that raised ({"call", "error": kind}), whose count was wrong ({"call", "wrong": True})
    or that took a bad id otherwise ({"call", "bad_id": True}). Part 4 is judged through them
    (fork increfs, free decrefs, the rules read every block's refcount), so a failing Part 4 check
    names Part 1 when they do not work."""
    cfg = config(cfg)
    pool = new_pool(pk, cfg, 5, 2)
    current = ["refcount"]

    def counts(want):
        current[0] = "refcount"
        return [as_int(pool.refcount(b)) for b in range(5)] == want

    def run():
        if not counts([0] * 5):
            return {"call": "refcount", "wrong": True}
        current[0] = "alloc"
        held = [as_int(pool.alloc()) for _ in range(2)]
        for i, b in enumerate(held):
            for call, want in ((None, 1), ("incref", 2), ("incref", 3), ("decref", 2), ("decref", 1), ("decref", 0)):
                if call:
                    current[0] = call
                    getattr(pool, call)(b)
                if not counts([want if x == b else int(x in held[i + 1:]) for x in range(5)]):
                    return {"call": call or "refcount", "wrong": True}
        for call in REFCOUNT_CALLS:                 # an id outside [0, n_blocks): ValueError (a cache checks ids so)
            for bad in (5, -1):
                current[0] = call
                _, error = attempt(getattr(pool, call), bad)
                if error is None or error["kind"] != "ValueError":
                    return {"call": call, "bad_id": True}
        return None
    result, error = attempt(run)
    return result if error is None else {"call": current[0], "error": error["kind"]}


def refcount_said(probe, kind=str):
    """What a refcount_probe answer that is not None found, in the words the public tests and the
    hidden feedback both print; kind(error kind) shows the kind (the hidden side marks it as theirs)."""
    if "bad_id" in probe:
        return "took an id outside [0, n_blocks) without ValueError"
    return f"raised {kind(probe['error'])}" if "error" in probe else "gave a wrong count"


def step_script(pk, cfg=None, param_seed=0, n_blocks=16, block_size=4, actions=(), record_kv=False, ledger=None):
    """Part 2's scripts: sequences advanced by paged_step, reserve, write and read, on a pool the test
    shapes with blocks of its own; no fork or free (Part 4). Returns {"order": alloc_order after the
    test's setup (its pool actions before the first sequence action), "records": one per action}.

    actions: ["new"], ["step", idx, chunks, as_numpy?], ["prefill", i, tokens] (seq i's step as a cached prefill
    runs it: block_steps; Part 5's twins), ["reserve", i, n], ["write", i, layer, start, n, seed],
    ["read", i, layer, length], ["adopt", i, n, seed, order] (the test gives empty seq i n positions of
    random K/V in ceil(n / B) blocks it takes, its table in `order`: a permutation of those blocks),
    ["poke", i, pos, seed, n?] (the test overwrites positions pos..pos+n-1,
    default n = 1, of seq i in storage: later logits must read them), ["alloc"] (the test takes a block; result: its handle),
    ["release", h] (the test gives back its block h; setup only), ["fill", seed] (random K/V in every
    block, as a used pool's storage holds; setup only), ["share", i] (the test takes one
    more reference to seq i's last block, so writing into it must copy it), ["mirror", i, n?] (a new
    sequence sharing seq i's blocks, its first n full blocks when n is given: the test sets its blocks
    and length and increfs each block, as a fork or a cache hit would), ["fit", idx, chunks] /
    ["miss", idx, chunks] (the test takes blocks until the step needs exactly the free ones / one
    more, counted by the contract's rule on the state observed now, then runs the step), ["take_rest"] (the
    test takes every block alloc still hands out, until MemoryError: a full pool whatever n_free
    says, Part 1's), ["grow", i, n, seed]
    (sharing_script's grow: a sharing script's twin replays it as it was).
    A script that shares blocks also returns "copy_probe" (copy_runs).
    """
    cfg = config(cfg)
    prm = params(cfg, param_seed)
    setup = []
    for action in actions:
        if action[0] not in ("alloc", "release", "fill"):
            break
        setup.append(action)
    order = alloc_order(pk, cfg, n_blocks, block_size, setup, ledger)
    pool = working_pool(pk, cfg, n_blocks, block_size, ledger)
    seqs, held = [], []

    def new():
        seqs.append(pk.PagedSequence(pool))
        return len(seqs) - 1

    def write(i, layer, start, n, seed):
        k, v = np.random.default_rng(seed).standard_normal((2, n, cfg.n_heads, cfg.d_head))
        seqs[i].write(layer, start, k, v)

    def read(i, layer, length):
        k, v = seqs[i].read(layer, length)
        return {"k": as_array(k), "v": as_array(v)}

    def step(idx, chunks, as_numpy=False, allow_unfinished=False):
        chunks = [np.array(c, dtype=np.int64) for c in chunks] if as_numpy else [list(c) for c in chunks]
        try:
            return [as_array(o) for o in pk.paged_step(prm, cfg, [seqs[i] for i in idx], chunks)]
        except NotImplementedError:
            if not allow_unfinished:
                raise
            raise _Unfinished() from None

    def prefill(i, tokens):
        return [as_array(block_steps(pk.paged_step, cfg, block_size)(prm, cfg, [seqs[i]], [list(tokens)])[0])]

    def mirror(i, n=None):
        """What fork (or, with n, a cache hit of n blocks) does, done by the test through the contract's
        attributes (blocks, length) and pool.incref, so that Part 2's step is tested on shared blocks
        without Part 4's fork or Part 5's cache."""
        j = new()
        blocks = list(seqs[i].blocks) if n is None else list(seqs[i].blocks)[:n]
        for b in blocks:
            pool.incref(b)
        seqs[j].blocks = blocks
        seqs[j].length = seqs[i].length if n is None else n * pool.block_size
        return j

    def adopt(i, n, seed, order):
        adopted(pool, seqs[i], n, seed, order)

    def poke(i, pos, seed, n=1):
        if not put_kv(pool, [as_int(b) for b in seqs[i].blocks], pos, n, seed):
            raise IndexError("the table has no block for this position")

    def fitted(extra):
        def run(idx, chunks):
            need = step_need(pool, [seqs[i] for i in idx], [len(c) for c in chunks])
            for _ in range(as_int(pool.n_free) - need + extra):
                held.append(pool.alloc())
            padded.update(seq_state(seqs), **pool_state(pool))      # what the step itself must not change
            return step(idx, chunks, allow_unfinished=True)
        return run

    def take_rest():
        for _ in range(n_blocks):
            try:
                held.append(pool.alloc())
            except Exception:  # noqa: BLE001  (the kind a full pool raises is Part 1's, judged there)
                return None
        return None

    calls = {"new": new, "step": step, "prefill": prefill, "reserve": lambda i, n: seqs[i].reserve(n), "write": write,
             "read": read,
             "take_rest": take_rest,
             "poke": poke, "share": lambda i: pool.incref(seqs[i].blocks[-1]), "mirror": mirror, "adopt": adopt,
             "grow": lambda i, n, seed: grow(pool, seqs[i], n, seed),
             "fit": fitted(0), "miss": fitted(1),
             "alloc": lambda: _pool_action(pool, held, "alloc", ()),
             "release": lambda h: _pool_action(pool, held, "release", (h,)),
             "fill": lambda seed: _pool_action(pool, held, "fill", (seed,))}
    records = []
    for op, *args in actions:
        padded = {}
        result, error = attempt(calls[op], *args)
        rec = {"op": [op, *args], "result": result, "error": error, **seq_state(seqs), **pool_state(pool)}
        if padded:
            rec["before"] = padded
        if record_kv:
            rec["kv"] = [gathered_kv(s) for s in seqs]
        records.append(rec)
    out = {"order": order, "records": records, "capacity_probe": capacity_probe(pk, cfg),
           "refcount_probe": refcount_probe(pk, cfg)}
    if any(a[0] in ("share", "mirror") for a in actions):     # a step here may copy: says whether copy_block runs
        out["copy_probe"] = copy_runs(pk, cfg)
    if any(a[0] in ("fit", "miss", "reserve") for a in actions):   # a step that fits: whether reserve copies too often
        out["cow_probe"] = cow_probe(pk, cfg)
    return out


def cow_probe(pk, cfg=None):
    """Whether reserve's copy-on-write makes copies the contract does not (Part 4's rule broken), on
    pools of its own: a sequence holding 2 of 4 positions of a block nobody shares, then reserve(1),
    must keep its block; three sequences holding one partly filled block (the test's blocks and
    pool.incref, as fork would), each reserve(1) in turn, must make 2 copies, the last keeping the
    block; a full block two sequences share is kept by reserve(1) (a full block is never copied). True when either is broken, False when not, the error's kind when a call raised. Such a
    copy takes a block the contract's count does not have, so a Part 2 step that fits the free blocks
    exactly then runs out, and its failure names Part 4."""
    def unshared():
        pool = new_pool(pk, config(cfg), 4, 4)
        seq = fresh_sequence(pk, pool)
        grow(pool, seq, 2, 0)
        before = [as_int(b) for b in seq.blocks]
        seq.reserve(1)
        return [as_int(b) for b in seq.blocks][:len(before)] != before    # (blocks it added are the count's)

    def shared():
        pool = new_pool(pk, config(cfg), 10, 4)
        seqs = [fresh_sequence(pk, pool) for _ in range(3)]
        grow(pool, seqs[0], 6, 0)                   # a full block, then 2 of 4 positions
        table = [as_int(b) for b in seqs[0].blocks]
        for seq in seqs[1:]:
            for b in table:
                pool.incref(b)
            seq.blocks, seq.length = list(table), 6
        for seq in seqs:
            seq.reserve(1)
        lasts = [as_int(seq.blocks[1]) if [as_int(b) for b in seq.blocks[:1]] == table[:1] and len(seq.blocks) >= 2
                 else None for seq in seqs]                 # (blocks added past the second are the count's)
        return None in lasts or len(set(lasts)) != 3 or lasts.count(table[1]) != 1 \
            or any(as_int(pool.refcount(b)) != 1 for b in lasts) or as_int(pool.refcount(table[0])) != 3
    def full():
        pool = new_pool(pk, config(cfg), 6, 4)
        seq, other = fresh_sequence(pk, pool), fresh_sequence(pk, pool)
        grow(pool, seq, 4, 0)                       # one full block, shared
        pool.incref(as_int(seq.blocks[0]))
        other.blocks, other.length = list(seq.blocks), 4
        first = as_int(seq.blocks[0])
        seq.reserve(1)
        return not seq.blocks or as_int(seq.blocks[0]) != first
    try:
        result, error = attempt(lambda: unshared() or shared() or full())
    except NotImplementedError:
        return "NotImplementedError"
    return result if error is None else error["kind"]


def count_probe(pk, cfg=None):
    """Whether reserve takes a block the contract does not count, on a pool of its own: a sequence
    whose last block (block size 4) has room for 3, 2 or 1 more positions, then reserve of exactly
    those (no block is due). True when a table grew, False when not, the error's kind when a call
    raised. Part 4's grows ask reserve only for room the last block has, so a failing sharing check
    names Part 2 (its count) when this is True."""
    def run():
        for filled in (1, 2, 3):
            pool = new_pool(pk, config(cfg), 4, 4)
            seq = fresh_sequence(pk, pool)
            grow(pool, seq, filled, 0)
            before = len(list(seq.blocks))
            seq.reserve(4 - filled)
            if len(list(seq.blocks)) != before:
                return True
        return False
    try:
        result, error = attempt(run)
    except NotImplementedError:
        return "NotImplementedError"
    return result if error is None else error["kind"]


def layout_probe(pk, cfg=None):
    """Whether paged_step's logits depend on which physical blocks a table names (Part 2's bug), on
    pools of their own: the same K/V the test stores (adopt) in blocks taken in order and in another
    order, then the same chunk stepped: True when the logits differ, False when not, the error's kind
    when the step raised. A Part 5 request reads hit blocks wherever they are, its twin a fresh pool's
    blocks in order, so a failing comparison names Part 2 when this is True."""
    cfg = config(cfg)

    def logits(order):
        pool = _storage_float64(new_pool(pk, cfg, 8, 4), cfg, 8, 4)
        pool.alloc()                                # (the test's: the sequence's blocks do not start at 0)
        seq = adopted(pool, pk.PagedSequence(pool), 10, 7, order)
        return as_array(pk.paged_step(params(cfg, 0), cfg, [seq], [[5, 6, 7]])[0])
    try:
        result, error = attempt(lambda: bool(np.max(np.abs(logits([0, 1, 2]) - logits([2, 0, 1]))) > 1e-9))
    except NotImplementedError:
        return "NotImplementedError"
    return result if error is None else error["kind"]


def sequence_probe(pk, cfg=None):
    """Whether PagedSequence(pool) starts as the contract says (pool, blocks [], length 0), on a pool of
    its own: True, False, the error's kind, or None when no pool could be built (Part 1's). fork,
    swap_in and a cache's own checks build sequences with it, so a check of Parts 4-6 that fails
    names Part 2 when this is not True."""
    try:
        pool = new_pool(pk, config(cfg), 4, 4)
    except Exception:  # noqa: BLE001  (no pool: Part 1's, said by its own checks)
        return None

    def run():
        seq = pk.PagedSequence(pool)
        return seq.pool is pool and type(seq.blocks) is list and seq.blocks == [] and as_int(seq.length) == 0
    try:
        result, error = attempt(run)
    except NotImplementedError:
        return "NotImplementedError"
    return bool(result) if error is None else error["kind"]


def part2_probes(pk, cfg=None, step=True, ledger=None):
    """What another part's scenario sends for its judge to name Part 2 with (judges.part2_note): the
    sequence probe, and, for scripts that step, the step probe (once per implementation and Config)."""
    out = {"sequence": probed(sequence_probe, pk, cfg)}
    if step:
        out["step"] = probed(step_probe, pk, cfg, ledger=ledger)
    return out


def step_probe(pk, cfg=None, ledger=None):
    """What paged_step answers on a small script of a pool of its own (block size 3): three sequences
    the test gives K/V in tables of their own, in any order (adopt), two of them at one position with
    chunks of one size (a batched step groups them) and one elsewhere, stepped across a block boundary,
    then the two decoded together: {"logits": [...], "lengths": [...]}, the error's kind, or None when
    no pool could be built. The judge compares it with the reference's (judges.part2_note): a check of
    another part that steps (Parts 4 and 5) names Part 2 when it differs."""
    cfg = config(cfg)
    prm = params(cfg, 3)
    try:
        pool = working_pool(pk, cfg, 16, 3, ledger)     # (Part 1's references and n_free kept by the ledger)
    except Exception:  # noqa: BLE001  (no pool: Part 1's, said by its own checks)
        return None

    def run():
        pool.alloc()                                    # (the test's: the sequences' blocks do not start at 0)
        a, c, b = (adopted(pool, fresh_sequence(pk, pool), n, seed, order)
                   for n, order, seed in ((5, (1, 0), 11), (2, (0,), 12), (5, (0, 1), 13)))
        out = [as_array(x) for x in pk.paged_step(prm, cfg, [a, c, b], [[1, 2], [3], [4, 5]])]
        out += [as_array(x) for x in pk.paged_step(prm, cfg, [b, a], [[6], [7]])]
        return {"logits": out, "lengths": [as_int(s.length) for s in (a, c, b)]}
    try:
        result, error = attempt(run)
    except NotImplementedError:
        return "NotImplementedError"
    return result if error is None else error["kind"]


def fit_probe(pk, cfg=None):
    """Whether paged_step refuses a step that needs exactly the free blocks (Part 2's count), on a pool
    of its own: 4 blocks of 4, the test holding 2, an empty sequence stepped by 8 tokens. True when it
    raised MemoryError, False when it ran, the error's kind when it raised otherwise. A cached prefill
    that fits exactly after the cache evicted its shortfall names Part 2 when this is True."""
    cfg = config(cfg)

    def run():
        pool = _storage_float64(new_pool(pk, cfg, 4, 4), cfg, 4, 4)
        pool.alloc(), pool.alloc()
        pk.paged_step(params(cfg, 0), cfg, [fresh_sequence(pk, pool)], [[1, 2, 3, 4, 5, 6, 7, 8]])
    try:
        _, error = attempt(run)
    except NotImplementedError:
        return "NotImplementedError"
    return False if error is None else True if error["kind"] == "MemoryError" else error["kind"]


_PROBED = {}


def probed(probe, pk, cfg=None, **kw):
    """probe(pk, cfg, **kw), once per implementation, probe, Config and keywords in this process (a worker
    runs many cases of one implementation: what its pools do on pools of their own does not change)."""
    key = (probe.__name__, id(pk), repr(cfg), tuple(sorted(kw.items())))   # (a ledger's source hashes once)
    if key not in _PROBED:
        _PROBED[key] = probe(pk, cfg, **kw)
    return _PROBED[key]


def copy_runs(pk, cfg=None):
    """copy_probe with a stub's NotImplementedError as data: a Part 2 step that copies a shared block
    needs pool.copy_block (Part 1) to run, and a check that fails because it does not says so."""
    try:
        return copy_probe(pk, cfg)
    except NotImplementedError:
        return {"error": "NotImplementedError"}


def step_need(pool, seqs, sizes):
    """The blocks a step needs by the contract's count, on the state observed now: new blocks, plus
    for each shared, partly filled last block that w of the step's sequences write, min(w, refcount - 1)
    copies (the last holder to write needs none)."""
    B, need, writers = pool.block_size, 0, {}
    for seq, n in zip(seqs, sizes):
        need += max(0, -(-(as_int(seq.length) + n) // B) - len(seq.blocks))
        if as_int(seq.length) % B:
            last = as_int(seq.blocks[-1])
            writers[last] = writers.get(last, 0) + 1
    return need + sum(min(w, as_int(pool.refcount(b)) - 1) for b, w in writers.items())


def grow(pool, seq, n, seed):
    """A step's storage without paged_step: n positions of K/V the test stores through the table
    (put_kv) and length += n. At every block boundary the test takes the next block itself
    (pool.alloc, through the contract's `blocks`); into a last block with room it writes after
    reserve(the positions that fit there), which must take no block and copy that block exactly when
    it is partly filled and shared (copy-on-write, Part 4's). So how many blocks a chunk or an empty
    sequence takes, Part 2's count, judged by Part 2's checks, is never asked here; a shared full
    block is written only after an explicit reserve (copy_when_needed's)."""
    B, done, first = pool.block_size, 0, as_int(seq.length)
    while done < n:
        at, capacity = first + done, len(seq.blocks) * B
        if at < capacity:                           # room in the last block (or in one reserved ahead)
            piece = min(n - done, capacity - at)
            if at % B:                              # a partly filled last block: copy-on-write's to decide
                seq.reserve(piece)
        else:                                       # a block boundary: the test takes the next block
            piece = min(n - done, B)
            seq.blocks = list(seq.blocks) + [pool.alloc()]
        if not put_kv(pool, [as_int(b) for b in seq.blocks], first, n, seed, done, done + piece):
            raise IndexError("after reserve, the table has too few blocks for the new positions")
        seq.length = first + done + piece
        done += piece


def sharing_script(pk, cfg=None, param_seed=0, n_blocks=64, block_size=4, actions=(), ledger=None):
    """Part 4's scripts: sequences forked, freed and advanced, with every sequence's K and V read from
    storage through its table after each action. Returns {"records", "copy_probe"}.

    actions: ["new"], ["fork", i], ["free", i], ["reserve", i, n], ["grow", i, n, seed] (reserve(n), a block at a
    time, or for a new sequence the test's own blocks; the test stores random K/V for the n new positions
    through the table and sets length += n: a step's
    storage without paged_step, so these scripts judge sharing on data the test itself put there),
    ["step", idx, chunks] (paged_step).
    A script of new, fork, free and step is also compared with its twin without sharing: a step_script
    of unshared_script(actions), run as a call of its own (in the grader: another worker), never here.
    """
    cfg = config(cfg)
    prm = params(cfg, param_seed)
    pool = working_pool(pk, cfg, n_blocks, block_size, ledger)
    seqs, records = [], []

    def new():
        seqs.append(fresh_sequence(pk, pool))
        return len(seqs) - 1

    def fork(i):
        seqs.append(seqs[i].fork())
        return len(seqs) - 1

    def step(idx, chunks):
        return [as_array(o) for o in pk.paged_step(prm, cfg, [seqs[i] for i in idx], [list(c) for c in chunks])]

    calls = {"new": new, "fork": fork, "free": lambda i: seqs[i].free(), "grow": lambda i, n, seed: grow(pool, seqs[i], n, seed),
             "step": step, "reserve": lambda i, n: seqs[i].reserve(n)}
    for op, *args in actions:
        result, error = attempt(calls[op], *args)
        records.append({"op": [op, *args], "result": result, "error": error, "kv": [gathered_kv(s, pool) for s in seqs],
                        **seq_state(seqs), "refcounts": refcounts(pool)})
    return {"records": records, "copy_probe": copy_probe(pk, cfg), "refcount_probe": refcount_probe(pk, cfg),
            "count_probe": count_probe(pk, cfg),
            "part2": part2_probes(pk, cfg, step=any(a[0] == "step" for a in actions), ledger=ledger)}


def sharing_twin(cfg=None, param_seed=0, n_blocks=64, block_size=4, actions=()):
    """The call that makes a sharing script's twin (unshared_script), on a pool of its own 4x larger."""
    return ["step_script", {"cfg": cfg, "param_seed": param_seed, "n_blocks": 4 * n_blocks, "block_size": block_size,
                            "actions": unshared_script(actions)["actions"], "record_kv": True}]


def unshared_script(actions):
    """The twin of a sharing script of new, fork, free, step and grow: the same script where every fork
    is a new sequence that prefills its parent's tokens, in the chunks the parent got them (so a step
    that depends on how a prompt is chunked does the same on both sides), and grows as its parent grew
    (the same K/V from the same seeds), and every free leaves its sequence for a new one,
    as step_script actions (Part 2's kind of call: the implementation cannot tell it from one).
    Returns {"actions", "last": per sharing action, the index of its last step_script record, "seqs":
    per sharing action, the step_script sequence each sharing sequence is then}. Histories assume
    every step succeeds, as the reference's do: a twin step that raises is said as such."""
    out, last, seqs, where, history = [], [], [], [], []

    def new():
        out.append(["new"])
        return sum(1 for a in out if a[0] == "new") - 1
    for op, *args in actions:
        if op == "new":
            where.append(new())
            history.append([])
        elif op == "fork":
            where.append(new())
            history.append(list(history[args[0]]))
            out += [_replayed(where[-1], h) for h in history[-1]]
        elif op == "free":
            where[args[0]], history[args[0]] = new(), []
        elif op == "step":
            out.append(["step", [where[i] for i in args[0]], [list(c) for c in args[1]]])
            for i, c in zip(*args):
                history[i].append(list(c))
        elif op == "grow":
            out.append(["grow", where[args[0]], *args[1:]])
            history[args[0]].append(("grow", *args[1:]))
        else:
            raise ValueError(f"a twin replays new, fork, free, step and grow only, not {op}")
        last.append(len(out) - 1)
        seqs.append(list(where))
    return {"actions": out, "last": last, "seqs": seqs}


def _replayed(seq, entry):
    """One entry of a sequence's history (a chunk it was stepped by, or a grow) as an action on `seq`."""
    if isinstance(entry, tuple):
        return ["grow", seq, *entry[1:]]
    return ["step", [seq], [list(entry)]]


# ------------------------------------------------------------------------------ Part 3 scenario
ONE_BLOCK = "read seq.pool.k[layer, b] one block at a time (assignment.md, Part 3)"
REFUSALS = {    # why Part 3's storage refused an access: the test names the rule from the code alone
    "many_blocks": f"blockwise_attention read many blocks in one index: {ONE_BLOCK}",
    "whole": f"blockwise_attention took the whole pool.k or pool.v as one array (np.asarray, np.array): {ONE_BLOCK}",
    "iterate": f"blockwise_attention iterated over every block of pool.k or pool.v at once: {ONE_BLOCK}",
}


class NotOneBlock(IndexError):
    """Part 3's storage refused to serve more than one block in one index."""


def _one_integer(x):
    """x as an int when it is one integer (Python, numpy, or a 0-d integer array), else None."""
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iu":
        return int(x)
    return None


def _one_block(x, n_blocks):
    """The index of one block: an integer, or a slice of exactly one block (b:b+1, kept as a slice so
    the result keeps its block axis); None for anything else."""
    if isinstance(x, slice):
        return x if len(range(*x.indices(n_blocks))) == 1 else None
    return _one_integer(x)


def _served(x):
    """What an index of one block returns: a copy, so no view leads back to the whole storage."""
    return x.copy() if isinstance(x, np.ndarray) else x


class OneBlockAtATime:
    """pool.k or pool.v as Part 3's tests hand them over: [n_layers, n_blocks, B, H, Dh] storage that
    serves one block per index, as a copy: k[layer, b], k[layer, b, :n], k[layer, b, i], k[layer][b],
    k[layer][b, :n], with b any integer (or a slice b:b+1), and .shape, .ndim, .dtype, .size, len().
    Many blocks in one index (a list, array or longer slice of them, Ellipsis or None), the whole array
    (np.asarray, np.array) and iteration over the blocks are refused: NotOneBlock is raised and its
    reason recorded in `refused` (one of REFUSALS), so the test names the rule even if the code
    catches the error."""

    def __init__(self, data, refused, layer=None):
        self._data, self._refused, self._layer = data, refused, layer

    def _whole(self):
        return self._data if self._layer is None else self._data[self._layer]

    shape = property(lambda self: self._whole().shape)
    ndim = property(lambda self: self._whole().ndim)
    dtype = property(lambda self: self._data.dtype)
    size = property(lambda self: self._whole().size)

    def __len__(self):
        return len(self._whole())

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        if self._layer is not None:                         # k[layer][b, ...]
            block = _one_block(index[0], self._data.shape[1]) if index else None
            if block is None:
                self._refuse("many_blocks")
            return _served(self._data[(self._layer, block) + index[1:]])
        layer = _one_integer(index[0]) if index else None
        if len(index) == 1 and layer is not None:           # k[layer]: serves its blocks one at a time
            return OneBlockAtATime(self._data, self._refused, layer)
        block = _one_block(index[1], self._data.shape[1]) if len(index) > 1 else None
        if block is None or (layer is None and not isinstance(index[0], slice)):
            self._refuse("many_blocks")
        return _served(self._data[(index[0], block) + index[2:]])

    def __array__(self, *args, **kwargs):
        self._refuse("whole")

    def __iter__(self):
        self._refuse("iterate")

    def _refuse(self, reason):
        self._refused.append(reason)
        raise NotOneBlock(REFUSALS[reason])

    def __repr__(self):
        return f"<pool storage of shape {self.shape}, served one block per index>"


def blockwise_inputs(cfg, n_blocks, block_size, seed, case):
    """The storage and query of a blockwise case: random in every block, layer and slot, so reading
    a stale slot, a wrong layer or a wrong block changes the answer."""
    rng = np.random.default_rng(seed)
    shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)
    pool = types.SimpleNamespace(k=rng.standard_normal(shape) * 2.0, v=rng.standard_normal(shape),
                                 block_size=block_size, cfg=cfg)
    q = np.random.default_rng(case["q_seed"]).standard_normal((cfg.n_heads, cfg.d_head))
    if "q_scale" in case:       # optional: large scores, where a softmax without its max overflows
        q = large_scores(pool, q, case, block_size)
    return pool, q


def large_scores(pool, q, case, block_size):
    """The query of a large-scores case: one head (chosen by q_seed) whose largest score is
    case["q_scale"] (above 709, where exp overflows), the others' at most 20 (so a maximum taken over
    all heads leaves them exp = 0 everywhere). Fair to every correct formulation: K on a grid of
    quarters and q of 1/64ths make every score exact in any summation order (d_head a power of 4),
    and V is scaled by 1/8, so the rounding of a score near 1000 (a log-sum-exp's) stays far under
    the tolerance. Changes pool.k and pool.v in place."""
    pool.k[:] = np.round(pool.k * 4) / 4
    pool.v *= 0.125
    used = list(case["table"])[:-(-case["length"] // block_size)]
    pos = np.arange(case["length"])
    keys = pool.k[case["layer"], np.array(used, dtype=np.int64)[pos // block_size], pos % block_size]  # [L, H, Dh]
    rng = np.random.default_rng(case["q_seed"] + 1)
    top = np.full(q.shape[0], 0.0)
    top[int(rng.integers(q.shape[0]))] = case["q_scale"]
    for h in range(q.shape[0]):
        raw = keys[:, h] @ q[h] / np.sqrt(q.shape[1])
        big = raw[np.argmax(np.abs(raw))]
        q[h] *= (top[h] or rng.uniform(2, 20)) / (big or 1.0)     # the head's largest |score| is its top, positive
    return np.round(q * 64) / 64


def served_one_block_at_a_time(pool, refused):
    """The object blockwise_attention gets as seq.pool: the contract's four attributes, with pool.k and
    pool.v that serve one block per index (OneBlockAtATime), so the part's rule is enforced."""
    return types.SimpleNamespace(k=OneBlockAtATime(pool.k, refused), v=OneBlockAtATime(pool.v, refused),
                                 block_size=pool.block_size, cfg=pool.cfg)


def blockwise(pk, cfg=None, n_blocks=8, block_size=4, cases=(), seed=0):
    """blockwise_attention on sequences the scenario builds itself from the contract's layout, so a
    broken allocator or paged_step cannot spoil this part. cases: {"table", "length", "layer", "q_seed"}
    and optionally "q_scale" (the query is multiplied by it).
    The object passed has only the attributes the contract lists, no methods, and storage that
    serves one block per index: "refused" is the first reason it refused an access (REFUSALS), or None."""
    cfg = config(cfg)
    out = []
    for case in cases:
        pool, q = blockwise_inputs(cfg, n_blocks, block_size, seed, case)
        refused = []
        seq = types.SimpleNamespace(pool=served_one_block_at_a_time(pool, refused), blocks=list(case["table"]),
                                    length=case["length"])
        result, error = attempt(pk.blockwise_attention, q, seq, case["layer"])
        out.append({"out": None if error else as_array(result), "error": error,
                    "refused": refused[0] if refused else None})
    return out


# ---------------------------------------------------------------------------- Part 4: the drivers
class _StepWatch:
    """paged_kv as the lab's drivers import it: the implementation's PagedSequence, and its paged_step
    noting whether it raised, so a driver that stopped inside paged_step (Part 2) is said so. With
    test_steps (the test chooses the tokens, so no logits are read), every step of the driver is the
    test's own instead: each sequence, in list order, grows by its chunk (grow: your reserve, the
    test's K/V, length += the chunk), and the logits are zeros. So the drivers judge fork, free and
    copy-on-write (reserve) alone: how many blocks a prompt takes, the lengths and the logits are Part
    2's, judged by Part 2's checks."""

    def __init__(self, pk, test_steps=False):
        self.PagedSequence = (lambda pool: fresh_sequence(pk, pool)) if test_steps else pk.PagedSequence
        self._step, self.raised = pk.paged_step, False
        self._test_steps, self._steps = test_steps, 0

    def paged_step(self, params, cfg, seqs, chunks):
        if self._test_steps:
            self._steps += 1
            try:
                for s, chunk in zip(seqs, chunks):
                    grow(s.pool, s, len(chunk), self._steps)
            except BaseException:
                self.raised = True
                raise
            return [np.zeros((len(chunk), cfg.vocab)) for chunk in chunks]
        try:
            out = self._step(params, cfg, seqs, chunks)
            if len(out) != len(seqs) or any(np.shape(o)[-1:] != (cfg.vocab,) for o in out):
                raise ValueError("paged_step returned no logits array [len(chunk), vocab] per sequence")
            return out
        except BaseException:
            self.raised = True
            raise


def _chosen(vocab, seed):
    """What the test hands the drivers instead of what the logits say: with a seed, each sampled token
    (parallel_sample) and each beam's log-probabilities (beam_search) are the test's own draws, so which
    sequences fork, copy and die depends on the pool alone, never on Part 2's logits; None keeps the
    lab's sampling from the logits."""
    if seed is None:
        return {}
    rng = np.random.default_rng(seed)
    return {"_sample": lambda logits, temperature, _rng: int(rng.integers(vocab)),
            "_log_softmax": lambda logits: rng.standard_normal(vocab)}


def _drive(pk, fn, pool, choices=None, **kw):
    """Run a lab driver on this implementation, watching the pool after every step: each live
    sequence's table and length, and how many blocks are in use by their refcounts. `choices`
    replaces the driver's sampling functions (_chosen)."""
    import decoding  # the lab's drivers use `paged_kv` from sys.modules: make it this implementation
    saved = sys.modules.get("paged_kv")
    kept = {name: getattr(decoding, name) for name in ("_record", *(choices or {}))}
    steps, watched_pk = [], _StepWatch(pk, test_steps=bool(choices))

    def watch(stats, pool_, seqs):
        kept["_record"](stats, pool_, seqs)
        steps.append({"tables": [[as_int(b) for b in s.blocks] for s in seqs],
                      "lengths": [as_int(s.length) for s in seqs], "in_use": in_use(pool_)})
    sys.modules["paged_kv"] = watched_pk
    for name, f in {**(choices or {}), "_record": watch}.items():
        setattr(decoding, name, f)
    try:
        result, error = attempt(getattr(decoding, fn), pool=pool, **kw)
    finally:
        for name, f in kept.items():
            setattr(decoding, name, f)
        sys.modules["paged_kv"] = saved if saved is not None else pk
    out, stats = result if error is None else ([], {"blocks_used": []})
    watched = {"steps": steps, "in_use_after": in_use(pool), "error": error,
               "raised_in": None if error is None else ("the test's step" if watched_pk._test_steps else "paged_step")
               if watched_pk.raised else "driver"}
    if watched["raised_in"] in ("paged_step", "the test's step"):    # a fork's step copies: whether copy_block
        watched["copy_probe"] = copy_runs(pk, kw.get("cfg"))           # (Part 1) runs, copy-on-write (Part 4),
        watched["cow_probe"] = cow_probe(pk, kw.get("cfg"))            # and reserve's count (Part 2)
        watched["count_probe"] = count_probe(pk, kw.get("cfg"))
    return out, stats, watched


def in_use(pool):
    """Blocks whose refcount is above 0 (what n_used should say; Part 4 does not rely on n_used).
    An answer that is not an integer counts as in use, but a ValueError counts as free."""
    return sum(1 for r in refcounts(pool) if r not in (0, "error: ValueError"))


def sampling(pk, cfg=None, param_seed=0, prompt=(), n=2, max_new=8, temperature=1.0, seed=0,
             n_blocks=64, block_size=16, choose_seed=None, ledger=None):
    """parallel_sample on a fresh pool: the samples and the pool watched after every step. With
    choose_seed, the test picks the tokens (_chosen): the samples then say nothing of the logits."""
    cfg = config(cfg)
    pool = working_pool(pk, cfg, n_blocks, block_size, ledger)
    samples, stats, watched = _drive(pk, "parallel_sample", pool, _chosen(cfg.vocab, choose_seed),
                                     params=params(cfg, param_seed), cfg=cfg,
                                     prompt=np.array(prompt, dtype=np.int64), n=n, max_new=max_new,
                                     temperature=temperature, seed=seed)
    return {"samples": samples, "blocks_used": [as_int(u) for u in stats["blocks_used"]], **watched,
            "refcount_probe": refcount_probe(pk, cfg), "part2": part2_probes(pk, cfg, step=choose_seed is None,
                                                                             ledger=ledger)}


def beams(pk, cfg=None, param_seed=0, prompt=(), k=2, steps=8, n_blocks=64, block_size=16, choose_seed=None,
          ledger=None):
    """beam_search on a fresh pool: the beams (score, tokens) and the pool watched after every step. With
    choose_seed, the test picks every beam's log-probabilities (_chosen), so which beams survive, fork
    and die does not depend on the logits."""
    cfg = config(cfg)
    pool = working_pool(pk, cfg, n_blocks, block_size, ledger)
    out, stats, watched = _drive(pk, "beam_search", pool, _chosen(cfg.vocab, choose_seed),
                                 params=params(cfg, param_seed), cfg=cfg,
                                 prompt=np.array(prompt, dtype=np.int64), k=k, steps=steps)
    return {"scores": [float(s) for s, _ in out], "tokens": [list(t) for _, t in out],
            "blocks_used": [as_int(u) for u in stats["blocks_used"]], **watched,
            "refcount_probe": refcount_probe(pk, cfg), "part2": part2_probes(pk, cfg, step=choose_seed is None,
                                                                             ledger=ledger)}


# ------------------------------------------------------------------------ Part 5 (bonus) scenario


def bonus_stub(pk, part):
    """The NotImplementedError the starter's stubs of a bonus part raise, when
    every entry point of the part (registry.py's names) still raises one; None when any is written
    (or the part is not there). Decided from what the code does, never its text: each entry point
    is called on placeholders, methods and properties on an instance whose __init__ never ran, so a
    stub raises before it reads anything and written code fails (or returns) at once, touching
    nothing of the student's. make test, make submit, the bonus demos and the grader all ask this."""
    todo, calls, bare = registry.todo_prefix(part), [], {}
    for name in registry.BY_ID[part].names:
        top = getattr(pk, name.dotted.split(".")[0], None)
        if name.kind == "function":
            calls.append(lambda f=top, n=len(name.args): f(*[None] * n))
            continue
        if top not in bare:
            try:
                bare[top] = top.__new__(top)
            except Exception:  # noqa: BLE001  (no class, or one that cannot be made bare: not the starter's)
                return None
        obj, attr, n = bare[top], name.dotted.split(".")[-1], len(name.args)
        if name.kind == "class":
            calls.append(lambda c=top, o=obj, n=n: c.__init__(o, *[None] * n))
        elif name.kind == "method":
            calls.append(lambda c=top, o=obj, a=attr, n=n: getattr(c, a)(o, *[None] * n))
        else:
            calls.append(lambda o=obj, a=attr: getattr(o, a))
    first = None
    for call in calls:
        try:
            call()
        except NotImplementedError as e:
            if not (e.args and isinstance(e.args[0], str) and e.args[0].startswith(todo)):
                return None
            first = e if first is None else first
        except Exception:  # noqa: BLE001  (written code given placeholders)
            return None
        else:
            return None
    return first


def prefix_script(pk, cfg=None, param_seed=0, n_blocks=32, block_size=4, actions=(), twin=True, ledger=None):
    """Part 5's scripts: requests prefilled through one PrefixCache, sequences the test builds itself,
    and the cache's own calls. Returns {"records": one per action, "twins": per action, what a
    request's twin needs (prefix_twin: {"h": the hit blocks it shares, "pokes": the test's overwrite
    seed or None per hit block, "chain": the prompts that computed its hit blocks}), or None}.

    Sequences are numbered in the order they appear, requests and the test's own alike:
    ["request", tokens] (a new PagedSequence, then cache.lookup(tokens) and cached_prefill: result
    {"hits": the lookup's ids, "rows": how many rows of logits, "logits"}), ["seq", tokens, seed] (the
    test takes ceil(len / B) blocks with pool.alloc and stores random K/V in them itself: no
    paged_step), ["insert", s] (cache.insert(s's tokens, s's table)), ["insert", s, n, table] (n
    tokens of s; table: entries k = s's k-th block, "freed" = a block the test took and gave back,
    "past" = n_blocks, "neg" = -1), ["lookup", tokens], ["evict", n], ["release", s] (the test
    decrefs every block of s's table and empties it, with pool.decref only: no free()), ["overwrite",
    s, i, seed] (the test overwrites every slot of the block that was s's logical block i when s was
    made, in every layer: a request that hits it must read that), ["hold", n] (the test takes n
    blocks), ["hold_until", k] (the test takes blocks until the pool says n_free == k), ["unhold"]
    (gives them all back), ["bad_prefill", kind, tokens] (cached_prefill on a sequence it must
    refuse: "filled" holds the test's last block with length 1, "reserved" the same with length 0,
    "other_pool" is on another pool).
    After every action: every sequence's table, the blocks the test holds, every refcount, n_cached
    and n_hit_tokens. "alone": per action, for a request that raised, what paged_step alone does with
    its prompt on an empty sequence of a pool of its own (step_alone), else None.

    The twin of a request whose table starts with h of its hits (prefix_twin) is the same prompt
    prefilled without the cache, a call of its own (in the grader: another worker), never run here. Its
    chain replays how the hit blocks were computed: the request that made the last hit block, itself
    on the hit blocks it shared (its own chain), so that a step that depends on how a prompt is cut
    into chunks (Part 2's bug) computes the same K/V on both sides.
    """
    run = PrefixRun(pk, cfg, param_seed, n_blocks, block_size, twin, ledger)
    for action in actions:
        run.call(action)
    return {"records": run.records, "twins": run.twins, "alone": run.alone,
            "probes": {"cow": probed(cow_probe, pk, cfg), "layout": probed(layout_probe, pk, cfg),
                       "count": probed(count_probe, pk, cfg), "fit": probed(fit_probe, pk, cfg),
                       "part2": part2_probes(pk, cfg, ledger=ledger)}}


class PrefixRun:
    """prefix_script one action at a time (Part 5's public tests call it directly): `call(action)` runs
    one action of prefix_script's form and returns its record, also appended to `records` (and its
    entries to `twins` and `alone`). While an action runs (and only then), paged_step is block_steps'
    (a replacement of pk.paged_step made during an action stays for the next ones, as in one run)."""

    def __init__(self, pk, cfg=None, param_seed=0, n_blocks=32, block_size=4, twin=True, ledger=None):
        self.pk, self.cfg, self.n_blocks, self.B, self.twin = pk, config(cfg), n_blocks, block_size, twin
        self.prm = params(self.cfg, param_seed)
        stub = bonus_stub(pk, "prefix_cache")
        if stub is not None:    # Part 5 left as the starter's stubs: said so, even when Part 1 is unfinished too
            raise stub
        self.pool = working_pool(pk, self.cfg, n_blocks, block_size, ledger)   # as its twin's (a step_script) storage
        self._step = block_steps(pk.paged_step, self.cfg, block_size)
        self.cache = self._stepping(pk.PrefixCache, self.pool)
        self.seqs, self.held, self.poked = [], [], {}     # seqs: {"tokens", "made", "obj" or "blocks"}
        self.maker, self.chains, self.hits_of = {}, {}, {}  # block id -> (seq, logical block); request -> chain, hits
        self.records, self.twins, self.alone = [], [], []
        self.calls = {"request": self.request, "seq": self.own, "insert": self.insert, "release": self.release,
                      "overwrite": self.overwrite, "lookup": lambda t: [as_int(b) for b in self.cache.lookup(t)],
                      "evict": lambda n: as_int(self.cache.evict(n)), "hold": self.hold,
                      "hold_until": self.hold_until, "unhold": self.unhold, "bad_prefill": self.bad_prefill}

    def _stepping(self, fn, *args):
        """fn(*args) with pk.paged_step as block_steps runs it, restored after."""
        outside, self.pk.paged_step = self.pk.paged_step, self._step
        try:
            return fn(*args)
        finally:
            self._step, self.pk.paged_step = self.pk.paged_step, outside

    def call(self, action):
        return self._stepping(self._call, action)

    def _call(self, action):
        op, *args = action
        before = len(self.twins)
        result, error = attempt(self.calls[op], *args)
        if len(self.twins) == before:
            self.twins.append(None)
        if op == "request" and error is not None:
            self.seqs[-1]["made"] = []
        self.alone.append(self._alone(args[0], error) if op == "request" else None)
        pool, cache = self.pool, self.cache
        self.records.append({"op": [op, *args], "result": result, "error": error,
                             "tables": [[as_int(b) for b in self.table(s)] for s in self.seqs],
                             "held": [as_int(b) for b in self.held],
                             "refcounts": refcounts(pool, self.n_blocks),
                             "n_cached": observe(lambda: cache.n_cached),
                             "n_hit_tokens": observe(lambda: cache.n_hit_tokens)})
        return self.records[-1]

    def _alone(self, tokens, error):
        """What paged_step alone does with a request's prompt (step_alone), when the request raised, or
        when the prompt is not a valid chunk but the request did not raise: "accepted" when the step
        runs on it too (cached_prefill may leave checking the prompt to paged_step, Part 2's)."""
        valid = bool(tokens) and all(type(t) is int and 0 <= t < self.cfg.vocab for t in tokens)
        if error is None and valid:
            return None
        said = step_alone(self.pk, self.cfg, self.prm, self.B, tokens)
        return "accepted" if said is None and error is None else said

    def table(self, s):
        return list(s["obj"].blocks) if "obj" in s else s["blocks"]

    def handed_out(self, blocks, s=None, first=0):
        for i, b in enumerate(blocks, start=first):
            self.poked.pop(as_int(b), None)      # a block handed out anew holds no overwrite of the test's
            self.maker.pop(as_int(b), None)
            if s is not None:
                self.maker[as_int(b)] = (s, i)

    def chain(self, s, tokens, h):
        """[[prompt, h], ...]: the requests that computed the first h blocks of `tokens`, first made first,
        then this one; a prefix the test stored itself (or out of reach) is one chunk of its tokens."""
        B = self.B
        m, i = self.maker.get(self.hits_of[s][h - 1], (None, None)) if h else (None, None)
        if not h:
            return [[list(tokens), 0]]
        if m in self.chains and m != s and i == h - 1 and self.seqs[m]["tokens"][:h * B] == list(tokens[:h * B]):
            return self.chains[m] + [[list(tokens), h]]
        return [[list(tokens[:h * B]), 0], [list(tokens), h]]

    # ------------------------------------------------------------------ the actions
    def request(self, tokens):
        pk = self.pk
        seq = fresh_sequence(pk, self.pool)
        self.seqs.append({"tokens": list(tokens), "obj": seq, "made": []})
        found, _ = attempt(self.cache.lookup, list(tokens))     # (lookup of bad token ids is not graded)
        hits = [as_int(b) for b in found] if isinstance(found, list) else []
        s = len(self.seqs) - 1
        self.hits_of[s] = hits
        logits = as_array(pk.cached_prefill(self.prm, self.cfg, seq, list(tokens), self.cache))
        made = [as_int(b) for b in seq.blocks]
        self.seqs[-1]["made"] = made
        h = shared_hits(made, hits, len(tokens), len(logits), self.B)
        self.chains[s] = self.chain(s, tokens, h)
        self.twins.append({"h": h, "pokes": [self.poked.get(b) for b in hits[:h]], "chain": self.chains[s]}
                          if self.twin else None)
        self.handed_out(made[h:], s, h)
        return {"hits": hits, "rows": len(logits), "logits": logits}

    def own(self, tokens, seed):
        pool, blocks = self.pool, []
        try:
            for _ in range(-(-len(tokens) // self.B)):
                blocks.append(pool.alloc())
        except MemoryError:
            for b in blocks:
                pool.decref(b)
            raise
        self.handed_out(blocks, len(self.seqs))
        put_kv(pool, blocks, 0, len(tokens), seed)
        self.seqs.append({"tokens": list(tokens), "blocks": blocks, "made": [as_int(b) for b in blocks]})

    def insert(self, s, n=None, spec=None):
        seq = self.seqs[s]
        tokens = seq["tokens"][:n] if n is not None else seq["tokens"]
        blocks = self.table(seq) if spec is None else [_spec_block(self.pool, self.seqs, self.table(seq), e)
                                                       for e in spec]
        return as_int(self.cache.insert(tokens, blocks))

    def release(self, s):
        seq = self.seqs[s]
        for b in self.table(seq):
            self.pool.decref(b)
        if "obj" in seq:
            seq["obj"].blocks, seq["obj"].length = [], 0
        else:
            seq["blocks"] = []

    def overwrite(self, s, i, seed):
        b = self.seqs[s]["made"][i]
        put_kv(self.pool, [b], 0, self.B, seed)
        self.poked[b] = seed

    def hold(self, n):
        for _ in range(n):
            self.held.append(self.pool.alloc())
        self.handed_out(self.held)

    def hold_until(self, k):
        for _ in range(self.n_blocks):      # bounded: a pool whose n_free never falls cannot hang the test
            if not as_int(self.pool.n_free) > k:
                break
            self.held.append(self.pool.alloc())
        self.handed_out(self.held)

    def unhold(self):
        while self.held:
            self.pool.decref(self.held.pop())

    def bad_prefill(self, kind, tokens):
        pk, pool, held = self.pk, self.pool, self.held
        seq = fresh_sequence(pk, pk.BlockPool(self.cfg, 4, self.B) if kind == "other_pool" else pool)
        if kind in ("filled", "reserved"):         # the sequence holds the test's last block too
            pool.incref(held[-1])
            seq.blocks, seq.length = [held[-1]], 1 if kind == "filled" else 0
        try:
            return as_array(pk.cached_prefill(self.prm, self.cfg, seq, list(tokens), self.cache))
        finally:
            if kind in ("filled", "reserved"):
                pool.decref(held[-1])


def block_pieces(tokens, block_size):
    """A chunk as block_steps runs it again: a block at a time."""
    return [tokens[i:i + block_size] for i in range(0, len(tokens), block_size)] or [tokens]


def block_steps(step, cfg, block_size):
    """paged_step as Part 5's scripts call it (the contract's cached_prefill runs paged_step on the
    rest of the prompt) and as their twins call it (step_script's "prefill"): the step as it is;
    only when it raises although it is one sequence's chunk of valid token ids that spans more than
    a block and fits (the contract's count, step_need, on the state before the step) is it run
    again a block at a time, its logits joined. A correct step never raises there, so it is never
    run again; a step that must raise (it does not fit, a bad id) raises. How many blocks one step
    of a long chunk takes is Part 2's count, judged by Part 2's checks (as Part 4's grow does), so
    it does not also cost a cached prefill; the twin runs the same way, so both sides compute alike."""
    def paged_step(params, cfg_, seqs, chunks):
        again = _fits_in_pieces(cfg, block_size, seqs, chunks)
        try:
            return step(params, cfg_, seqs, chunks)
        except NotImplementedError:
            raise
        except Exception:  # noqa: BLE001  (a step that fits and raises: Part 2's, run again in pieces)
            if not again:
                raise
        rows = [as_array(step(params, cfg_, seqs, [piece])[0]) for piece in block_pieces(chunks[0], block_size)]
        return [np.concatenate(rows)]
    return paged_step


def _fits_in_pieces(cfg, block_size, seqs, chunks):
    try:
        if len(seqs) != 1 or len(chunks) != 1 or len(chunks[0]) <= block_size:
            return False
        if not all(type(as_int(t)) is int and 0 <= as_int(t) < cfg.vocab for t in chunks[0]):
            return False
        seq, n = seqs[0], len(chunks[0])
        length, free = as_int(seq.length), as_int(seq.pool.n_free)
        return type(length) is int and type(free) is int and length + n <= cfg.max_len \
            and step_need(seq.pool, [seq], [n]) <= free
    except Exception:  # noqa: BLE001  (whatever the state is, the step then runs as it is)
        return False


def step_alone(pk, cfg, prm, block_size, tokens):
    """The kind of error paged_step raises for `tokens` on an empty sequence of an ample pool of its own,
    stepped whole, from its second block on (as after a hit), and with its last token alone, or
    "returns" when it answers no [len(chunk), vocab] logits array, or None when all three run:
    cached_prefill computes the rest of a prompt with paged_step (Part 2's), so a request that raised
    names Part 2 when this is not None."""
    def run(first):
        n = 2 * (-(-len(tokens) // block_size)) + 4
        pool = _storage_float64(new_pool(pk, cfg, n, block_size), cfg, n, block_size)
        seq = fresh_sequence(pk, pool)
        for chunk in ([tokens[:first], tokens[first:]] if first else [tokens]):
            out = pk.paged_step(prm, cfg, [seq], [list(chunk)])
            if len(out) != 1 or np.shape(out[0]) != (len(chunk), cfg.vocab):
                return "returns"
        return None
    try:
        for first in {0, block_size if len(tokens) > block_size else 0, len(tokens) - 1 if len(tokens) > 1 else 0}:
            said, error = attempt(run, first)        # (whole; after a hit; its last token alone)
            if error is not None or said is not None:
                return said or error["kind"]
    except NotImplementedError:
        return "NotImplementedError"
    return None


def shared_hits(table, hits, prompt_len, rows, block_size):
    """How many of a lookup's hits cached_prefill shared, what the cache decided (the rest it computed):
    as many as the request's table starts with, or, when that is fewer than the rows of logits say
    (a step that copied the last of them: Part 4's copy-on-write), the rows' count, never more than
    the hits. So neither the shape of the logits (Part 2's) nor a copy (Part 4's) decides it alone."""
    h = 0
    while h < min(len(table), len(hits)) and table[h] == hits[h]:
        h += 1
    done = prompt_len - rows if type(rows) is int else -1
    if 0 <= done and done % block_size == 0 and h < done // block_size <= len(hits):
        return done // block_size
    return h


def _spec_block(pool, seqs, table, entry):
    """A block id for an insert whose table the test makes (see prefix_script)."""
    if entry == "freed":
        b = pool.alloc()
        pool.decref(b)
        return b
    if isinstance(entry, list):             # [s, k]: seq s's k-th block when it was made
        return seqs[entry[0]]["made"][entry[1]]
    return {"past": pool.n_blocks, "neg": -1}.get(entry, table[entry] if isinstance(entry, int) else entry)


def prefix_twin(cfg, param_seed, n_blocks, block_size, chain, pokes):
    """The twin of a request: the same prompt without the cache, as a step_script call (Part 2's kind:
    the implementation cannot tell it from one) on a pool of its own. chain (prefix_script's): the
    first prompt stepped whole, then each next one on a sequence sharing the previous one's first h
    blocks (["mirror"]: what a cache hit does, done by the test) stepped from there, as the cached run
    computed them; before the last step the test's overwrites of the hit blocks (pokes: a seed or None
    per hit). Every chunk is stepped as a cached prefill steps it (["prefill"]: block_steps). The
    request's logits must equal the last step's."""
    B = block_size
    actions = [["new"], ["prefill", 0, list(chain[0][0])]]
    for j, (tokens, h) in enumerate(chain[1:], start=1):
        actions.append(["mirror", j - 1, h])
        if j == len(chain) - 1:
            actions += [["poke", j, i * B, seed, B] for i, seed in enumerate(pokes) if seed is not None]
        actions.append(["prefill", j, list(tokens[h * B:])])
    room = sum(len(t) // B + 2 for t, _ in chain)
    return ["step_script", {"cfg": cfg, "param_seed": param_seed, "n_blocks": n_blocks + room,
                            "block_size": B, "actions": actions}]


# ------------------------------------------------------------------------ Part 6 (bonus) scenario
def swap_script(pk, cfg=None, n_blocks=16, block_size=4, cpu_blocks=8, actions=(), ledger=None):
    """Part 6's scripts: groups of sequences the test builds itself (their blocks taken with pool.alloc
    and shared with pool.incref, their K/V stored by the test: no paged_step, no fork), swapped out and
    in through one SwapSpace(pool, cpu_blocks). Returns {"layout": the new space's attributes and
    storage, "records": one per action}.

    Sequences are numbered in the order they appear: ["seq", n, seed] (a new sequence of n positions in
    ceil(n / B) blocks of its own, random K/V), ["fork", s] (a new sequence sharing all of s's blocks,
    each incref'd, s's length), ["branch", s, k, n, seed] (a new sequence sharing s's first k blocks,
    which are full, then n positions in blocks of its own), ["swap_out", [s, ...]] (result: the
    handle's number h; "other" in the list is a sequence of another pool), ["swap_in", h] (the
    sequences it returns are the next ones; result: {"seqs": their numbers, "same_pool": whether each
    is of the pool, "taken": the ids pool.alloc returned during the call, in order, "kv": each one's K/V
    read through its table}; h = "made_up" is an object no space returned, "other" a handle of another
    SwapSpace of the pool), ["free", s] (the test decrefs s's blocks and empties it), ["hold", n],
    ["hold_until", k] (the test takes blocks until n_free == k), ["unhold"], ["scribble", seed] (the test
    takes every free block, overwrites its K/V and gives it back: the pool reuses what a swap_out
    freed), ["read"] (result: every sequence's K/V). After every action: every sequence's table and
    length, the blocks the test holds, every refcount, and the space's n_free, n_out and n_in."""
    run = SwapRun(pk, cfg, n_blocks, block_size, cpu_blocks, ledger)
    for action in actions:
        run.call(action)
    return {"layout": run.layout, "records": run.records, "part2": part2_probes(pk, cfg, step=False)}


class SwapRun:
    """swap_script one action at a time (Part 6's public tests call it directly)."""

    def __init__(self, pk, cfg=None, n_blocks=16, block_size=4, cpu_blocks=8, ledger=None):
        self.pk, self.cfg, self.B = pk, config(cfg), block_size
        stub = bonus_stub(pk, "swap")
        if stub is not None:    # Part 6 left as the starter's stubs: said so, even when Part 1 is unfinished too
            raise stub
        self.pool = working_pool(pk, self.cfg, n_blocks, block_size, ledger)
        self.taken = self._watch_alloc()
        self.space = build("SwapSpace", pk.SwapSpace, self.pool, cpu_blocks)
        self.layout = swap_layout(self.space, self.pool, self.cfg, cpu_blocks)
        self.seqs, self.handles, self.held, self.records = [], [], [], []
        self.calls = {"seq": self.new, "fork": self.fork, "branch": self.branch, "swap_out": self.swap_out,
                      "swap_in": self.swap_in, "free": self.free, "hold": self.hold, "hold_until": self.hold_until,
                      "unhold": self.unhold, "scribble": self.scribble,
                      "read": lambda: [gathered_kv(s) for s in self.seqs]}

    def _watch_alloc(self):
        """The ids the pool's alloc returns, in order (a list the test empties before a swap_in), or None
        when the pool's alloc cannot be watched. Watched from before the space is made, so a space that
        keeps pool.alloc from its __init__ is watched too."""
        taken, alloc = [], self.pool.alloc

        def watched():
            b = alloc()
            taken.append(as_int(b))
            return b
        try:
            self.pool.alloc = watched
        except Exception:  # noqa: BLE001  (a pool without room for the attribute: nothing is watched)
            return None
        return taken

    def call(self, action):
        op, *args = action
        result, error = attempt(self.calls[op], *args)
        space = self.space
        self.records.append({"op": [op, *args], "result": result, "error": error,
                             "tables": [[as_int(b) for b in s.blocks] for s in self.seqs],
                             "lengths": [as_int(s.length) for s in self.seqs],
                             "held": [as_int(b) for b in self.held], "refcounts": refcounts(self.pool),
                             "n_free": observe(lambda: space.n_free), "n_out": observe(lambda: space.n_out),
                             "n_in": observe(lambda: space.n_in)})
        return self.records[-1]

    def _adopt(self, blocks, length):
        seq = fresh_sequence(self.pk, self.pool)
        seq.blocks, seq.length = list(blocks), length
        self.seqs.append(seq)
        return len(self.seqs) - 1

    def _own(self, start, n, seed, shared=()):
        """blocks for positions start..start+n-1 (the test's), after `shared`; all or none."""
        got = []
        try:
            for _ in range(-(-(start + n) // self.B) - len(shared)):
                got.append(self.pool.alloc())
        except MemoryError:
            for b in got:
                self.pool.decref(b)
            raise
        put_kv(self.pool, list(shared) + got, start, n, seed)
        return got

    def new(self, n, seed):
        return self._adopt(self._own(0, n, seed), n)

    def fork(self, s):
        for b in self.seqs[s].blocks:
            self.pool.incref(b)
        return self._adopt(self.seqs[s].blocks, self.seqs[s].length)

    def branch(self, s, k, n, seed):
        shared = list(self.seqs[s].blocks[:k])
        own = self._own(k * self.B, n, seed, shared)
        for b in shared:
            self.pool.incref(b)
        return self._adopt(shared + own, k * self.B + n)

    def swap_out(self, group):
        seqs = [self._other_seq() if s == "other" else self.seqs[s] for s in group]
        self.handles.append(self.space.swap_out(seqs))
        return len(self.handles) - 1

    def _other_seq(self):
        """A sequence of another pool, its table naming one block of it: the test sets it, taking no block
        with that pool's alloc (a group with it is refused whatever its blocks are, and an alloc that
        does not work is Part 1's, not a bad call of Part 6's)."""
        other = new_pool(self.pk, self.cfg, 2, self.B)
        seq = fresh_sequence(self.pk, other)
        seq.blocks, seq.length = [0], 1
        return seq

    def swap_in(self, h):
        if h == "made_up":
            handle = object()
        elif h == "other":      # a true handle, of another space of the same pool (it swaps out an empty sequence)
            handle = build("SwapSpace", self.pk.SwapSpace, self.pool, 1).swap_out([fresh_sequence(self.pk, self.pool)])
        else:
            handle = self.handles[h]
        if self.taken is not None:
            self.taken.clear()
        back = self.space.swap_in(handle)
        taken = None if self.taken is None else list(self.taken)
        back = list(back)
        first = len(self.seqs)
        self.seqs += back
        return {"seqs": list(range(first, len(self.seqs))), "same_pool": [s.pool is self.pool for s in back],
                "taken": taken, "kv": [gathered_kv(s, self.pool) for s in back]}

    def free(self, s):
        seq = self.seqs[s]
        for b in seq.blocks:
            self.pool.decref(b)
        seq.blocks, seq.length = [], 0

    def hold(self, n):
        for _ in range(n):
            self.held.append(self.pool.alloc())

    def hold_until(self, k):
        for _ in range(self.pool.n_blocks):      # bounded: a pool whose n_free never falls cannot hang the test
            if not as_int(self.pool.n_free) > k:
                break
            self.held.append(self.pool.alloc())

    def unhold(self):
        while self.held:
            self.pool.decref(self.held.pop())

    def scribble(self, seed):
        got = []
        for _ in range(self.pool.n_blocks):
            if not as_int(self.pool.n_free) > 0:
                break
            got.append(self.pool.alloc())
        put_kv(self.pool, got, 0, len(got) * self.B, seed)
        for b in got:
            self.pool.decref(b)


def swap_layout(space, pool, cfg, cpu_blocks):
    """A new SwapSpace's attributes and storage."""
    k, v = np.asarray(space.k), np.asarray(space.v)
    return {"n_blocks": as_int(space.n_blocks), "same_pool": space.pool is pool,
            "k_shape": list(k.shape), "v_shape": list(v.shape), "k_dtype": str(k.dtype), "v_dtype": str(v.dtype),
            "zeros": bool(not k.any() and not v.any()), "distinct": k is not v and not np.shares_memory(k, v),
            "n_free": observe(lambda: space.n_free), "n_out": observe(lambda: space.n_out),
            "n_in": observe(lambda: space.n_in)}


def batch(pk, calls=()):
    """Several scenarios in one worker: [[name, inputs], ...] -> their results in order; a scenario
    that could not build what it needs (Unbuilt) gives {"unbuilt": its name, "kind": the error's kind}."""
    out = []
    for name, inputs in calls:
        try:
            out.append(SCENARIOS[name](pk, **inputs))
        except Unbuilt as e:
            out.append({"unbuilt": e.what, "kind": e.kind})
    return out


SCENARIOS = {f.__name__: f for f in (pool_layout, pool_script, step_script, sharing_script, blockwise, sampling,
                                       beams, prefix_script, swap_script, batch)}
