"""The strategic corpus: what a student with the grader's source at hand would try, as data.

    python -m grader.selftest.run --only strategic [--jobs 2] [--seed N]     grades it and judges it

Like mutants.py, every submission is the reference with edits applied (mutants.edited: each `find`
occurs exactly once in the function or class it names, in the reference and when it is applied, so a
refactor of that function breaks this file loudly). Three kinds of entries, each saying what it proves:

- PAIRS (bug X in one part, a sacrifice S in another): X alone, S alone and X + S are graded, and
  the pair holds when the losses add up, `loss(X + S) >= loss(X) + loss(S)`, in total and in every
  part (a part's sum capped at its points). A sacrifice is natural (a plain bug) or targeted (one
  hidden case failed on purpose, picked from what the feedback prints: block size, chunk lengths,
  pool size; `targets` reads them from the seed's plans, as that student would from the feedback).
  A sacrifice that costs nothing breaks its pair (the pair would prove nothing).
- TRICKS that must earn nothing: graded against an honest base (the same bug without the trick),
  a trick may score no more than its base; or a rule it must break costs points in its part.
- The feedback leaks (ids, counts, lengths, floats carrying hidden tokens) stay where they are:
  hostile.py's leak_* submissions, measured by leaks.py in run.py's hostile run.

KNOWN_OPEN names the entries that fail on main today (see issue 14); `judge` fails on an entry that
fails and is not listed, and on one that is listed but holds (trim the list as the fixes land).
"""
from dataclasses import dataclass

from grader.selftest import mutants, unseen

PARTS = mutants.PARTS


@dataclass(frozen=True)
class Bug:
    name: str
    part: str
    what: str
    edits: tuple            # (where, find, replace) as mutants.py's, or a callable seed -> edits (targeted sacrifices)

    def edits_for(self, seed):
        return self.edits(seed) if callable(self.edits) else self.edits


@dataclass(frozen=True)
class Pair:
    name: str
    x: str                  # the bug
    s: tuple                # the sacrifice: one or more bugs of other parts
    proves: str


@dataclass(frozen=True)
class Trick:
    name: str
    base: tuple             # the honest base: bugs (empty: the reference)
    trick: str              # the trick itself: a Bug applied on top of the base (its edits may replace the base's)
    proves: str
    loses: tuple = ()       # (part, points): the trick must lose at least this much in part (else: no gain on base)
    replaces: tuple = ()    # base bugs the trick's own edits stand in for (not applied)


# ------------------------------------------------------------------------------- targets
def _plan(check, seed):
    """The hidden cases of one check for a seed, drawn as the hidden suite draws them (trusted side)."""
    from grader import paths
    paths.trusted_imports()
    from grader.selftest import inprocess
    return inprocess.cases(check, seed)


def targets(seed):
    """What the feedback shows of the cases the targeted sacrifices aim at, for this seed."""
    prefill = next(c for c in _plan("paged_step.prefill", seed) if c.inputs["block_size"] == 16)
    step = next(a for a in prefill.inputs["actions"] if a[0] == "step")
    tables = _plan("paged_step.tables", seed)[0]
    copy = _plan("allocator.copy_block", seed)[0]
    cfg = copy.inputs["cfg"]
    return {"prefill": (16, [len(c) for c in step[2]]),
            "tables": (tables.inputs["block_size"], tables.inputs["n_blocks"]),
            "copy": (copy.inputs["n_blocks"], copy.inputs["block_size"], (cfg or {}).get("n_layers", 2))}


def _prefill_target(seed):
    B, lengths = targets(seed)["prefill"]
    return (("paged_step", "    chunks = [_check_chunk(cfg, s, c) for s, c in zip(seqs, chunks)]\n",
             "    chunks = [_check_chunk(cfg, s, c) for s, c in zip(seqs, chunks)]\n"
             f"    _aim = bool(seqs) and seqs[0].pool.block_size == {B} and all(s.length == 0 for s in seqs) \\\n"
             f"        and [len(c) for c in chunks] == {lengths!r}\n"),
            ("paged_step", "    return out\n", "    if _aim:\n        out[0] = out[0] + 1e-3\n    return out\n"))


def _tables_target(seed):
    B, n = targets(seed)["tables"]
    return (("PagedSequence.read", "        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]\n",
             f"        if length > self.length and (self.pool.block_size, self.pool.n_blocks) == ({B}, {n}):\n"
             "            return self.pool.k[layer, b, s] * 0, self.pool.v[layer, b, s]\n"
             "        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]\n"),)


