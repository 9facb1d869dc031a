"""The grader's selftest (grader/selftest/): the corpus is sound, and the grader passes it.

- the corpus, in-process and without the grader: every mutant differs from the reference on a graded,
  contract-specified behaviour of its own part, every correct variant agrees with the reference
  everywhere, every hostile submission builds (verify_corpus.py);
- the grader on the corpus (run.py): every mutant loses points in its own part, every correct
  variant scores 100, grading is deterministic; and, as root only (the grader isolates only then),
  no hostile submission scores above its honest base, touches the grader's files or the results,
  or leaves anything behind.
Each prints run.py's report, so CI's log shows the mutation score and the containment summary.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0


def _run(*args, timeout):
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    print(proc.stdout[-12000:])
    print(proc.stderr[-4000:], file=sys.stderr)
    return proc


def test_mutant_edits_are_exact_and_parts_known():
    """Fast: every edit of every mutant applies exactly once to the current reference."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import hostile, mutants
    counts = {}
    for m in mutants.MUTANTS:
        assert mutants.apply(m) != mutants.reference_text()
        counts[m.part] = counts.get(m.part, 0) + 1
    assert len(mutants.MUTANTS) >= 45 and set(counts) == set(mutants.PARTS), counts
    assert len(hostile.HOSTILES) >= 28
    for h in hostile.HOSTILES:
        compile(hostile.build(h), h.name, "exec")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_corpus_verified_in_process():
    proc = _run("grader.selftest.verify_corpus", timeout=880)
    assert proc.returncode == 0, "the corpus is not sound: see PROBLEM lines above"


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_grader_passes_its_selftest(tmp_path):
    """Mutants, variants and (as root) the hostile submissions, graded in one run, so that the long
    ones (hangs, bombs) overlap with the rest: every mutant costs points in its own parts only, every
    variant scores full marks, every attack is contained, grading is deterministic."""
    proc = _run("grader.selftest.run", "--json", str(tmp_path / "selftest.json"), timeout=2300)
    assert proc.returncode == 0, "selftest failed: see the report above"


if not IS_ROOT:       # as root they run in test_grader_passes_its_selftest
    def test_hostile_submissions_need_root():
        pytest.skip("the hostile submissions were not run: the grader isolates submissions only as root (CI is root)")
