"""What `make test` says about realistic bugs (issue: failure messages that point at the right place).

Each case plants one bug in a copy of the reference, runs the public tests on it the way a student
does, and checks the words of the failure: it must name the student's mistake in the assignment's
terms, never a line of the test harness, and each summary line must stand on its own.
"""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solution" / "paged_kv.py"


def public_tests(tmp_path, find, replace, *args):
    text = REFERENCE.read_text()
    assert text.count(find) == 1, find
    (tmp_path / "paged_kv.py").write_text(text.replace(find, replace))
    proc = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "tests"), "-c", str(REPO / "tests" / "pytest.ini"),
                           f"--rootdir={REPO / 'tests'}", f"--impl={tmp_path}", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    return proc.stdout + proc.stderr


def summary(out):
    return out[out.index("results by part"):]


def test_a_step_that_leaves_length_ahead_of_the_table_is_named(tmp_path):
    """A step that raises half-way with a length already advanced: the message says what state it
    left (length vs blocks), not an IndexError inside tests/scenarios.py."""
    out = public_tests(tmp_path, "        seq.reserve(len(chunk))\n",
                       "        seq.length += len(chunk)\n        raise RuntimeError('half done')\n",
                       "-k", "decode_steps_match")
    assert "seq 0 has length 6 but 0 blocks of 2: its table must hold ceil(6 / 2) = 3" in out, out[-3000:]
    assert "scenarios.py" not in out and "IndexError" not in out, out[-3000:]


def test_a_softmax_over_all_heads_is_named_among_the_causes(tmp_path):
    out = public_tests(tmp_path, "    top = np.max([s.max(axis=-1) for s in scores], axis=0)[:, None]",
                       "    top = np.max([s.max() for s in scores])", "-k", "overflow")
    assert "got a non-finite value" in out and "one maximum taken\n  over all heads" in out, out[-3000:]


def test_a_summary_line_stands_on_its_own(tmp_path):
    """A step that changes a table before it runs out of memory: the one-line summary says what
    changed, not "...these changed:" with nothing after it."""
    out = public_tests(tmp_path, "        if n > pool.n_free:\n            raise MemoryError(f\"this step needs {n} blocks, "
                       "the pool has {pool.n_free} free\")\n", "        pass\n", "-k", "does_not_fit")
    line = next(ln for ln in summary(out).splitlines() if "FAILED test_a_step_that_does_not_fit" in ln)
    assert "must change nothing, but it changed tables" in line, line


@pytest.mark.parametrize("test", ["test_prefill_matches_the_contiguous_forward", "test_lecture_demo1_block_tables"])
def test_a_part_1_bug_fails_no_public_test_of_part_2(tmp_path, test):
    """The issue's first example: an allocator handing out the highest free block fails Part 1's
    tests, not Part 2's (tables are compared by allocation order)."""
    out = public_tests(tmp_path, "b = heapq.heappop(self._free)", "b = self._free.pop()", "-k", test)
    assert " passed" in out and "failed" not in out, out[-3000:]


def test_a_pop_allocator_fails_only_the_lowest_free_tests_of_part_1(tmp_path):
    """Issue 16: the same pop() allocator failed 21 of Part 1's 24 public tests; the scripts name
    blocks by handle, so only the tests of which id is handed out fail, and they say so."""
    out = public_tests(tmp_path, "b = heapq.heappop(self._free)", "b = self._free.pop()", "-m", "allocator")
    failed = [ln.split()[1].split("[")[0] for ln in summary(out).splitlines() if ln.strip().startswith("FAILED")]
    assert failed and set(failed) == {"test_alloc_hands_out_the_lowest_free_block"}, out[-3000:]
    assert "fresh pool: the ids returned by alloc and copy_block, in order" in out, out[-3000:]
    assert "expected [0, 1, 2, 3], got [3, 2, 1, 0]" in out, out[-3000:]
