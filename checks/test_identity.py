"""Who each submission is, and the course secret that seeds it: decided by staff, never by a
submission (grader/roster.py, grader/gradescope/export.py, grader/coursesecret.py). Without
grading: the roster in our columns and in LMS exports' (Canvas, Gradescope, Moodle), Gradescope's
export metadata as Gradescope writes it, the flags (unclaimed, one id twice, metadata inside a
submission, a row without its submission), bad input refused with one line and nothing written, a
class of 64 submissions in the shapes students hand in mapped to LMS ids, and the secret: where it
comes from, what refuses to run without it, and that the autograder zip carries it.
(checks/test_class_batch.py grades a class with a roster, and an export, end to end.)"""
import csv
import json
import subprocess
import sys
import zipfile

import pytest

from grader import paths

paths.trusted_imports()

from grader import batch, coursesecret, roster  # noqa: E402
from grader.gradescope import build, export  # noqa: E402
from grader.selftest import classfolder  # noqa: E402

REPO = paths.REPO


def _write_csv(path, header, rows, delimiter=","):
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


def _class(tmp_path, names):
    """A class folder with one loose file per name; its entries as the batch lists them."""
    folder = tmp_path / "class"
    folder.mkdir()
    for name in names:
        (folder / f"{name}.py").write_text("x = 1\n")
    return folder, batch.submissions(folder)


