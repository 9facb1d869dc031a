"""Judges that explain a difference in the terms of the assignment: which action of a script, what
state, with the block tables drawn. They print the script's shape (operations, sequence indices,
chunk sizes, block ids) but never the hidden token ids, prompts or seeds.

Each judge compares only what its part owns (tests/rules.py says what that is): Part 1 the pool's
ids, refcounts and counters; Part 2 logits, lengths, errors, all-or-nothing and the tables up to
renaming; Part 4 sharing, judged on the tables and refcounts the submission's own pool shows, on
K/V the test put in storage itself, and on drivers whose tokens the test chooses. So a bug is
charged once without asking how other parts fare: no judge of Parts 1-4 leaves a comparison out
because another part fails. Where a case truly cannot be observed without another part (a
copy_block or paged_step that raises), it fails, and its message names the part to fix first. A
twin (the same implementation without sharing, without the cache) is the case's second run, from a
worker of its own (`ctx.second`).
"""
import functools

from explain import (describe_action, describe_prefix_actions, draw_tables, hidden_feedback, ours, outcome, their,
                     their_list)
from rules import (NORMAL_COPY, append_violation, copy_note, first_copy, first_move, lifetime_from, refcount_note, handle_ids, kv_difference, lowest_free_difference, part2_view,
                   part5_view, pool_difference, pool_view, pool_view_violation, sampling_violation, savings,
                   sharing_violation, short_of, step_twin, twin_difference, twin_requests, unshared_records)
from scenarios import REFUSALS

from grader.hidden.compare import ATTENTION_TOL, _show, first_mismatch, ranges_for
from grader.hidden.inputs import Case

SAVINGS_RANGE = 0.02        # the drivers' savings: within 2 points of the reference's on the same inputs


def _wrong_form(what="answer"):
    return f"  the {what} has the wrong form (was the scenario code tampered with?)"


def generic_judge(case, expected, got, ctx=None):
    """The plain comparison with the reference: the first difference, with its path. Only for a check
    that names it in its module's JUDGES (whatever it compares is then that check's to own)."""
    found = first_mismatch(expected, got)
    return f"  {found[0]}: {found[1]}" if found else None


# ------------------------------------------------------------------------------------------ Part 1
def pool_judge(case, expected, got, ctx=None):
    """Part 1's checks but lowest_free_first: the first call after which the submission's pool differs
    from the reference's, with every block named by its handle (rules.pool_view), so which free block
    the allocator picks costs nothing here."""
    n = case.inputs["n_blocks"]
    views = _pool_views(expected, got, n)
    if views is None:
        return _wrong_form()
    for i, (e, g) in enumerate(zip(*views)):
        why = pool_difference(e, g)
        if why:
            return _pool_message(i, why, got, n)
    return None


def lowest_free_judge(case, expected, got, ctx=None):
    """allocator.lowest_free_first: the ids alloc and copy_block return, exactly the reference's."""
    n = case.inputs["n_blocks"]
    if _pool_views(expected, got, n) is None:
        return _wrong_form()
    found = lowest_free_difference(expected, got, n)
    return None if found is None else _pool_message(*found, got, n)


def _pool_views(expected, got, n):
    """Both sides' rules.pool_view, or None when the submission's records do not have the scenario's
    form (other calls, other blocks passed than the script names)."""
    if not isinstance(got, list) or len(got) != len(expected) or \
            any(not isinstance(g, dict) or g.get("op") != e["op"] for e, g in zip(expected, got)):
        return None
    try:
        return pool_view(expected, n), pool_view(got, n)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def _pool_message(i, why, got, n):
    """What differed after call i, with the ids of the submission's handles when the call or the
    difference names a handle."""
    rec, b = got[i], got[i]["block"]
    named = len(rec["op"]) > 1 and not (isinstance(rec["op"][1], list) and rec["op"][1][0] == "id")
    yours = f" (your block {their(b, 'id')})" if named else ""
    lines = [f"  after action {i + 1} of {len(got)}, {describe_action(rec['op'])}{yours}:", f"    {why}"]
    if named or "#" in why:
        lines.append(f"    (#k is the block the k-th alloc or copy_block that succeeded returned; yours: "
                     f"{handle_ids(got[:i + 1], n)})")
    return "\n".join(lines)


def _drawable(rec):
    """Only lists of ints are drawn from the submission's side."""
    return (isinstance(rec.get("tables"), list) and all(_ints(t) for t in rec["tables"])
            and _ints(rec.get("lengths")) and isinstance(rec.get("refcounts"), list))


def _ints(x):
    return isinstance(x, list) and all(type(i) is int for i in x)


