"""Shared setup for the checks of the lab and the reference: lab/ and solution/ on sys.path, and
`paged_kv` imported from solution/ (the reference), the way the contract imports an implementation."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for _d in ("lab", "solution"):
    if str(ROOT / _d) not in sys.path:
        sys.path.insert(0, str(ROOT / _d))

import paged_kv  # noqa: E402

assert Path(paged_kv.__file__).resolve().parent == ROOT / "solution", \
    f"checks expect the reference paged_kv, got {paged_kv.__file__}"


def _switched(on):
    from grader import rubric
    was = rubric.BONUS
    rubric.switch_bonus(on)
    yield
    rubric.switch_bonus(was)


@pytest.fixture
def bonus_off():
    """The rubric with the bonus switched off (as a course would, in rubric.py), restored after."""
    yield from _switched(False)


@pytest.fixture
def bonus_on():
    yield from _switched(True)
