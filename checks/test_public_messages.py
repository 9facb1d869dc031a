"""What `make test` says about realistic bugs (issue: failure messages that point at the right place).

Each case plants one bug in a copy of the reference, runs the public tests on it the way a student
does, and checks the words of the failure: it must name the student's mistake in the assignment's
terms, never a line of the test harness, and each summary line must stand on its own.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solution" / "paged_kv.py"
sys.path.insert(0, str(REPO))
from grader import rubric  # noqa: E402
from grader.selftest import mutants  # noqa: E402


def public_tests(tmp_path, edit, *args):
    """The public tests on the reference with one edit (where, find, replace: mutants.edited's) planted."""
    return planted(tmp_path, [edit], *args)


def _run(tmp_path, *args):
    proc = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "tests"), "-c", str(REPO / "tests" / "pytest.ini"),
                           f"--rootdir={REPO / 'tests'}", f"--impl={tmp_path}", "-q", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    return proc.stdout + proc.stderr


def summary(out):
    return out[out.index("results by part"):]


def test_a_step_that_leaves_length_ahead_of_the_table_is_named(tmp_path):
    """A step that raises half-way with a length already advanced: the message says what state it
    left (length vs blocks), not an IndexError inside tests/scenarios.py."""
    out = public_tests(tmp_path, ("paged_step", "        seq.reserve(len(chunk))\n",
                                  "        seq.length += len(chunk)\n        raise RuntimeError('half done')\n"),
                       "-k", "decode_steps_match")
    assert "seq 0 has length 6 but 0 blocks of 2: its table must hold ceil(6 / 2) = 3" in out, out[-3000:]
    assert "scenarios.py" not in out and "IndexError" not in out, out[-3000:]


def test_a_softmax_over_all_heads_is_named_among_the_causes(tmp_path):
    out = public_tests(tmp_path, ("blockwise_attention", "    top = np.max([s.max(axis=-1) for s in scores], axis=0)[:, None]",
                                  "    top = np.max([s.max() for s in scores])"), "-k", "overflow")
    assert "got a non-finite value" in out and "one maximum taken\n  over all heads" in out, out[-3000:]


def test_a_summary_line_stands_on_its_own(tmp_path):
    """A step that changes a table before it runs out of memory: the one-line summary says what
    changed, not "...these changed:" with nothing after it."""
    out = public_tests(tmp_path, ("paged_step", "        if n > pool.n_free:\n            raise MemoryError(f\"this step needs "
                                  "{n} blocks, the pool has {pool.n_free} free\")\n", "        pass\n"), "-k", "does_not_fit")
    line = next(ln for ln in summary(out).splitlines() if "FAILED test_a_step_that_does_not_fit" in ln)
    assert "must change nothing, but it changed tables" in line, line


@pytest.mark.parametrize("test", ["test_prefill_matches_the_contiguous_forward", "test_lecture_demo1_block_tables"])
def test_a_part_1_bug_fails_no_public_test_of_part_2(tmp_path, test):
    """The issue's first example: an allocator handing out the highest free block fails Part 1's
    tests, not Part 2's (tables are compared by allocation order)."""
    out = public_tests(tmp_path, ("BlockPool.alloc", "b = heapq.heappop(self._free)", "b = self._free.pop()"), "-k", test)
    assert " passed" in out and "failed" not in out, out[-3000:]


def test_a_pop_allocator_fails_only_the_lowest_free_tests_of_part_1(tmp_path):
    """Issue 16: the same pop() allocator failed 21 of Part 1's 24 public tests; the scripts name
    blocks by handle, so only the tests of which id is handed out fail, and they say so."""
    out = public_tests(tmp_path, ("BlockPool.alloc", "b = heapq.heappop(self._free)", "b = self._free.pop()"), "-m",
                       "allocator")
    failed = [ln.split()[1].split("[")[0] for ln in summary(out).splitlines() if ln.strip().startswith("FAILED")]
    assert failed and set(failed) == {"test_alloc_hands_out_the_lowest_free_block"}, out[-3000:]
    assert "fresh pool: the ids returned by alloc and copy_block, in order" in out, out[-3000:]
    assert "expected [0, 1, 2, 3], got [3, 2, 1, 0]" in out, out[-3000:]


# ------------------------------------------- a test that waits for another part (issue 17, issue 15)
def planted(tmp_path, edits, *args):
    """public_tests with several bugs planted at once: (where, find, replace) edits, each find once in
    the function or class it names (mutants.edited)."""
    (tmp_path / "paged_kv.py").write_text(mutants.edited(REFERENCE.read_text(), edits, "planted"))
    return _run(tmp_path, *args)