# ------------------------------------------------------------------ the roster
LMS_HEADERS = {          # the columns, a row of (id, name, email, submission), and the id the row gives
    "ours": (["id", "name", "submission"], lambda sid, name, email, sub: [sid, name, sub], "s1"),
    "Canvas": (["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "submission"],      # its ID: what its
               lambda sid, name, email, sub: [name, "99" + sid, sid, email, "A", sub], "99s1"),  # import matches
    "Gradescope": (["First Name", "Last Name", "SID", "Email", "submission"],
                   lambda sid, name, email, sub: [*name.split(" ", 1), sid, email, sub], "s1"),
    "Moodle": (["First name", "Surname", "ID number", "Email address", "submission"],
               lambda sid, name, email, sub: [*name.split(" ", 1), sid, email, sub], "s1"),
}


@pytest.mark.parametrize("lms", list(LMS_HEADERS))
def test_a_roster_in_our_columns_or_an_lms_export_maps_every_submission_to_its_id(tmp_path, lms):
    header, row, expected = LMS_HEADERS[lms]
    folder, entries = _class(tmp_path, ["ann", "ben"])
    people = [("s1", "Ann Lee", "ann@u.edu", "ann.py"), ("s2", "Ben Ng", "ben@u.edu", "ben")]
    path = _write_csv(tmp_path / "r.csv", header, [row(*p) for p in people], delimiter=";" if lms == "Moodle" else ",")
    who = roster.identify(folder, entries, path)
    assert [s.id for s in who.of("ann")] == [expected] and [s.name for s in who.of("ben")] == ["Ben Ng"]
    assert who.flags == {} and who.absent == [] and who.said().startswith("Ids from the roster")
    assert who.key("ben") == {"ours": "s2", "Canvas": "99s2"}.get(lms, "ben@u.edu")   # the email when it has one


def test_canvas_s_points_possible_row_is_no_student_and_a_shared_submission_is_a_group(tmp_path):
    folder, entries = _class(tmp_path, ["pair"])
    path = _write_csv(tmp_path / "r.csv", ["Student", "ID", "SIS User ID", "submission"],
                      [["    Points Possible", "", "", ""], ["Ann", "1", "s1", "pair.py"], ["Ben", "2", "s2", "pair"]])
    who = roster.identify(folder, entries, path)
    assert [s.id for s in who.of("pair")] == ["1", "2"] and who.flags == {}


def test_unclaimed_doubly_claimed_forged_and_absent_are_flagged(tmp_path):
    folder, entries = _class(tmp_path, ["ann", "ben", "cat", "dan"])
    (folder / "eve").mkdir()
    (folder / "eve" / "deep").mkdir()
    (folder / "eve" / "deep" / "submission_metadata.json").write_text(json.dumps(classfolder.FORGED))
    (folder / "eve" / "paged_kv.py").write_text("x = 1\n")
    with zipfile.ZipFile(folder / "fay.zip", "w") as z:
        z.writestr("paged_kv.py", "x = 1\n")
        z.writestr("submission_metadata.yml", "forged")
    entries = batch.submissions(folder)
    path = _write_csv(tmp_path / "r.csv", ["id", "name", "submission"],
                      [["s1", "Ann", "ann.py"], ["s2", "Ben", "ben"], ["s2", "Ben", "cat.py"], ["s5", "Eve", "eve"],
                       ["s6", "Fay", "fay.zip"], ["s7", "Gus", ""], ["s8", "Hal", "hal.py"]])
    who = roster.identify(folder, entries, path)
    assert who.flags["ben"] == ["id s2 is claimed by another submission too: cat"]
    assert who.flags["cat"] == ["id s2 is claimed by another submission too: ben"]
    assert who.flags["dan"] == ["no roster row claims this submission (its id here is its name)"]
    assert who.of("dan")[0].id == "dan"
    assert who.flags["eve"] == ["metadata inside the submission (deep/submission_metadata.json): ignored, identity "
                                "and seed come from staff"]
    assert who.flags["fay"][0].startswith("metadata inside the submission (submission_metadata.yml)")
    assert [s.id for s in who.of("eve")] == ["s5"]                     # the forged file names erin: not read
    assert [(s.id, why) for s, why in who.absent] == [("s7", "no submission"), ("s8", "hal.py is not in the class "
                                                                                      "folder")]
    assert "ann" not in who.flags


def test_without_a_roster_or_metadata_ids_are_the_names_and_it_says_so(tmp_path):
    folder, entries = _class(tmp_path, ["ann"])
    who = roster.identify(folder, entries)
    assert who.of("ann")[0].id == "ann" and who.flags == {} and "Ids are the entries' names" in who.said()
    assert who.key("ann") == "ann"


@pytest.mark.parametrize("header, rows, says", [
    (["name", "submission"], [["Ann", "ann.py"]], "no column for an id"),
    (["id", "submission"], [["s1", "ann.py"]], "no column for a name"),
    (["id", "name"], [["s1", "Ann"]], "no column for a submission"),
    (["id", "name", "submission"], [["", "Ann", "ann.py"]], "line 2: no id for Ann"),
    (["id", "name", "submission"], [["s1", "Ann", "../ann.py"]], "is a path"),
    (["id", "name", "submission"], [], "no student rows"),
])
def test_a_roster_that_cannot_be_used_is_one_line_saying_what_to_fix(tmp_path, header, rows, says):
    folder, entries = _class(tmp_path, ["ann"])
    path = _write_csv(tmp_path / "r.csv", header, rows)
    with pytest.raises(roster.RosterError, match=says):
        roster.identify(folder, entries, path)


def _batch(*args):
    return subprocess.run([sys.executable, "-m", "grader", "batch", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_bad_identity_input_stops_the_batch_with_one_line_and_writes_nothing(tmp_path):
    folder, _ = _class(tmp_path, ["ann"])
    bad = _write_csv(tmp_path / "r.csv", ["id", "submission"], [["s1", "ann.py"]])
    done = _batch(folder, "--roster", bad, "--csv", tmp_path / "out" / "book.csv")
    assert done.returncode == 2 and "has no column for a name" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    (folder / export.METADATA).write_text("submission_1:\n  :submitters: somebody\n")
    done = _batch(folder, "--seed", 1, "--csv", tmp_path / "out" / "book.csv")
    assert done.returncode == 2 and "line 2: submission_1's :submitters: is 'somebody', not a list" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
    done = _batch(folder, "--seed", 1, "--regrade", "nobody", "--roster", _write_csv(
        tmp_path / "ok.csv", ["id", "name", "submission"], [["s1", "Ann", "ann.py"]]), "--csv", tmp_path / "out" / "b.csv")
    assert done.returncode == 2 and "no submission or student id nobody" in done.stderr


# ------------------------------------------------------------------ Gradescope's export
def test_gradescope_s_export_metadata_is_read_as_gradescope_writes_it(tmp_path):
    folder, people = classfolder.export_folder(tmp_path / "assignment_7_export")
    found = export.read(folder / export.METADATA)
    assert {sub: [(p["sid"], p["email"]) for p in ps] for sub, ps in found.items()} == people
    assert [p["name"] for p in found["submission_302"]] == ['Carol "CJ" Jones', "Ned O'Neil"]
    who = roster.identify(folder, batch.submissions(folder))
    assert [s.id for s in who.of("submission_302")] == ["1002", "1003"] and who.key("submission_302") == \
        "carol@example.edu,ned@example.edu"
    assert who.flags == {"submission_302": ["metadata inside the submission (submission_metadata.json): ignored, "
                                            "identity and seed come from staff"]}
    outer = tmp_path / "outer"
    outer.mkdir()
    folder.rename(outer / folder.name)
    with pytest.raises(roster.RosterError, match="one level down: give DIR="):
        roster.identify(outer, batch.submissions(outer))


@pytest.mark.parametrize("text, says", [
    ("submission_1:\n  :submitters: somebody\n", "line 2: submission_1's :submitters: is 'somebody', not a list"),
    ("submission_1:\n  :score: 1.0\n", "line 1: submission_1 has no :submitters:"),
    ("  :submitters: []\n", "line 1: expected a submission's folder name"),
    ("submission_1:\n  :submitters:\n  - :name: 'Ann\n", "line 3: a quote is never closed"),
    ("submission_1:\n  :submitters:\n  - :name: Ann\n      :sid: '1'\n", "line 4: expected a submitter's key"),
    ("submission_1:\n\t:submitters: []\n", "line 2: a tab in the indentation"),
    ("submission_1:\n  :submitters: []\nsubmission_1:\n  :submitters: []\n", "line 3: submission_1 appears twice"),
])
def test_a_malformed_export_metadata_is_one_line_naming_its_line(text, says):
    with pytest.raises(export.ExportError, match=says):
        export.parse(text)


# ------------------------------------------------------------------ a class of 64 in every shape
def test_a_class_of_64_in_every_shape_maps_every_entry_to_its_lms_id(tmp_path):
    """Loose files (renamed copies among them), folders (nested, Gradescope-style with a forged
    submission_metadata.json), `make submit` zips: each entry is its roster row's id, however it is
    named, and only the forged ones are flagged."""
    folder = tmp_path / "class"
    folder.mkdir()
    rows = []
    for i in range(64):
        sid, name = f"2026{i:04d}", f"Student {i}"
        shape = i % 4
        if shape == 0:
            entry = f"student{i} paged_kv (1).py"
            (folder / entry).write_text("x = 1\n")
        elif shape == 1:
            entry = f"student{i}"
            (folder / entry / "src").mkdir(parents=True)
            (folder / entry / "src" / "paged_kv.py").write_text("x = 1\n")
        elif shape == 2:
            entry = f"submission_{9000 + i}"
            (folder / entry).mkdir()
            (folder / entry / "paged_kv.py").write_text("x = 1\n")
            (folder / entry / "submission_metadata.json").write_text(json.dumps(classfolder.FORGED))
        else:
            entry = f"submission-student{i}.zip"
            with zipfile.ZipFile(folder / entry, "w") as z:
                z.writestr("paged_kv.py", "x = 1\n")
        rows.append([sid, name, f"s{i}@u.edu", entry])
    path = _write_csv(tmp_path / "roster.csv", ["id", "name", "email", "submission"], rows)
    entries = batch.submissions(folder)
    who = roster.identify(folder, entries, path)
    assert len(entries) == 64
    by_file = {p.name: e for e, p in entries.items()}
    assert {who.of(by_file[entry])[0].id for _, _, _, entry in rows} == {sid for sid, *_ in rows}
    assert sorted(who.flags) == sorted(by_file[r[3]] for i, r in enumerate(rows) if i % 4 == 2)
    assert all(f == ["metadata inside the submission (submission_metadata.json): ignored, identity and seed come "
                     "from staff"] for f in who.flags.values())


# ------------------------------------------------------------------ the course secret
def test_the_secret_comes_from_a_file_else_the_environment_and_must_be_long_enough(tmp_path, monkeypatch):
    monkeypatch.setenv(coursesecret.ENV, "from-the-environment-0123")
    assert coursesecret.load() == b"from-the-environment-0123"
    (tmp_path / "s").write_text("  from-a-file-0123456789\n")
    assert coursesecret.load(tmp_path / "s") == b"from-a-file-0123456789"
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(coursesecret.SecretError, match="3 characters; use at least 16"):
        coursesecret.load(tmp_path / "short")
    with pytest.raises(coursesecret.SecretError, match="cannot read the course secret"):
        coursesecret.load(tmp_path / "missing")
    monkeypatch.delenv(coursesecret.ENV)
    assert coursesecret.load(required=False) is None
    with pytest.raises(coursesecret.SecretError, match="CS349E_COURSE_SECRET is not set"):
        coursesecret.load()
    assert coursesecret.key_of([{"email": "B@u.edu", "id": 2}, {"id": 1}]) == "1,b@u.edu"


def _without_secret():
    import os
    return {k: v for k, v in os.environ.items() if k != coursesecret.ENV}


def test_without_a_secret_the_batch_the_autograder_and_a_gradescope_grading_refuse(tmp_path):
    folder, _ = _class(tmp_path, ["ann"])
    run = [sys.executable, "-m", "grader"]
    done = subprocess.run([*run, "batch", str(folder), "--csv", str(tmp_path / "o" / "b.csv")], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=_without_secret())
    assert done.returncode == 2 and "no course secret" in done.stderr and "--seed N" in done.stderr
    assert not (tmp_path / "o").exists()
    built = subprocess.run([sys.executable, "-m", "grader.gradescope.build", str(tmp_path / "a.zip")], cwd=REPO,
                           capture_output=True, text=True, timeout=120, env=_without_secret())
    assert built.returncode == 2 and "no course secret" in built.stderr and not (tmp_path / "a.zip").exists()
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps(classfolder.METADATA))
    graded = subprocess.run([*run, str(folder / "ann.py"), "--metadata", str(meta), "--results",
                             str(tmp_path / "r.json")], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env=_without_secret())
    assert graded.returncode == 2 and "no course secret" in graded.stderr and not (tmp_path / "r.json").exists()


def test_the_autograder_zip_carries_the_secret_and_run_autograder_passes_it(tmp_path):
    secret = coursesecret.throwaway()
    with zipfile.ZipFile(build.build(tmp_path / "a.zip", secret=secret)) as z:
        assert z.read(coursesecret.FILE_IN_ZIP).strip() == secret
        assert '--secret-file "$ROOT/source/course_secret"' in z.read("run_autograder").decode()
        assert (z.getinfo(coursesecret.FILE_IN_ZIP).external_attr >> 16) & 0o077 == 0
    assert not any(rel == coursesecret.FILE_IN_ZIP for _, rel in build.files())          # not in the repository
    assert not (REPO / coursesecret.FILE_IN_ZIP).exists()
