"""Machinery of the hidden suites.

Each part's module (the part's test_file, tests/registry.py) declares PLANS (check id -> plan(rng) ->
[Case]) and JUDGES (check id -> judge(case, expected, got, ctx) -> message or None), both with exactly
the registry's checks of that part: a check without its judge, a judge without its check or a check
the registry does not list fails collection (bind), and grade.py refuses such a grading (exit 3).
There is no fallback judge: a check that wants the plain comparison names judges.generic_judge.
Every case becomes one pytest item marked with its check. All cases go to the sandbox in TWO calls
(Sandbox.each, a `batch` scenario per check; a fresh worker costs more than most parts), made at once
as soon as collection ends: one for the parts whose cases have second runs (they wait on it), one for
the others. A check that raises (a stub's NotImplementedError, SystemExit) gets its own answer in it,
as a call of its own would, and ends none of the others. When a call fails otherwise (a death, a hang,
a malformed reply), each check of its parts is called again on its own (and the sandbox calls such
a check once more in a fresh worker if its worker dies or the machine starves it: sandbox.py), so a
crash or a hang costs only the check it happens in. The reference answers the same calls here, in
the trusted process. The submission's code never runs
in this process.

A call the machine failed twice ("grader_error") is judged as nothing: the case fails here, but
grade.py then refuses the whole grading (exit 3, no results: regrade), so no score includes it.
What the sandbox said for staff (failed attempts, workers' stderr) is kept in `Grading.staff`.

A case with a second run (Case.second: a twin, the same implementation without sharing or without
the cache) gets it from ANOTHER sandbox call, made here from the plan (and, for Part 5, the first
run's rows of logits) once the first answers are in: every part's second runs in one call, each
check's alone when that call fails. It is the same kind of call a check compared with the reference
makes (a step_script), in a fresh worker that cannot see the first, so nothing the submission
computes in one run is what the other is compared with. A missing second answer fails the case,
saying why; a grader error there is a grader error. The judge reads it as `ctx.second`.

No judge asks how another check fares: a case is passed or failed on its own answers, so failing a
check on purpose cannot excuse another.
"""
import gc
import hashlib
import importlib
import json
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import registry
import scenarios
from explain import Ranges, hidden_feedback, their

from grader import refcache, rubric
from grader.hidden.compare import ranges_for
from grader.hidden.judges import part2_note
from grader.sandbox import DEFAULT_DEADLINE, Sandbox

CALLS_AT_ONCE = 2          # the machines have 2 cores
LEDGER = Path(__file__).with_name("ledger.py").read_text()     # scenarios.working_pool: Part 1's references
NO_LEDGER = ("allocator", "blockwise_attention")    # the pool's own part; a part judged on the test's own object
LEDGER_PARTS = tuple(p.id for p in registry.PARTS if p.id not in NO_LEDGER)   # judged through incref, decref, refcount, n_free
DEADLINE_PER_REF_SECOND = 20.0   # a correct solution 10x slower than the reference still fits, 2x over


def pytest_addoption(parser):
    g = parser.getgroup("grader")
    g.addoption("--submission", help="the paged_kv.py to grade")
    g.addoption("--seed", type=int, default=0, help="seeds the hidden inputs (per student)")
    g.addoption("--job", type=int, default=0, help="index of this grading job among parallel ones")
    g.addoption("--isolate", default="auto", choices=("auto", "yes", "no"))
    g.addoption("--hide", action="append", default=[], help="a path the submission must not see")
    g.addoption("--leave-out", action="append", default=[], help="a part not to grade (a bonus not attempted)")


def pytest_configure(config):
    config.addinivalue_line("markers", "check(id): the rubric check a case belongs to")
    config.grading = None


