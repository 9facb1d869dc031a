"""What each part owns, checked on the plain data a scenario returns. The public tests and the hidden
grader judge with these same functions, so a mistake costs points once, in its own part:

- Part 1 owns the pool's ids, refcounts and counters. Which free block alloc and copy_block pick
  is judged by `lowest_free_difference` alone (allocator.lowest_free_first); every other check
  compares `pool_view`, where each block is named by the call that handed it out (its handle), so
  an allocator whose only mistake is the order loses that one check and nothing else.
- Part 2 owns logits, lengths, errors and all-or-nothing, and the SHAPE of the block tables. Which
  physical id a block has is Part 1's: `part2_view` names every block by its place in the order a
  fresh pool of the same implementation hands blocks out (scenarios.alloc_order), so any allocator
  gives the same view, while the order in which a step asks for blocks (list order) still shows.
- Part 4 owns sharing: `sharing_violation` replays the contract's rules for fork, free and
  copy-on-write on the tables and refcounts observed before each action, and never looks at n_used,
  peak_used or n_copies (Part 1's counters) or at which ids the allocator picks; `kv_difference`
  compares what sequences read back through their tables.
- The drivers: `sampling_violation` and `beam_violation` judge the sharing the pool shows after
  every step (blocks in use, shared prompt blocks, copies, leaks); the savings they report are
  computed by `savings`.

Every function takes plain data and returns a sentence (what is wrong, where) or None.
"""
import math
import re

import numpy as np

import scenarios as sc
from explain import describe_action, draw_tables, first_difference, outcome, their, their_group, their_list, their_tables

TOL_LOGITS = 1e-10
STATE = ("tables", "lengths", "refcounts", "n_used", "n_free", "peak_used", "n_copies")


def error_kind(error):
    return None if error is None else error["kind"]


# ------------------------------------------------------------------------------------------ Part 1
POOL_COUNTERS = ("n_used", "n_free", "peak_used", "n_copies")
POOL_RECORD = {"op", "block", "result", "error", "refcounts", *POOL_COUNTERS}
ERROR_KINDS = ("MemoryError", "ValueError", "IndexError", "KeyError", "TypeError", "AttributeError", "Exception",
               "NotImplementedError")      # what scenarios.error_kind can say


def pool_view(records, n_blocks):
    """The Part 1 observables of a pool_script result, one row per call, every block named by its
    handle (#k: what the k-th alloc or copy_block that succeeded returned, from #0), so which free
    block the allocator picks, allocator.lowest_free_first's business alone, changes nothing here:

    the error's kind; the result (of an alloc or copy: "#k, a free block", or what is wrong with the
    id it returned: in use, outside the pool, not an integer; of a refcount: the int); for a call
    that raised, the state it changed (none is due); each handle's refcount (0 once its block was
    handed out again, under a newer handle); the refcounts other than 0 of blocks no call returned
    (the contract: none); and the counters. A renaming, never a pardon: an id handed out while the
    test still holds it is named so, and every id of the pool is seen under a handle or among the
    blocks no call returned. Values that are not plausible integers are named, not kept.
    Raises ValueError when the records do not have the scenario's form, or when a call was not
    given the block its script names (scenarios.PoolBook, replayed here on the records)."""
    if not isinstance(records, list):
        raise ValueError("the records are not a list")
    book, view, limit = sc.PoolBook(n_blocks), [], len(records) + n_blocks
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or set(rec) != POOL_RECORD or not isinstance(rec["op"], list) \
                or not rec["op"] or not isinstance(rec["refcounts"], list) or len(rec["refcounts"]) != n_blocks \
                or not (rec["error"] is None or isinstance(rec["error"], dict) and rec["error"].get("kind") in ERROR_KINDS):
            raise ValueError(f"record {i + 1} does not have the scenario's form")
        op = rec["op"]
        block = book.resolve(op[1]) if len(op) > 1 else None
        if (None if block is None else sc.as_int(block)) != rec["block"]:
            raise ValueError(f"call {i + 1} was not given the block its script names")
        row = {"error": error_kind(rec["error"]), "result": _pool_result(op[0], rec, book, limit),
               "raised": rec["error"]}       # (not compared: what pool_difference quotes of a call that raised)
        if rec["error"] is not None and i > 0:
            row["changed"] = [k for k in ("refcounts", *POOL_COUNTERS) if records[i - 1][k] != rec[k]]
        book.note(op[0], rec["block"], rec["result"], rec["error"])
        row["refcounts"] = [_plain(r, limit) for r in book.by_handle(rec["refcounts"])]
        row["unallocated"] = [_plain(r, limit) for r in book.unallocated(rec["refcounts"])]
        row.update({k: _plain(rec[k], limit) for k in POOL_COUNTERS})
        view.append(row)
    return view


def _pool_result(name, rec, book, limit):
    if rec["error"] is not None:
        return None
    if name not in ("alloc", "copy"):
        return _plain(rec["result"], limit)
    b = rec["result"]
    if type(b) is not int:
        return "not an integer"
    if not book.valid(b):
        return "an id outside the pool"
    if book.holds(b):
        return "a block in use (the test holds a reference on it)"
    return f"#{len(book.handles)}, a free block"


def _plain(x, limit):
    """A value the pool reported, as Part 1 compares it: an int within the plausible range, None, the
    scenario's own "error: Kind" words; anything else is named."""
    if x is None or (type(x) is int and -limit <= x <= limit):
        return x
    if type(x) is int:
        return "an implausibly large number"
    if isinstance(x, str) and x.startswith("error: ") and x[7:] in ERROR_KINDS:
        return x
    return "not an integer"