def _records_ok(got, n, keys):
    """The submission's records have the scenario's form: n dicts with these keys, tables of ints."""
    if not isinstance(got, list) or len(got) != n:
        return False
    for rec in got:
        if not isinstance(rec, dict) or not keys <= set(rec):
            return False
        if "tables" in keys and not _drawable({"refcounts": [], **rec}):
            return False
    return True


# ------------------------------------------------------------------------------------------ Part 2
PART2_FIELDS = {            # what each Part 2 check compares, besides errors and all-or-nothing
    "logits": ("result", "error", "lengths", "unchanged"),
    "tables": ("result", "error", "lengths", "unchanged", "tables", "kv"),
    "replays": ("result", "error", "lengths", "unchanged", "kv"),
}


def replays_judge(case, expected, got, ctx=None):
    """paged_step.replays: the runs a check of another part compares a submission's run with (its
    second runs: step_scripts, the same code without sharing or without the cache), judged as Part 2
    judges any step_script, against the reference's answer to the same call. The calls are those the
    check makes of the reference's own answers; the grading runs each once, so the twin a Part 4 or
    Part 5 check reads for a correct submission is the very run judged here: answering it otherwise
    than a step_script deserves costs Part 2 (case.inputs: "of", the check; "calls", the runs)."""
    calls = case.inputs["calls"]
    if not isinstance(got, list) or len(got) != len(calls) or not isinstance(expected, list) \
            or len(expected) != len(calls):
        return _wrong_form()
    judge = part2_judge(PART2_FIELDS["replays"])
    for k, ((scenario, inputs), e, g) in enumerate(zip(calls, expected, got), 1):
        run = Case(f"run {k}", scenario, inputs)
        with hidden_feedback(ranges_for(run)):
            why = judge(run, e, g)
        if why:
            return f"  run {k} of {len(calls)}:\n  {why.strip()}"
    return None


NEEDS_POOL = "this check needs a pool that does what Part 1 says: fix Part 1 first"
NEEDS_COPY = "it needs a pool.copy_block (Part 1) that runs: fix Part 1 first"


def part2_judge(fields):
    """A judge for step_script cases comparing `fields` of rules.part2_view. Block ids are named by the
    submission's own allocation order (tables up to renaming), or, from a block the test gave back
    after the setup on, by lifetime (rules.lifetime_from), so which id the allocator picks, Part 1's
    business, never matters here. After a "share" or "mirror" the tables are Part 4's (whether a write
    copies); from the reference's first copy on only errors and all-or-nothing count: Part 2 owns the
    step's block count (new blocks plus min(w, r - 1) copies), which decides MemoryError on an exact
    fit or one block short before anything changes. Nothing is left out: a step that raised where the
    reference's did not is failed, also when another part made it run out (a copy the contract does
    not make, a copy_block that raises), and the message then names that part to fix first."""
    def judge(case, expected, got, ctx=None):
        if not isinstance(got, dict) or not isinstance(got.get("order"), list) \
                or not all(type(b) is int for b in got["order"]) \
                or not _records_ok(got.get("records"), len(expected["records"]), {"op", "error", "lengths", "tables"}):
            return _wrong_form()
        try:
            moved = lifetime_from(expected["records"], first_move(got["records"]))  # both sides alike from there
            copied = first_copy(expected["records"])
            e_view, g_view = part2_view(expected, moved=moved, copied=copied), part2_view(got, moved=moved, copied=copied)
        except (KeyError, TypeError, ValueError, AttributeError):
            return _wrong_form()
        block_size = case.inputs["block_size"]
        for n, (e, g, rec) in enumerate(zip(e_view, g_view, expected["records"]), 1):
            keep = [f for f in fields if f in e]
            found = first_mismatch({f: e[f] for f in keep}, {f: g.get(f) for f in keep}, path="")
            if found:
                raw = got["records"][n - 1]
                if found[0] == ".error":        # what raised, in its own words (bounded like any value)
                    found = (".error", f"expected {e['error'] or 'no error'}, got {outcome(raw['error'])}")
                message = _part2_message(n, len(e_view), rec, found, raw, block_size)
                raised_sharing = "tables" not in e and raw["error"] is not None
                needed = _copy_needed(got.get("copy_probe")) if raised_sharing else ""
                needed = needed or _pool_needed(rec, raw, got.get("capacity_probe"), got.get("refcount_probe")) \
                    or _cow_needed(rec, raw, got.get("cow_probe")) \
                    or (_cow_raises(rec, raw, got.get("cow_probe")) if raised_sharing else "")
                return f"{message}\n    ({needed})" if needed else message
        return None
    return judge


