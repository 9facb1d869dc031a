"""Failure messages that read like a good TA: what was checked, expected vs got, and a picture.

Used by the public tests and by the hidden grader. It formats only plain data (ints, lists, float64
arrays) that a scenario returned, never live objects of an implementation.

The public tests run on your own inputs in your own process, so they show every value in full. The
hidden grader's feedback must not be a channel out of its sandbox (its inputs are secret), so inside
`hidden_feedback(ranges)` every value of the submission's answer is rendered by `their` (or
`their_list`, or a drawing of `theirs=True`): checked against its field's range first (an id outside
the pool is named, not printed; floats get 4 significant digits in a bounded range; strings are
never shown) and marked, so that grader/feedback.py can show a bounded number of them per message
and per part, or none (the staff's feedback level). Values of the reference go through `ours`, so
that the "what differed" level can leave them out too.
"""
import contextlib
import contextvars
import math
import re
from dataclasses import dataclass

import numpy as np


# ------------------------------------------------------------- what the hidden feedback may echo
# Marks that grader/feedback.py resolves: VALUE + 3-digit bits + text + END (one value of the
# submission), TRUSTED + text + END (one of the reference), GROUP + kind + 3-digit bits + content +
# END (a list "L", a drawn table's row "R", a whole drawing "D": shown whole or not at all, its own
# bits being what its shape can tell: how many items or rows it shows).
VALUE, TRUSTED, GROUP, END = "\x1e", "\x1c", "\x1a", "\x1f"
CELLS = 4           # blocks of the submission's table drawn in hidden feedback; the rest are counted
SEQS = 6            # sequences of the submission drawn in hidden feedback; the rest are counted
LISTED = 6          # items of the submission's list shown in hidden feedback; the rest are counted


@dataclass(frozen=True)
class Ranges:
    """What a value of the submission's answer may be, for one hidden case (trusted numbers only):
    block ids in [0, n_blocks), lengths in [0, max_len], counts of blocks or references (refcounts,
    n_used, n_copies...) in [-refs, refs], any other number in [-most, most]."""
    n_blocks: int
    max_len: int
    refs: int
    most: int


_RANGES = contextvars.ContextVar("hidden_feedback_ranges", default=None)   # None: the public tests


@contextlib.contextmanager
def hidden_feedback(ranges):
    """Render for the hidden grader: the submission's values validated against `ranges` and marked."""
    token = _RANGES.set(ranges)
    try:
        yield
    finally:
        _RANGES.reset(token)


def _hidden():
    return _RANGES.get() is not None


def their(value, field="number", public=None, choices=None):
    """One value of the submission's answer, as feedback may show it. field: "id", "length", "count"
    (of blocks or references: refcounts, n_used...), "number" (any other integer), "float", "share"
    (a fraction in [0, 1]), "index" (where in an array it differs; `choices`: the array's size),
    "shape", "word" (a string, quoted), "kind" (an error's kind) or "name" (Part 5's names of
    blocks). In the public tests: the value itself (`public`: its format spec). In hidden feedback:
    checked against the field's range, and marked with the bits the field can carry (how many
    different texts it can show, whatever the value's type), which grader/feedback.py counts."""
    ranges = _RANGES.get()
    if ranges is None:
        if isinstance(value, str) and field == "word":
            return repr(value)
        return format(value, public) if public and isinstance(value, (int, float)) else str(value)
    return _mark(VALUE, _renderings(field, ranges, choices), _checked(value, field, ranges, choices))


def _mark(kind, renderings, text, group=""):
    bits = 0 if renderings <= 1 else min(999, math.ceil(math.log2(renderings)))
    return f"{kind}{group}{bits:03d}{text}{END}"


def ours(value, public=None, chosen=False):
    """A value of the reference or of the test (trusted). Marked in hidden feedback so that the "what
    differed" level leaves it out; chosen=True for a float the submission's answer picked (the
    expected logit where it first differs): then counted like the submission's values."""
    text = format(value, public) if public and isinstance(value, (int, float)) else str(value)
    if not _hidden():
        return text
    if isinstance(value, float):
        text = _float(value)
        if chosen:
            return _mark(VALUE, FLOATS, text)
    return TRUSTED + text + END


