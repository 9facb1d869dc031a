"""What the public tests share: the contract's invariants and the contiguous baseline, checked on
the plain data a scenario (scenarios.py) returns, with failures that say what was checked,
expected vs got, and draw the block tables.

Nothing here knows how to implement paged_kv: expected values come from the lab's contiguous
`forward` with a KVCache, from hand-worked examples in the tests, or from rules the contract
states about what one operation does to the state you can observe.
"""
import copy
import math

import numpy as np
import pytest

import explain
import scenarios as sc
import transformer_lab as tl

TOL_LOGITS = 1e-10         # the contract: paged logits equal the contiguous forward to 1e-10
TOL_ATTENTION = 1e-12      # blockwise attention equals attention_core to 1e-12
STATE = ("tables", "lengths", "refcounts", "n_used", "n_free", "peak_used", "n_copies")

# A second, small Config so nothing depends on TINY's sizes (3 layers, 2 heads, tiny vocab).
SMALL = dict(vocab=40, d_model=24, n_layers=3, n_heads=2, d_head=12, d_ff=48, max_len=12)


def fail(message, section=None):
    """Fail with a message and no traceback: the message is the whole story."""
    if section:
        message += f'\n  (assignment.md, "{section}")'
    pytest.fail(message, pytrace=False)


def tokens(n, seed, vocab=tl.TINY.vocab):
    """n token ids, reproducible."""
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


# ----------------------------------------------------------------------------------- describing
def where(records, i):
    return f"after action {i + 1} of {len(records)}, {explain.describe_action(records[i]['op'])}"


def picture(rec, block_size, title="got"):
    return explain.draw_tables(title, rec["tables"], rec["lengths"], block_size, rec["refcounts"])


def error_text(error):
    return f"{error['kind']}: {error['message']}"


# ------------------------------------------------------------------------------ basic expectations
def succeeded(records, i, section=None):
    rec = records[i]
    if rec["error"] is not None:
        fail(f"{where(records, i)}: expected it to succeed, but it raised {error_text(rec['error'])}", section)
    return rec


def raised(records, i, kind, why, section=None, block_size=None):
    """Action i must raise `kind` (a name: "ValueError", "MemoryError") and change nothing."""
    rec = records[i]
    got = "no error" if rec["error"] is None else error_text(rec["error"])
    if rec["error"] is None or rec["error"]["kind"] != kind:
        fail(f"{where(records, i)}: expected {kind} ({why}), got {got}", section)
    if i > 0:
        unchanged(records, i, f"a call that raised {kind}", section, block_size)


def unchanged(records, i, what, section=None, block_size=None):
    """Everything observable after action i equals what it was before it."""
    before, after = records[i - 1], records[i]
    diffs = [k for k in STATE if k in before and before[k] != after[k]]
    if diffs:
        lines = [f"{where(records, i)}: {what} must change nothing, but these changed:"]
        lines += [f"    {k}: before {before[k]}, after {after[k]}" for k in diffs]
        if block_size and ("tables" in diffs or "lengths" in diffs):
            lines += [picture(before, block_size, "before"), picture(after, block_size, "after")]
        fail("\n".join(lines), section)


def equal(what, expected, got, section=None, extra=""):
    if expected != got:
        fail(explain.mismatch(what, expected, got) + (f"\n{extra}" if extra else ""), section)


def close(what, expected, got, tol, section=None, extra=""):
    diff = explain.first_difference(expected, got, tol)
    if diff is not None:
        fail(f"{what}: {diff}" + (f"\n{extra}" if extra else ""), section)


def tables(records, i, expected, block_size, section, why):
    """Action i must leave exactly these block tables; on failure draw both."""
    rec = records[i]
    if rec["tables"] != expected:
        fail("\n".join([f"{where(records, i)}: block tables differ ({why})",
                        explain.draw_tables("expected", expected, rec["lengths"], block_size),
                        picture(rec, block_size)]), section)


