"""Every comparison has a trusted side: a twin (the same implementation without sharing, without the
cache) is a second run in a worker of its own, so a submission cannot make it equal its run from
inside its own process (grader/hidden/conftest.py, Case.second). Graded end to end on the hostile
corpus's twin attacks (grader/selftest/hostile.py), seed 0."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader import report, rubric
from grader.selftest import hostile, mutants

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def graded(tmp_path, name, text):
    """{check id: score} and {part: score} of one grading of `text`."""
    path = tmp_path / name / "paged_kv.py"
    path.parent.mkdir()
    path.write_text(text)
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(path), "--results", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tests = json.loads(out.read_text())["tests"]
    parts = {}
    for t in tests:
        for tag in t["tags"]:
            parts[tag] = parts.get(tag, 0) + t["score"]
    ids = {report.test_name(check): cid for cid, check in rubric.CHECKS.items()}
    return {ids[t["name"]]: t["score"] for t in tests}, parts


def test_a_twin_memoised_in_the_submissions_process_earns_nothing_of_the_logits_check(tmp_path):
    """cached_prefill computes no logits and paged_step replays them when the twin asks: the twin runs
    in a worker that never saw them, so the logits check fails, and nothing else of Part 5 does."""
    _, parts = graded(tmp_path, "memo", hostile.build(hostile.BY_NAME["memo_twin"]))
    assert parts["prefix_cache"] == pytest.approx(8.0), parts
    assert sum(parts[p] for p in ("allocator", "paged_step", "blockwise_attention", "copy_on_write")) == 100, parts


def test_a_twin_patched_in_the_submissions_process_gains_nothing_on_a_part4_bug(tmp_path):
    """The scenario that runs sharing scripts replaced so that its twin is its own run: Part 4 scores
    what the bug alone scores (before, +5.33), and the bug costs Part 4 points, not Part 2's."""
    _, alone = graded(tmp_path, "stale", mutants.reference_text() + "\n" + hostile._STALE_TABLE_STEP)
    _, patched = graded(tmp_path, "patched", hostile.build(hostile.BY_NAME["patch_twin"]))
    assert alone["copy_on_write"] < 30 and alone["paged_step"] == 30, alone
    assert patched["copy_on_write"] == pytest.approx(alone["copy_on_write"]), (alone, patched)
    assert patched["copy_on_write"] <= dict(hostile.BY_NAME["patch_twin"].caps)["copy_on_write"]


CRASH_IN_TWIN = '''

_real_paged_step = paged_step


def paged_step(params, cfg, seqs, chunks):
    if any(s.pool.n_blocks == 384 for s in seqs):     # only the unshared twins of Part 4 have 4 x 96 blocks
        import os
        os._exit(0)
    return _real_paged_step(params, cfg, seqs, chunks)
'''


def test_a_second_run_that_gives_no_answer_fails_its_cases_and_says_why(tmp_path):
    """A twin whose worker dies: its cases fail, naming the run that failed, never a pass nor a
    grader error; the same runs are Part 2's (paged_step.replays judges them): its case of them fails
    too, its other case keeps its points, and no other check loses any."""
    checks, parts = graded(tmp_path, "crash", mutants.reference_text() + CRASH_IN_TWIN)
    assert checks["copy_on_write.sharing_invariance"] == 0, checks       # every case of it has a twin
    assert checks["copy_on_write.fork"] == 4, checks                     # none of its cases has one
    assert checks["paged_step.replays"] == 2, checks                     # its case of Part 4's twins fails
    assert parts["paged_step"] == 28, parts
    assert parts["prefix_cache"] == 10, parts
    said = json.loads((tmp_path / "crash.json").read_text())["tests"]
    name = report.test_name(rubric.CHECKS["copy_on_write.sharing_invariance"])
    text = next(t["output"] for t in said if t["name"] == name)
    assert "the run this check compares yours with (the same code, in a worker of its own) failed" in text, text
    assert "crashed the worker process" in text, text