def pool_difference(expected, got):
    """Where two rows of pool_view first differ, as a sentence; None if they agree."""
    for field in ("error", "result", "changed", "refcounts", "unallocated", *POOL_COUNTERS):
        e, g = expected.get(field), got.get(field)
        if e == g:
            continue
        if field == "error":
            return f"expected {e or 'no error'}, got {outcome(got.get('raised')) if g else 'no error'}"
        if field == "result":
            return f"the result: expected {_said(e)}, got {_their_said(g)}"
        if field == "changed":
            return f"a call that raised must change nothing, but it changed {', '.join(g)}"
        if field == "refcounts":
            if len(e) != len(g):
                return f"the script's calls made {their(len(g), 'count')} handles, expected {len(e)}"
            k = next(k for k, (a, b) in enumerate(zip(e, g)) if a != b)
            said = f"the refcount of #{k}'s block: expected {_said(e[k])}, got {_their_said(g[k])}"
            if expected.get("unallocated") != got.get("unallocated"):   # a count read or set on the wrong
                said += "; and " + _unallocated(got["unallocated"])      # block shows on a free one too
            return said
        if field == "unallocated":
            return _unallocated(g)
        return f"{field}: expected {_said(e)}, got {_their_said(g)}"
    return None


def _unallocated(refcounts):
    return (f"blocks no call has returned have refcounts {their_list(refcounts[:8], item=_their_said)}: "
            "a block nobody was handed is free (refcount 0)")


def _said(x):
    return "None" if x is None else str(x)


def _their_said(x):
    """A value of the submission's pool_view row, as feedback may show it (explain.their)."""
    handle = re.fullmatch(r"#(\d+), a free block", x) if isinstance(x, str) else None
    if handle:
        return f"#{their(int(handle.group(1)), 'count')}, a free block"
    return their(x, "count" if type(x) is int else "kind")


def handle_ids(records, n_blocks, most=12):
    """The ids the handles name, as "#0 = 7, #1 = 6, ..." (the first `most`; ids outside the pool
    or not integers are named, not printed), so a student sees their own pool's ids."""
    book = sc.PoolBook(n_blocks)
    for rec in records:
        book.note(rec["op"][0], rec["block"], rec["result"], rec["error"])
    said = [f"#{k} = {their(b, 'id') if book.valid(b) else 'no block'}" for k, b in enumerate(book.handles[:most])]
    text = ", ".join(said) + (", ..." if len(book.handles) > most else "") if said else "no handles yet"
    return their_group(text, (most + 2) << most)          # how many handles, which of them name no block


def lowest_free_difference(expected, got, n_blocks):
    """allocator.lowest_free_first, the one check of which id alloc and copy_block pick: the first call
    whose error, or whose id from an alloc or copy_block, differs from the reference's, as (index,
    sentence); None if all agree. The blocks free before it are the reference's: until then the
    submission handed out the very same ids."""
    for i, (e, g) in enumerate(zip(expected, got)):
        same = error_kind(e["error"]) == error_kind(g["error"])
        if same and (e["error"] is not None or e["op"][0] not in ("alloc", "copy") or e["result"] == g["result"]):
            continue
        before = expected[i - 1]["refcounts"] if i else [0] * n_blocks
        free = [b for b, r in enumerate(before) if r == 0]
        free_said = ", ".join(map(str, free[:10])) + (", ..." if len(free) > 10 else "")
        want = f"block {e['result']}, the lowest free one (free before the call: {free_said})" \
            if e["error"] is None else e["error"]["kind"]
        b = g["result"]
        have = their(g["error"]["kind"], "kind") if g["error"] is not None else f"block {their(b, 'id')}" \
            if type(b) is int and 0 <= b < n_blocks else "an id outside the pool" if type(b) is int else "not an integer"
        return i, f"expected {want}, got {have}"
    return None


# ------------------------------------------------------------------------------------------ Part 2
def canonical(table, order):
    """A table with every block named by its place in the allocator's order (#0 = the first block a
    fresh pool hands out); an id outside that order keeps its id, as the string "id N"."""
    where = {b: i for i, b in enumerate(order)}
    return [where[b] if isinstance(b, int) and b in where else f"id {b}" for b in table]


def part2_view(result, order=None, moved=None, copied=None):
    """The Part 2 observables of a step_script result, one record per action: the result (logits,
    reads), the error's kind, the lengths, the tables by allocation order, the K/V read through the
    tables, and for an action that raised, whether it changed anything at all.

    From the first "share" or "mirror" on (blocks are shared: whether a write copies one is Part 4's
    rule) the tables are not compared; results, lengths and K/V are, until record `copied` (the first
    where the reference's step copied a block: rules.first_copy of its records), from which only
    errors and all-or-nothing are Part 2's: what a copy does is Parts 1 and 4's. From record `moved`
    on (the first where the test gave back a block of its own after the setup, so the allocation
    order no longer names the next blocks: rules.lifetime_from; or first_move of the submission's
    records: a block nobody shared was copied, Part 4's rule broken, which moves the allocation order
    of every later block) the tables are named by lifetime (lifetime_tables): how many distinct blocks
    each sequence holds, which stay, which are new."""
    order = result["order"] if order is None else order
    view, before, shared = [], None, False
    lifetimes = lifetime_tables(result["records"]) if moved is not None else None
    for n, rec in enumerate(result["records"]):
        shared = shared or rec["op"][0] in ("share", "mirror")
        row = {"error": error_kind(rec["error"])}
        if copied is None or n < copied:        # from the reference's first copy on: Parts 1 and 4 decide the rest
            row.update(result=None if rec["op"][0] == "alloc" else rec["result"], lengths=rec["lengths"])
            if not shared:
                row["tables"] = lifetimes[n] if moved is not None and n >= moved else \
                    [canonical(t, order) for t in rec["tables"]]
            if "kv" in rec:
                row["kv"] = rec["kv"]
        before = rec.get("before", before)
        if rec["error"] is not None and before is not None:
            row["unchanged"] = [k for k in STATE if before[k] != rec[k]] == []
        view.append(row)
        before = rec
    return view