_TEST_CALLS = {"alloc": "pool.alloc", "release": "pool.decref", "share": "pool.incref", "mirror": "pool.incref",
               "adopt": "pool.alloc",
               "take_rest": "pool.alloc"}


def _pool_needed(rec, raw, capacity, refcounts=None):
    """What to add when the test's own pool call raised (Part 1's: the test takes, gives back or shares a
    block), when a step ran out of blocks while pool.n_free does not say what alloc hands out on a
    pool of its own (scenarios.capacity_probe: a step counts on n_free), or when a call raised while
    incref, decref or refcount do not work there (scenarios.refcount_probe); "" otherwise."""
    if raw["error"] is None:
        return ""
    if rec["error"] is None and isinstance(raw["error"], dict) and raw["error"].get("kind") == "MemoryError" \
            and capacity is not None and rec["op"][0] not in _TEST_CALLS:      # the most precise first
        return ("this call ran out of blocks, and on a pool of its own your pool.n_free does not say what alloc "
                f"hands out: {NEEDS_POOL}")
    if rec["error"] is None and refcounts is not None and rec["op"][0] not in _TEST_CALLS:
        return ("this call raised, and on a pool of its own your pool.incref, decref or refcount does not do what "
                f"the contract says: {NEEDS_POOL}")
    if rec["op"][0] in _TEST_CALLS:
        return f"the test's own {_TEST_CALLS[rec['op'][0]]} raised: {NEEDS_POOL}"
    return ""


def _cow_raises(rec, raw, probe):
    """What to add when a call raised where the reference did not while, on a pool of its own,
    copy-on-write itself raises (scenarios.cow_probe gave an error's kind): Part 4's to fix first."""
    if isinstance(probe, str) and probe != "NotImplementedError" and rec["error"] is None and raw["error"] is not None:
        return f"on a pool of its own your reserve's copy-on-write raises {their(probe, 'kind')}: fix Part 4 first"
    return ""


def _cow_needed(rec, raw, probe):
    """What to add when a call ran out of blocks where the reference did not, while on a pool of its
    own reserve's copy-on-write makes copies the contract does not (scenarios.cow_probe: a block nobody
    shares copied, or r holders writing in turn making more than r - 1 copies: Part 4's rule broken,
    so the step needs blocks the contract's count does not have); "" otherwise."""
    if probe is True and rec["error"] is None and isinstance(raw["error"], dict) and raw["error"].get("kind") == "MemoryError":
        return ("this call ran out of blocks, and on a pool of its own your reserve's copy-on-write makes copies the "
                "contract does not (a partly filled block nobody shares, or more than r - 1 copies for r holders "
                "writing in turn), which take blocks the contract does not count: fix Part 4 first")
    return ""


def _copy_needed(probe):
    """What to add when a step that copies a shared block raised while pool.copy_block does not run, or
    does not do what the contract says, on a pool of its own (scenarios.copy_runs); "" when it does."""
    if isinstance(probe, dict) and set(probe) == {"error"}:
        return f"this step copies a shared block, and your pool.copy_block raised on a pool of its own: {NEEDS_COPY}"
    if isinstance(probe, dict) and probe != NORMAL_COPY:
        return ("this step copies a shared block, and on a pool of its own your pool.copy_block does not do what the "
                "contract says (its new block, its refcounts or the K/V it copies): fix Part 1 first")
    return ""


def _part2_message(n, of, rec, found, raw, block_size):
    field = found[0].lstrip(".") or "the record"
    what = {"unchanged": "a call that raised must change nothing (tables, lengths, refcounts, counters)",
            "tables": "block tables, each block named by its place in the allocation order (#0 = the first block "
                      "your pool hands out)"}
    lines = [f"  after action {n} of {of}, {describe_action(rec['op'])}:",
             f"    {field}: {found[1]}"]
    if field.split("[")[0] in what:
        lines.append(f"    ({what[field.split('[')[0]]})")
    if field.startswith(("tables", "lengths", "kv")):
        lines.append(draw_tables("expected", rec["tables"], rec["lengths"], block_size))
        lines.append(draw_tables("got", raw["tables"], raw["lengths"], block_size, theirs=True))
    short = short_of(raw, block_size)
    if short:
        lines.append(f"    ({short})")
    return "\n".join(lines)


def _part2_probes(answer):
    """The part2 probes an answer of another part's scenario carries (scenarios.part2_probes), or {}."""
    if not isinstance(answer, dict):
        return {}
    probes = answer.get("probes")                   # (prefix_script keeps its probes together)
    found = answer.get("part2", probes.get("part2") if isinstance(probes, dict) else None)
    return found if isinstance(found, dict) else {}


