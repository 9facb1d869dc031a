"""The grader as course staff use it: `python -m grader` on real files, batch, and the Gradescope
archive run in a simulated /autograder tree. Expected scores come from the rubric (100 for the
reference, 0 for the stubs) and from which part a planted bug lives in."""
import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader import rubric

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solution" / "paged_kv.py"
pytestmark = pytest.mark.slow


def grade(submission, tmp_path, *extra, name="results.json"):
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "grader", str(submission), "--results", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def parts(results):
    return {p: sum(t["score"] for t in results["tests"] if p in t["tags"]) for p in rubric.PARTS}


def planted(tmp_path, find, replace, name="paged_kv.py"):
    text = REFERENCE.read_text()
    assert text.count(find) == 1, find
    path = tmp_path / "sub" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(find, replace))
    return path


@pytest.fixture(scope="module")
def reference_results(tmp_path_factory):
    return grade(REFERENCE, tmp_path_factory.mktemp("ref"))


def test_reference_scores_100(reference_results):
    proc, results = reference_results
    assert proc.returncode == 0, proc.stderr
    assert results["score"] == 100 and all(t["status"] == "passed" for t in results["tests"])
    assert "TOTAL                  100.00 / 100" in proc.stdout


def test_grading_is_deterministic(reference_results, tmp_path):
    _, first = reference_results
    _, again = grade(REFERENCE, tmp_path)
    first, again = dict(first), dict(again)
    first.pop("execution_time"), again.pop("execution_time")
    assert first == again


def test_starter_scores_0_with_feedback_per_check(tmp_path):
    proc, results = grade(REPO / "starter" / "paged_kv.py", tmp_path)
    assert proc.returncode == 0 and results["score"] == 0
    assert len(results["tests"]) == len(rubric.CHECKS)
    for t in results["tests"]:
        assert t["status"] == "failed" and "not implemented yet" in t["output"], t


@pytest.mark.parametrize("part, find, replace", [
    ("blockwise_attention", "weights = [np.exp(s - top) for s in scores]",          # a max per block
     "weights = [np.exp(s - s.max(axis=-1)[:, None]) for s in scores]"),
    ("allocator", "        heapq.heappush(self._free, b)", "        self._free.append(b)"),
])
def test_a_bug_costs_points_in_its_part(tmp_path, part, find, replace):
    _, results = grade(planted(tmp_path, find, replace), tmp_path)
    got = parts(results)
    assert got[part] < rubric.part_points(part), got


@pytest.mark.parametrize("source, expected", [
    ("def broken(:\n", "SyntaxError"),
    ("from decoding import beam_search, parallel_sample\nclass BlockPool: pass\n", "PagedSequence"),
    ("raise RuntimeError('boom at import')\n", "RuntimeError"),
    ("import definitely_not_a_module\n", "definitely_not_a_module"),
])
def test_unimportable_submissions_get_0_and_say_what_to_fix(tmp_path, source, expected):
    sub = tmp_path / "paged_kv.py"
    sub.write_text(source)
    proc, results = grade(sub, tmp_path)
    assert proc.returncode == 0 and results["score"] == 0
    assert expected in results["output"] and "cannot be graded" in results["output"]
    assert "Traceback" not in results["output"] and "autograder failed" not in results["output"].lower()


def test_missing_file_and_empty_folder(tmp_path):
    proc, results = grade(tmp_path / "nothing-here.py", tmp_path)
    assert proc.returncode == 2 and results is None and "no such file" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc, results = grade(tmp_path / "empty", tmp_path)
    assert proc.returncode == 0 and results["score"] == 0 and "No file named paged_kv.py" in results["output"]


def test_batch_writes_a_gradebook(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(REFERENCE, subs / "alice.py")
    shutil.copy(REPO / "starter" / "paged_kv.py", subs / "bob.py")
    (subs / "carol").mkdir()
    (subs / "carol" / "paged_kv.py").write_text("def broken(:\n")
    book = tmp_path / "book.csv"
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(subs), "--jobs", "2", "--csv", str(book)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    rows = {r["submission"]: r for r in csv.DictReader(book.open())}
    assert set(rows) == {"alice", "bob", "carol"}
    assert float(rows["alice"]["score"]) == 100 and float(rows["bob"]["score"]) == 0 == float(rows["carol"]["score"])
    assert all(float(rows["alice"][p]) == rubric.part_points(p) for p in rubric.PARTS)


def test_gradescope_archive_in_a_simulated_autograder_tree(tmp_path):
    zip_path = tmp_path / "autograder.zip"
    subprocess.run([sys.executable, "-m", "grader.gradescope.build", str(zip_path)], cwd=REPO, check=True)
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as z:
        names = z.namelist()
        z.extractall(root / "source")
    assert {"setup.sh", "run_autograder", "solution/paged_kv.py", "grader/hidden/conftest.py"} <= set(names)
    assert not any("selftest" in n or "__pycache__" in n for n in names)
    (root / "submission").mkdir()
    (root / "results").mkdir()
    shutil.copy(REFERENCE, root / "submission" / "paged_kv.py")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": 42}]}))
    run = root / "source" / "run_autograder"
    run.chmod(0o755)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "CS349E_PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(run)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 100 and "seed 0)" not in results["output"]      # the per-student seed was used
