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


def describe_op(op):
    """A scenario action as the call it stands for."""
    name, *args = op if isinstance(op, list) else [op]
    return f"{name}({', '.join(str(a) for a in args)})" if args else f"{name}()"


def mismatch(what, expected, got):
    return f"{what}: expected {expected}, got {got}"
