"""The rubric: every hidden check, its part, its points and the handout section to read.

A view of tests/registry.py (the one list of parts and checks, shared with the public tests and
the handout), with the course's bonus switch. The hidden suites take their check ids from it (a
check that never reports scores 0: see score.py); tools/tables.py writes the handout's grading
tables from the same list.
"""
import sys
from collections import namedtuple
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
import registry  # noqa: E402

Check = namedtuple("Check", "id part points title section")

PARTS = tuple(p.id for p in registry.core())      # the 100 points
BONUS = True          # the course's switch for the bonus parts: False grades exactly Parts 1-4

SECTIONS = {p.id: registry.section(p.id) for p in registry.PARTS}


def _checks(bonus):
    return {c.id: Check(c.id, c.part, c.points, c.title, SECTIONS[c.part])
            for c in registry.CHECKS.values() if bonus or c.part in PARTS}


def switch_bonus(on):
    """Set BONUS and everything derived from it (the module's names below). The course's switch is
    the line `BONUS = ...` above; this is for tests that grade both ways in one checkout."""
    global BONUS, BONUS_PARTS, ALL_PARTS, CHECKS, TOTAL, BONUS_TOTAL, SWITCHED_OFF
    BONUS = bool(on)
    BONUS_PARTS = tuple(p.id for p in registry.bonus()) if BONUS else ()
    ALL_PARTS = PARTS + BONUS_PARTS
    CHECKS = _checks(BONUS)
    SWITCHED_OFF = frozenset(_checks(True)) - frozenset(CHECKS)     # check ids of bonus parts switched off
    TOTAL = sum(c.points for c in CHECKS.values() if c.part in PARTS)
    BONUS_TOTAL = sum(c.points for c in CHECKS.values() if c.part in BONUS_PARTS)
    assert TOTAL == 100, TOTAL


switch_bonus(BONUS)


def part_points(part):
    return sum(c.points for c in CHECKS.values() if c.part == part)