def part2_note(expected, got):
    """What a failing case of Parts 4-6 adds when, on pools of their own, the submission's
    PagedSequence(pool) does not start as the contract says or its paged_step does not answer the
    step probe as the reference does (scenarios.sequence_probe, step_probe): fork, swap_in and the
    cache build sequences, requests and forks step, so the failure names Part 2; "" otherwise."""
    e, g = _part2_probes(expected), _part2_probes(got)
    notes = []
    if e.get("sequence") is True and "sequence" in g and g["sequence"] is not True and g["sequence"] is not None:
        notes.append("(on a pool of its own your PagedSequence(pool) does not start as the contract says: pool, "
                     "blocks [] and length 0 (Part 2), and this check builds sequences with it: fix Part 2 first)")
    if isinstance(e.get("step"), dict) and "step" in g and g["step"] is not None \
            and (not isinstance(g["step"], dict) or first_mismatch(e["step"], g["step"], path="") is not None):
        notes.append("(on a pool of its own your paged_step does not give the contract's logits and lengths for "
                     "sequences with tables in any order, two of them stepped together at one position (Part 2), "
                     "and this check steps: fix Part 2 first)")
    return "\n  ".join(notes)


def naming_part2(judge):
    """A judge of Parts 4-6 whose failure also says when Part 2 does not work on pools of its own
    (part2_note): the dependency named, the verdict still a failure."""
    @functools.wraps(judge)
    def judged(case, expected, got, ctx=None):
        message = judge(case, expected, got, ctx)
        note = part2_note(expected, got) if message else ""
        return f"{message}\n  {note}" if note else message
    return judged


# ------------------------------------------------------------------------------------------ Part 4
def sharing_judge(case, expected, got, ctx):
    """sharing_script cases: Part 4's rules on the submission's own tables and refcounts, then the
    K/V: read back equal to the reference's (scripts whose data the test stored itself), or, for
    scripts of steps, the logits and K/V equal to the same implementation's unshared twin (ctx.second:
    a step_script of scenarios.unshared_script in a worker of its own, so your own Part 2 is on both
    sides and nothing is excused; a step that writes outside its positions breaks sharing, and the
    failure then names Part 2, from the twin's own evidence: rules.append_violation). A failure says
    what the pool's copy_block does when it is not what the contract says (Part 1), since
    copy-on-write relies on it."""
    n = len(expected["records"])
    if not isinstance(got, dict) or not _records_ok(got.get("records"), n, {"op", "error", "lengths", "tables",
                                                                             "refcounts", "kv"}):
        return _wrong_form()
    if any(g["op"] != e["op"] for g, e in zip(got["records"], expected["records"])):
        return _wrong_form()            # the actions are said from the submission's records: they must be the script's
    message = _sharing_message(case, expected, got, ctx.second)
    twin_said = message and any(said in message for said in _TWIN_SAID)
    appended = append_violation(ctx.second[0], case.inputs["block_size"]) if twin_said else None
    if appended:        # the dependency named; the verdict stays a failure
        message += (f"\n  (without sharing too, {appended}: a step may only store its own new positions and advance "
                    "the length by its chunk, taking a block only when a position needs one (Part 2), or it overwrites blocks "
                    "that forks share: fix Part 2 first)")
    notes = [n for n in (copy_note(got.get("copy_probe")), refcount_note(got.get("refcount_probe"))) if n]
    count = got.get("count_probe")
    if message and count is True:
        notes.append(f"(on a pool of its own your reserve takes a block when the last one has room for what it is "
                     f"asked: {NEEDS_EXACT})")
    elif message and count not in (None, False):
        notes.append(f"(on a pool of its own your reserve raises {their(count, 'kind')} when asked for room the last "
                     "block has (Part 2): fix Part 2 first)")
    return "\n  ".join([message, *notes]) if message else message


