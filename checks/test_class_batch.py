"""A class graded offline, as staff do the day after the deadline: `python -m grader batch` on the
selftest's class folder with its roster (grader/selftest/classfolder.py: 23 submissions, honest
work and not, one with a forged submission_metadata.json), then what they rely on: every integrity
flag right and none on honest work, a CSV that imports as a gradebook with every row's LMS id and
seed from staff (the roster and the course secret), feedback files named by LMS id that are exactly
what each student sees, the class page, one student regraded to the same row, the same results as
Gradescope from the same metadata, Gradescope's own export read as Gradescope writes it, and SIGTERM
stopping a batch as Ctrl-C does. Expected scores come from the rubric and from which part each
planted bug lives in; expected seeds from HMAC-SHA256 of the course secret (conftest.py's
throwaway) and the students' emails, as README's "Grading a class" states it."""
import csv
import hashlib
import hmac
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

from grader import coursesecret, report, rubric  # noqa: E402
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
    """(the Points Possible row, {submission: its first row}, every row after the first)."""
    with open(book, newline="") as f:
        table = list(csv.DictReader(f))
    by = {}
    for r in table[1:]:
        by.setdefault(r["submission"], r)
    return table[0], by, table[1:]


def results_of(book, name):
    return json.loads((book.parent / f"{book.stem}-results" / f"{name}.json").read_text())


def without_time(results):
    return {k: v for k, v in results.items() if k != "execution_time"}


def expected_seed(*emails):
    """README: a seed is HMAC-SHA256(course secret, "cs349e-seed\\0" + the students' emails, lowercased, sorted,
    joined by commas), its first 4 bytes little-endian."""
    key = ",".join(sorted(e.lower() for e in emails)).encode()
    digest = hmac.new(coursesecret.load(), b"cs349e-seed\0" + key, hashlib.sha256).digest()
    return int.from_bytes(digest[:4], "little")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    folder = classfolder.write(root / "class")
    roster = classfolder.write_roster(root / "roster.csv")
    book = root / "out" / "gradebook.csv"
    proc = batch(folder, book, "--roster", str(roster))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return folder, book, proc.stdout, roster


def test_every_flag_is_right_and_honest_work_gets_none(graded):
    _, book, out, _ = graded
    _, rows, _ = read_book(book)
    assert set(rows) == set(classfolder.EXPECTED) | {""}                   # "": olga, who handed nothing in
    for name, expected in {**classfolder.EXPECTED, "jack": ["no roster row claims"]}.items():
        got = [f for f in rows[name]["flags"].split("; ") if f]
        assert len(got) == len(expected) and all(g.startswith(e) for g, e in zip(got, expected)), (name, got)
    summary = out[out.index("Integrity flags"):]
    assert "  not started: bob (the starter unchanged), gina (stubs only)\n" in summary
    assert "  identical files: erin = frank\n" in summary
    assert re.search(r"near-copies of solution/paged_kv.py:\n    ada \(100% of its code normalized, 100% raw\)\n", summary)
    assert re.search(r"\n    wes \(1\d\d% of its code normalized, \d\d% raw\)", summary)       # disguised: raw misses it
    clusters = [set(m.split(", ")) for m in re.findall(r"\n    cluster \d+: (.*) \(\d+ files\)", summary)]
    assert sorted(clusters, key=sorted) == sorted(classfolder.CLUSTERS, key=sorted)
    assert "carol: metadata inside the submission (submission_metadata.json): ignored" in summary
    assert "s1024 (Olga): no submission" in summary


