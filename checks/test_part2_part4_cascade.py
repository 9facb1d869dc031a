"""Issue 14's cascade between Parts 2 and 4, on the hidden plans judged in-process: a bug of one part
costs nothing in the other (Part 4's scripts grow a sequence's first positions with the test's own
blocks and step by at most a block; Part 2's tables name blocks by lifetime once a block nobody
shared was copied), while a bug of the part itself still fails there."""
import types

import pytest

from grader import paths

paths.trusted_imports()

from grader.hidden.conftest import rng_for  # noqa: E402
from grader.selftest import mutants, unseen  # noqa: E402
from grader.selftest.verify_corpus import load  # noqa: E402  (a paged_kv.py text as a fresh module)


def _bug(name):
    return load(mutants.apply(next(b for b in unseen.BUGS if b.name == name)), name)


def _verdicts(module, plans, judges, checks, seed=0):
    """{check: [judge message or None per case]} of a hidden module's plans run on `module` in-process,
    each case's second run (its twin) made here on `module` too, as a worker of its own would."""
    import paged_kv as reference
    import scenarios
    out = {}
    for check in checks:
        out[check] = []
        for case in plans[check](rng_for(seed, check)):
            run = scenarios.SCENARIOS[case.scenario]
            expected, got = run(reference, **case.inputs), run(module, **case.inputs)
            calls = case.second(expected, got) if case.second else []
            ctx = types.SimpleNamespace(second=[scenarios.SCENARIOS[n](module, **i) for n, i in calls])
            out[check].append(judges[check](case, expected, got, ctx))
    return out


PART2_TABLES = ("paged_step.tables", "paged_step.configs")


def test_part2_tables_do_not_charge_a_copy_of_a_block_nobody_shares():
    from grader.hidden import test_paged_step as t
    passed = _verdicts(_bug("copy_when_not_shared"), t.PLANS, t.JUDGES, PART2_TABLES)
    assert all(v is None for vs in passed.values() for v in vs), passed
    wrong = _verdicts(load(mutants.apply(mutants.BY_NAME["reserve_reverse_order"]), "reverse"), t.PLANS, t.JUDGES,
                      PART2_TABLES)
    assert any(v is not None for vs in wrong.values() for v in vs)


PART4_STEPS = ("copy_on_write.fork", "copy_on_write.n_minus_1", "copy_on_write.free",
               "copy_on_write.sharing_invariance", "copy_on_write.parallel_sampling", "copy_on_write.beam_search")


@pytest.mark.parametrize("bug", ["reserve_one_short", "reserve_one_extra"])
def test_part4_does_not_charge_part2s_count_for_an_empty_sequence_or_a_chunk_of_many_blocks(bug):
    from grader.hidden import test_copy_on_write as t
    verdicts = _verdicts(_bug(bug), t.PLANS, t.JUDGES, PART4_STEPS)
    assert all(v is None for vs in verdicts.values() for v in vs), verdicts


def test_part4_steps_and_drivers_still_fail_a_part4_bug():
    from grader.hidden import test_copy_on_write as t
    verdicts = _verdicts(_bug("cow_needs_three"), t.PLANS, t.JUDGES, PART4_STEPS)
    assert sum(v is not None for vs in verdicts.values() for v in vs) >= 3, verdicts
