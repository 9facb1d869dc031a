"""Every check earns its place (grader/selftest/earns.py), shown on synthetic losses: no grading.

The selftest (run.py) applies earns.unearned to the mutants' real gradings; these tests show that
it bites: a check no mutant singles out fails, whether it catches nothing or only what another
check of its part catches too, and a JOINT reason fails once the check has a mutant of its own.
"""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader import rubric  # noqa: E402
from grader.selftest import earns, mutants, run  # noqa: E402

PART_OF = {c.id: c.part for c in rubric.CHECKS.values()}


def one_of_each():
    """Losses where every graded check has exactly one mutant of its own (named after it)."""
    return {f"m_{c}": {c: 2.0} for c in PART_OF}


def test_a_mutant_of_its_own_for_every_check_passes():
    assert earns.unearned(one_of_each(), PART_OF, {}) == []


def test_a_check_that_catches_nothing_fails():
    part_of = {**PART_OF, "paged_step.throwaway": "paged_step"}
    failures = earns.unearned(one_of_each(), part_of, {})
    assert len(failures) == 1 and "paged_step.throwaway earns no place" in failures[0], failures


def test_a_check_whose_only_unique_mutant_is_removed_fails():
    losses = one_of_each()
    del losses["m_blockwise_attention.configs"]
    losses["m_both"] = {"blockwise_attention.configs": 4.0, "blockwise_attention.boundaries": 5.0}
    failures = earns.unearned(losses, PART_OF, {})
    assert len(failures) == 1 and "blockwise_attention.configs earns no place" in failures[0], failures


def test_losses_in_another_part_do_not_spoil_a_unique_mutant():
    losses = one_of_each()
    losses["m_allocator.peak_used"]["copy_on_write.parallel_sampling"] = 1.0     # a labelled span
    assert earns.unearned(losses, PART_OF, {}) == []


def test_a_joint_reason_excuses_a_check_and_goes_stale_once_it_has_a_mutant():
    losses = one_of_each()
    del losses["m_allocator.peak_used"]
    joint = {"allocator.peak_used": "covered jointly with allocator.refcounts because ..."}
    assert earns.unearned(losses, PART_OF, joint) == []
    failures = earns.unearned(one_of_each(), PART_OF, joint)
    assert len(failures) == 1 and "remove its mutants.JOINT or SWEEPS line" in failures[0], failures


def test_run_applies_it_only_to_the_whole_mutant_corpus():
    """run.evaluate_earns on mutant gradings whose results.json lose points in one check each:
    the whole corpus with a check nobody singles out fails; a slice (the hostile run's) is not judged."""
    from grader import report
    graded = [m for m in mutants.MUTANTS if m.part in run.PARTS]
    target = {m.name: next(c for c in PART_OF if PART_OF[c] == m.part) for m in graded}     # first check of its part
    subs = [run.Sub("mutant", m.name, "", part=m.part, data={"score": 90, "tests": [
        {"name": report.test_name(rubric.CHECKS[target[m.name]]), "score": 0, "max_score": 3, "tags": [m.part]}]})
        for m in graded]
    failures = []
    run.evaluate_earns(subs, failures, [])
    unearned = {c for c in PART_OF if c not in target.values()}
    excused = set(mutants.JOINT) | set(mutants.SWEEPS)
    named = {f.split()[1] for f in failures if "earns no place" in f}
    assert unearned - excused and named == unearned - excused, failures[:3]
    failures = []
    run.evaluate_earns(subs[:5], failures, [])
    assert failures == []


def test_every_joint_reason_is_a_sentence_for_a_graded_check():
    for c, why in {**mutants.JOINT, **mutants.SWEEPS}.items():
        assert c in rubric.registry.CHECKS and len(why) > 20, (c, why)


def test_a_sweep_does_not_count_against_the_targeted_checks():
    """A sweep (random_ops) catches what every targeted check catches: listed in SWEEPS, the targeted
    check's mutant is its own again; not listed, neither has a mutant of its own and both fail; listed
    in JOINT only, the sweep is excused but still takes the targeted check's mutant."""
    losses = one_of_each()
    losses["m_allocator.bad_ids"]["allocator.random_ops"] = 1.0
    del losses["m_allocator.random_ops"]
    failures = earns.unearned(losses, PART_OF, {})
    assert sorted(f.split()[1] for f in failures) == ["allocator.bad_ids", "allocator.random_ops"], failures
    why = {"allocator.random_ops": "a sweep: replays every targeted check"}
    assert earns.unearned(losses, PART_OF, {}, why) == []
    failures = earns.unearned(losses, PART_OF, why)
    assert [f.split()[1] for f in failures] == ["allocator.bad_ids"], failures


def test_a_sweep_with_a_mutant_of_its_own_goes_stale():
    losses = one_of_each()
    assert "remove its mutants.JOINT or SWEEPS line" in earns.unearned(
        losses, PART_OF, {}, {"allocator.random_ops": "a sweep: replays every targeted check"})[0]