SETUP_ACTIONS = ("alloc", "release", "fill")       # scenarios.step_script's setup: before any sequence exists


def lifetime_from(records, moved=None):
    """Where a step_script's tables stop being named by allocation order: the first "release" after the
    setup (the test gave back a block of its own while sequences hold theirs: which block the pool
    hands out next is the allocator's business, Part 1's), or `moved` (first_move), whichever comes
    first; None when neither happens."""
    setup = next((n for n, rec in enumerate(records) if rec["op"][0] not in SETUP_ACTIONS), len(records))
    released = next((n for n, rec in enumerate(records) if n > setup and rec["op"][0] == "release"), None)
    found = [n for n in (moved, released) if n is not None]
    return min(found) if found else None


def first_copy(records):
    """The index of the first record of a step_script (the reference's) where n_copies grew: a step or
    reserve copied a shared block; None when nothing was copied."""
    for n in range(1, len(records)):
        if records[n]["n_copies"] != records[n - 1]["n_copies"]:
            return n
    return None


def first_move(records):
    """The index of the first record where, with nothing shared yet, a table's last block (the one
    holding its last position before the action) was replaced and the rest kept: copy-on-write copied
    a block nobody shares (Part 4's rule: rules.sharing_violation); None when there is none."""
    before = None
    for n, rec in enumerate(records):
        if rec["op"][0] in ("share", "mirror"):
            return None
        if before is not None and rec["error"] is None:
            for old, new in zip(before["tables"], rec["tables"]):
                if old and len(new) >= len(old) and new[:len(old) - 1] == old[:-1] and new[len(old) - 1] != old[-1]:
                    return n
        before = rec
    return None


def lifetime_tables(records):
    """Per record, the tables with every block named by when a table first gained it ("L0" the first):
    a block keeps its name while it stays where it was, and a block that replaced a table's last block
    takes that block's name (a copy-on-write move, Part 4's); any other block is a new name, the same
    for every place that holds it. So the names say how many distinct blocks each sequence holds and
    which stay, whatever ids the pool hands out."""
    out, before, count = [], [], 0
    for rec in records:
        names, row = {}, []
        for s, table in enumerate(rec["tables"]):
            old, old_names = before[s] if s < len(before) else ([], [])
            named = []
            for p, b in enumerate(table):
                if p < len(old) and (b == old[p] or p == len(old) - 1) and b not in names:
                    names[b] = old_names[p]
                elif b not in names:
                    names[b], count = f"L{count}", count + 1
                named.append(names[b])
            row.append(named)
        before = [(t, r) for t, r in zip(rec["tables"], row)]
        out.append(row)
    return out


def short_table(records, block_size):
    """The first record where a sequence's table holds fewer blocks than its length needs (a step
    raised half-way, or grew the length without the blocks), as a sentence; else None."""
    for n, rec in enumerate(records, 1):
        short = short_of(rec, block_size)
        if short:
            return f"after action {n} of {len(records)}, {describe_action(rec['op'])}: {short}"
    return None


def short_of(rec, block_size):
    """In one record, the first sequence whose table holds fewer blocks than its length needs."""
    for s, (table, length) in enumerate(zip(rec["tables"], rec["lengths"])):
        if isinstance(length, int) and len(table) < math.ceil(length / block_size):
            need = math.ceil(length / block_size)
            return (f"seq {their(s, 'count')} has length {their(length, 'length')} but {their(len(table), 'count')} "
                    f"block{'s' * (len(table) != 1)} of {block_size}: its table must hold "
                    f"ceil({their(length, 'length')} / {block_size}) = {their(need, 'count')}")
    return None


# ------------------------------------------------------------------------------------------ Part 4
NORMAL_COPY = {"source_delta": 0, "copy_refcount": 1, "copies_data": True}    # scenarios.copy_probe of a correct pool


class _Fail(Exception):
    pass


def sharing_violation(records, block_size):
    """The first action whose effect on the tables and refcounts breaks Part 4's rules, or None.

    fork shares the whole table (same ids, same length; each block's refcount + 1); free empties the
    table (each refcount - 1); reserve, grow and step keep every block of a table but the last, and
    replace the last only by copy-on-write: a partly filled last block that w of the writing
    sequences hold, with refcount r > 1, is copied as many times as writing sequences find it still
    shared (r - 1 copies for r holders, when copy_block leaves the source's refcount alone), each copy
    a block nobody held; new blocks are blocks nobody held, each with refcount 1; nothing else changes."""
    before = {"tables": [], "lengths": [], "refcounts": None}
    for n, rec in enumerate(records, 1):
        if rec["error"] is None:
            try:
                _check_action(rec["op"], before, rec, block_size)
            except _Fail as e:
                lines = [f"after action {n} of {len(records)}, {describe_action(rec['op'])}: {e}"]
                if before["refcounts"] is not None:
                    lines.append(draw_tables("before", before["tables"], before["lengths"], block_size,
                                             before["refcounts"], theirs=True))
                lines.append(draw_tables("after", rec["tables"], rec["lengths"], block_size, rec["refcounts"],
                                         theirs=True))
                return "\n".join(lines)
        before = rec
    return None


def copies_made(records, block_size):
    """How many copy-on-write copies each action made, seen in the tables: a table whose last block
    (the one holding its last position before the action) was replaced."""
    out, before = [], {"tables": [], "lengths": []}
    for rec in records:
        op, made = rec["op"], 0
        if op[0] in ("step", "grow", "reserve") and rec["error"] is None:
            for i in (op[1] if op[0] == "step" else [op[1]]):
                old = before["tables"][i]
                if old and len(rec["tables"][i]) >= len(old) and rec["tables"][i][len(old) - 1] != old[-1]:
                    made += 1
        out.append(made)
        before = rec
    return out