# --------------------------------------------------------------------------------- invariants
def pool_invariants(records, n_blocks, section):
    """After every action: n_used + n_free == n_blocks; n_used == blocks with refcount > 0;
    peak_used >= n_used, never decreasing, and it rises exactly when n_used sets a new record."""
    peak = 0
    for i, rec in enumerate(records):
        rc = rec["refcounts"]
        equal(f"{where(records, i)}: n_used + n_free", n_blocks,
              _sum(rec["n_used"], rec["n_free"]), section)
        equal(f"{where(records, i)}: n_used (the number of blocks with refcount > 0; refcounts {rc})",
              sum(1 for r in rc if isinstance(r, int) and r > 0), rec["n_used"], section)
        peak = max(peak, rec["n_used"]) if isinstance(rec["n_used"], int) else peak
        equal(f"{where(records, i)}: peak_used (the largest n_used so far)", peak, rec["peak_used"], section,
              "  peak_used counts every block in use at any moment: a block allocated and given back within one "
              "call (a needless copy, a speculative alloc) raises it too.")


def _sum(a, b):
    return a + b if isinstance(a, int) and isinstance(b, int) else f"{a} + {b}"


def table_invariants(records, block_size, section, outside=None):
    """Between steps: each table holds ceil(length / block_size) distinct blocks, and each block's
    refcount equals the number of tables holding it plus `outside` holders (pool-level allocs and
    increfs the test made itself, tracked from the actions)."""
    outside, reserved = dict(outside or {}), set()
    for i, rec in enumerate(records):
        op = rec["op"]
        if rec["error"] is None and op[0] in ("alloc", "incref", "decref"):
            b = rec["result"] if op[0] == "alloc" else op[1]
            outside[b] = outside.get(b, 0) + (-1 if op[0] == "decref" else 1)
        if op[0] == "reserve":          # a bare reserve may hold more blocks until the next step
            reserved.add(op[1])
        elif op[0] == "step" and rec["error"] is None or op[0] == "free":
            reserved -= set(op[1]) if op[0] == "step" else {op[1]}
        for s, (table, length) in enumerate(zip(rec["tables"], rec["lengths"])):
            if s in reserved:
                continue
            if len(table) != math.ceil(length / block_size) or len(set(table)) != len(table):
                fail(f"{where(records, i)}: seq {s} has length {length}, so its table must hold "
                     f"ceil({length} / {block_size}) = {math.ceil(length / block_size)} distinct blocks, "
                     f"it holds {table}\n{picture(rec, block_size)}", section)
        in_tables = {}
        for table in rec["tables"]:
            for b in table:
                in_tables[b] = in_tables.get(b, 0) + 1
        expected = [in_tables.get(b, 0) + outside.get(b, 0) for b in range(len(rec["refcounts"]))]
        if rec["refcounts"] != expected:
            b = next(b for b, (e, g) in enumerate(zip(expected, rec["refcounts"])) if e != g)
            by_test = f" and held {outside[b]} time(s) by the test itself" if outside.get(b) else ""
            fail(f"{where(records, i)}: block {b} is in {in_tables.get(b, 0)} block table(s){by_test}, so its "
                 f"refcount must be {expected[b]}, got {rec['refcounts'][b]}\n{picture(rec, block_size)}", section)


# ------------------------------------------------------------------------ the contiguous baseline
class Contiguous:
    """The same actions replayed on the lab's contiguous KVCache, one per sequence: the baseline
    paged KV must reproduce. fork = a deep copy of the parent's cache; free = a fresh cache."""

    def __init__(self, cfg=None, param_seed=0):
        self.cfg = sc.config(cfg)
        self.params = sc.params(self.cfg, param_seed)
        self.caches = []

    def apply(self, rec):
        """Replay one recorded action that succeeded; returns a step's logits, else None."""
        op = rec["op"]
        if rec["error"] is not None:
            return None
        if op[0] == "new":
            self.caches.append(tl.KVCache(self.cfg, 1))
        elif op[0] == "fork":
            self.caches.append(copy.deepcopy(self.caches[op[1]]))
        elif op[0] == "free":
            self.caches[op[1]] = tl.KVCache(self.cfg, 1)
        elif op[0] == "step":
            return [tl.forward(self.params, self.cfg, np.array([list(c)], dtype=np.int64), cache=self.caches[s])[0]
                    for s, c in zip(op[1], op[2])]
        return None

    def kv(self, s):
        c = self.caches[s]
        return c.k[:, 0, :c.length], c.v[:, 0, :c.length]


