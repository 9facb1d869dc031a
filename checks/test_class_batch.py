"""A class graded offline, as staff do the day after the deadline: `python -m grader batch` on the
selftest's class folder (grader/selftest/classfolder.py: 20 submissions, honest work and not), then
what they rely on: every integrity flag right and none on honest work, a CSV that imports as a
gradebook, feedback files that are exactly what each student sees, the class page, one student
regraded to the same row, the same results as Gradescope from the same metadata, and SIGTERM
stopping a batch as Ctrl-C does. Expected scores come from the rubric and from which part each
planted bug lives in."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import paths

paths.trusted_imports()

from grader import report, rubric  # noqa: E402
from grader.selftest import classfolder  # noqa: E402

sys.path.insert(0, str(paths.REPO / "tools"))
from browser_check import Outline  # noqa: E402

REPO = paths.REPO
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600),     # the first test grades the class (a loaded machine: minutes)
              pytest.mark.parallel,                             # two gradings at once: after the background commands,
              pytest.mark.lane]                                 # or beside them in the second lane (conftest.py)
FULL_BASE = rubric.TOTAL


def batch(folder, book, *extra, timeout=3600):
    return subprocess.run([sys.executable, "-m", "grader", "batch", str(folder), "--jobs", "2", "--csv", str(book),
                           *extra], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def read_book(book):
    with open(book, newline="") as f:
        table = list(csv.DictReader(f))
    return table[0], {r["submission"]: r for r in table[1:]}


def results_of(book, name):
    return json.loads((book.parent / f"{book.stem}-results" / f"{name}.json").read_text())


def without_time(results):
    return {k: v for k, v in results.items() if k != "execution_time"}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    folder = classfolder.write(root / "class")
    book = root / "out" / "gradebook.csv"
    proc = batch(folder, book)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return folder, book, proc.stdout


def test_every_flag_is_right_and_honest_work_gets_none(graded):
    _, book, out = graded
    _, rows = read_book(book)
    assert set(rows) == set(classfolder.EXPECTED)
    for name, expected in classfolder.EXPECTED.items():
        got = [f for f in rows[name]["flags"].split("; ") if f]
        assert len(got) == len(expected) and all(g.startswith(e) for g, e in zip(got, expected)), (name, got)
    summary = out[out.index("Integrity flags"):]
    assert "  not started: bob (the starter unchanged), gina (stubs only)\n" in summary
    assert "  identical files: erin = frank\n" in summary
    assert re.search(r"near-copies of solution/paged_kv.py: ada \(100% of its code\), hal \(1\d\d% .*vic \(", summary)


def test_the_gradebook_imports_with_ids_separate_extra_credit_and_one_charge_per_bug(graded):
    folder, book, out = graded
    top, rows = read_book(book)
    assert top["submission"] == "Points Possible" and float(top["base"]) == FULL_BASE
    assert [line.split("]")[0] for line in out.splitlines() if line.startswith("[")] == \
        [f"[{i:>2}/20" for i in range(1, 21)]
    assert rows["carol"]["student_id"] == "carol@example.edu"
    assert all(rows[n]["student_id"] == n for n in rows if n != "carol")
    assert [n for n in rows if rows[n]["from_zip"] == "yes"] == ["erin"]
    base = {n: float(r["base"]) for n, r in rows.items()}
    for name in ("carol", "erin", "frank", "kim", "leo", "mia", "ned", "ada", "hal", "ivy"):
        assert base[name] == FULL_BASE, (name, rows[name])
    for name in ("bob", "gina", "jack"):
        assert base[name] == 0
    assert rows["jack"]["status"].startswith("not graded: ") and "SyntaxError" in rows["jack"]["status"]
    for name, part in (("pam", "allocator"), ("quinn", "blockwise_attention"), ("tom", "copy_on_write"),
                       ("uma", "allocator"), ("vic", "paged_step"), ("rita", "copy_on_write"),
                       ("sam", "blockwise_attention")):
        lost = {p for p in rubric.PARTS if float(rows[name][p]) < rubric.part_points(p)}
        assert lost == {part}, (name, rows[name])
    if rubric.BONUS_PARTS:
        assert float(top["extra_credit"]) == rubric.BONUS_TOTAL
        assert {n for n, r in rows.items() if float(r["extra_credit"]) == rubric.BONUS_TOTAL} >= {"mia", "ned", "ada"}
        assert rows["carol"]["bonus_attempted"] == "no" and rows["mia"]["bonus_attempted"] == "yes"
        assert rows["jack"]["bonus_attempted"] == "not graded"
        assert all(float(r["total"]) == float(r["base"]) + float(r["extra_credit"]) for r in rows.values())
    assert "Checks failed most often (by the 17 graded submissions that were started):" in out


def test_each_feedback_file_is_exactly_what_the_student_sees(graded):
    _, book, _ = graded
    feedback = book.parent / f"{book.stem}-feedback"
    assert sorted(p.stem for p in feedback.iterdir()) == sorted(classfolder.EXPECTED)
    for path in feedback.iterdir():
        results = results_of(book, path.stem)
        text = path.read_text()
        assert text == report.visible_text(results)
        assert text.startswith(results["output"]) and all(t["output"] in text for t in results["tests"])
        staff = results["extra_data"]
        assert "Isolation" not in text and staff["grader"][:12] not in text
        assert staff.get("sha256", "-" * 12)[:12] not in text


def test_the_class_page_has_histograms_flags_and_a_link_per_student(graded):
    _, book, _ = graded
    page = book.with_suffix(".html")
    seen = Outline(page.read_text())
    assert seen.problems == [] and seen.svgs == 1 + len(rubric.ALL_PARTS)
    assert sorted(Path(link).stem for link in seen.links) == sorted(classfolder.EXPECTED)
    assert all((page.parent / link).is_file() for link in seen.links)
    assert "near-copy of the solution" in page.read_text() and "identical to frank" in page.read_text()


def test_one_student_regraded_by_the_documented_command_gets_the_same_row(graded):
    folder, book, out = graded
    assert f"--csv {book} --regrade NAME" in out.splitlines()[-1]           # the command the batch prints
    _, before = read_book(book)
    old = results_of(book, "pam")
    again = batch(folder, book, "--regrade", "pam")
    assert again.returncode == 0, again.stderr
    assert "19 already graded (same file, same grader), 1 to grade" in again.stdout
    assert f"Regraded pam (seed {before['pam']['seed']})" in again.stdout and "TOTAL" in again.stdout
    _, after = read_book(book)
    assert after == before
    assert without_time(results_of(book, "pam")) == without_time(old)


def test_gradescope_grades_a_folder_with_its_metadata_as_the_batch_did(graded, tmp_path):
    folder, book, _ = graded
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(folder / "carol"), "--results", str(out), "--metadata",
                           str(folder / "carol" / "submission_metadata.json"), "--quiet"],
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    assert without_time(json.loads(out.read_text())) == without_time(results_of(book, "carol"))


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_stops_a_batch_as_ctrl_c_does_and_keeps_what_is_done(tmp_path, sigint):
    """sigint "ignored": the batch starts with SIGINT ignored, as a shell's background job or a CI
    runner starts it; its gradings must still stop (they would inherit the ignored signal)."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "a.py").write_text("def broken(:\n")                     # fast: not graded
    shutil.copy(paths.SOLUTION / "paged_kv.py", subs / "c.py")
    book = tmp_path / "out" / "book.csv"
    stamps = book.parent / "book-results" / ".stamps"
    cmd = [sys.executable, "-m", "grader", "batch", str(subs), "--jobs", "1", "--csv", str(book)]
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignore)
    try:
        deadline = time.monotonic() + 600
        while not (stamps.is_dir() and any(stamps.iterdir())):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)                                                 # c is being graded now
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, (out, err)
    if "Interrupted (SIGTERM). Every finished result is kept (1 of 2 submissions)" not in out:
        pytest.fail("the batch's output (pytest would cut it short in an assertion):\n" + out + err)
    assert "Traceback" not in err
    assert not book.exists()
    _, partial = read_book(book.with_name("book.partial.csv"))
    assert set(partial) == {"a"} and partial["a"]["status"].startswith("not graded")
    assert not [pid for pid in filter(str.isdigit, os.listdir("/proc")) if _mentions(pid, str(book.parent))]
    (subs / "c.py").unlink()
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert "1 already graded (same file, same grader), nothing to grade" in rerun.stdout
    assert set(read_book(book)[1]) == {"a"} and not book.with_name("book.partial.csv").exists()


def _mentions(pid, text):
    try:
        return text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