def their_list(values, field="number", item=None):
    """The submission's list, each item by item(v) (default: their(v, field)); in hidden feedback its
    first LISTED items and how many more, shown whole or not at all."""
    if not isinstance(values, list) or not (_hidden() or item):
        return their(values, field)
    item = item or (lambda v: their(v, field))
    if not _hidden():
        return "[" + ", ".join(item(v) for v in values) + "]"
    more = f", +{their(len(values) - LISTED)} more" if len(values) > LISTED else ""
    return _mark(GROUP, LISTED + 2, "[" + ", ".join(item(v) for v in values[:LISTED]) + more + "]", "L")


def their_group(text, renderings):
    """Text made of the submission's values whose shape (how many, which are named) can take
    `renderings` forms: shown whole or not at all in hidden feedback, its shape counted."""
    return _mark(GROUP, renderings, text, "L") if _hidden() else text


def their_tables(tables):
    """The submission's block tables (a list of lists of ids), as their_list shows lists."""
    return their_list(tables, item=lambda t: their_list(t, "id"))


FLOATS = 2 * 9000 * 22 + 6      # texts of a float: 4 significant digits, exponents -12..9, sign; 0; 5 names
SHAPES = 1 << 72                # texts of a shape: up to 6 dimensions below 4096
MESSAGE_CHARS = 36              # of an exception's message, hidden feedback shows the first line's first 36
PRINTABLE = 95                  # characters, printable ASCII (any other shown as "?"); a longer line ends in "..."


def _renderings(field, ranges, choices):
    """How many different texts `their` can show for this field, whatever the submission returns."""
    common = 3 + 1 + len(SAFE_WORDS) + 1     # True/False/None, "another value", the words, "another string"
    ints = {"id": 2 * (ranges.n_blocks + 1), "length": ranges.max_len + 2, "count": 2 * ranges.refs + 2,
            "number": 2 * ranges.most + 2}     # (ids: also "id N", the judges' name of an id outside an order)
    if field in ints:
        return ints[field] + 1 + common          # + "not an integer" for a float
    return common + {"float": FLOATS, "share": 1002, "name": 10 ** 6 + 2 + ranges.n_blocks + 1,
                     "index": (choices or SHAPES) + 1, "shape": SHAPES + 1,
                     "message": 2 * PRINTABLE ** MESSAGE_CHARS}.get(field, 0)