def _check_action(op, before, after, B):
    name = op[0]
    t0, t1, rc1 = before["tables"], after["tables"], free_as_zero(after["refcounts"])
    rc0 = free_as_zero(before["refcounts"]) if before["refcounts"] is not None else [0] * len(rc1)
    if any(not isinstance(r, int) for r in rc1):
        raise _Fail(f"refcount() did not return an integer for every block (got {their(_first_bad(rc1))})")
    expected = list(rc0)
    held_before = {b for t in t0 for b in t}
    if name == "new":
        _same_tables(t0, t1[:-1], range(len(t0)))
        if t1[-1] != [] or after["lengths"][-1] != 0:
            raise _Fail(f"a new sequence must have no blocks and length 0, it has {their_list(t1[-1], 'id')}, length "
                        f"{their(after['lengths'][-1], 'length')}")
    elif name == "fork":
        i = op[1]
        _same_tables(t0, t1[:-1], range(len(t0)))
        if t1[-1] != t0[i] or after["lengths"][-1] != before["lengths"][i]:
            raise _Fail(f"the fork must share seq {i}'s whole table {their_list(t0[i], 'id')} with its length "
                        f"{their(before['lengths'][i], 'length')}; it has {their_list(t1[-1], 'id')}, length "
                        f"{their(after['lengths'][-1], 'length')}")
        for b in t0[i]:
            expected[b] += 1
    elif name == "free":
        i = op[1]
        _same_tables(t0, t1, [j for j in range(len(t0)) if j != i])
        if t1[i] != [] or after["lengths"][i] != 0:
            raise _Fail(f"after free() seq {i} must have no blocks and length 0, it has {their_list(t1[i], 'id')}, "
                        f"length {their(after['lengths'][i], 'length')}")
        for b in t0[i]:
            expected[b] -= 1
    elif name in ("step", "grow", "reserve"):
        idx = op[1] if name == "step" else [op[1]]
        _same_tables(t0, t1, [j for j in range(len(t0)) if j not in idx])
        _advance(idx, before, after, B, expected, held_before)
    if rc1 != expected:
        b = next(b for b, (e, g) in enumerate(zip(expected, rc1)) if e != g)
        holders = sum(t.count(b) for t in t1)
        raise _Fail(f"block {their(b, 'id')} should have refcount {their(expected[b], 'count')} (it was "
                    f"{their(rc0[b], 'count')}; "
                    f"{their(holders, 'count')} table{'s' * (holders != 1)} hold{'s' * (holders == 1)} it now), got "
                    f"{their(rc1[b], 'count')}")


def _advance(idx, before, after, B, expected, held_before):
    """Writers of one step (or one reserve): the copies due, the kept prefixes, the new blocks."""
    t0, t1, rc0 = before["tables"], after["tables"], expected[:]
    writers = {}
    for i in idx:
        if t0[i] and before["lengths"][i] % B:
            writers.setdefault(t0[i][-1], []).append(i)
    due = {}
    for b, who in writers.items():              # each writer in turn finds the block still shared, or not
        rc, n = rc0[b], 0
        for _ in who:
            if rc > 1:
                n += 1
                rc -= 1
        due[b] = n
    fresh = set()
    for i in idx:
        old, new = t0[i], t1[i]
        if new[:max(0, len(old) - 1)] != old[:-1]:
            raise _Fail(f"seq {i}'s table was {their_list(old, 'id')}; every block but the last must stay, it is "
                        f"{their_list(new, 'id')}")
        if len(new) < len(old):
            raise _Fail(f"seq {i}'s table lost blocks: {their_list(old, 'id')} became {their_list(new, 'id')}")
        added = new[len(old):]
        if old and new[len(old) - 1] != old[-1]:
            b = old[-1]
            if not writers.get(b) or i not in writers[b]:
                why = "it is full" if before["lengths"][i] % B == 0 else "nobody else holds it"
                raise _Fail(f"seq {i}'s last block {their(b, 'id')} was replaced by {their(new[len(old) - 1], 'id')}, "
                            f"but {why}: copy-on-write "
                            "copies only a partly filled last block that is shared (refcount > 1)")
            due[b] -= 1
            expected[b] -= 1
            added = [new[len(old) - 1], *added]
            if due[b] < 0:
                raise _Fail(f"block {their(b, 'id')} (refcount {their(rc0[b], 'count')}, written by "
                            f"{their(len(writers[b]), 'count')} of "
                            f"its holders) was copied "
                            f"too often: with r holders, r - 1 copies; the last holder writes in place")
        for b in added:
            if b in held_before or b in fresh or not isinstance(b, int) or not 0 <= b < len(expected) or rc0[b] != 0:
                raise _Fail(f"seq {i} got block {their(b, 'id')}, which was not free (a new block or a copy must be "
                            "a block "
                            "nobody held)")
            fresh.add(b)
            expected[b] = 1
    late = {b: n for b, n in due.items() if n > 0}
    if late:
        b = next(iter(late))
        due_now = late[b] + sum(1 for i in writers[b] if t1[i][len(t0[i]) - 1] != b)
        raise _Fail(f"block {their(b, 'id')} is partly filled and shared (refcount {their(rc0[b], 'count')}) and "
                    f"{their(len(writers[b]), 'count')} of its holders wrote into it, so {their(due_now, 'count')} "
                    f"cop{'y was' if late[b] == 1 else 'ies were'} due; {their(late[b], 'count')} did not happen "
                    "(copy-on-write in "
                    "reserve: copy a partly filled last block whose refcount is > 1)")


