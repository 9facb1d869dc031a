"""Where the trusted pieces live. The reference, the lab and the scenarios are imported from here
into the grading process; only copies of the lab and scenarios ever reach the sandbox."""
import sys
from pathlib import Path

GRADER = Path(__file__).resolve().parent
REPO = GRADER.parent
LAB, TESTS, SOLUTION, HIDDEN = REPO / "lab", REPO / "tests", REPO / "solution", GRADER / "hidden"


def trusted_imports():
    """The reference as `paged_kv`, the lab, the scenarios, and the grader package, on sys.path."""
    for p in (SOLUTION, TESTS, LAB, REPO):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