def _checked(value, field, ranges, choices=None):
    """The text a value of the submission may be shown as in its field (see _renderings)."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return str(bool(value)) if value is not None else "None"
    if field == "message":
        return _message(value)
    if isinstance(value, str):
        named = re.fullmatch(r"id (-?\d{1,30})", value)     # the judges' name of an id outside an order or table
        if named and field in ("id", "name"):
            return "id " + _checked(int(named.group(1)), "id", ranges)
        if field == "name" and (value in ("held", "not an integer") or re.fullmatch(r"\d{1,3}\.\d{1,3}", value)):
            return value            # rules.part5_view's name of a block: "3.1" = block 1 of seq 3
        return "another string" if value not in SAFE_WORDS else repr(value) if field == "word" else value
    if field in ("id", "length", "count", "number"):
        if not isinstance(value, (int, np.integer)):
            return "not an integer" if isinstance(value, (float, np.floating)) else "another value"
        value, (lo, hi, outside) = int(value), {
            "id": (0, ranges.n_blocks - 1, "an id outside the pool"),
            "length": (0, ranges.max_len, "a length outside [0, max_len]"),
            "count": (-ranges.refs, ranges.refs, "a count far outside its range"),
            "number": (-ranges.most, ranges.most, "a number far outside its range")}[field]
        return str(value) if lo <= value <= hi else outside
    if field in ("float", "share") and isinstance(value, (int, float, np.integer, np.floating)):
        if field == "share":
            return f"{value:.1%}" if 0 <= value <= 1 else "a share outside [0, 1]"
        return _float(float(value))
    if field == "index" and type(value) is int and 0 <= value <= (choices or 0):
        return str(value)           # how many entries of an array differ (of `choices`)
    if field in ("index", "shape") and isinstance(value, (list, tuple)) and len(value) <= 6 \
            and all(type(i) is int and 0 <= i < 4096 for i in value):
        return str(value)           # where an array first differs, or an array's shape: a few small numbers
    return "another value"


def _message(value):
    """An exception's message as hidden feedback may show it: its first line's first MESSAGE_CHARS
    characters, printable ASCII only (others "?"), "..." when cut; "" for anything but a string."""
    if not isinstance(value, str):
        return ""
    line = value.strip().split("\n")[0].strip()
    shown = "".join(c if " " <= c <= "~" else "?" for c in line[:MESSAGE_CHARS])
    return shown + ("..." if len(line) > MESSAGE_CHARS else "")


def raised(error):
    """What a call raised, as feedback says it: the error's kind, then the first line of its message
    (the submission's words: in hidden feedback bounded and counted like any of its values)."""
    if not isinstance(error, dict) or error.get("kind") not in SAFE_WORDS:
        return "an error"
    kind = their(error.get("kind"), "kind")
    message = error.get("message")
    if not (isinstance(message, str) and message.strip()):
        return kind
    return f"{kind}: {their(message, 'message') if _hidden() else message.strip().splitlines()[0]}"


def outcome(error):
    """An error as scenarios.attempt records it, or None, as feedback says it: "no error", or raised()."""
    return "no error" if error is None else raised(error)


def _float(x):
    """4 significant digits, magnitudes from 1e-12 to 1e9; anything else named."""
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"
    if x != 0 and not 1e-12 <= abs(x) <= 1e9:
        return "a huge number" if abs(x) > 1e9 else "a number below 1e-12 in size"
    return f"{x:.4g}"


# Strings from the submission's side are shown only when they are words the scenarios themselves
# produce: any other string could carry hidden inputs out through the feedback.
SAFE_WORDS = {"float64", "float32", "float16", "int64", "int32", "object", "MemoryError", "ValueError",
              "IndexError", "KeyError", "TypeError", "AttributeError", "Exception", "NotImplementedError"}
SAFE_WORDS |= {"not an integer", "an id outside the pool", "an implausibly large number",
               "a block in use (the test holds a reference on it)"}        # rules.pool_view's names
SAFE_WORDS |= {f"{prefix}{w}" for prefix in ("not an integer: ", "error: ") for w in
               ("float", "float64", "float32", "str", "NoneType", "bool", "bool_", "list", "tuple", "ndarray",
                "MemoryError", "ValueError", "IndexError", "KeyError", "TypeError", "AttributeError", "Exception")}


def range_note():
    """What hidden feedback says once when it held values back (grader/feedback.py adds it)."""
    return ("(some values of your answer are not shown: hidden feedback shows a few per message and per part; "
            "see assignment.md, \"Grading\")")


# ---------------------------------------------------------------------------------- drawing tables
def draw_block_table(table, length, block_size, refcounts=None, theirs=False):
    """One sequence's block table: each physical block with its fill and, if known, its refcount.

        length 9, block size 4:  [ 0 ####  rc1 ][ 2 ####  rc2 ][ 4 #...  rc1 ]

    theirs=True: the submission's table; hidden feedback draws its first CELLS blocks, validated,
    and the fill only from a length it shows."""
    hidden = _hidden()
    show = their if theirs else (lambda v, field="number": ours(v))
    ok_length = isinstance(length, int) and not (hidden and theirs and not 0 <= length <= _RANGES.get().max_len)
    cells = []
    for i, b in enumerate(table):
        if hidden and theirs and i == CELLS:
            cells.append(f" (+{their(len(table) - CELLS)} more)")
            break
        filled = max(0, min(block_size, length - i * block_size)) if ok_length else 0
        fill = "#" * filled + "." * (block_size - filled) if block_size <= 16 else f"{filled}/{block_size}"
        fill = fill if ok_length or not (hidden and theirs) else "?" * min(block_size, 16)
        rc = ""
        if refcounts is not None and isinstance(b, int) and 0 <= b < (_RANGES.get().n_blocks if hidden and theirs
                                                                       else len(refcounts)):
            rc = f"  rc{show(refcounts[b] if b < len(refcounts) else None, 'count')}"
        cells.append(f"[ {show(b, 'id')} {fill}{rc} ]")
    row = f"length {show(length, 'length')}, block size {block_size}:  " + ("".join(cells) or "(no blocks)")
    return _mark(GROUP, CELLS + 2, row, "R") if hidden and theirs else row


def draw_tables(title, tables, lengths, block_size, refcounts=None, theirs=False):
    """Every sequence's table, one line each (theirs=True: the submission's, see draw_block_table).
    In hidden feedback a drawing is marked as one, which the "what differed" level leaves out."""
    hidden = _hidden()
    lines = [f"  {title}:"]
    for i, (t, n) in enumerate(zip(tables, lengths)):
        if hidden and theirs and i == SEQS:
            lines.append(f"    (+{their(min(len(tables), len(lengths)) - SEQS)} more sequences)")
            break
        lines.append(f"    seq {i}  " + draw_block_table(t, n, block_size, refcounts, theirs))
    text = "\n".join(lines)
    return _mark(GROUP, SEQS + 2 if theirs else 1, text, "D") if hidden else text


def first_difference(expected, got, tol, twin=False):
    """Where two arrays first differ by more than tol, as one sentence; None if they agree. `got` is
    the submission's side (see `their`); `expected` the reference's, or with twin=True the
    submission's own second run (then shown as the submission's values too)."""
    expected, got = np.asarray(expected, dtype=np.float64), np.asarray(got, dtype=np.float64)
    want = (lambda v, fmt: their(v, "float", fmt)) if twin else (lambda v, fmt: ours(v, fmt, chosen=True))
    if expected.shape != got.shape:
        shape = their(expected.shape, "shape") if twin else ours(expected.shape)
        return f"shape: expected {shape}, got {their(got.shape, 'shape')}"
    if not np.all(np.isfinite(got)):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(got))[0])
        return f"got a non-finite value at index {their(list(idx), 'index', choices=got.size)}"
    err = np.abs(expected - got)
    bad = np.argwhere(err > tol)
    if len(bad) == 0:
        return None
    idx = tuple(int(i) for i in bad[0])
    return (f"first difference at index {their(list(idx), 'index', choices=err.size)}: "
            f"expected {want(float(expected[idx]), '.10g')}, "
            f"got {their(float(got[idx]), 'float', '.10g')} (max |difference| {their(float(err.max()), 'float', '.3g')}"
            f" > {tol:g}; {their(len(bad), 'index', choices=err.size)} of {err.size} entries differ)")


_SAID = {   # how each scenario action is said in feedback; {0}, {1}, ... are its arguments
    "grow": "seq {0} grows by {1} positions (reserve of the ones its last block has room for, the test's own "
            "block at each block boundary), the test storing their K/V and setting length += {1}",
    "share": "the test takes one more reference to seq {0}'s last block (pool.incref)",
    "mirror": "the test makes a new sequence sharing seq {0}'s blocks (as fork would)",
    "prefill": "paged_step on seq {0}, its chunk as cached_prefill gives it (the rest of a prompt)",
    "poke": "the test overwrites position {1} of seq {0} in pool storage",
    "fill": "the test fills every block's storage with random K/V (a used pool)",
    "release": "pool.decref of the test's block #{0}",
    "adopt": "the test gives seq {0} the K/V of {1} positions in blocks it takes, its table in the order {3}",
    "take_rest": "the test takes every block pool.alloc still hands out (until MemoryError)",
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