def copy_note(probe):
    """What a failing copy-on-write check adds when pool.copy_block (Part 1's, which copy-on-write
    relies on) did not do what the contract says on a pool of its own (scenarios.copy_probe); "" else."""
    if not isinstance(probe, dict) or probe == NORMAL_COPY:
        return ""
    if set(probe) != set(NORMAL_COPY) or type(probe["source_delta"]) is not int \
            or type(probe["copy_refcount"]) is not int or type(probe["copies_data"]) is not bool:
        return "Note: pool.copy_block failed on a pool of its own (Part 1): copy-on-write relies on it: fix Part 1 first."
    wrong = []
    if probe["source_delta"]:
        wrong.append(f"changes the source's refcount by {their(probe['source_delta'], 'count', '+d')} (it must "
                     "leave it "
                     "alone)")
    if probe["copy_refcount"] != 1:
        wrong.append(f"gives the copy refcount {their(probe['copy_refcount'], 'count')} (must be 1)")
    if not probe["copies_data"]:
        wrong.append("does not copy the source's K and V in every layer")
    return f"Note: your pool.copy_block {' and '.join(wrong)}; copy-on-write relies on it: fix Part 1 first."


def refcount_note(probe):
    """What a failing Part 4 check adds when pool.incref, decref or refcount (Part 1's, through which
    fork, free and the rules are judged) did not do what the contract says on a pool of its own
    (scenarios.refcount_probe); "" when they did."""
    if probe is None:
        return ""
    if not isinstance(probe, dict) or probe.get("call") not in sc.REFCOUNT_CALLS or \
            set(probe) not in ({"call", "error"}, {"call", "wrong"}, {"call", "bad_id"}):
        return "Note: pool.incref, decref or refcount failed on a pool of its own (Part 1): fix Part 1 first."
    what = sc.refcount_said(probe, lambda kind: their(kind, "kind")) + \
        ("" if "bad_id" in probe else " on a block alloc handed out")
    return (f"Note: on a pool of its own, your pool.{probe['call']} {what} (Part 1): "
            "fork, free and copy-on-write are judged through incref, decref and refcount: fix Part 1 first.")


def free_as_zero(refcounts):
    """Refcounts as Part 4 reads them: a refcount() that raises ValueError for a block counts it as
    free (0); whether refcount() of a free block answers 0 is Part 1's business."""
    return [0 if r == "error: ValueError" else r for r in refcounts]


def _same_tables(t0, t1, which):
    for j in which:
        if t1[j] != t0[j]:
            raise _Fail(f"seq {their(j, 'count')} was not part of this action, but its table changed from "
                        f"{their_list(t0[j], 'id')} to {their_list(t1[j], 'id')}")


def _first_bad(values):
    return next(v for v in values if not isinstance(v, int))


def kv_difference(expected, got, twin=False):
    """Where two sequences' K/V (scenarios.gathered_kv) first differ, as a sentence; None if they agree.
    twin=True: `expected` is the same implementation's run without sharing (shown as its values)."""
    if "short" in got or "short" in expected:
        return "its table holds too few blocks for its length" if "short" in got else "it has K/V where none was due"
    for name in "kv":
        e, g = expected[name], got[name]
        if e.shape != g.shape:
            want = their(e.shape, "shape") if twin else e.shape
            return f"{name.upper()} has shape {their(g.shape, 'shape')}, expected {want} ([n_layers, length, H, Dh])"
        why = first_difference(e, g, TOL_LOGITS, twin=twin)
        if why:
            return f"{name.upper()} (index [layer, position, head, d]): {why}"
    return None


# ------------------------------------------------------------------------------------ the drivers
def savings(steps):
    """Blocks saved by sharing over the run: 1 - (blocks in use) / (blocks each live sequence would
    hold alone), summed over the steps, as the lecture's demos 3 and 4 print it."""
    used = sum(s["in_use"] for s in steps)
    alone = sum(len(t) for s in steps for t in s["tables"])
    return 1 - used / alone if alone else 0.0


def pool_view_violation(steps, in_use_after):
    """After every step the blocks in use are exactly the blocks the live tables hold (nothing leaked,
    nothing held twice as much), and after the driver freed everything, no block is in use."""
    for t, s in enumerate(steps):
        distinct = len({b for table in s["tables"] for b in table})
        if s["in_use"] != distinct:
            return (f"after step {their(t, 'count')}, {their(s['in_use'], 'count')} blocks have refcount > 0, but the "
                    "live sequences' "
                    f"tables hold {their(distinct, 'count')} distinct blocks: "
                    f"{'a block leaked' if s['in_use'] > distinct else 'a held block is free'}")
    if in_use_after != 0:
        return f"after every sequence was freed, {their(in_use_after, 'count')} blocks still have refcount > 0 (a leak)"
    return None


def sampling_violation(steps, prompt_len, n, block_size):
    """Parallel sampling: the prompt's full blocks are shared by all n samples at every step, nothing
    else is shared, and the partly filled prompt block is copied by n - 1 samples (none if the prompt
    fills whole blocks)."""
    full = prompt_len // block_size
    for t, s in enumerate(steps):
        tables = s["tables"]
        if len({tuple(table[:full]) for table in tables}) != 1 or any(len(table) < full for table in tables):
            return (f"after step {their(t, 'count')}, the {full} full blocks of the prompt are not shared by all {n} "
                    "samples: "
                    f"{their_tables(tables)}")
        rest = [b for table in tables for b in table[full:]]
        if t > 0 and len(rest) != len(set(rest)):
            return (f"after step {their(t, 'count')}, samples share blocks past the prompt's full blocks: "
                    f"{their_tables(tables)}")
    if len(steps) > 1 and prompt_len % block_size:
        first, second = steps[0]["tables"], steps[1]["tables"]
        copies = sum(1 for a, b in zip(first, second) if len(a) > full and len(b) > full and a[full] != b[full])
        if copies != n - 1:
            return (f"the prompt's last block (partly filled: {prompt_len} % {block_size} = {prompt_len % block_size}) was "
                    f"copied {their(copies, 'count')} times at the first step; {n} samples sharing it need {n - 1} "
                    "copies")
    return None