def rng_for(seed, check_id):
    """Independent inputs per check: a new check never shifts the inputs of another."""
    digest = hashlib.sha256(f"cs349e-l7:{seed}:{check_id}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def drawn_flags(plan, check_id, seed, cases):
    """Per case of a check's plan at `seed`: True when it is drawn from the seed (it differs at two
    other seeds), False for a core case, the same for every student. score.counted scores a drawn case
    only once every core case passes."""
    others = [plan(rng_for(f"{seed}/other-{k}", check_id)) for k in (1, 2)]

    def key(case):
        return json.dumps([case.name, case.scenario, case.inputs], sort_keys=True, default=repr)
    return [any(i >= len(o) or key(o[i]) != key(c) for o in others) for i, c in enumerate(cases)]


class BindingError(Exception):
    """A hidden module whose plans and judges are not exactly its part's checks: the grader's own
    bug, so collection fails and no grading is made with it."""


def bind(module):
    """{check id: (plan, judge)} of a hidden module, its PLANS and JUDGES matched to the registry's
    checks of the part whose test file it is, by id. Anything else is a BindingError naming what is
    extra or missing: a check graded without a judge of its own, or a judge left behind, would
    otherwise pass silently (or charge another part's comparison)."""
    name = Path(getattr(module, "__file__", "") or "").name
    part = next((p for p in registry.PARTS if p.test_file == name), None)
    if part is None:
        raise BindingError(f"{name or module!r}: no part of tests/registry.py has this test file")
    wanted = [c.id for c in registry.checks_of(part.id)]
    problems = []
    for what in ("PLANS", "JUDGES"):
        table = getattr(module, what, None)
        if not isinstance(table, dict):
            problems.append(f"{what} is not a dict of check id -> function")
            continue
        extra = [c for c in table if c not in wanted]
        missing = [c for c in wanted if c not in table]
        if extra:
            problems.append(f"{what} has {', '.join(map(str, extra))}, not a check of part {part.id} in the registry")
        if missing:
            problems.append(f"{what} lacks {', '.join(missing)}")
        problems += [f"{what}[{c!r}] is not callable" for c in wanted if c in table and not callable(table[c])]
    if problems:
        raise BindingError(f"{name}: " + "; ".join(problems))
    return {c: (module.PLANS[c], module.JUDGES[c]) for c in wanted}


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    bound = bind(metafunc.module)       # before anything is left out: a broken module never loads
    seed = metafunc.config.getoption("--seed")
    params = []
    left_out = metafunc.config.getoption("--leave-out")
    for check_id, (plan, judge) in bound.items():
        if check_id in rubric.SWITCHED_OFF or rubric.CHECKS[check_id].part in left_out:
            continue                    # a bonus part the course switched off, or one not attempted
        cases = plan(rng_for(seed, check_id))
        _all_plans(metafunc.config)[check_id] = cases
        _all_judges(metafunc.config)[check_id] = judge
        drawn = drawn_flags(plan, check_id, seed, cases)
        for i, case in enumerate(cases):
            params.append(pytest.param((check_id, i), id=f"{check_id}[{i}]",
                                       marks=pytest.mark.check(check_id, drawn=drawn[i])))
    metafunc.parametrize("case", params or [pytest.param(None, marks=pytest.mark.skip("nothing to grade here"))])


def _all_plans(config):
    if not hasattr(config, "grading_plans"):
        config.grading_plans = {}
    return config.grading_plans


def _all_judges(config):
    if not hasattr(config, "grading_judges"):
        config.grading_judges = {}
    return config.grading_judges


class Grading:
    """The reference's answers (computed here) and the submission's (from the sandbox), per check."""

    def __init__(self, config):
        import paged_kv as reference          # grader.grade put the reference on sys.path
        self.reference = reference
        self.plans, self.judges = _all_plans(config), _all_judges(config)
        self.todo_parts = {}     # check id -> N, when its reply was a stub's NotImplementedError("TODO Part N")
        self.staff, self.grader_errors = [], []     # staff only: (label, line); (check id, why)
        self.expected, self.ref_seconds, self.futures = {}, {}, {}
        isolate = {"auto": None, "yes": True, "no": False}[config.getoption("--isolate")]
        job = config.getoption("--job")
        self.sandboxes = queue.Queue()
        for i in range(CALLS_AT_ONCE):
            self.sandboxes.put(Sandbox(config.getoption("--submission"), isolate=isolate,
                                       job=job * CALLS_AT_ONCE + i, hide=config.getoption("--hide")))
        self.executor = ThreadPoolExecutor(CALLS_AT_ONCE)
        self.parts, self.part_futures, self.lock = {}, {}, threading.Lock()
        self.together = {}      # part -> the check ids of the call it went in (its parts', in order)
        self.second_futures, self.second_calls = {}, {}     # "seconds" or an entry -> future; check id -> {i: calls}
        self.seconds = None     # (entries in the call's order, {(check id, i): its entries}, {entry: call}), once made
        self.seed, self._first_of_reference, self._drawn = config.getoption("--seed"), {}, {}
        boxes = list(self.sandboxes.queue)
        order = sorted(self.plans, key=lambda c: list(rubric.CHECKS).index(c))
        known = refcache.answers(self.seed if all(b.isolate for b in boxes) else None, order, self._reference_answers)
        for check_id in order:
            self.expected[check_id], self.ref_seconds[check_id] = known[check_id]
            if not self._replays(check_id):       # (a replays check rides in the second runs' call only)
                self.parts.setdefault(rubric.CHECKS[check_id].part, []).append(check_id)
        self.replays = [c for c in order if self._replays(c)]
        gc.freeze()     # what lives now (the modules, the reference's answers) lives to the end: not traversed again
        self.twinned = [part for part in self.parts if self._second_ids(part)]
        for parts in (self.twinned, [p for p in self.parts if p not in self.twinned]):   # the first is waited on
            if not parts:
                continue
            ids = [c for p in parts for c in self.parts[p]]
            calls = [["batch", {"calls": self._calls(c)}] for c in ids]      # retried below, per check
            future = self.executor.submit(self._call, "+".join(parts), calls, self._deadline(ids),
                                          retry=False, each=True)
            for p in parts:
                self.part_futures[p], self.together[p] = future, ids
        if self.twinned:                # the second runs start as soon as the first answers are in
            self.part_futures[self.twinned[0]].add_done_callback(lambda _: self._start_seconds(wait=False))
        elif self.replays:
            self._start_seconds(wait=False)

    def _replays(self, check_id):
        return all(case.scenario == REPLAYS for case in self.plans[check_id])

    def _reference_answers(self, check_id):
        """(the reference's answers to a check's cases, the seconds it took): computed here."""
        start = time.perf_counter()
        if self._replays(check_id):
            answers = [scenarios.batch(self.reference, calls) for calls in self._replay_calls(check_id)]
        else:
            answers = self._reference_first(check_id)
        return answers, time.perf_counter() - start

    def _reference_first(self, check_id):
        """The reference's answers to a check's cases (memoised: a replays check needs them too)."""
        if check_id not in self._first_of_reference:
            self._first_of_reference[check_id] = scenarios.batch(self.reference, self._calls(check_id))
        return self._first_of_reference[check_id]

    def _plan(self, check_id):
        """A check's cases: the grading's, or, for a check it does not grade (a bonus not attempted),
        drawn here as the grading would draw them (its seed)."""
        if check_id not in self.plans:
            self._drawn.setdefault(check_id, _bound_checks()[check_id][0](rng_for(self.seed, check_id)))
        return self.plans.get(check_id) or self._drawn[check_id]

    def _calls(self, check_id):
        return case_calls(check_id, self._plan(check_id))

    def _replay_calls(self, check_id):
        """Per case of a replays check, the second runs its twinned check makes of the reference's own
        first answers (for a correct submission, the very calls of its second runs), with the ledger as
        the replays check's part carries it, also when the twinned check is not graded."""
        out = []
        for case in self.plans[check_id]:
            twinned = case.inputs["of"]
            first = self.expected[twinned] if twinned in self.expected else self._reference_first(twinned)
            out.append(_with_ledger(check_id, replayed(first, self._plan(twinned))))
        return out

    def _deadline(self, check_ids):
        return max(DEFAULT_DEADLINE, DEADLINE_PER_REF_SECOND * sum(self.ref_seconds[c] for c in check_ids))

    def _call(self, label, calls, deadline, retry=True, each=False):
        """One sandbox call of `calls`: as one batch (a reply for all), or each=True, one Reply per call."""
        box = self.sandboxes.get()
        try:
            reply = box.each(calls, deadline=deadline, retry=retry) if each else \
                box.call("batch", {"calls": calls}, deadline=deadline, retry=retry)
        finally:
            self.sandboxes.put(box)
        with self.lock:
            self.staff += [(label, line) for line in reply.staff]
        return reply

    def _first(self, part):
        """{check id: its Reply} of the call a part's checks went in, when it answered them all (a check
        that raised included: its Reply says so, as a call of its own would); else None."""
        ids, whole = self.together[part], self.part_futures[part].result()
        if whole.status == "ok":            # each: one Reply per check, checked there
            return dict(zip(ids, whole.data))
        return None

    def _reply(self, check_id):
        """The sandbox's reply for one check: its answer in the call of its parts (see the top); when
        that call failed in any way, its part's checks are called again, each alone, so a crash or a
        hang costs only the check it happens in."""
        part = rubric.CHECKS[check_id].part
        answered = self._first(part)
        if answered is not None:
            return answered[check_id]
        with self.lock:
            if check_id not in self.futures:
                for c in self.parts[part]:
                    self.futures[c] = self.executor.submit(self._call, c, self._calls(c), self._deadline([c]))
        return self.futures[check_id].result()

    def _second_calls(self, check_id, data):
        """{case index: its second run's calls} for a check, made here from the plan and the first
        answer; None for a case whose first answer has a form they cannot be made from."""
        if check_id not in self.second_calls:
            calls = {}
            for i, case in enumerate(self.plans[check_id]):
                if case.second is not None:
                    try:
                        calls[i] = _with_ledger(check_id, case.second(self.expected[check_id][i], data[i]))
                    except Exception:       # noqa: BLE001  (the first answer has a form no plan foresaw)
                        calls[i] = None
            self.second_calls[check_id] = calls
        return self.second_calls[check_id]

    def _second_ids(self, part):
        return [c for c in self.parts[part] if any(case.second for case in self.plans[c])]

    def _start_seconds(self, wait=True):
        """Every second run in ONE call (a fresh worker costs more than they do), made once the first
        calls of the parts with second runs are done: the twins of each case whose check's first call
        answered, and the replays checks' runs (the same calls made of the reference's answers), each
        distinct call once (a twin and its replay are one run, answered once and judged twice), in an
        order drawn on the trusted side. A case whose check's first call failed gets its second runs
        later, each call on its own (_entry). (entries in order, {(check id, i): entries}, {entry: call})."""
        futures = [self.part_futures[p] for p in self.twinned]
        if not wait and not all(f.done() for f in futures):
            return None
        answered = {p: self._first(p) for p in self.twinned}
        with self.lock:
            if self.seconds is None:
                entries, uses = {}, {}
                for p in self.twinned:
                    for c in (self._second_ids(p) if answered[p] is not None else ()):
                        if answered[p][c].status == "ok":
                            for i, calls in self._second_calls(c, answered[p][c].data).items():
                                if calls is not None:
                                    uses[(c, i)] = _entries(calls, entries)
                for c in self.replays:
                    for i, calls in enumerate(self._replay_calls(c)):
                        uses[(c, i)] = _entries(calls, entries)
                order = list(entries)
                np.random.default_rng(int.from_bytes(hashlib.sha256(f"seconds:{self.seed}".encode()).digest()[:8],
                                                     "little")).shuffle(order)
                if order:
                    owners = sorted({c for c, _ in uses})
                    self.second_futures["seconds"] = self.executor.submit(
                        self._call, "second runs", [_batched(entries[k]) for k in order], self._deadline(owners),
                        retry=False, each=True)      # retried per call
                self.seconds = (order, uses, entries)
        return self.seconds

    def _entry(self, key, call, check_id):
        """The Reply for one second-run call: its answer in the one call of every second run when that
        call answered them all, else from a call of its own (so a crash or a hang costs only the cases
        that need that run)."""
        order, _, _ = self._start_seconds()
        reply = None
        if key in order:
            whole = self.second_futures["seconds"].result()
            if whole.status == "ok":
                reply = whole.data[order.index(key)]
        if reply is None:
            with self.lock:
                if key not in self.second_futures:
                    self.second_futures[key] = self.executor.submit(
                        self._call, f"{check_id} (second run)", [_batched(call)], self._deadline([check_id]), each=True)
            whole = self.second_futures[key].result()
            reply = whole.data[0] if whole.status == "ok" else whole
        if reply.status == "ok":        # a batch of one call: its answer (an Unbuilt's too: batch says so as data)
            data = reply.data
            ok = isinstance(data, list) and len(data) == 1
            return replace(reply, data=data[0]) if ok else replace(reply, status="bad_reply", data=None,
                                                                  error="the worker's answer has the wrong form")
        return reply

    def _case_entries(self, check_id, i):
        """[(entry, call)] of case i's second runs, or None when they cannot be made."""
        _, uses, entries = self._start_seconds()
        if (check_id, i) not in uses:
            if self._replays(check_id):
                return None
            data = self._reply(check_id).data        # (ok: answer() saw it)
            calls = self._second_calls(check_id, data).get(i)
            if calls is None:
                return None
            with self.lock:
                uses[(check_id, i)] = _entries(calls, entries)
        return [(k, entries[k]) for k in uses[(check_id, i)]]

    def second(self, check_id, i):
        """Case i's second runs (a twinned case's, or a replays case's): (its answers, one per call, or
        None, message): a missing or malformed answer is a message that fails the case; a grader error
        fails it as not judged."""
        found = self._case_entries(check_id, i)
        if found is None:
            return None, _wrong_form("first answer")
        replies = [self._entry(key, call, check_id) for key, call in found]
        for reply in replies:
            if reply.status == "grader_error":
                with self.lock:
                    if check_id not in dict(self.grader_errors):
                        self.grader_errors.append((check_id, reply.error))
                pytest.fail("not judged: the grader failed this call, not the submission", pytrace=False)
        part = rubric.CHECKS[check_id].part
        failed = next((r for r in replies if r.status != "ok"), None)
        if failed is not None:
            why = _no_answer(failed, registry.number(part))
            if self._replays(check_id):
                return None, f"  {why}"
            return None, "  the run this check compares yours with (the same code, in a worker of its own) failed: " + why
        return [r.data for r in replies], None

    def answer(self, check_id, i):
        """(expected, got) for case i of a check; fails the case when the submission gave no answer."""
        reply = self._reply(check_id)
        if reply.status == "grader_error":
            with self.lock:
                if check_id not in dict(self.grader_errors):
                    self.grader_errors.append((check_id, reply.error))
            pytest.fail("not judged: the grader failed this call, not the submission", pytrace=False)
        if reply.status == "raised" and reply.data:
            self.todo_parts[check_id] = reply.data.get("todo_part")
        if reply.status != "ok":
            pytest.fail(_no_answer(reply, registry.number(rubric.CHECKS[check_id].part)), pytrace=False)
        data = reply.data
        if not isinstance(data, list) or len(data) != len(self.plans[check_id]):
            pytest.fail("the worker's answer has the wrong form (was the scenario code tampered with?)", pytrace=False)
        if _unbuilt(data[i]):
            pytest.fail(_unbuilt(data[i], rubric.CHECKS[check_id].part), pytrace=False)
        return self.expected[check_id][i], data[i]

    def message(self, check_id, i):
        """The judge's message for case i (None: it passed); a missing answer fails the case. The
        submission's values in it are validated and marked (explain.hidden_feedback); grader/feedback.py
        decides how many a student sees. A replays case's answers are the second runs it names."""
        case = self.plans[check_id][i]
        if case.scenario == REPLAYS:
            got, failed = self.second(check_id, i)
            if failed:
                return failed
            built = next((_unbuilt(g, rubric.CHECKS[check_id].part) for g in got if _unbuilt(g)), "")
            if built:
                return "  " + built
            calls = [call for _, call in self._case_entries(check_id, i)]
            expected, case = self.expected[check_id][i], case._replace(inputs={**case.inputs, "calls": calls})
            return self._judged(check_id, case, expected, got, None)
        expected, got = self.answer(check_id, i)
        second = None
        if case.second is not None:
            second, failed = self.second(check_id, i)
            if failed:             # (the run of your own it compares with: Part 2's steps, named when they fail)
                with hidden_feedback(ranges_for(case)):
                    note = part2_note(expected, got)
                return f"{failed}\n  {note}" if note else failed
        return self._judged(check_id, case, expected, got, second)

    def _judged(self, check_id, case, expected, got, second):
        """The check's judge on one case, its values rendered for hidden feedback (ranges_for)."""
        with hidden_feedback(ranges_for(case)):
            try:
                return self.judges[check_id](case, expected, got, Context(self, check_id, second))
            except AssertionError:      # the grader's own invariants: its bug, said as such
                raise
            except Exception:           # noqa: BLE001  (an answer of a form no judge foresaw; never its text)
                return "  the answer has a form this check cannot judge (was the scenario code tampered with?)"

    def staff_lines(self):
        """What the sandbox said for staff, one line per failed attempt, in rubric order (parts' calls first)."""
        order = [*rubric.ALL_PARTS, *rubric.CHECKS]
        return [f"{label}: {line}" for label, line in
                sorted(self.staff, key=lambda item: (order.index(item[0]) if item[0] in order else len(order), item))]

    def close(self):
        self.executor.shutdown(wait=True)
        while not self.sandboxes.empty():
            self.sandboxes.get().close()


def _batched(call):
    """A second run's call as the scenario `batch` of it alone, so that a scenario that cannot build what
    it needs (scenarios.Unbuilt) answers so as data, as a first run's calls do."""
    return ["batch", {"calls": [call]}]


def _entries(calls, entries):
    """The keys of `calls` in `entries` (a call's canonical JSON), adding the new ones: equal calls are
    one entry, so a twin and its replay are run once."""
    keys = []
    for call in calls:
        key = json.dumps(call, sort_keys=True)
        entries.setdefault(key, call)
        keys.append(key)
    return keys


_BOUND = {}


def _bound_checks():
    """{check id: (plan, judge)} of every hidden module (bind), for a check this grading does not grade."""
    if not _BOUND:
        for part in registry.PARTS:
            _BOUND.update(bind(importlib.import_module(f"grader.hidden.{part.test_file[:-3]}")))
    return _BOUND


REPLAYS = "replays"     # the scenario of a case whose answers are other checks' second runs (paged_step.replays)


def replayed(first, cases):
    """The second runs a twinned check's cases make of the reference's own first answers: a replays
    case's runs (for a correct submission, the very calls of that check's second runs)."""
    return [call for e, case in zip(first, cases) if case.second is not None for call in case.second(e, e)]


def case_calls(check_id, cases):
    """The calls a check's cases make, as a grading sends them (with the ledger where it rides)."""
    return _with_ledger(check_id, [[c.scenario, c.inputs] for c in cases])


def _with_ledger(check_id, calls):
    """A Part 2, 4 or 5 check's calls, each with the ledger's source (scenarios.working_pool: it stands in
    for the pool's references only when the submission's own incref, decref, refcount or n_free fail
    on a pool of their own). Part 1's and 3's calls never carry it: a pool could borrow it. Part 2's
    carry it as the twins of Parts 4 and 5 (step_scripts) do, so it cannot tell a twin from a check."""
    if rubric.CHECKS[check_id].part not in LEDGER_PARTS:
        return calls
    return [[name, {**inputs, "ledger": LEDGER}] for name, inputs in calls]


def _no_answer(reply, part_no):
    if reply.status == "raised" and reply.error.startswith("NotImplementedError"):
        todo = (reply.data or {}).get("todo_part")
        if todo and todo != part_no:
            return (f"not implemented yet: your code reached a TODO of Part {todo}, which this check needs: "
                    f"fix Part {todo} first")
        return "not implemented yet (your code raised NotImplementedError)"
    what = {"timeout": "did not finish in time (an infinite loop, or far too slow)",
            "crashed": "crashed the worker process",
            "raised": "raised an exception the contract does not allow here",
            "bad_reply": "sent back something that is not a valid answer",
            "import_error": "could not be imported"}.get(reply.status, reply.status)
    if reply.status == "import_error":      # the probe already said why; here it could carry chosen line numbers
        return f"your code {what} in this call"
    if reply.status == "timeout" or not reply.error:     # (the deadline is the grader's own number)
        return f"your code {what}: {reply.error}" if reply.error else f"your code {what}"
    with hidden_feedback(_ANSWERLESS):      # what the submission chose (its exit status, exception, reply) is a value
        if reply.status == "crashed" and isinstance(reply.data, dict) and type(reply.data.get("returncode")) is int:
            rc = reply.data["returncode"]
            how = f"was killed by signal {their(-rc)}" if rc < 0 else f"exited with status {their(rc)}"
            return f"your code {what}: the worker {how} without a valid reply"
        return f"your code {what}: {their(reply.error, 'message')}"


_ANSWERLESS = Ranges(n_blocks=0, max_len=0, refs=0, most=255)      # an exit status, a signal: 0..255


def _unbuilt(got, part=None):
    """For an answer saying the scenario could not build what it needs (scenarios.Unbuilt: its name,
    one of scenarios.UNBUILT, and the error's kind, both checked here), what to fix first; else ""."""
    if not (isinstance(got, dict) and set(got) == {"unbuilt", "kind"} and type(got["unbuilt"]) is str
            and got["unbuilt"] in scenarios.UNBUILT):
        return ""
    what = got["unbuilt"]
    owner = next(p.id for p in registry.PARTS if p.number == scenarios.UNBUILT[what])
    kind = got["kind"] if type(got["kind"]) is str and got["kind"] in KINDS else "an exception"
    if part == owner:
        return f"your {what}(...) raised {kind}: every case of this check starts with it"
    return (f"your {what}(...) raised {kind}, and this check needs one before it can test anything: "
            f"fix Part {scenarios.UNBUILT[what]} ({what}) first")


KINDS = ("MemoryError", "ValueError", "IndexError", "KeyError", "TypeError", "AttributeError")   # scenarios.error_kind


def pytest_collection_finish(session):
    if session.config.getoption("--submission") and _all_plans(session.config):
        session.config.grading = Grading(session.config)


def pytest_unconfigure(config):
    if getattr(config, "grading", None):
        config.grading.close()


def _wrong_form(what):
    return f"  the {what} has the wrong form (was the scenario code tampered with?)"


class Context:
    """What one case's judge gets besides the case and the two answers: `second`, the answers of the
    case's second run (Case.second), from a worker of its own. Nothing about how other checks fare:
    no judge may decide a case by another part's verdict."""

    def __init__(self, grading, asking, second=None):
        self.grading, self.asking, self.second = grading, asking, second


@pytest.fixture
def judge(request):
    """Compare case i of a check with the reference; on a difference, fail with the explanation."""
    grading = request.config.grading

    def run(case):
        check_id, i = case
        check = rubric.CHECKS[check_id]
        plan_case = grading.plans[check_id][i]
        message = grading.message(check_id, i)
        if message:
            pytest.fail(f"{check.title} ({plan_case.name}):\n{message}\n"
                        f"Read assignment.md, section \"{check.section}\".", pytrace=False)
    return run

