"""The public tests' contiguous baselines (tests/contiguous.py) are what the lab computes today: a
change to the lab's model that leaves them stale fails here, naming the command that writes them."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import contiguous  # noqa: E402


def test_the_written_baselines_are_the_labs():
    assert contiguous.compute() == contiguous.TOKENS, \
        "tests/contiguous.py is stale: run `python tests/contiguous.py` to write the lab's tokens again"


def test_they_are_the_lecture_demos_inputs():
    """Each driver at each width, with the demo's lengths (a file cut short would still compare equal
    to itself, not to the lab)."""
    d3, d4 = contiguous.DEMO3, contiguous.DEMO4
    assert sorted(contiguous.TOKENS) == ["beam_search", "parallel_sample"]
    for n in contiguous.WIDTHS:
        assert [len(s) for s in contiguous.TOKENS["parallel_sample"][n]] == [d3["max_new"]] * n
        assert [len(t) for t in contiguous.TOKENS["beam_search"][n]] == [d4["steps"]] * n
    assert len(contiguous.prompt(d3)) == 100 and len(contiguous.prompt(d4)) == 64