# ------------------------------------------------------------------------------------ Part 5 (bonus)
def part5_view(result, block_size):
    """The Part 5 observables of a prefix_script result, one record per action: the error's kind; the
    result with every block named by what it was made for ("3.1" = logical block 1 of sequence 3, the
    request or test sequence whose table it entered new), so which ids the allocator picks (Part 1)
    and where a step put its blocks (Part 2) change nothing; the names of the blocks the cache holds
    (a block's refcount minus the tables and the test holding it: the cache's own reference);
    n_cached, n_hit_tokens; and for an action that raised, whether it changed anything.
    A request's result: the names of the blocks its lookup returned and how many of the prompt's tokens
    it computed (its length minus the hit blocks its table shares: what the cache decided, not the
    shape of the logits paged_step returned). Raises ValueError when the records do not have the scenario's form."""
    reader = Part5Reader(block_size)
    return [reader.row(rec) for rec in result["records"]]


class Part5Reader:
    """part5_view one record at a time, in order (Part 5's public bench reads each call's record as it
    comes): a block's name is given when it enters a table new, so the names carry over."""

    def __init__(self, block_size):
        self.block_size, self.names, self.before = block_size, {}, None

    def row(self, rec):
        """The next record's row of part5_view."""
        names, before, block_size = self.names, self.before, self.block_size
        op, error = rec["op"], rec["error"]
        tables, held = rec["tables"], rec["held"]
        if error is None:
            _name_new_blocks(names, op, rec, before, block_size)
        for b in held:
            names.setdefault(b, "held")
        row = {"error": error_kind(error), "result": _named_result(op, rec, names, error, block_size),
               "n_cached": rec["n_cached"], "n_hit_tokens": rec["n_hit_tokens"]}
        refs = cache_references(tables, held, rec["refcounts"])
        row["cached"] = sorted(names.get(b, f"id {b}") for b, r in enumerate(refs) if r == 1)
        row["bad_references"] = [[b, r] for b, r in enumerate(refs) if r not in (0, 1)]
        if error is not None and before is not None:
            old = before["tables"] + [[]] * (len(tables) - len(before["tables"]))
            row["unchanged"] = (old == tables and before["refcounts"] == rec["refcounts"]
                                and before["n_cached"] == rec["n_cached"]
                                and before["n_hit_tokens"] == rec["n_hit_tokens"])
        self.before = rec
        return row


def cache_references(tables, held, refcounts):
    """Per block: its refcount minus its holders (the tables and the test): the references the cache
    holds, which the contract says are 1 for a cached block and 0 for any other."""
    holders = [0] * len(refcounts)
    for b in [b for t in tables for b in t] + list(held):
        if not (isinstance(b, int) and 0 <= b < len(refcounts)):
            raise ValueError(f"block id {b} outside the pool")
        holders[b] += 1
    rc = free_as_zero(refcounts)
    if any(not isinstance(r, int) for r in rc):
        raise ValueError("a refcount that is not an integer")
    return [r - h for r, h in zip(rc, holders)]


def request_hits(rec, block_size):
    """How many blocks a request took from the cache (scenarios.shared_hits): what the cache decided,
    not how many rows of logits the step returned (Part 2's). None when the record does not have a
    request's form."""
    result, tables = rec.get("result"), rec.get("tables")
    if not isinstance(result, dict) or not isinstance(result.get("hits"), list) or not isinstance(tables, list) \
            or not tables or not isinstance(tables[-1], list):
        return None
    return sc.shared_hits(tables[-1], result["hits"], len(rec["op"][1]), result.get("rows"), block_size)


def _name_new_blocks(names, op, rec, before, block_size):
    """Blocks that entered a table new in this action get the name of their place in it."""
    s = len(rec["tables"]) - 1
    if op[0] == "seq":
        new = list(enumerate(rec["tables"][s]))
    elif op[0] == "request":
        h = request_hits(rec, block_size) or 0
        new = list(enumerate(rec["tables"][s]))[h:]
    else:
        new = []
    for i, b in new:
        names[b] = f"{s}.{i}"
    if before is not None:
        for b in set(rec["held"]) - set(before["held"]):
            names[b] = "held"


def _named_result(op, rec, names, error, block_size):
    result = rec["result"]
    if error is not None:
        return None
    if op[0] == "request":
        if not isinstance(result, dict) or not isinstance(result.get("hits"), list):
            raise ValueError("a request's result has the wrong form")
        return {"hits": [names.get(b, f"id {b}") for b in result["hits"]],
                "computed": len(op[1]) - request_hits(rec, block_size) * block_size}
    if op[0] == "bad_prefill":
        return None
    if op[0] == "lookup":
        if not isinstance(result, list):
            raise ValueError("a lookup's result has the wrong form")
        return [names.get(b, f"id {b}") if type(b) is int else "not an integer" for b in result]
    if op[0] in ("evict", "insert"):
        return result if type(result) is int else "not an integer"
    return None


def twin_requests(expected, got, block_size):
    """[(n, h)]: the requests of a prefix script that get a twin, those that succeeded in the
    submission's run (got), with the h hit blocks its table shares (request_hits), the plan's actions
    (expected: the reference's run of the same script)."""
    out = []
    for n, (e, g) in enumerate(zip(expected["records"], got["records"])):
        if e["op"][0] == "request" and isinstance(g, dict) and g.get("error") is None:
            h = request_hits(g, block_size)
            if h is not None:
                out.append((n, h))
    return out


