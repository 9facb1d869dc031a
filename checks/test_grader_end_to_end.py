"""The grader as course staff use it: `python -m grader` on real files, a batch killed halfway, and
the Gradescope archive run in a simulated /autograder tree (a whole class: test_class_batch.py). Expected scores come from the rubric (100 for the
reference, plus the bonus parts' points with the bonus, 0 for the stubs) and from which part a planted bug lives in."""
import csv
import json
import os
import re
import shutil
import signal
import time
import uuid
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from outside import Killer, asleep

from grader import rubric

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "solution" / "paged_kv.py"
pytestmark = pytest.mark.slow


def grade(submission, tmp_path, *extra, name="results.json", kill=None, env=None):
    """(the finished process, results.json or None); kill: a outside.Killer pick for the grader's workers,
    and then its Killer is returned third; env: the grader's environment (default: this one's)."""
    out = tmp_path / name
    argv = [sys.executable, "-m", "grader", str(submission), "--results", str(out), *extra]
    if kill is None:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
        return proc, (json.loads(out.read_text()) if out.exists() else None)
    running = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with Killer(kill, ancestor=running.pid) as killer:
        stdout, stderr = running.communicate(timeout=600)
    proc = subprocess.CompletedProcess(argv, running.returncode, stdout, stderr)
    return proc, (json.loads(out.read_text()) if out.exists() else None), killer


def parts(results):
    return {p: sum(t["score"] for t in results["tests"] if p in t["tags"]) for p in rubric.PARTS}


def planted(tmp_path, where, find, replace, name="paged_kv.py"):
    """The reference with one edit in the function or class `where` (mutants.edited)."""
    from grader.selftest import mutants
    path = tmp_path / "sub" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(mutants.edited(REFERENCE.read_text(), [(where, find, replace)], "planted"))
    return path


@pytest.fixture(scope="module")
def reference_results(tmp_path_factory):
    return grade(REFERENCE, tmp_path_factory.mktemp("ref"))


FULL = rubric.TOTAL + rubric.BONUS_TOTAL       # 100 plus the bonus parts' points with the bonus on (rubric.BONUS)


def test_reference_scores_full_marks(reference_results):
    proc, results = reference_results
    assert proc.returncode == 0, proc.stderr
    assert results["score"] == FULL and results["max_score"] == 100
    assert all(t["status"] == "passed" for t in results["tests"])
    assert re.search(rf"\nTOTAL +{FULL}\.00 / 100", proc.stdout)


def test_students_read_their_grade_first_and_staff_get_the_sandbox_details(reference_results):
    proc, results = reference_results
    out = results["output"]
    extra = f" ({rubric.BONUS_TOTAL:.2f} of it extra credit)" if rubric.BONUS_PARTS else ""
    assert out.splitlines()[0] == f"Score: {FULL:.2f} / 100{extra}"
    assert [line.split()[:2] for line in out.splitlines() if line.startswith("Part ")] == \
        [["Part", f"{i}:"] for i in range(1, len(rubric.PARTS) + 1)] + \
        [["Part", str(rubric.registry.number(p))] for p in rubric.BONUS_PARTS]
    for staff_only in ("Isolation", "namespace", "rlimits", "seed", "uid"):
        assert staff_only not in out
    assert results["stdout_visibility"] == "hidden" and all(t["visibility"] == "visible" for t in results["tests"])
    assert results["extra_data"]["seed"] == 0 and results["extra_data"]["isolation"]
    assert "Isolation: " in proc.stdout and "(seed 0," in proc.stdout              # make grade: everything


def test_grading_is_deterministic(reference_results, tmp_path):
    """The same results a second time, though the shell that runs it now holds pytest options that
    would deselect, stop and time out the hidden suites, and a plugin that does not exist."""
    _, first = reference_results
    env = {**os.environ, "PYTEST_ADDOPTS": "-x -k allocator --timeout=0.000001", "PYTEST_PLUGINS": "no_such_plugin"}
    proc, again = grade(REFERENCE, tmp_path, env=env)
    assert proc.returncode == 0 and again is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    first, again = dict(first), dict(again)
    first.pop("execution_time"), again.pop("execution_time")
    assert first == again


