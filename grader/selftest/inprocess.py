"""The hidden checks judged in this process, for our own corpus only (the reference, its variants and
mutants): the same plans, scenarios and judges as a grading, without the sandbox, so a measurement
over many seeds (margins.py) costs seconds, not a grading per seed.

Never for a submission: student code only runs in the sandbox (grader/sandbox.py). A case whose
scenario raised here is failed (None is a pass, anything else the judge's message or why). As in a
grading, the calls of Parts 2, 4 and 5 carry the ledger (hidden conftest's _with_ledger), the answers
reach the judges through the wire's round trip, and an answer saying the scenario could not build its
pool fails with the grading's "fix Part N first" (_unbuilt); the messages are the judges', before
feedback.py trims them.
"""
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for _d in (os.path.join(REPO, "lab"), os.path.join(REPO, "tests"), REPO):
    if _d not in sys.path:
        sys.path.insert(0, _d)

import scenarios  # noqa: E402
from explain import hidden_feedback  # noqa: E402

from grader import rubric, wire  # noqa: E402
from grader.hidden.compare import ranges_for  # noqa: E402
from grader.hidden.conftest import (REPLAYS, Context, _bound_checks, _unbuilt, _with_ledger, case_calls,  # noqa: E402
                                   drawn_flags, replayed, rng_for)


def load(path, tag):
    """Import a paged_kv.py file as a fresh module named paged_kv_TAG."""
    spec = importlib.util.spec_from_file_location(f"paged_kv_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_text(text, tag):
    """Import a paged_kv.py text (a mutant's) as a fresh module."""
    d = tempfile.mkdtemp(prefix=f"inprocess-{tag}-")
    path = os.path.join(d, "paged_kv.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return load(path, tag)


def bound_checks():
    """{check id: (plan, judge)} of every hidden module, in the registry's order: the hidden suites' own
    binding (conftest.bind), the one way the selftest reads the plans."""
    return _bound_checks()


def cases(check_id, seed):
    """A check's hidden cases at a seed, drawn as a grading draws them (coverage, leaks, strategic)."""
    return bound_checks()[check_id][0](rng_for(seed, check_id))


def drawn(check_id, seed, bound=None):
    """Per case of a check at a seed: drawn from the seed (True) or core (conftest.drawn_flags)."""
    plan = (bound or bound_checks())[check_id][0]
    return drawn_flags(plan, check_id, seed, plan(rng_for(seed, check_id)))


def _batch(pk, calls, sent=False):
    """(answers, None) or (None, why); sent: the answers as a grading's judges get them, through the wire."""
    try:
        got = scenarios.batch(pk, calls)
    except Exception as e:  # noqa: BLE001  (our own corpus: a mutant's crash fails its cases)
        return None, f"the scenario raised {type(e).__name__}: {e}"
    if not sent:
        return got, None
    try:
        return wire.decode(wire.encode(got)), None
    except (TypeError, ValueError) as e:
        return None, f"the answer is not plain data ({type(e).__name__}: {e})"


_EXPECTED = {}      # (reference module's name, (check id, seed[, case])) -> its answers: computed once


def _reference(ref, key, calls):
    if (ref.__name__, key) not in _EXPECTED:
        _EXPECTED[(ref.__name__, key)], why = _batch(ref, calls)
        assert why is None, f"the reference's {key}: {why}"
    return _EXPECTED[(ref.__name__, key)]


def _replay_calls(ref, check_id, seed, cases, bound):
    """Per case of a replays check, the second runs its twinned check makes of the reference's own
    first answers, as a grading makes them (hidden conftest's _replay_calls)."""
    out = []
    for case in cases:
        twinned = case.inputs["of"]
        plan = bound[twinned][0]
        first_cases = plan(rng_for(seed, twinned))
        first = _reference(ref, (twinned, seed), case_calls(twinned, first_cases))
        out.append(_with_ledger(check_id, replayed(first, first_cases)))
    return out


def _judge_replays(pk, ref, check_id, seed, cases, judge, bound, seen):
    """A replays check (paged_step.replays): each case's runs answered by pk and by the reference."""
    out = []
    for i, (case, calls) in enumerate(zip(cases, _replay_calls(ref, check_id, seed, cases, bound))):
        case = case._replace(inputs={**case.inputs, "calls": calls})
        expected = _reference(ref, (check_id, seed, i), calls)
        got, why = _batch(pk, calls, sent=True)
        if seen is not None:
            seen.append((case, expected, got))
        built = why or next((_unbuilt(g, rubric.CHECKS[check_id].part) for g in got if _unbuilt(g)), None)
        out.append(built or _judged(judge, check_id, case, expected, got, None))
    return out


def _judged(judge, check_id, case, expected, got, second):
    with hidden_feedback(ranges_for(case)):
        try:
            return judge(case, expected, got, Context(None, check_id, second))
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001
            return f"the judge could not read the answer ({type(e).__name__})"


def judge_check(pk, ref, check_id, seed, bound=None, seen=None):
    """[None or message per case] of one check at one seed, pk judged against the reference ref;
    seen: a list to append each (case, expected, got) to."""
    bound = bound or bound_checks()
    plan, judge = bound[check_id]
    cases = plan(rng_for(seed, check_id))
    if cases and all(c.scenario == REPLAYS for c in cases):
        return _judge_replays(pk, ref, check_id, seed, cases, judge, bound, seen)
    calls = case_calls(check_id, cases)
    expected = _reference(ref, (check_id, seed), calls)
    got, why = _batch(pk, calls, sent=True)
    if why:
        return [why] * len(cases)
    out = []
    for case, e, g in zip(cases, expected, got):
        if seen is not None:
            seen.append((case, e, g))
        if _unbuilt(g):
            out.append(_unbuilt(g, rubric.CHECKS[check_id].part))
            continue
        second = None
        if case.second is not None:
            second, why = _batch(pk, _with_ledger(check_id, case.second(e, g)), sent=True)
            if why:
                out.append(why)
                continue
        out.append(_judged(judge, check_id, case, e, g, second))
    return out


def failed_checks(pk, ref, seed=0, checks=None):
    """The ids of the checks (of `checks`, default all) with a failed case at this seed."""
    bound = bound_checks()
    return [c for c in (checks or bound) if any(m is not None for m in judge_check(pk, ref, c, seed, bound))]
