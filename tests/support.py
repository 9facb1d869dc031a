"""What the public tests share: failures that say what was checked (expected vs got, the block
tables drawn), the contract's invariants on the plain data a scenario (scenarios.py) returns, and
the probes that decide whether a test must wait for another part. Parts 2 and 4 run their stories
on benches of their own (side_by_side.py, fork_bench.py) built on these.

Nothing here knows how to implement paged_kv: expected values come from the lab's contiguous
`forward` with a KVCache, from hand-worked examples in the tests, or from rules the contract
states about what one operation does to the state you can observe (rules.py, which the grader
uses too). Each part's tests look only at what that part owns, so a bug in one part fails the
tests of that part, not the others'; a comparison that needs another part working is skipped
(pytest.skip, with the reason: what failed in that part) while that part does not work yet, after
everything the test can check without it.
"""
import numpy as np
import pytest

import explain
import registry
import rules
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
    """Everything observable after action i equals what it was before it (for a fitted step, what it
    was once the test had taken its blocks)."""
    before, after = records[i].get("before", records[i - 1]), records[i]
    diffs = [k for k in STATE if k in before and before[k] != after[k]]
    if diffs:
        lines = [f"{where(records, i)}: {what} must change nothing, but it changed {', '.join(diffs)}:"]
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


# ------------------------------------------------------------------ comparisons that wait for a part
def wait(reason):
    """Skip the rest of this test, with the reason: what is left needs another part that does not
    work yet. Everything the test can check without it has been checked (and a bug of this part
    failed it); the results by part count it as skipped, with the reason (conftest)."""
    pytest.skip(reason)


def stub_named(e):
    """'PagedSequence.fork (Part 4) is not implemented yet' for a stub's NotImplementedError("TODO
    Part 4: PagedSequence.fork"); None for any other error."""
    text = e.args[0] if isinstance(e, NotImplementedError) and e.args and isinstance(e.args[0], str) else ""
    head, _, name = text.partition(":")
    if not head.startswith("TODO Part ") or not name.strip():
        return None
    return f"{name.strip()} ({head[len('TODO '):].replace(' (bonus)', '')}) is not implemented yet"


def probe_failure(e):
    """What a probe saw when it raised: the stub it reached, else the error."""
    return stub_named(e) or f"it raised {type(e).__name__}: {str(e)[:200]}"


def _one_line(text):
    return " ".join(str(text).split())[:300]


_WORKS = {}     # probe -> None (works) or what failed


def part2_problem(pk):
    """None when paged_step gives the contiguous forward's logits, stores K/V through the tables and
    leaves each table ceil(length / B) blocks on a small script (two sequences on a pool whose first
    three blocks the test holds, and gives two of them back midway: seq 0's table ends out of order,
    [3, 4, 0] with the contract's allocator; token 0 among the tokens; twice both sequences step at
    the same position with chunks of one size, as a batched step groups them; seq 0 ends on a block
    boundary, 12 tokens in 3 blocks), else what failed.
    Part 4's comparisons of logits, samples and savings need it; they wait (are skipped) while it does not."""
    if "part2" not in _WORKS:
        actions = [["alloc"], ["alloc"], ["alloc"], ["new"], ["new"],
                   ["step", [0, 1], [[0, *tokens(5, 1)], tokens(6, 2)]], ["release", 0], ["release", 1],
                   ["step", [1, 0], [[5], [6]]], ["step", [0], [tokens(5, 3)]]]
        try:
            _WORKS["part2"] = _part2_problem(pk, actions)
        except Exception as e:  # noqa: BLE001  (not implemented, or broken: either way it does not work)
            _WORKS["part2"] = probe_failure(e)
    return _WORKS["part2"]