def test_starter_scores_0_with_feedback_per_check(tmp_path):
    """Every check says which TODO it reached, and in four workers (the import probe, the parts' two calls,
    the second runs, where paged_step.replays rides whatever the first calls answered): a stub's
    NotImplementedError ends no other check's answer, so no check is called again alone."""
    proc, results, watcher = grade(REPO / "starter" / "paged_kv.py", tmp_path, kill=lambda n, pid, started: False)
    assert 1 <= watcher.seen <= 4, watcher.seen
    assert proc.returncode == 0 and results["score"] == 0
    assert len(results["tests"]) == len(rubric.CHECKS)
    for t in results["tests"]:
        bonus = any(p in t["tags"] for p in rubric.BONUS_PARTS)
        said = "bonus not attempted" if bonus else "not implemented yet"     # the bonus stubs left as they are
        assert t["status"] == "failed" and said in t["output"], t
    out = results["output"].splitlines()
    assert out[0] == "Score: 0.00 / 100"
    assert sum(line.startswith("  First to fix: ") for line in out) == len(rubric.PARTS)   # Parts 1-4's stubs


def test_a_file_without_the_bonus_is_graded_as_before(tmp_path):
    """Written before the bonus parts existed (none of their names): 100, and each bonus part one
    message, never a wall of failures or a 0."""
    proc, results = grade(REPO / "grader" / "selftest" / "variants" / "plain_loops.py", tmp_path)
    assert proc.returncode == 0 and results["score"] == 100, proc.stderr
    assert results["output"].splitlines()[0] == "Score: 100.00 / 100"
    if rubric.BONUS_PARTS:
        said = results["output"].count("bonus not attempted")
        assert said == len(rubric.BONUS_PARTS) and "First to fix" not in results["output"]
        bonus = [t for t in results["tests"] if set(t["tags"]) & set(rubric.BONUS_PARTS)]
        assert bonus and all(t["score"] == 0 and t["output"].startswith("bonus not attempted") for t in bonus)
        assert list(results["extra_data"]["bonus"]) == list(rubric.BONUS_PARTS)