def _with_notes(judge):
    """A driver's judge whose failure says, when so, that pool.incref, decref or refcount do not work
    (rules.refcount_note: the drivers' pool is judged through them), or that a table held more blocks
    than its length needs (Part 2's: copy-on-write looks at the last block)."""
    @functools.wraps(judge)
    def judged(case, expected, got, ctx=None):
        message = judge(case, expected, got, ctx)
        if not message or not _steps_ok(got):
            return message
        notes = [refcount_note(got.get("refcount_probe"))]
        B = case.inputs["block_size"]
        if any(type(n) is int and len(t) > -(-n // B) for s in got["steps"] for t, n in zip(s["tables"], s["lengths"])):
            notes.append(f"(a table held more blocks than its length needs: {NEEDS_EXACT})")
        return "\n  ".join([message, *[n for n in notes if n]])
    return judged


_TWIN_SAID = ("sharing changed the logits", "K/V without sharing")     # what a twin's difference says


def _sharing_message(case, expected, got, second):
    records, B, n = got["records"], case.inputs["block_size"], len(expected["records"])
    twinned = case.second is not None
    for i, (e, g) in enumerate(zip(expected["records"], records), 1):
        if (g["error"] is None) != (e["error"] is None) and not (twinned and g["op"][0] == "step"):
            return (f"  after action {i} of {n}, {describe_action(e['op'])}: expected {e['error']['kind'] if e['error'] else 'no error'}, "
                    f"got {outcome(g['error'])}")
    try:
        broken = sharing_violation(records, B)
    except (KeyError, TypeError, ValueError, IndexError):
        return _wrong_form()
    if broken:
        return "  " + broken.replace("\n", "\n  ")
    if not twinned:
        return _kv_against(expected["records"], records, "K/V the test stored")
    twin = unshared_records(case.inputs["actions"], second[0]) if second and len(second) == 1 else None
    if twin is None:
        return _wrong_form("answer of the script without sharing")
    for i, (e, g, t) in enumerate(zip(expected["records"], records, twin), 1):
        if t["error"] is not None and e["error"] is None:
            return (f"  after action {i} of {n}, {describe_action(g['op'])}: without sharing (every fork a new sequence "
                    f"that prefills its parent's tokens), your code raised {outcome(t['error'])}: this check needs a "
                    f"paged_step that runs (fix Part 2 first)")
        if _kind(g["error"]) != _kind(t["error"]):
            return (f"  after action {i} of {n}, {describe_action(g['op'])}: sharing changed the outcome: "
                    f"{_kind(g['error'])} with sharing, {_kind(t['error'])} without")
        if g["op"][0] == "step" and g["error"] is None:
            found = first_mismatch(t["result"], g["result"], path="logits", twin=True)
            if found:
                return (f"  after action {i} of {n}, {describe_action(g['op'])}: {_TWIN_SAID[0]} "
                        f"(vs the same script where every fork is a new sequence that prefills its parent's tokens):"
                        f" {found[0]}: {found[1]}")
    return _kv_against(twin, records, _TWIN_SAID[1], twin=True)


def _kind(error):
    """An error's kind as feedback may say it: a word of explain.SAFE_WORDS, validated like any value."""
    return "no error" if error is None else their(error.get("kind"), "kind") if isinstance(error, dict) else "an error"


def _kv_against(expected_records, records, what, twin=False):
    for i, (e, g) in enumerate(zip(expected_records, records), 1):
        if not isinstance(g["kv"], list) or len(g["kv"]) != len(e["kv"]):
            return _wrong_form("K/V record")
        for s, (ekv, gkv) in enumerate(zip(e["kv"], g["kv"])):
            if not isinstance(gkv, dict) or not (set(gkv) in ({"short"}, {"k", "v"})):
                return _wrong_form("K/V record")
            why = kv_difference(ekv, gkv, twin=twin)
            if why:
                return (f"  after action {i} of {len(records)}, {describe_action(g['op'])}: seq {s}'s K/V read from "
                        f"pool storage through its table differ from the {what}: {why}")
    return None


# ------------------------------------------------------------------------------------ the drivers
def _steps_ok(got):
    return (isinstance(got, dict) and isinstance(got.get("steps"), list) and type(got.get("in_use_after")) is int
            and all(isinstance(s, dict) and type(s.get("in_use")) is int and isinstance(s.get("tables"), list)
                    and isinstance(s.get("lengths"), list) and len(s["lengths"]) == len(s["tables"])
                    and all(isinstance(t, list) and all(type(b) is int for b in t) for t in s["tables"])
                    for s in got["steps"]))


def _savings_line(expected, got):
    return (f"blocks saved by sharing: {their(savings(got['steps']), 'share', '.1%')} (the reference: "
            f"{ours(savings(expected['steps']), '.1%')})")


def _savings_off(expected, got):
    e, g = savings(expected["steps"]), savings(got["steps"])
    if abs(e - g) > SAVINGS_RANGE:
        return (f"  {_savings_line(expected, got)}: outside {ours(e - SAVINGS_RANGE, '.1%')}.."
                f"{ours(e + SAVINGS_RANGE, '.1%')}")
    return None


NEEDS_PART2 = "needs a paged_step that runs (Part 2): fix Part 2 first"
NEEDS_EXACT = "a step or reserve takes a block only when a position needs one (Part 2): fix Part 2 first"


def _driver_failed(got):
    """The driver raised: always a failure of this case (a driver that did not run was not judged, so
    it is no pass). The test's own step (scenarios._StepWatch: your reserve, the test's K/V) raised:
    said with what copy_block (Part 1) and copy-on-write (Part 4) do on pools of their own, since a
    fork's step copies; paged_step raised (a driver run without the test's steps): Part 2's."""
    if got.get("error") is None:
        return None
    if got.get("raised_in") in ("paged_step", "the test's step"):
        stopped = (f"  the driver stopped: paged_step raised {outcome(got['error'])}" if got["raised_in"] == "paged_step"
                   else f"  the driver stopped: your reserve raised {outcome(got['error'])} in a step (the test "
                        f"advances each sequence by its token: your reserve, then the test's own K/V)")
        copy = _copy_needed(got.get("copy_probe"))
        if copy:
            return f"{stopped}: {copy}"
        if got.get("cow_probe") is True:
            return f"{stopped}: on a pool of its own your copy-on-write makes copies the contract does not"
        if got.get("count_probe") not in (None, False) and got["raised_in"] == "the test's step":
            return (f"{stopped}: on a pool of its own your reserve raises or takes a block when the last one has "
                    f"room for what it is asked: {NEEDS_EXACT}")
        return f"{stopped}: this check {NEEDS_PART2}" if got["raised_in"] == "paged_step" else stopped
    return f"  the driver raised {outcome(got['error'])} (a fork or free failed)"


def sampling_judge(case, expected, got, ctx=None):
    """parallel_sample with the tokens chosen by the test (scenarios._chosen), so nothing here depends
    on Part 2's logits, and every step the test's own (your reserve, the test's K/V: lengths are the
    test's): the pool after every step (sharing, copies, leaks), the peak blocks in use and the savings
    against the reference's on the same choices. The samples are not compared (the test chose them)."""
    if not _steps_ok(got):
        return _wrong_form()
    failed = _driver_failed(got)
    if failed:
        return failed
    if len(got["steps"]) != len(expected["steps"]):
        return _wrong_form()
    inputs = case.inputs
    broken = (pool_view_violation(got["steps"], got["in_use_after"])
              or sampling_violation(got["steps"], len(inputs["prompt"]), inputs["n"], inputs["block_size"]))
    if broken:
        return f"  {broken}\n  ({_savings_line(expected, got)})"
    peak_e, peak_g = max(s["in_use"] for s in expected["steps"]), max(s["in_use"] for s in got["steps"])
    if peak_e != peak_g:
        return (f"  peak blocks in use: expected {ours(peak_e)}, got {their(peak_g, 'count')}\n"
                f"  ({_savings_line(expected, got)})")
    return _savings_off(expected, got)


def beam_judge(case, expected, got, ctx=None):
    """beam_search with every beam's log-probabilities chosen by the test (scenarios._chosen), so which
    beams survive, fork and die is the same for every implementation: no leak, sharing never costs
    blocks, and the savings against the reference's (every step the test's own: lengths are the
    test's). The beams' tokens and scores are not compared (the test chose them)."""
    if not _steps_ok(got):
        return _wrong_form()
    failed = _driver_failed(got)
    if failed:
        return failed
    if len(got["steps"]) != len(expected["steps"]):
        return _wrong_form()
    broken = pool_view_violation(got["steps"], got["in_use_after"])
    if broken:
        return f"  {broken}"
    for t, s in enumerate(got["steps"]):
        alone = sum(len(table) for table in s["tables"])
        if s["in_use"] > alone:
            return (f"  after step {their(t, 'count')}, {their(s['in_use'], 'count')} blocks in use, more than the "
                    f"{their(alone, 'count')} the beams would hold alone")
    return _savings_off(expected, got)


sampling_judge, beam_judge = _with_notes(sampling_judge), _with_notes(beam_judge)


# ------------------------------------------------------------------------------------------ Part 3
def attention_judge(case, expected, got, ctx=None):
    """blockwise cases: the storage refused no access (Part 3's rule: one block per index), and each
    query's output to 1e-12. A refusal is said in the trusted side's words, chosen by its code."""
    if not isinstance(got, list) or len(got) != len(expected):
        return "  the answer has the wrong form"
    for n, (e, g, c) in enumerate(zip(expected, got, case.inputs["cases"]), 1):
        blocks = len(c["table"])
        where = (f"  query {n} of {len(expected)} (length {c['length']}, {blocks} block{'s' * (blocks != 1)} of "
                 f"{case.inputs['block_size']}, layer {c['layer']})")
        if not isinstance(g, dict) or set(g) != set(e):
            return _wrong_form()
        if g["refused"] is not None:
            return f"{where}: {REFUSALS[g['refused']]}" if isinstance(g["refused"], str) and g["refused"] in REFUSALS \
                else _wrong_form()
        found = first_mismatch(e, g, tol=ATTENTION_TOL, path="")
        if found:
            return f"{where}: {found[0].lstrip('.') or 'output'}: {found[1]}"
    return None



# ------------------------------------------------------------------------------------ Part 5 (bonus)
PART5_FIELDS = {            # what each Part 5 check compares with the reference (rules.part5_view)
    "hits": ("error", "result", "n_hit_tokens"),
    "keys": ("error", "result", "cached", "n_cached"),
    "logits": ("error",),
    "eviction": ("error", "result", "cached", "n_cached"),
    "exhaustion": ("error", "unchanged", "cached", "result"),
    "errors": ("error", "unchanged"),
}
_PART5_KEYS = {"op", "result", "error", "tables", "held", "refcounts", "n_cached", "n_hit_tokens"}


def _prefix_ok(expected, got):
    """The submission's prefix_script answer has the scenario's form: the same actions, tables and held
    blocks as lists of ints, a request's hits as ints and rows as an int, a twin's plan per action."""
    if not isinstance(got, dict) or set(got) != {"records", "twins", "alone", "probes"} \
            or not isinstance(got["alone"], list) or not isinstance(got["probes"], dict) \
            or len(got["alone"]) != len(expected["records"]):
        return False
    records, twins = got["records"], got["twins"]
    if not isinstance(records, list) or not isinstance(twins, list) or not \
            len(records) == len(twins) == len(expected["records"]):
        return False
    for e, g, t in zip(expected["records"], records, twins):
        if not isinstance(g, dict) or set(g) != _PART5_KEYS or g["op"] != e["op"] or not isinstance(g["tables"], list) \
                or not all(_ints(x) for x in g["tables"]) or not _ints(g["held"]) or not isinstance(g["refcounts"], list):
            return False
        if g["op"][0] == "request" and g["error"] is None and not (
                isinstance(g["result"], dict) and _ints(g["result"].get("hits")) and type(g["result"].get("rows")) is int):
            return False
        if t is not None and not isinstance(t, dict):       # (the twin's plan is the reference's: never read)
            return False
    return True


def _show_named(value, theirs=True):
    """A value of rules.part5_view (names the judge made from ints, ints, None, True/False): the
    submission's (theirs) validated like any of its values, the reference's as they are."""
    if isinstance(value, dict):
        done = their(value.get("computed"), "length") if theirs else ours(value.get("computed"))
        return "hits " + _show_named(value.get("hits"), theirs) + f", {done} tokens computed"
    if isinstance(value, list):
        if theirs:
            return their_list(value, item=_show_named)
        return "[" + ", ".join(_show_named(v, False) for v in value) + "]"
    if not theirs:
        return ours(value if isinstance(value, str) else repr(value))
    return their(value, "name") if isinstance(value, str) else _show(value)


_PART5_WHAT = {
    "error": "the error",
    "result": "the result (blocks named by what they were made for: 3.1 = block 1 of seq 3)",
    "cached": "the blocks the cache holds (its own reference: refcount minus the tables and the test holding it)",
    "n_cached": "n_cached",
    "n_hit_tokens": "n_hit_tokens",
    "unchanged": "a call that raised must change nothing (tables, refcounts, n_cached, n_hit_tokens)",
}


_TEST_POOL_CALLS = ("release", "hold", "hold_until", "unhold")


def _alone_note(op, g, alone):
    """What to add when a request raised while paged_step alone raises on its prompt, on an empty
    sequence of a pool of its own (scenarios.step_alone): the observation needs Part 2."""
    if op[0] == "request" and g.get("error") is None and alone == "accepted":
        return ("\n    (your paged_step alone accepts this prompt too, on an empty sequence of a pool of its own, though "
                "it is not a valid chunk: a cached_prefill that leaves checking the prompt to paged_step (Part 2) "
                "needs it to refuse: fix Part 2 first)")
    if op[0] == "request" and g.get("error") is not None and alone == "returns":
        return ("\n    (your paged_step alone does not return one [len(chunk), vocab] logits array per sequence on this "
                "prompt, on an empty sequence of a pool of its own: cached_prefill computes the rest of the prompt "
                "with paged_step (Part 2): fix Part 2 first)")
    if op[0] == "request" and g.get("error") is not None and alone not in (None, "accepted"):
        return (f"\n    (your paged_step alone raises {their(alone, 'kind')} on this prompt, on an empty sequence of a pool "
                "of its own: cached_prefill computes the rest of the prompt with paged_step (Part 2): fix Part 2 first)")
    return ""


def _part5_note(op, g, probes=None):
    """Where an error a Part 5 case shows is another part's to fix first: an action of the test's own
    that calls only the pool (Part 1), or a request that fits the free blocks exactly once the cache
    has evicted (Part 2's count of the blocks a step takes, Part 4's copy at a block boundary)."""
    if op[0] in _TEST_POOL_CALLS and g.get("error") is not None:
        return ("\n    (the test's own pool.alloc / pool.decref raised here, nothing of the cache's: Part 1's, fix it first)")
    if op[0] == "request" and g.get("error") == "MemoryError" and (probes or {}).get("fit") not in (None, False):
        return ("\n    (after the cache evicts the shortfall the prompt fits the free blocks exactly, and on a pool of "
                "its own your paged_step refuses (or fails) a step that needs exactly the free blocks (Part 2's "
                "count): fix Part 2 first)")
    if op[0] == "request" and g.get("error") == "MemoryError" and (probes or {}).get("count") not in (None, False):
        return ("\n    (after the cache evicts the shortfall the prompt fits the free blocks exactly, and on a pool of "
                "its own your reserve takes a block (or raises) when the last one has room for what it is asked: "
                "a step must take a block only when a position needs one (Part 2): fix Part 2 first)")
    if op[0] == "request" and g.get("error") == "MemoryError" and (probes or {}).get("cow") is True:
        return ("\n    (after the cache evicts the shortfall the prompt fits the free blocks exactly, and on a pool of "
                "its own your copy-on-write makes copies the contract does not (a full shared block, say), which take "
                "blocks the contract does not count: fix Part 4 first)")
    if op[0] == "request" and g.get("error") == "MemoryError":
        return ("\n    (after the cache evicts the shortfall the prompt fits the free blocks exactly: your paged_step "
                "must then take every one of them; Part 2's count and Part 4's copy-on-write decide that too)")
    return ""


def prefix_judge(fields, twin=False):
    """A judge for prefix_script cases comparing `fields` of rules.part5_view with the reference's, the
    cache holding one reference per cached block (when "cached" is compared) and, with twin=True,
    every request's logits with the same prompt prefilled by the same implementation without the
    cache (rules.twin_difference; ctx.second: scenarios.prefix_twin calls run in a worker of their
    own): your own Parts 1-4, right or wrong, are on both sides."""
    def judge(case, expected, got, ctx=None):
        if not _prefix_ok(expected, got):
            return _wrong_form()
        B = case.inputs["block_size"]
        try:
            e_view, g_view = part5_view(expected, B), part5_view(got, B)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return _wrong_form()
        said = describe_prefix_actions([r["op"] for r in expected["records"]])
        n_all = len(said)
        twins = {}
        if twin:
            requests = twin_requests(expected, got, B)
            second = ctx.second if ctx is not None else None
            if not isinstance(second, list) or len(second) != len(requests):
                return _wrong_form("answer of the prefill without the cache")
            twins = {n: step_twin(reply) for (n, _), reply in zip(requests, second)}
        for n, (e, g) in enumerate(zip(e_view, g_view)):
            where = f"  after action {n + 1} of {n_all}, {said[n]}:"
            if "cached" in fields and g["bad_references"]:
                b, r = g["bad_references"][0]
                return (f"{where}\n    block {their(b, 'id')}'s refcount minus the tables and the test holding it is "
                        f"{their(r, 'count')}: the "
                        "cache must hold exactly one reference on a block it caches (pool.incref once), none on others")
            for f in fields:
                if f in e and e[f] != g.get(f):
                    if f == "error":        # what raised, in its own words (bounded like any value)
                        op = expected["records"][n]["op"]
                        return (f"{where}\n    {_PART5_WHAT[f]}: expected {e[f] or 'no error'}, got "
                                f"{outcome(got['records'][n]['error'])}"
                                + (_alone_note(op, g, got["alone"][n]) or _part5_note(op, g, got["probes"])))
                    return (f"{where}\n    {_PART5_WHAT[f]}: expected {_show_named(e[f], theirs=False)}, got "
                            f"{_show_named(g.get(f))}")
            rec = expected["records"][n]
            if twin and rec["op"][0] == "request" and rec["error"] is None:
                why = twin_difference(got["records"][n], twins.get(n))
                if why:
                    layout = ("\n    (on a pool of its own your paged_step gives other logits when the same K/V sit in "
                              "other blocks, as a cache hit's do: a step reads through the table in its order "
                              "(Part 2): fix Part 2 first)" if got["probes"].get("layout") is True else "")
                    return (f"{where}\n    its logits differ from your own prefill of the same prompt without the cache "
                            f"(a pool of its own, the hit blocks' tokens first, then the rest): {why}{layout}")
        return None
    return judge