def twin_pokes(result, n, h, block_size):
    """The test's overwrites (a seed or None) of the first h hit blocks of request n, read from the
    records of the run (the blocks each overwrite action targeted, the tables when they were made; a
    block handed out anew since holds none): where the test wrote in this run, so that a copy a step
    made (Part 4's) moves the overwrite with it. Raises ValueError on records of the wrong form."""
    made, poked, held = {}, {}, set()
    for rec in result["records"][:n]:
        op, tables = rec["op"], rec["tables"]
        new = []
        if rec["error"] is None and op[0] in ("request", "seq"):
            s = len(tables) - 1
            made[s] = list(tables[s])
            new = made[s][(request_hits(rec, block_size) or 0) if op[0] == "request" else 0:]
        new += [b for b in rec["held"] if b not in held]
        held = set(rec["held"])
        for b in new:
            poked.pop(b, None)
        if rec["error"] is None and op[0] == "overwrite" and op[1] in made and 0 <= op[2] < len(made[op[1]]):
            poked[made[op[1]][op[2]]] = op[3]
    hits = result["records"][n]["result"]["hits"]
    return [poked.get(b) for b in hits[:h]]


def twin_chain(plan, tokens, h, block_size):
    """The chain of a request's twin (scenarios.prefix_twin): the reference's (plan: its twins entry,
    the test's own run) when the submission shared as many hit blocks, else the h hit blocks' tokens
    as one chunk, then the rest."""
    if isinstance(plan, dict) and plan.get("h") == h and plan.get("chain"):
        return plan["chain"]
    return [[list(tokens), 0]] if not h else [[list(tokens[:h * block_size]), 0], [list(tokens), h]]


def twin_difference(rec, twin):
    """A request's logits (its record) vs its twin's (rules.step_twin: the same prompt without the
    cache, by the same implementation, in a call of its own): a sentence, or None when they agree."""
    if twin is None:
        return "the prefill without the cache gave an answer of the wrong form, so nothing can be compared"
    if twin["error"] is not None:
        return f"without the cache, your paged_step raised {_twin_kind(twin['error'])} on the same prompt (fix Part 2 first)"
    got = rec["result"].get("logits") if isinstance(rec["result"], dict) else None
    if not isinstance(twin["result"], np.ndarray) or not isinstance(got, np.ndarray):
        return "the logits have the wrong form (float arrays expected)"
    return first_difference(twin["result"], got, TOL_LOGITS, twin=True)


def _twin_kind(error):
    kind = error.get("kind") if isinstance(error, dict) else None
    return kind if kind in ("MemoryError", "ValueError", "IndexError", "KeyError", "TypeError", "AttributeError",
                            "NotImplementedError") else "an exception"


def _step_records(reply, n=None):
    """A step_script answer's records (n of them, when n is given), or None when it does not have that
    form (it came from the submission's process: nothing in it is trusted but its form is checked)."""
    records = reply.get("records") if isinstance(reply, dict) else None
    if not isinstance(records, list) or not records or (n is not None and len(records) != n) or \
            not all(isinstance(r, dict) and {"result", "error"} <= set(r) for r in records):
        return None
    return records


def step_twin(reply):
    """A request's twin from the answer of its scenarios.prefix_twin call: {"result": the last step's
    logits, "error": the first error of the call}, or None when the answer has the wrong form."""
    records = _step_records(reply)
    if records is None:
        return None
    error = next((r["error"] for r in records if r["error"] is not None), None)
    out = records[-1]["result"]
    if error is None and not (isinstance(out, list) and len(out) == 1):
        return None
    return {"result": None if error is not None else out[0], "error": error}