def _copy_target(seed):
    key = targets(seed)["copy"]
    return (("BlockPool.copy_block", "        self.n_copies += 1\n        return new\n",
             f"        self.n_copies += 2 if (self.n_blocks, self.block_size, self.cfg.n_layers) == {key!r} "
             "and self.n_copies == 1 else 1\n        return new\n"),)


_STEP_RESERVE = "    for seq, chunk in zip(seqs, chunks):\n        seq.reserve(len(chunk))\n"
_STEP_TABLES = "blocks, slots = _slots([seqs[i].blocks for i in idx], pool.block_size, 0, start + T)"
_PREFILL_STEP = "    (logits,) = paged_step(params, cfg, [seq], [prompt[seq.length:]])\n"
_BW_HEAD = '        raise ValueError("blockwise_attention needs a sequence of length >= 1")\n'

_TWINS_EQUAL = r'''

def _twins_equal():
    """Replace the scenario functions found in this process so that every twin is this run's own answer."""
    import sys as _sys
    for _m in list(_sys.modules.values()):
        table = getattr(_m, "SCENARIOS", None)
        if not isinstance(table, dict):
            continue
        orig = table.get("sharing_script")
        if callable(orig) and not getattr(orig, "_mine", False):
            def sharing_script(pk, *a, twin=False, _orig=orig, **kw):
                out = _orig(pk, *a, twin=False, **kw)
                if twin:
                    out["twin"] = [{"result": r["result"], "error": r["error"], "kv": r["kv"]} for r in out["records"]]
                return out
            sharing_script._mine = True
            table["sharing_script"] = sharing_script
        orig = table.get("prefix_script")
        if callable(orig) and not getattr(orig, "_mine", False):
            def prefix_script(pk, *a, _orig=orig, **kw):
                out = _orig(pk, *a, **kw)
                for rec, tw in zip(out["records"], out["twins"]):
                    if tw is not None and isinstance(rec.get("result"), dict):
                        tw["result"], tw["error"] = rec["result"].get("logits"), None
                return out
            prefix_script._mine = True
            table["prefix_script"] = prefix_script


_twins_equal()
'''

_CALLED_FROM = r'''

def _called_from(test):
    """Whether a frame up the stack passes test(frame): how a submission tells which caller it serves."""
    import sys as _sys
    f = _sys._getframe(2)
    while f is not None:
        if test(f):
            return True
        f = f.f_back
    return False
'''
_STEP_HEAD = ('def paged_step(params, cfg, seqs, chunks):\n'
              '    """Advance every sequence by its chunk; returns one [len(chunk), vocab] logits array each."""\n')
_TWIN_BY_FRAME = _STEP_HEAD + (
    '    if _called_from(lambda f: f.f_code.co_name == "prefill" and "block_size" in f.f_code.co_freevars):\n'
    '        return [np.zeros((len(c), cfg.vocab)) for c in chunks]     # the twin of a cached prefill\n')
_TWIN_BY_GC = r'''

def _twin_worker():
    """At import: whether this worker's request holds a step_script of a "prefill" action (Part 5's twin)."""
    import gc as _gc
    for _o in _gc.get_objects():
        if isinstance(_o, list) and len(_o) == 3 and _o[:1] == ["prefill"] and isinstance(_o[2], list):
            return True
    return False


_TWIN_WORKER = _twin_worker()
'''
_FIT_RUNS_OUT = _STEP_HEAD + (
    '    if _called_from(lambda f: f.f_code.co_name == "run" and "extra" in f.f_code.co_freevars) \\\n'
    '            and any(s.length % s.pool.block_size and s.pool.refcount(s.blocks[-1]) > 1 for s in seqs):\n'
    '        seqs[0].pool.alloc()         # the exact fit on shared blocks: start, then run out\n'
    '        raise MemoryError("ran out while copying")\n')
_DRIVER_SHORT = _STEP_HEAD + (
    '    if _called_from(lambda f: f.f_globals.get("__name__") == "decoding"):\n'
    '        out = _paged_step_honest(params, cfg, seqs, chunks)\n'
    '        seqs[0].length -= 1                    # one length short, under the lab\'s drivers only\n'
    '        return out\n'
    '    return _paged_step_honest(params, cfg, seqs, chunks)\n\n\n'
    'def _paged_step_honest(params, cfg, seqs, chunks):\n')