def test_every_row_carries_the_lms_id_and_the_seed_staff_gave_whatever_a_submission_says(graded):
    folder, book, out, roster = graded
    _, _, every = read_book(book)
    with open(roster, newline="") as f:
        students = list(csv.DictReader(f))
    assert "Ids from the roster" in out
    ids = {(r["submission"], r["student_id"], r["name"]) for r in every}
    expected = {(s["submission"] and Path(s["submission"]).stem, s["id"], s["name"]) for s in students}
    assert ids == expected | {("jack", "jack", "")}                        # jack's file: no roster row claims it
    emails = {}
    for s in students:
        emails.setdefault(Path(s["submission"]).stem, []).append(s["email"])
    for r in every:
        if r["submission"] == "jack":
            assert r["seed"] == str(expected_seed("jack"))
        elif r["submission"]:
            assert r["seed"] == str(expected_seed(*emails[r["submission"]])), r
    carol = next(r for r in every if r["submission"] == "carol")            # her forged metadata names erin
    assert (carol["student_id"], carol["seed"]) == ("s1003", str(expected_seed("carol@example.edu")))
    assert [r["student_id"] for r in every].count("s1004") == 1 and classfolder.FORGED["users"][0]["email"] == \
        "erin@example.edu"
    assert [(r["student_id"], r["base"]) for r in every if r["submission"] == "ned"] == [("s1012", "100.0"),
                                                                                       ("s1023", "100.0")]


def test_the_gradebook_imports_with_separate_extra_credit_and_one_charge_per_bug(graded):
    folder, book, out, _ = graded
    top, rows, _ = read_book(book)
    assert top["submission"] == "Points Possible" and float(top["base"]) == FULL_BASE
    total = len(classfolder.EXPECTED)
    assert [line.split("]")[0] for line in out.splitlines() if line.startswith("[")] == \
        [f"[{i:>2}/{total}" for i in range(1, total + 1)]
    assert [n for n in rows if rows[n]["from_zip"] == "yes"] == ["erin"]
    base = {n: float(r["base"]) for n, r in rows.items() if n}
    for name in ("carol", "erin", "frank", "kim", "leo", "mia", "ned", "ada", "hal", "ivy", "wes", "yara", "zoe"):
        assert base[name] == FULL_BASE, (name, rows[name])
    for name in ("bob", "gina", "jack"):
        assert base[name] == 0
    assert rows["jack"]["status"].startswith("not graded: ") and "SyntaxError" in rows["jack"]["status"]
    assert rows[""]["status"] == "no submission" and rows[""]["base"] == ""
    for name, part in (("pam", "allocator"), ("quinn", "blockwise_attention"), ("tom", "copy_on_write"),
                       ("uma", "allocator"), ("vic", "paged_step"), ("rita", "copy_on_write"),
                       ("sam", "blockwise_attention")):
        lost = {p for p in rubric.PARTS if float(rows[name][p]) < rubric.part_points(p)}
        assert lost == {part}, (name, rows[name])
    for copy, original in (("wes", "ada"), ("yara", "kim"), ("zoe", "mia")):      # a disguise changes no score
        assert rows[copy]["total" if rubric.BONUS_PARTS else "base"] == \
            rows[original]["total" if rubric.BONUS_PARTS else "base"]
    if rubric.BONUS_PARTS:
        assert float(top["extra_credit"]) == rubric.BONUS_TOTAL
        assert {n for n, r in rows.items() if n and float(r["extra_credit"]) > 0} >= {"mia", "ned", "ada"}
        first = f"{rubric.BONUS_PARTS[0]}_attempted"
        assert rows["carol"][first] == "no" and rows["mia"][first] == "yes"
        assert all(rows["jack"][f"{p}_attempted"] == "not graded" for p in rubric.BONUS_PARTS)
        assert all(float(r["total"]) == float(r["base"]) + float(r["extra_credit"]) for n, r in rows.items() if n)
    assert "Checks failed most often (by the 20 graded submissions that were started):" in out


def test_each_feedback_file_is_named_by_lms_id_and_exactly_what_the_student_sees(graded):
    _, book, _, _ = graded
    _, _, every = read_book(book)
    feedback = book.parent / f"{book.stem}-feedback"
    owner = {r["student_id"]: r["submission"] for r in every if r["submission"]}
    assert sorted(p.stem for p in feedback.iterdir()) == sorted(owner)      # every student with a submission
    for path in feedback.iterdir():
        results = results_of(book, owner[path.stem])
        text = path.read_text()
        assert text == report.visible_text(results)
        assert text.startswith(results["output"]) and all(t["output"] in text for t in results["tests"])
        staff = results["extra_data"]
        assert "Isolation" not in text and staff["grader"][:12] not in text
        assert staff.get("sha256", "-" * 12)[:12] not in text