def _part2_problem(pk, actions):
    records = sc.step_script(pk, n_blocks=7, block_size=4, actions=actions, record_kv=True)["records"]
    base = Contiguous()
    for i, rec in enumerate(records):
        if rec["error"] is not None:
            return f"{where(records, i)}, it raised {error_text(rec['error'])}"
        short = rules.short_of(rec, 4)
        if short or any(isinstance(n, int) and len(t) > -(-n // 4) for t, n in zip(rec["tables"], rec["lengths"])):
            return f"{where(records, i)}, " + (short or "a table holds more blocks than its length needs")
        expected = base.apply(rec)
        for e, g in zip(expected, rec["result"]) if expected is not None else ():
            diff = explain.first_difference(e, g, TOL_LOGITS)
            if diff is not None:
                return f"{where(records, i)}, the logits differ from the contiguous forward: {_one_line(diff)}"
    for s in range(2):
        why = rules.kv_difference(dict(zip("kv", base.kv(s))), records[-1]["kv"][s])
        if why:
            return f"seq {s}'s K/V read through its table differ from the contiguous cache: {_one_line(why)}"
    return None


def part2_works(pk):
    return part2_problem(pk) is None


def needs_part2(pk, what="this comparison"):
    return f"{what} waits for paged_step (Part 2): {part2_problem(pk)}; fix Part 2 first"


def part1_problem(pk):
    """None when the pool's references and capacity do what the contract says on pools of their own
    (scenarios.refcount_probe, capacity_probe, copy_moves_references), else what does not. Part 4's and
    Part 5's benches count on them (fork increfs, free decrefs, copy-on-write reads refcounts, a
    request evicts what n_free lacks); their tests wait (are skipped) while they do not: Part 1's
    own tests say what is wrong."""
    if "part1" not in _WORKS:
        try:
            found = sc.refcount_probe(pk)
            said = f"pool.{found['call']} {sc.refcount_said(found)}" if found else ""
            if not said and sc.capacity_probe(pk) is not None:
                said = "pool.n_free does not say what alloc hands out (or a block given back is not handed out again)"
            if not said and sc.copy_moves_references(pk):
                said = ("pool.copy_block changes the source's refcount, gives the copy another than 1, or raises or "
                        "returns no block id")
            _WORKS["part1"] = said or None
        except sc.Unbuilt:        # no pool at all: each test says so itself (conftest: "needs a BlockPool first")
            _WORKS["part1"] = None
        except Exception as e:  # noqa: BLE001  (not implemented, or broken: either way it does not work)
            _WORKS["part1"] = probe_failure(e)
    return _WORKS["part1"]


def needs_part1(pk, what="this test", copies=True):
    """The reason to wait while Part 1's references do not work, else None. copies=False: copy_block's
    references do not matter to the test (it copies nothing)."""
    problem = part1_problem(pk)
    if problem and not copies and problem.startswith("pool.copy_block"):
        return None
    return f"{what} waits for the pool's references (Part 1): {problem}; fix Part 1 first" if problem else None


def needs_exact_copies(pk, what="this test"):
    """The reason to wait while copy-on-write makes copies the contract does not (scenarios.cow_probe,
    without fork: a block nobody shares, a full one, more than r - 1 for r holders), else None: such a
    copy takes a block no count foresees, so a step that fits exactly runs out."""
    if "cow" not in _WORKS:
        try:
            _WORKS["cow"] = sc.cow_probe(pk) is True
        except Exception:  # noqa: BLE001  (a stub: its own tests say so)
            _WORKS["cow"] = False
    return (f"{what} waits for copy-on-write (Part 4): it makes copies the contract does not (a full or unshared "
            "block, or more than r - 1 for r holders); fix Part 4 first") if _WORKS["cow"] else None


def copies_problem(pk):
    """None when copy-on-write works on a small script without paged_step (a shared, partly filled
    block written by its three holders in turn: fork, reserve's copy, copy_block), else what failed.
    Part 2's tests of a step that must copy need it; they wait (are skipped) while it does not."""
    if "copies" not in _WORKS:
        actions = [["new"], ["grow", 0, 6, 1], ["fork", 0], ["fork", 0], ["grow", 1, 1, 2], ["grow", 2, 1, 3],
                   ["grow", 0, 1, 4]]
        try:
            _WORKS["copies"] = _copies_problem(pk, actions)
        except Exception as e:  # noqa: BLE001
            _WORKS["copies"] = probe_failure(e)
    return _WORKS["copies"]


def _copies_problem(pk, actions):
    result = sc.sharing_script(pk, n_blocks=12, block_size=4, actions=actions)
    records = result["records"]
    for i, rec in enumerate(records):
        if rec["error"] is not None:
            return f"{where(records, i)}, it raised {error_text(rec['error'])}"
    broken = rules.sharing_violation(records, 4)
    if broken:
        return _one_line(broken + _copy_note(result))
    stored = Stored()
    for i, rec in enumerate(records):
        stored.apply(rec["op"])
        for s, got in enumerate(rec["kv"]):
            why = rules.kv_difference(stored.kv(s), got)
            if why:
                return _one_line(f"{where(records, i)}, seq {s}'s K/V differ from what the test stored: {why}"
                                 + _copy_note(result))
    return None


def copies_work(pk):
    return copies_problem(pk) is None


def needs_copies(pk):
    return f"the rest of this script copies a shared block, so it waits for copy-on-write: {copies_problem(pk)}"


# ------------------------------------------------------------------------------- Part 2: steps
class Contiguous:
    """The same actions replayed on the lab's contiguous KVCache, one per sequence: the baseline
    paged KV must reproduce."""

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
        elif op[0] in ("step", "fit", "miss"):
            return [tl.forward(self.params, self.cfg, np.array([list(c)], dtype=np.int64), cache=self.caches[s])[0]
                    for s, c in zip(op[1], op[2])]
        return None

    def kv(self, s):
        c = self.caches[s]
        return c.k[:, 0, :c.length], c.v[:, 0, :c.length]


def contract_order(n_blocks, actions):
    """The blocks a correct pool hands out after the test's setup, in order: its free blocks, lowest
    first (the setup's allocs take 0, 1, 2, ...; a release gives its block back)."""
    held = []
    for op, *args in actions:
        if op == "alloc":
            held.append(min(set(range(n_blocks)) - set(held) - {None}))
        elif op == "release":
            held[args[0]] = None
        else:
            break
    return sorted(set(range(n_blocks)) - set(held))


# ----------------------------------------------------------------------------- Part 4: sharing
class Stored:
    """What a sequence's K/V must read back as in a "grow" script: the test's own random K/V per
    position, inherited by forks, dropped by free (scenarios.put_kv draws them the same way)."""

    def __init__(self, cfg=None):
        self.cfg, self.seqs = sc.config(cfg), []

    def apply(self, op):
        if op[0] == "new":
            self.seqs.append([])
        elif op[0] == "fork":
            self.seqs.append(list(self.seqs[op[1]]))
        elif op[0] == "free":
            self.seqs[op[1]] = []
        elif op[0] == "grow":
            i, n, seed = op[1:]
            k, v = np.random.default_rng(seed).standard_normal((2, self.cfg.n_layers, n, self.cfg.n_heads,
                                                                self.cfg.d_head))
            self.seqs[i] += [(k[:, j], v[:, j]) for j in range(n)]

    def kv(self, s):
        empty = np.zeros((self.cfg.n_layers, 0, self.cfg.n_heads, self.cfg.d_head))
        pos = self.seqs[s]
        return {"k": np.stack([k for k, _ in pos], axis=1) if pos else empty,
                "v": np.stack([v for _, v in pos], axis=1) if pos else empty}


def _copy_note(result):
    note = rules.copy_note(result.get("copy_probe"))
    return f"\n  {note}" if note else ""


# ------------------------------------------------------------------------- Part 5 (bonus): the cache
def bonus_attempted(pk, part):
    """A bonus part is extra credit: a file without any of its top-level names (written before the
    part existed, or without it) skips its tests with one reason instead of failing them."""
    import labtool
    top = registry.top_names(part)
    missing = [n for n in top if not hasattr(pk, n)]
    if missing == list(top):
        pytest.skip(labtool.not_attempted(labtool.BONUS_ABSENT, part))
    if missing:
        fail(f"Part {registry.number(part)} (bonus) is half there: paged_kv.py does not define {', '.join(missing)}")