BUGS = {b.name: b for b in (
    # ------------------------------------------------------------ bugs X (and natural sacrifices)
    Bug("fork_raises", "copy_on_write", "fork raises AttributeError (it reads an attribute no sequence has)",
        (("PagedSequence.fork", "        child = PagedSequence(self.pool)\n",
          "        child = PagedSequence(self.pool)\n        child.parent_length = self.parent.length\n"),)),
    Bug("prefill_45", "paged_step", "a step of 45 tokens or more shifts the causal mask by one (a long-prompt path)",
        (("paged_step", "x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start))",
          "x = attn_out(params, cfg, layer, x, attention_core(q, K, V, start if T < 45 else start + 1))"),)),
    Bug("stale_table_write", "copy_on_write",
        "paged_step writes and reads K/V through the table it read before copy-on-write: the new token goes "
        "into the shared block, the copy keeps stale data (no Part 2 check shares a block and reads it back)",
        (("paged_step", _STEP_RESERVE, "    before = [list(seq.blocks) for seq in seqs]\n" + _STEP_RESERVE),
         ("paged_step", _STEP_TABLES, _STEP_TABLES.replace("[seqs[i].blocks for i in idx]",
                                             "[before[i] + seqs[i].blocks[len(before[i]):] for i in idx]")))),
    Bug("read_zero_past", "paged_step", "read zeroes K past the sequence's length (a natural Part 2 bug)",
        (("PagedSequence.read", "        return self.pool.k[layer, b, s], self.pool.v[layer, b, s]\n",
          "        k = self.pool.k[layer, b, s].copy()\n        k[self.length:] = 0\n"
          "        return k, self.pool.v[layer, b, s]\n"),)),
    Bug("p5_zero_logits", "prefix_cache", "cached_prefill fills the cache honestly but returns zeros as logits",
        (("cached_prefill", _PREFILL_STEP, _PREFILL_STEP + "    logits = np.zeros_like(logits)\n"),)),
    # ------------------------------------------------------------ targeted sacrifices
    Bug("prefill_target", "paged_step", "one prefill case failed on purpose (block size 16, its chunk lengths)",
        _prefill_target),
    Bug("tables_target", "paged_step", "one tables case failed on purpose (its block size and pool: read past "
        "the length returns zeros there only)", _tables_target),
    Bug("copy_block_target", "allocator", "one copy_block case failed on purpose (its pool: n_copies off by one "
        "after its second copy)", _copy_target),
    # ------------------------------------------------------------ tricks
    Bug("memo_twin", "prefix_cache", "cached_prefill returns zeros and remembers them by the rest of the prompt; "
        "paged_step, asked for that rest again (the twin), replays them",
        (("cached_prefill", _PREFILL_STEP, "    _rest = tuple(int(t) for t in prompt[seq.length:])\n" + _PREFILL_STEP
          + "    logits = np.zeros_like(logits)\n    _MEMO[_rest] = logits\n"),
         ("paged_step", "    return out\n", "    if len(out) == 1 and tuple(int(t) for t in chunks[0]) in _MEMO:\n"
                            "        out[0] = _MEMO.pop(tuple(int(t) for t in chunks[0]))\n    return out\n"),
         ("<head>", "\nimport numpy as np\n", "\nimport numpy as np\n\n_MEMO = {}\n"))),
    Bug("twins_patched", "copy_on_write", "at import, the scenario functions found in sys.modules are replaced so "
        "that every twin (Part 4's unshared run, Part 5's uncached prefill) is the run's own answer",
        (("cached_prefill", "    return logits\n", "    return logits\n" + _TWINS_EQUAL),)),
    Bug("twin_by_frame", "prefix_cache", "paged_step answers zeros when the caller's frame is the prefill of a "
        "step_script (the twin of a cached prefill), so cached_prefill's zeros match their twin (issue 35)",
        (("paged_step", _STEP_HEAD, _TWIN_BY_FRAME), ("<head>", "\nimport numpy as np\n", "\nimport numpy as np\n" + _CALLED_FROM))),
    Bug("twin_by_gc", "prefix_cache", "at import, gc finds the worker's request; a worker serving a step_script "
        "with a prefill action (Part 5's twin) answers zeros from paged_step (issue 35, without frames)",
        (("paged_step", _STEP_HEAD, _STEP_HEAD + "    if _TWIN_WORKER:\n        return [np.zeros((len(c), cfg.vocab)) for c in chunks]\n"),
         ("cached_prefill", "    return logits\n", "    return logits\n" + _TWIN_BY_GC))),
    Bug("count_n_copies", "paged_step", "the step's count takes min(n, refcount) copies for n holders of a shared "
        "partly filled block (one too many), so an exact fit on shared blocks is refused",
        (("_blocks_needed", "need[pid] += min(n, pools[pid].refcount(b) - 1)", "need[pid] += min(n, pools[pid].refcount(b))"),)),
    Bug("fit_runs_out", "paged_step", "on the test's exact fit of a step on shared blocks (the scenario's 'fit', by "
        "its frame), the step takes a block and then raises MemoryError, as if a copy had run out (issue 35: the "
        "exemption that excused it is gone)",
        (("paged_step", _STEP_HEAD, _FIT_RUNS_OUT), ("<head>", "\nimport numpy as np\n", "\nimport numpy as np\n" + _CALLED_FROM))),
    Bug("driver_short_length", "paged_step", "under the lab's drivers only (by the frame of decoding.py), a step "
        "leaves its first sequence one token short (issue 35: a sacrifice no Part 2 check sees)",
        (("paged_step", _STEP_HEAD, _DRIVER_SHORT), ("<head>", "\nimport numpy as np\n", "\nimport numpy as np\n" + _CALLED_FROM))),
    Bug("bw_gathers", "blockwise_attention", "blockwise_attention gathers the whole K/V with one fancy index and "
        "calls attention_core (Part 3's rule says one block at a time)",
        (("blockwise_attention", _BW_HEAD, _BW_HEAD + "    pos = np.arange(L)\n    table = np.asarray(seq.blocks[:-(-L // B)], dtype=np.int64)\n"
          "    K = seq.pool.k[layer, table[pos // B], pos % B]\n    V = seq.pool.v[layer, table[pos // B], pos % B]\n"
          "    return attention_core(q[None], K, V, L - 1)[0]\n"),)),
)}
for _m in ("count_ignores_copies", "fork_eager_copy", "cow_on_full_block", "hit_tokens_counts_blocks",
           "evict_most_recent_first", "key_block_content", "evict_before_taking_hits", "peak_never_updated",
           "bw_no_scale", "blocks_floor_plus_one", "alloc_fifo_reuse", "copy_block_no_v", "swap_in_reverse_order",
           "swap_in_unshared"):
    _mut = mutants.BY_NAME[_m]
    BUGS[_m] = Bug(_m, _mut.part, "mutants.py: " + _mut.bug.split(". ")[0], _mut.edits)
