"""Failure messages that read like a good TA: what was checked, expected vs got, and a picture.

Used by the public tests and by the hidden grader. It formats only plain data (ints, lists, float64
arrays) that a scenario returned, never live objects of an implementation.
"""
import numpy as np


def draw_block_table(table, length, block_size, refcounts=None):
    """One sequence's block table: each physical block with its fill and, if known, its refcount.

        length 9, block size 4:  [ 0 ####  rc1 ][ 2 ####  rc2 ][ 4 #...  rc1 ]
    """
    cells = []
    for i, b in enumerate(table):
        filled = max(0, min(block_size, length - i * block_size)) if isinstance(length, int) else 0
        fill = "#" * filled + "." * (block_size - filled) if block_size <= 16 else f"{filled}/{block_size}"
        rc = ""
        if refcounts is not None and isinstance(b, int) and 0 <= b < len(refcounts):
            rc = f"  rc{refcounts[b]}"
        cells.append(f"[ {b} {fill}{rc} ]")
    return f"length {length}, block size {block_size}:  " + ("".join(cells) or "(no blocks)")


def draw_tables(title, tables, lengths, block_size, refcounts=None):
    lines = [f"  {title}:"]
    for i, (t, n) in enumerate(zip(tables, lengths)):
        lines.append(f"    seq {i}  " + draw_block_table(t, n, block_size, refcounts))
    return "\n".join(lines)


def first_difference(expected, got, tol):
    """Where two arrays first differ by more than tol, as one sentence; None if they agree."""
    expected, got = np.asarray(expected, dtype=np.float64), np.asarray(got, dtype=np.float64)
    if expected.shape != got.shape:
        return f"shape: expected {expected.shape}, got {got.shape}"
    if not np.all(np.isfinite(got)):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(got))[0])
        return f"got a non-finite value at index {list(idx)}"
    err = np.abs(expected - got)
    bad = np.argwhere(err > tol)
    if len(bad) == 0:
        return None
    idx = tuple(int(i) for i in bad[0])
    return (f"first difference at index {list(idx)}: expected {expected[idx]:.10g}, got {got[idx]:.10g} "
            f"(max |difference| {err.max():.3g} > {tol:g}; {len(bad)} of {err.size} entries differ)")


_SAID = {   # how each scenario action is said in feedback; {0}, {1}, ... are its arguments
    "grow": "seq {0}.reserve({1}), then the test stores K/V for the {1} new positions and sets length += {1}",
    "share": "the test takes one more reference to seq {0}'s last block (pool.incref)",
    "mirror": "the test makes a new sequence sharing seq {0}'s blocks (as fork would)",
    "poke": "the test overwrites position {1} of seq {0} in pool storage",
    "fill": "the test fills every block's storage with random K/V (a used pool)",
    "release": "pool.decref of the test's block #{0}",
    "fork": "seq {0}.fork()", "free": "seq {0}.free()", "reserve": "seq {0}.reserve({1})",
    "write": "seq {0}.write(layer {1}, start {2}, {3} positions)", "read": "seq {0}.read(layer {1}, length {2})",
    "new": "PagedSequence(pool)", "data": "reading block {0}'s K/V from storage",
}


def describe_action(op):
    """A scenario action as the call it stands for, with chunk sizes but never token ids:
    step(seqs [0, 1], chunks of 7, 1 tokens), seq 2.fork(), pool.decref(#3)."""
    name, *args = op
    if name in ("step", "fit", "miss"):
        sizes = [len(c) for c in args[1]]
        call = f"step(seqs {list(args[0])}, chunks of {', '.join(map(str, sizes)) or 'no'} tokens)"
        if name == "step":
            return call
        return (f"{call}, the test having taken blocks until it needs "
                + ("exactly the free ones" if name == "fit" else "one block more than is free"))
    if name in _SAID:
        return _SAID[name].format(*args)
    name = {"copy": "copy_block"}.get(name, name)
    return f"pool.{name}({', '.join(_block_said(a) for a in args)})"


def _block_said(spec):
    """A block as Part 1's scripts name it (scenarios.pool_script): #k = the k-th handle."""
    if isinstance(spec, list) and len(spec) == 2:
        return str(spec[1]) if spec[0] == "id" else f"np.{spec[0]}({_block_said(spec[1])})"
    return {"freed": "a block the test gave back", "unused": "a block no call has returned"}.get(spec, f"#{spec}")


def describe_prefix_actions(ops):
    """Part 5's script actions as the calls they stand for, with lengths but never token ids; each
    request or test sequence named by its number ("seq 3")."""
    out, n_seqs = [], 0
    for name, *args in ops:
        if name == "request":
            text = f"seq {n_seqs} = PagedSequence(pool); cached_prefill of a {len(args[0])}-token prompt"
            n_seqs += 1
        elif name == "seq":
            text = f"seq {n_seqs}: the test takes the blocks of {len(args[0])} tokens (pool.alloc) and stores their K/V"
            n_seqs += 1
        elif name == "insert":
            text = f"cache.insert(seq {args[0]}'s tokens, seq {args[0]}'s table)" if len(args) == 1 else \
                f"cache.insert({args[1]} tokens of seq {args[0]}, a table the test made: {_spec(args[2])})"
        elif name == "lookup":
            text = f"cache.lookup of {len(args[0])} tokens"
        elif name == "hold":
            text = f"the test takes {args[0]} block{'s' * (args[0] != 1)} (pool.alloc)"
        elif name in _SAID_PART5:
            text = _SAID_PART5[name].format(*args)
        elif name == "bad_prefill":
            what = {"filled": "a sequence of length 1", "reserved": "a sequence with a block and length 0",
                    "other_pool": "a sequence on another pool"}.get(args[0], args[0])
            text = f"cached_prefill on {what} ({len(args[1])} tokens)"
        else:
            text = describe_action([name, *args])
        out.append(text)
    return out


_SAID_PART5 = {   # Part 5's actions said from a template ("release" there means a sequence's blocks)
    "evict": "cache.evict({0})",
    "release": "the test gives back seq {0}'s blocks (pool.decref each) and empties it",
    "overwrite": "the test overwrites the K/V of the block that was seq {0}'s block {1}",
    "hold_until": "the test takes blocks until n_free is {0}",
    "unhold": "the test gives back the blocks it took",
}


def _spec(entries):
    words = {"freed": "a free block", "past": "id n_blocks", "neg": "id -1"}
    return "[" + ", ".join(f"seq {e[0]}'s block {e[1]}" if isinstance(e, list) else words.get(e, f"its block {e}")
                           for e in entries) + "]"


def mismatch(what, expected, got):
    return f"{what}: expected {expected}, got {got}"
