"""The summary a student reads first (results.json's `output`): per part, the first failing check and
the start of its first difference, quoted in whole pieces (never a `before:` without its table,
never an `expected ..., got ...` without the line that explains it), and the other checks that
fail from the same first difference named once. Messages here are shaped like the hidden judges'
(tests/explain.py, grader/hidden/judges.py); the expected lines are written out by hand."""
from grader import paths

paths.trusted_imports()

from grader import report, rubric  # noqa: E402
from grader.score import score  # noqa: E402


def summary_of(failing):
    """The student's summary when every check passes except those in `failing` (check id -> its
    failure messages, one case each)."""
    rows = score({cid: [(False, m) for m in failing[cid]] if cid in failing else [(True, "")] for cid in rubric.CHECKS})
    return report.student_output(rows).splitlines()


TITLE = rubric.CHECKS["paged_step.all_or_nothing"].title
UNCHANGED = (f"{TITLE} (block size 2):\n"
             "  after action 7 of 8, step(seqs [1, 0], chunks of 3, 2 tokens), the test having taken blocks:\n"
             "    unchanged: expected True, got False\n"
             "    (a call that raised must change nothing (tables, lengths, refcounts, counters))\n"
             "Read assignment.md, section \"Part 2: paged KV and the paged step\".")
FORK = rubric.CHECKS["copy_on_write.fork"].title
PICTURE = (f"{FORK} (block size 3):\n"
           "  after action 3 of 11, seq 0.fork(): block 0 should have refcount 2 (it was 1), got 1\n"
           "    before:\n"
           "      seq 0  length 10, block size 3:  [ 0 ###  rc1 ][ 1 #..  rc1 ]\n"
           "    after:\n"
           "      seq 0  length 10, block size 3:  [ 0 ###  rc1 ][ 1 #..  rc1 ]\n"
           "      seq 1  length 10, block size 3:  [ 0 ###  rc1 ][ 1 #..  rc1 ]\n"
           "Read assignment.md, section \"Part 4: sharing and copy-on-write\".")


def _part_block(lines, section):
    start = next(i for i, line in enumerate(lines) if line.startswith(section))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ") or not lines[i].strip())
    return lines[start + 1:end]


def test_the_summary_keeps_an_expected_got_line_with_its_explanation():
    block = _part_block(summary_of({"paged_step.all_or_nothing": [UNCHANGED]}), rubric.SECTIONS["paged_step"])
    assert block[0] == f"  First to fix: {TITLE} (0 of 1 cases passed)"
    said = [line.strip() for line in block[1:]]
    assert said == ["(block size 2) after action 7 of 8, step(seqs [1, 0], chunks of 3, 2 tokens), the test having "
                    "taken blocks:", "unchanged: expected True, got False",
                    "(a call that raised must change nothing (tables, lengths, refcounts, counters))"]
    assert not any(TITLE in line for line in block[1:])        # the header is not said twice


def test_the_summary_never_ends_on_a_picture_it_cannot_show_whole():
    block = _part_block(summary_of({"copy_on_write.fork": [PICTURE]}), rubric.SECTIONS["copy_on_write"])
    assert [line.strip() for line in block[1:]] == [
        "(block size 3) after action 3 of 11, seq 0.fork(): block 0 should have refcount 2 (it was 1), got 1",
        "(before and after: drawn in this check's test below)"]
    assert not any(line.rstrip().endswith(":") for line in block)


def test_checks_failing_from_one_first_difference_are_named_once():
    def pop(n):         # an allocator that hands out the highest free block, seen by several checks
        return f"{{title}} ({n} blocks):\n  after action {n - 3} of 40, pool.alloc():\n    result: expected 0, got {n - 1}"
    failing = {cid: [pop(n).format(title=rubric.CHECKS[cid].title)] for cid, n in
               (("allocator.lowest_free_first", 7), ("allocator.refcounts", 9), ("allocator.random_ops", 29))}
    failing["allocator.copy_block"] = [f"{rubric.CHECKS['allocator.copy_block'].title} (Config 0):\n"
                                       "  after action 4 of 19, pool.copy_block(2):\n    n_copies: expected 1, got 0"]
    block = _part_block(summary_of(failing), rubric.SECTIONS["allocator"])
    same = [line for line in block if "same first difference" in line]
    assert len(same) == 1 and same[0].startswith("  The same first difference fails 2 more checks of this part")
    assert "incref / decref / refcount, n_used and n_free" in same[0] and "long random operation sequences" in same[0]
    assert "copy_block" not in same[0] and "alloc returns the lowest" not in same[0]
    assert block[0].startswith(f"  First to fix: {rubric.CHECKS['allocator.lowest_free_first'].title}")