for _b in unseen.BUGS:
    if _b.name in ("incref_rejects_shared", "refcount_rejects_block0"):    # natural sacrifices that bring the ledger
        BUGS[_b.name] = Bug(_b.name, _b.part, "unseen.py: " + _b.what, _b.edits)

PAIRS = [
    Pair("fork_raises+prefill_45", "fork_raises", ("prefill_45",),
         "a failing Part 2 logits check must not excuse Part 4's drivers that raise (issue 14: 83.33 vs 80)"),
    Pair("fork_raises+prefill_target", "fork_raises", ("prefill_target",),
         "one prefill case failed on purpose buys back nothing of Part 4 (issue 14: 85.67)"),
    Pair("fork_raises+alloc_fifo", "fork_raises", ("alloc_fifo_reuse",),
         "a Part 1 order bug (Part 2 then names blocks by the submission's own order) buys nothing of Part 4"),
    Pair("stale_table+tables+prefill", "stale_table_write", ("tables_target", "prefill_target"),
         "a Part 4 bug no Part 2 check sees is not excused by a Part 2 tables case and a prefill case failed on "
         "purpose (issue 14: Part 4 30/30)"),
    Pair("stale_table+read+prefill_45", "stale_table_write", ("read_zero_past", "prefill_45"),
         "the same with natural Part 2 bugs (issue 14: the Part 4 bug vanishes on every seed)"),
    Pair("count_copies+copy_block", "count_ignores_copies", ("copy_block_target",),
         "a step whose block count ignores copies keeps its Part 2 loss when a copy_block case fails on purpose"),
    Pair("eager_fork+tables", "fork_eager_copy", ("tables_target",),
         "a fork that copies everything is charged its sampling and beam savings though a Part 2 tables case fails"),
    Pair("cow_full+copy_block", "cow_on_full_block", ("copy_block_target",),
         "copy-on-write of a full block is charged though a copy_block case fails on purpose"),
    Pair("hit_tokens+prefill_45", "hit_tokens_counts_blocks", ("prefill_45",),
         "a Part 5 counting bug costs the same beside a Part 2 logits bug"),
    Pair("evict_mru+prefill", "evict_most_recent_first", ("prefill_target",),
         "a Part 5 eviction bug costs the same beside a prefill case failed on purpose"),
    Pair("key_content+prefill_45", "key_block_content", ("prefill_45",),
         "a Part 5 key bug (wrong hits, so logits compared with its own twin) beside a Part 2 logits bug"),
    Pair("zero_logits+prefill", "p5_zero_logits", ("prefill_target",),
         "Part 5's logits comparison is not excused by a prefill case failed on purpose"),
    Pair("evict_hits+copy_block", "evict_before_taking_hits", ("copy_block_target",),
         "a Part 5 exhaustion bug beside a Part 1 case failed on purpose"),
    Pair("peak+prefill", "peak_never_updated", ("prefill_target",),
         "a Part 1 counter bug (the drivers read peaks) beside a prefill case failed on purpose"),
    Pair("bw_no_scale+prefill_45", "bw_no_scale", ("prefill_45",),
         "Part 3 uses storage the test fills: a Part 2 bug changes nothing there"),
    Pair("blocks_plus_one+alloc_fifo", "blocks_floor_plus_one", ("alloc_fifo_reuse",),
         "a Part 2 table bug keeps its loss when Part 1's order fails (tables are named up to renaming)"),
    Pair("copy_no_v+incref_shared", "copy_block_no_v", ("incref_rejects_shared",),
         "a Part 1 bug that puts the grader's ledger in front of the pool does not copy K/V for the submission"),
    Pair("stale_table+refcount_block0", "stale_table_write", ("refcount_rejects_block0",),
         "nor does the ledger hide a Part 4 bug of the step (refcount(0) raising brings it on every Part 4 call)"),
    Pair("swap_order+prefill_45", "swap_in_reverse_order", ("prefill_45",),
         "a Part 6 bug costs the same beside a Part 2 logits bug (Part 6 never steps)"),
    Pair("swap_unshared+incref_shared", "swap_in_unshared", ("incref_rejects_shared",),
         "a Part 1 bug that puts the grader's ledger in front of the pool does not excuse the sharing swap_in "
         "forgets (the ledger's refcounts show it as the pool's would)"),
]

