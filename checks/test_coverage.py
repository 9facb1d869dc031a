"""State coverage (grader/selftest/coverage.py): the core cases reach every state each part's
observables depend on, on every seed, so whether a bug is caught never depends on the student."""
import pytest

from grader.selftest import coverage


@pytest.mark.parametrize("seed", range(5))
def test_every_state_is_reached_on_every_seed(seed):
    assert coverage.missing(seed) == []


def test_every_part_lists_its_states():
    """A new part of tests/registry.py lists the states its observables depend on here, or this fails."""
    assert list(coverage.STATES) == [p.id for p in coverage.registry.PARTS]


def test_a_state_no_case_reaches_is_reported():
    """The report bites: a state whose predicate holds for no case is listed as missing."""
    coverage.STATES["paged_step"]["never"] = lambda case, answer: False
    try:
        assert coverage.missing(0) == ["paged_step: never"]
    finally:
        del coverage.STATES["paged_step"]["never"]