def test_the_bonus_switched_off_grades_exactly_parts_1_to_4(tmp_path):
    """rubric.BONUS = False (done here in the grading process, as editing rubric.py would): the
    reference scores 100 on Parts 1-4's checks alone; no test is tagged prefix_cache."""
    out = tmp_path / "results.json"
    code = ("import sys; from grader import rubric; rubric.switch_bonus(False); from grader.__main__ import main; "
            "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, str(REFERENCE), "--results", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text())
    assert results["score"] == 100 and results["max_score"] == 100
    assert len(results["tests"]) == len(rubric._checks(False))
    assert not any("prefix_cache" in t["tags"] for t in results["tests"])
    assert results["output"].splitlines()[0] == "Score: 100.00 / 100" and "Part 5" not in results["output"]
    assert "extra credit" not in proc.stdout and re.search(r"\nTOTAL +100\.00 / 100\n", proc.stdout + "\n")


@pytest.mark.parametrize("part, where, find, replace", [
    ("blockwise_attention", "blockwise_attention", "weights = [np.exp(s - top) for s in scores]",   # a max per block
     "weights = [np.exp(s - s.max(axis=-1)[:, None]) for s in scores]"),
    ("allocator", "BlockPool.decref", "        heapq.heappush(self._free, b)", "        self._free.append(b)"),
])
def test_a_bug_costs_points_in_its_part(tmp_path, part, where, find, replace):
    _, results = grade(planted(tmp_path, where, find, replace), tmp_path)
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
    assert results["output"].startswith("Not graded: paged_kv.py cannot be graded: ")
    assert "Traceback" not in results["output"] and "autograder failed" not in results["output"].lower()


def test_workers_killed_from_outside_cost_nothing(tmp_path):
    """A machine that kills workers (another grader's clean-up, the OOM killer, an operator): the import
    probe's first worker and one of the hidden suites' are SIGKILLed while they run the submission's
    module (it sleeps there, so the kill lands then: after they said "started"). Each call is made
    again in a fresh worker: the reference keeps full marks, and only staff are told."""
    sub = tmp_path / "sub" / "paged_kv.py"
    sub.parent.mkdir()
    sub.write_text(REFERENCE.read_text() + "\nimport time as _t\n_t.sleep(0.4)    # long enough to be caught\n")
    proc, results, killer = grade(sub, tmp_path, kill=lambda n, pid, started: n in (1, 4) and asleep(pid))
    assert proc.returncode == 0 and results["score"] == FULL, (proc.stderr, results and results["output"])
    assert killer.killed == [1, 4] and killer.started == [True, True]
    notes = results["extra_data"]["sandbox"]
    assert sum("worker killed by signal 9 (SIGKILL), after it started" in line for line in notes) == 2, notes
    assert notes[0].startswith("import probe: worker 1 of 2: ")
    student = results["output"] + "".join(t["output"] for t in results["tests"])
    assert "signal" not in student and "worker" not in student
    assert "Sandbox (staff only):" in proc.stdout


def test_a_grading_the_machine_spoiled_is_no_grading(tmp_path):
    """Every worker killed before it starts: the import probe fails twice for the machine's reasons.
    Exit 3, no results.json (an earlier one is removed), the reason on stdout (Gradescope's staff read
    it) and stderr; never a 0 or "fix this first". A batch lists it as "grader failed", with no score,
    and grades it when run again."""
    (tmp_path / "results.json").write_text('{"score": 100}\n')          # from an earlier grading
    proc, results, killer = grade(REFERENCE, tmp_path, kill=lambda n, pid, started: not started)
    assert killer.killed == [1, 2] and proc.returncode == 3 and results is None
    for said in (proc.stdout, proc.stderr):
        assert "not graded: grader error, regrade this submission" in said and "died before it started" in said
    assert "Fix this first" not in proc.stdout + proc.stderr

    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(REFERENCE, subs / "alice.py")
    book = tmp_path / "book.csv"
    cmd = [sys.executable, "-m", "grader", "batch", str(subs), "--jobs", "1", "--csv", str(book)]
    batch = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Killer(lambda n, pid, started: not started, ancestor=batch.pid):
        out, _ = batch.communicate(timeout=600)
    score = "total" if rubric.BONUS_PARTS else "base"

    def alice():
        return next(r for r in csv.DictReader(book.open()) if r["submission"] == "alice")
    assert batch.returncode == 3 and alice()[score] == "" and alice()["status"].startswith("grader failed: exit 3"), out
    assert "  alice: grader failed: exit 3" in out
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "0 already graded (same file, same grader), 1 to grade" in again.stdout
    assert float(alice()[score]) == FULL


def test_missing_file_and_empty_folder(tmp_path):
    proc, results = grade(tmp_path / "nothing-here.py", tmp_path)
    assert proc.returncode == 2 and results is None and "no such file" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc, results = grade(tmp_path / "empty", tmp_path)
    assert proc.returncode == 0 and results["score"] == 0
    assert results["output"].startswith("Not graded: No file named paged_kv.py")


def test_results_written_straight_into_tmp(tmp_path):
    """--results /tmp/x.json: /tmp is where the sandbox's new root lives, so it cannot be hidden like
    other results folders; its fresh tmpfs hides it instead."""
    out = Path("/tmp") / f"cs349e-results-{uuid.uuid4().hex}.json"
    try:
        proc = subprocess.run([sys.executable, "-m", "grader", str(REFERENCE), "--results", str(out), "--quiet"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert json.loads(out.read_text())["score"] == FULL
    finally:
        out.unlink(missing_ok=True)


def test_a_results_path_that_cannot_be_written_is_said_in_one_line(tmp_path):
    (tmp_path / "results.json").mkdir()                 # e.g. planted by someone else in a shared /tmp
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "grader", str(tmp_path / "empty"), "--results",
                           str(tmp_path / "results.json")], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("grader: cannot write the results to ") and "Is a directory" in proc.stderr


def test_the_zip_make_submit_writes_is_graded(tmp_path):
    subprocess.run([sys.executable, "tools/labtool.py", "submit", "--impl", str(REFERENCE.parent),
                    "--out", str(tmp_path / "submission.zip")], cwd=REPO, check=True, capture_output=True)
    proc, results = grade(tmp_path / "submission.zip", tmp_path)
    assert proc.returncode == 0 and results["score"] == FULL, (proc.stderr, results and results["output"])
    assert results["extra_data"]["submission"] == "submission.zip: paged_kv.py"


def test_a_renamed_file_is_graded_and_the_report_says_so_first(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    shutil.copy(REFERENCE, folder / "paged_kv (1).py")
    proc, results = grade(folder, tmp_path)
    assert proc.returncode == 0 and results["score"] == FULL, results and results["output"]
    first = results["output"].splitlines()[:2]
    assert first[0].startswith(f"Score: {FULL:.2f} / 100")
    assert first[1].startswith("Graded paged_kv (1).py as paged_kv.py")


def _processes_mentioning(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_a_batch_killed_halfway_resumes_where_it_stopped(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "a.py").write_text("def broken(:\n")                     # fast to grade: not graded
    (subs / "b.py").write_text("class BlockPool:\n    pass\n")       # fast too: missing names
    shutil.copy(REFERENCE, subs / "c.py")
    book, log = tmp_path / "book.csv", tmp_path / "batch.log"
    stamps = tmp_path / "book-results" / ".stamps"
    cmd = [sys.executable, "-m", "grader", "batch", str(subs), "--jobs", "1", "--csv", str(book)]
    with open(log, "w") as out:
        batch = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while not (stamps.is_dir() and len(list(stamps.iterdir())) >= 2 and "[2/3]" in log.read_text()):
                assert batch.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)         # (b's line comes just after its stamp: on a busy machine, later)
            os.kill(batch.pid, signal.SIGKILL)                            # while c is being graded
        finally:
            batch.kill()
            batch.wait()
    assert [line[:5] for line in log.read_text().splitlines() if line.startswith("[")] == ["[1/3]", "[2/3]"]
    assert not book.exists()
    end = time.monotonic() + 10                                           # the grading child died with it
    while _processes_mentioning(str(tmp_path / "book-results")) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _processes_mentioning(str(tmp_path / "book-results"))
    kept = {n: (tmp_path / "book-results" / f"{n}.json").stat().st_mtime_ns for n in ("a", "b")}

    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "2 already graded (same file, same grader), 1 to grade" in again.stdout
    assert re.findall(r"left  (\S+) ", again.stdout) == ["c"]
    assert {n: (tmp_path / "book-results" / f"{n}.json").stat().st_mtime_ns for n in ("a", "b")} == kept
    rows = {r["submission"]: r for r in csv.DictReader(book.open()) if r["submission"] != "Points Possible"}
    assert set(rows) == {"a", "b", "c"} and float(rows["c"]["total" if rubric.BONUS_PARTS else "base"]) == FULL

    (subs / "b.py").write_text("class BlockPool:\n    pass\n\n")      # a new file: graded again, alone
    third = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert re.findall(r"left  (\S+) ", third.stdout) == ["b"]


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
    assert results["score"] == FULL and results["extra_data"]["seed"] not in (0, None)  # the per-student seed
    assert "Isolation" not in results["output"] and "Isolation: " in proc.stdout          # stdout: staff only