def part_line(out, n):
    return next(ln for ln in summary(out).splitlines() if ln.startswith(f"Part {n}"))


PART2_LOGITS = ("paged_step", "np.stack([chunks[i] for i in idx]), start)",
                "np.stack([chunks[i] for i in idx]), 0)")  # positions
FORK_NO_INCREF = ("PagedSequence.fork", "            self.pool.incref(b)\n        child.blocks",
                  "            pass\n        child.blocks")
FORK_STUB = ("PagedSequence.fork", "    def fork(self):\n",
             '    def fork(self):\n        raise NotImplementedError("TODO Part 4: PagedSequence.fork")\n')
POOL_RAISES = ("BlockPool.__init__", '        n_blocks = _as_int(n_blocks, "n_blocks")\n',
               '        n_blocks = _as_int(n_blocks, "n_blocks")\n        raise RuntimeError("no pool today")\n')


def test_a_part_2_logits_bug_skips_part_4s_comparisons_with_the_reason(tmp_path):
    """Issue 17: with a Part 2 logits bug, Part 4's line said "21 of 21 passed". The comparisons that
    need Part 2 are skipped, counted as skipped, and the reason says what failed in Part 2."""
    out = planted(tmp_path, [PART2_LOGITS], "-m", "copy_on_write")
    line = part_line(out, 4)
    m = re.search(r": (\d+) passed, (\d+) skipped", line)
    assert m and int(m.group(2)) >= 4 and "FAILED" not in summary(out), summary(out)
    reasons = summary(out)
    assert "waits for paged_step (Part 2): " in reasons and "the logits differ from the contiguous forward" in reasons
    assert "fix Part 2 first" in reasons and "Note:" not in out, reasons
    assert f" {m.group(2)} skipped" in out.strip().splitlines()[-1], out.strip().splitlines()[-1]


def test_a_part_4_bug_still_fails_while_part_2_is_broken(tmp_path):
    """What a waiting test can check without Part 2 (the rules of fork on the tables and refcounts)
    is checked first: a fork that takes no references fails Part 4's tests of fork and step alike."""
    out = planted(tmp_path, [PART2_LOGITS, FORK_NO_INCREF], "-m", "copy_on_write")
    failed = [ln.split()[1].split("[")[0].rstrip(":") for ln in summary(out).splitlines()
              if ln.strip().startswith("FAILED")]
    assert "test_fork_shares_every_block" in failed and "test_n_holders_make_n_minus_1_copies" in failed, summary(out)
    assert "test_sharing_changes_no_result" in failed, summary(out)      # a script with steps, twin=True
    assert re.search(r": \d+ passed, \d+ failed, \d+ skipped: ", part_line(out, 4)), part_line(out, 4)


def test_a_stub_named_in_the_reason_is_the_one_that_is_missing(tmp_path):
    """Issue 15 item 2: copy-on-write written in reserve, `fork` still a stub: the reason names fork,
    not "copy_block, Part 1, or the copy in reserve, Part 4"."""
    out = planted(tmp_path, [FORK_STUB], "-m", "paged_step")
    line = part_line(out, 2)
    assert re.search(r": \d+ passed, \d+ skipped: ", line), line
    assert line.endswith("waits for copy-on-write: PagedSequence.fork (Part 4) is not implemented yet"), line
    assert "copy_block" not in line and "FAILED" not in summary(out), line


def test_a_pool_that_cannot_be_built_is_named_in_each_part(tmp_path):
    """Issue 15 item 8: BlockPool(...) raises. Part 1's tests fail saying so; Part 4's and the bonus parts'
    (and every other part's that needs a pool) are skipped naming the dependency and the part to fix first."""
    bonus = rubric.registry.bonus()
    out = planted(tmp_path, [POOL_RAISES], "-m", " or ".join(["allocator", "copy_on_write", *(p.id for p in bonus)]))
    assert "FAILED test_new_pool_layout[TINY]: your BlockPool(...) raised RuntimeError: no pool today" in out, out[-3000:]
    for n in (4, *(p.number for p in bonus)):
        line = part_line(out, n)
        assert re.search(r": 0 passed, \d+ skipped: this test needs a BlockPool first, and your BlockPool\(\.\.\.\) "
                         r"raised RuntimeError: no pool today: fix Part 1 first$", line), line
    assert "wrong form" not in out and "scenarios.py" not in out, out[-3000:]