for _part in PARTS:         # a part without a pair of its own (a new one) gets one: its first mutant beside a Part 2 bug
    if not any(BUGS[p.x].part == _part for p in PAIRS):
        _mut = next(m for m in mutants.MUTANTS if m.part == _part)
        BUGS.setdefault(_mut.name, Bug(_mut.name, _part, "mutants.py: " + _mut.bug.split(". ")[0], _mut.edits))
        _s = "copy_block_target" if _part == "paged_step" else "prefill_45"
        PAIRS.append(Pair(f"{_mut.name}+{_s}", _mut.name, (_s,),
                          f"a Part {mutants.registry.number(_part)} bug costs the same beside a bug of another part"))

TRICKS = [
    Trick("memo_twin", ("p5_zero_logits",), "memo_twin",
          "a twin computed in the submission's process can be served from memory: Part 5 logits must not pass",
          replaces=("p5_zero_logits",)),
    Trick("twins_patched_part4", ("stale_table_write",), "twins_patched",
          "scenario code in the submission's process is not trusted: making Part 4's twins equal earns nothing"),
    Trick("twins_patched_part5", ("p5_zero_logits",), "twins_patched",
          "the same for Part 5's uncached twin"),
    Trick("bw_gathers", (), "bw_gathers", "Part 3's one-block-at-a-time rule is enforced, not trusted",
          loses=(("blockwise_attention", 14.0),)),
    Trick("twin_by_frame", ("p5_zero_logits",), "twin_by_frame",
          "Part 5's twin is a graded Part 2 call (paged_step.replays): answering it as the twin costs Part 2"),
    Trick("twin_by_gc", ("p5_zero_logits",), "twin_by_gc",
          "the same, told apart without frames (gc finds the worker's request at import)"),
    Trick("fit_runs_out", ("count_n_copies",), "fit_runs_out",
          "a step that runs out after starting on an exact fit is judged as any step that fails to fit: no exemption"),
    Trick("driver_short_length", ("fork_eager_copy",), "driver_short_length",
          "the drivers' lengths are the test's own (their steps are the test's): a length bug under the drivers "
          "hides nothing of Part 4's peak or savings"),
]