def against_contiguous(records, cfg=None, param_seed=0, section=None, check_kv=False):
    """Every successful step's logits (and, with record_kv, every sequence's stored K/V) equal the
    contiguous baseline's; every length equals the baseline's length."""
    base = Contiguous(cfg, param_seed)
    for i, rec in enumerate(records):
        expected = base.apply(rec)
        if expected is not None:
            got = rec["result"]
            equal(f"{where(records, i)}: number of logits arrays returned", len(expected), len(got), section)
            for j, (e, g) in enumerate(zip(expected, got)):
                close(f"{where(records, i)}: logits of seq {rec['op'][1][j]} (index [position in chunk, token]) "
                      f"vs the contiguous forward with a KVCache", e, g, TOL_LOGITS, section)
        equal(f"{where(records, i)}: sequence lengths", [c.length for c in base.caches], rec["lengths"], section)
        if check_kv:
            for s, stored in enumerate(rec["kv"]):
                for name, e in zip("kv", base.kv(s)):
                    close(f"{where(records, i)}: {name.upper()} of seq {s} read from pool.{name} through its "
                          f"block table (index [layer, position, head, d]) vs the contiguous cache",
                          e, stored[name], TOL_LOGITS, section)


def copies_only_when_due(records, block_size, section):
    """n_copies rises only in a step or reserve, and by at most min(n, refcount - 1) for each
    partly filled, shared last block that n of its sequences hold (the last writer needs no copy)."""
    for i in range(1, len(records)):
        before, rec = records[i - 1], records[i]
        op = rec["op"]
        if not (isinstance(rec["n_copies"], int) and isinstance(before["n_copies"], int)):
            continue
        seqs = op[1] if op[0] == "step" else [op[1]] if op[0] == "reserve" else []
        holders = {}
        for s in seqs:
            if s < len(before["tables"]) and before["lengths"][s] % block_size:
                last = before["tables"][s][-1]
                holders[last] = holders.get(last, 0) + 1
        due = sum(min(n, before["refcounts"][b] - 1) for b, n in holders.items())
        if rec["n_copies"] - before["n_copies"] > due:
            fail(f"{where(records, i)}: n_copies went from {before['n_copies']} to {rec['n_copies']}, but at most "
                 f"{due} cop{'y is' if due == 1 else 'ies are'} due: copy a last block only when it is partly filled "
                 f"AND shared (refcount > 1), and n holders of one block make at most n - 1 copies\n"
                 f"{picture(before, block_size, 'before')}", section)


def run(pk, actions, block_size, n_blocks=16, cfg=None, section=None, record_kv=False, errors=None, **kw):
    """sequence_script plus the checks every script must pass, the most telling first: the actions
    in `errors` ({index: (kind, why)}) raise that error and change nothing, every other action
    succeeds; then the contiguous baseline, copies only when due, and the invariants."""
    records = sc.sequence_script(pk, cfg=cfg, n_blocks=n_blocks, block_size=block_size,
                                 actions=actions, record_kv=record_kv, **kw)
    errors = errors or {}
    for i in range(len(records)):
        if i in errors:
            raised(records, i, *errors[i], section, block_size)
        else:
            succeeded(records, i, section)
    against_contiguous(records, cfg, kw.get("param_seed", 0), section, check_kv=record_kv)
    copies_only_when_due(records, block_size, section)
    table_invariants(records, block_size, section)
    pool_invariants(records, n_blocks, section)
    return records