def test_the_class_page_has_histograms_flags_clusters_and_a_link_per_student(graded):
    _, book, _, _ = graded
    page = book.with_suffix(".html")
    seen = Outline(page.read_text())
    assert seen.problems == [] and seen.svgs == 1 + len(rubric.ALL_PARTS)
    files = [link for link in seen.links if not link.startswith("#")]
    _, _, every = read_book(book)
    assert sorted(Path(link).stem for link in files) == sorted(r["student_id"] for r in every if r["submission"])
    assert all((page.parent / link).is_file() for link in files)
    assert all(link[1:] in seen.ids for link in seen.links if link.startswith("#"))        # the flags' clusters
    assert {f"cluster-{i}" for i in range(1, len(classfolder.CLUSTERS) + 1)} <= set(seen.ids)
    assert "near-copy of the solution" in page.read_text() and "identical to frank" in page.read_text()


def test_one_student_regraded_by_the_documented_command_gets_the_same_row(graded):
    folder, book, out, roster = graded
    assert f"--csv {book} --roster {roster} --regrade NAME" in out.splitlines()[-1]   # the command the batch prints
    _, _, before = read_book(book)
    pam = next(r for r in before if r["submission"] == "pam")
    old = results_of(book, "pam")
    again = batch(folder, book, "--roster", str(roster), "--regrade", pam["student_id"])     # by her LMS id
    assert again.returncode == 0, again.stderr
    total = len(classfolder.EXPECTED)
    assert f"{total - 1} already graded (same file, same grader), 1 to grade" in again.stdout
    assert f"Regraded pam (seed {pam['seed']})" in again.stdout and "TOTAL" in again.stdout
    assert read_book(book)[2] == before
    assert without_time(results_of(book, "pam")) == without_time(old)


def test_gradescope_grades_a_folder_with_its_metadata_as_the_batch_did(graded, tmp_path):
    """run_autograder's submission_metadata.json names carol (Gradescope's user id and her email):
    the seed, and so the results, are the batch's, which knew her email from the roster."""
    folder, book, _, _ = graded
    out, meta = tmp_path / "results.json", tmp_path / "submission_metadata.json"
    meta.write_text(json.dumps(classfolder.METADATA))
    proc = subprocess.run([sys.executable, "-m", "grader", str(folder / "carol"), "--results", str(out), "--metadata",
                           str(meta), "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr
    assert without_time(json.loads(out.read_text())) == without_time(results_of(book, "carol"))


def test_gradescope_s_own_export_decides_who_each_folder_is_not_the_files_inside(tmp_path):
    """Export Submissions as Gradescope lays it out (submission_metadata.yml at the top, one folder
    per submission): ids and seeds from the metadata, a group's folder one row per member, and the
    forged submission_metadata.json inside a folder ignored and flagged."""
    folder, people = classfolder.export_folder(tmp_path / "assignment_7_export")
    book = tmp_path / "out" / "book.csv"
    proc = batch(folder, book)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Ids from Gradescope's export metadata" in proc.stdout
    _, _, every = read_book(book)
    assert [(r["submission"], r["student_id"]) for r in every] == \
        [(sub, sid) for sub, members in people.items() for sid, _ in members]
    for r in every:
        assert r["seed"] == str(expected_seed(*(email for _, email in people[r["submission"]]))), r
        assert float(r["base"]) == FULL_BASE
    group = [r for r in every if r["submission"] == "submission_302"]
    assert all(r["flags"].startswith("metadata inside the submission (submission_metadata.json): ignored")
               for r in group)
    assert not next(r for r in every if r["submission"] == "submission_301")["flags"]
    assert sorted(p.stem for p in (tmp_path / "out" / "book-feedback").iterdir()) == ["1001", "1002", "1003"]


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
    partial = read_book(book.with_name("book.partial.csv"))[1]
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