def append_violation(reply, block_size=None):
    """What a twin without sharing (the answer of a scenarios.sharing_twin call) shows of a step that
    does more than append, as a sentence, or None. Nothing is shared or freed there, so each step may
    only store its own new positions and advance its sequences' lengths by their chunks: a step that
    does otherwise is Part 2's bug, and it breaks sharing too (it writes into blocks forks share). With
    block_size, also a step that leaves a table more blocks than its length needs: copy-on-write looks
    at the last block, so a spare one there leaves the block being written unchecked."""
    records, seen, lengths = _step_records(reply), {}, []
    for rec in records or []:
        now = rec.get("lengths") if isinstance(rec.get("lengths"), list) else []
        op = rec.get("op")
        if isinstance(op, list) and op[:1] == ["step"] and rec.get("error") is None and len(op) == 3:
            for i, chunk in zip(op[1], op[2]):
                if type(i) is int and 0 <= i < min(len(now), len(lengths)) and now[i] != lengths[i] + len(chunk):
                    return "a step did not advance its sequence's length by its chunk"
            tables = rec.get("tables") if isinstance(rec.get("tables"), list) else []
            if type(block_size) is int and any(isinstance(t, list) and type(n) is int and len(t) > -(-n // block_size)
                                               for t, n in zip(tables, now)):
                return "a step left a table more blocks than its length needs"
        lengths = now
        for j, kv in enumerate(rec.get("kv") if isinstance(rec.get("kv"), list) else []):
            k = kv.get("k") if isinstance(kv, dict) else None
            if not (isinstance(k, np.ndarray) and k.ndim == 4):
                continue
            before = seen.get(j)
            if before is not None and before.shape[0] == k.shape[0] and before.shape[2:] == k.shape[2:]:
                m = min(before.shape[1], k.shape[1])
                if not np.array_equal(before[:, :m], k[:, :m]):
                    return "a step changed K/V that an earlier step had stored"
                stepped = isinstance(op, list) and op[:1] == ["step"] and rec.get("error") is None
                if stepped and k.shape[1] > m and not np.all(np.any(k[:, m:] != 0, axis=(2, 3))):
                    return "a step left its new positions' K/V unstored in some layer (zeros, on a fresh pool)"
            seen[j] = k
    return None


def unshared_records(actions, reply):
    """A sharing script's twin per sharing action, from the answer of its scenarios.sharing_twin call:
    {"result": a step's logits (else None), "error": the first error of the action's step_script
    actions, "kv": each sharing sequence's K/V}, or None when the answer has the wrong form."""
    plan = sc.unshared_script(actions)
    records = _step_records(reply, len(plan["actions"]))
    if records is None or not all(isinstance(r.get("kv"), list) for r in records):
        return None
    out, first = [], 0
    for (op, *_), last, seqs in zip(actions, plan["last"], plan["seqs"]):
        mine = records[first:last + 1]
        kv = records[last]["kv"]
        if any(not 0 <= j < len(kv) for j in seqs):
            return None
        out.append({"result": records[last]["result"] if op == "step" else None,
                    "error": next((r["error"] for r in mine if r["error"] is not None), None),
                    "kv": [kv[j] for j in seqs]})
        first = last + 1
    return out


# ------------------------------------------------------------------------------------ Part 6 (bonus)
def renamed(tables):
    """Block tables up to renaming: each id replaced by the place of its first appearance (sequence 0's
    table first), so which ids the pool handed out (Part 1's) changes nothing, while which entries name
    one block (the sharing) shows."""
    names = {}
    return [[names.setdefault(b, len(names)) for b in table] for table in tables]


def swap_references(tables, held, refcounts):
    """[[id, refcount minus its holders]] for every block whose refcount is not the number of table
    entries and test-held blocks naming it (Part 6's scripts hold no other reference), or a sentence
    when a table names an id outside the pool."""
    try:
        extra = cache_references(tables, held, refcounts)
    except ValueError as e:
        return str(e)
    return [[b, r] for b, r in enumerate(extra) if r != 0]


def part6_view(result):
    """The Part 6 observables of a swap_script result, one row per action: the error's kind; every
    sequence's table up to renaming and its length; the references that are not the tables' and the
    test's (swap_references); the space's n_free, n_out and n_in; for a swap_in that succeeded, what it
    returned ("returned": the tables up to renaming and lengths of its sequences, whether each is of
    the pool, and "taken": each id pool.alloc handed out during the call named by the place of its
    first appearance in those tables, so [0, 1, ..., d - 1] when the blocks were taken in that order);
    for an action that raised, whether it changed anything. Raises ValueError on records of another form."""
    rows, before = [], None
    for rec in result["records"]:
        op, error = rec["op"], rec["error"]
        row = {"error": error_kind(error), "tables": renamed(rec["tables"]), "lengths": rec["lengths"],
               "references": swap_references(rec["tables"], rec["held"], rec["refcounts"]),
               **{k: rec[k] for k in ("n_free", "n_out", "n_in")}}
        if op[0] == "swap_in" and error is None:
            got = rec["result"]
            tables = [rec["tables"][s] for s in got["seqs"]]
            order = {b: i for i, b in enumerate(dict.fromkeys(b for t in tables for b in t))}
            row["returned"] = {"tables": renamed(tables), "lengths": [rec["lengths"][s] for s in got["seqs"]],
                               "same_pool": got["same_pool"],
                               "taken": None if got["taken"] is None else [order.get(b, f"id {b}") for b in got["taken"]]}
        if error is not None and before is not None:
            row["unchanged"] = all(before[k] == rec[k] for k in ("tables", "lengths", "held", "refcounts", "n_free",
                                                                   "n_out", "n_in"))
        rows.append(row)
        before = rec
    return rows


_SAID_SWAP = {
    "fork": "the test makes seq {n} sharing every block of seq {0} (pool.incref each)",
    "branch": "the test makes seq {n} sharing the first {1} blocks of seq {0}, then {2} positions in blocks of its own",
    "free": "the test gives back seq {0}'s blocks (pool.decref each) and empties it",
    "hold": "the test takes {0} blocks (pool.alloc)",
    "hold_until": "the test takes blocks until n_free is {0}",
    "unhold": "the test gives back the blocks it took",
    "scribble": "the test takes every free block, overwrites its K/V and gives it back (the pool reuses freed blocks)",
    "read": "every sequence's K/V read through its table",
}


def describe_swap_actions(records):
    """Part 6's script actions as the calls they stand for, each sequence by its number ("seq 3"); a
    swap_in's sequences are numbered as they come back (from the records: how many it returned)."""
    out, n, handles = [], 0, 0
    for rec in records:
        op, *args = rec["op"]
        if op == "seq":
            text = f"the test makes seq {n} of {args[0]} positions in blocks of its own (pool.alloc)"
        elif op == "swap_out":
            group = ", ".join("a sequence of another pool" if s == "other" else f"seq {s}" for s in args[0])
            text = f"handle {handles} = swap_out([{group}])"
        elif op == "swap_in":
            what = {"made_up": "an object no space returned", "other": "a handle of another SwapSpace of the pool"}
            text = f"swap_in({what.get(args[0], f'handle {args[0]}')})"
            got = rec.get("result")
            if rec.get("error") is None and isinstance(got, dict) and isinstance(got.get("seqs"), list):
                text += f" (its sequences are seqs {n} to {n + len(got['seqs']) - 1})" if got["seqs"] else ""
                n += len(got["seqs"])
        else:
            text = _SAID_SWAP.get(op, op).format(*args, n=n)
        if op in ("seq", "fork", "branch") and rec.get("error") is None:
            n += 1
        handles += op == "swap_out" and rec.get("error") is None
        out.append(text)
    return out