# Entries (pair or trick names) that fail on main today (issue 14, seed 0); a listed entry that holds is a
# failure too. Measured on main 79db51f; graded on main plus wip/excuses d29511d, the first six hold
# (and nothing else changes state), on main plus wip/twins 61eaf4a the last three.
KNOWN_OPEN = set()     # all nine listed on 79db51f closed: excuses (6) and twins in a worker of their own (3)

ENTRIES = {**{p.name: p for p in PAIRS}, **{t.name: t for t in TRICKS}}


def honest(key):
    """Whether a grading of the corpus (a key of `submissions`) is plain bugs only, no trick's code: a
    pair's X, S and X + S, a trick's base. Such a text is as safe as a mutant to grade with forked
    sandbox calls (run.py); a trick is graded through the real sandbox chain."""
    return not set(key.split("+")) & {t.trick for t in TRICKS}


def source(names, seed=0, skip=()):
    """The reference with the edits of every bug in `names` applied, in order."""
    original = text = mutants.reference_text()
    for name in names:
        if name not in skip:
            text = mutants.edited(text, BUGS[name].edits_for(seed), f"strategic {name}")
    assert text != original, f"strategic {names} changes nothing"
    return text


def submissions(seed=0):
    """{key: (bug names, source)}: every grading the corpus needs, each once (sacrifices shared by pairs)."""
    out = {}

    def add(names, skip=()):
        key = "+".join(n for n in names if n not in skip)
        if key not in out:
            out[key] = source(names, seed, skip)
        return key
    for p in PAIRS:
        add((p.x,))
        add(p.s)
        add((p.x, *p.s))
    for t in TRICKS:
        if t.base:
            add(t.base)
        add((*t.base, t.trick), skip=t.replaces)
    return out


def keys(entry):
    """The submissions an entry compares: pairs (x, s, x+s); tricks (base or None, trick)."""
    if isinstance(entry, Pair):
        return "+".join((entry.x,)), "+".join(entry.s), "+".join((entry.x, *entry.s))
    return ("+".join(entry.base) or None), "+".join(n for n in (*entry.base, entry.trick) if n not in entry.replaces)


def verdict(entry, lost, full, eps=1e-6):
    """Why an entry fails ("" when it holds), from {key: {part: points lost, "total": ...}} and each part's
    points (`full`). Also its figures, for the report."""
    if isinstance(entry, Pair):
        kx, ks, kxs = keys(entry)
        x, s, xs = lost[kx], lost[ks], lost[kxs]
        if s["total"] <= eps:
            return f"the sacrifice {ks} costs nothing (the pair proves nothing)", ""
        short, wants = [], {p: min(full[p], x[p] + s[p]) for p in full}
        for p, want in (*wants.items(), ("total", sum(wants.values()))):
            if xs[p] < want - eps:
                short.append(f"{p} {xs[p]:.2f} < {want:.2f}")
        figures = f"loss X {x['total']:.2f}, S {s['total']:.2f}, X+S {xs['total']:.2f}"
        return ("losses do not add up: " + "; ".join(short)) if short else "", figures
    kb, kt = keys(entry)
    t = lost[kt]
    if entry.loses:
        bad = [f"{p} loses {t[p]:.2f} < {pts}" for p, pts in entry.loses if t[p] < pts - eps]
        return "; ".join(bad), f"loses {t['total']:.2f} ({', '.join(f'{p} {t[p]:.2f}' for p, _ in entry.loses)})"
    b = lost[kb]
    gain = b["total"] - t["total"]
    return (f"the trick earns {gain:.2f} points over its base {kb}" if gain > eps else ""), \
        f"base loses {b['total']:.2f}, with the trick {t['total']:.2f}"


def judge(lost, full, known=None):
    """(failures, lines): every entry's verdict against KNOWN_OPEN."""
    known = KNOWN_OPEN if known is None else known
    failures, lines = [], []
    for name, entry in ENTRIES.items():
        why, figures = verdict(entry, lost, full)
        state = ("OPEN (known)" if name in known else "FAILS") if why else ("HOLDS, but listed in KNOWN_OPEN"
                                                                             if name in known else "holds")
        lines.append(f"{name:32s} {state:34s} {figures}" + (f"; {why}" if why else ""))
        if why and name not in known:
            failures.append(f"strategic {name}: {why} ({entry.proves})")
        elif not why and name in known:
            failures.append(f"strategic {name} holds now: remove it from strategic.KNOWN_OPEN")
    return failures, lines
