"""Who each submission of a class folder is: decided by staff, never by a submission.

From the first of:
1. a roster CSV (`make batch ROSTER=path`, `--roster`): one row per student with the columns id,
   name and submission (the file or folder name in the class folder); an LMS export's own column
   names work too (ID_COLUMNS, NAME_COLUMNS, EMAIL_COLUMNS; FIRST/LAST name pairs), with a
   submission column added. Two rows naming one submission are a group.
2. Gradescope's "Export Submissions": submission_metadata.yml at the top of the class folder (read
   by grader/gradescope/export.py; the submission folders hold only the students' files).
3. neither: each id is the entry's name, and the summary says so.

Whatever is inside a submission (a submission_metadata.json a student uploaded, naming anyone) is
the student's: never read, and flagged. Flags: a submission no row claims (its id is then its
name), one id claimed by two submissions, metadata inside a submission; and a roster row whose
submission is not in the folder (a row of its own in the gradebook).
"""
import csv
import io
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader import coursesecret
from grader.gradescope import export

ID_COLUMNS = ("id", "sis user id", "sid", "student id", "id number", "student number")     # first present wins
NAME_COLUMNS = ("name", "student", "student name", "full name")
FIRST_LAST = (("first name", "last name"), ("first name", "surname"))
EMAIL_COLUMNS = ("email", "email address", "e-mail")
SUBMISSION_COLUMNS = ("submission", "submission file", "file", "folder")
NOT_STUDENTS = ("points possible",)          # Canvas's second row
INSIDE = ("submission_metadata.json", "submission_metadata.yml")


class RosterError(ValueError):
    """The roster or the export metadata cannot be used as it is; the message says what to fix."""


@dataclass(frozen=True)
class Student:
    id: str
    name: str = ""
    email: str = ""


@dataclass
class Identity:
    source: str = ""                                    # "" when the ids are the entries' names
    students: dict = field(default_factory=dict)        # entry -> (Student, ...): several for a group
    flags: dict = field(default_factory=dict)           # entry -> [phrases]
    absent: list = field(default_factory=list)          # (Student, why) of rows without their submission

    def of(self, entry):
        """The students of an entry (an unclaimed entry: one, named by the entry)."""
        return self.students.get(entry) or (Student(entry),)

    def key(self, entry):
        """What the entry's seed is made from: its students' emails (lowercased, sorted), else their
        ids; the same key Gradescope's run_autograder makes from its submission_metadata.json."""
        return coursesecret.key_of([{"email": s.email, "id": s.id} for s in self.of(entry)])

    def said(self):
        """The sentence that says where identities came from."""
        if not self.source:
            return ("Ids are the entries' names: no roster (ROSTER=roster.csv) and no Gradescope export metadata "
                    f"({export.METADATA} at the top of the class folder).")
        return f"Ids from {self.source}."


def identify(folder, entries, roster=None):
    """The class's Identity. entries: name -> path (batch.submissions); roster: a CSV path or None.
    RosterError when the roster or the metadata cannot be used."""
    folder = Path(folder)
    if roster:
        claims, source = _read_roster(Path(roster)), f"the roster {roster}"
    elif (folder / export.METADATA).is_file():
        try:
            found = export.read(folder / export.METADATA)
        except export.ExportError as e:
            raise RosterError(str(e)) from None
        claims = [(_from_export(p), sub) for sub, people in found.items() for p in people]
        claims += [(None, sub) for sub, people in found.items() if not people]
        source = f"Gradescope's export metadata, {folder / export.METADATA}"
    else:
        _not_one_level_down(folder, entries)
        claims, source = [], ""
    out = Identity(source=source)
    by_file = {Path(path).name: name for name, path in entries.items()}
    for student, submission in claims:
        entry = submission if submission in entries else by_file.get(submission)
        if entry is None:
            if student is not None:
                why = "no submission" if not submission else f"{submission} is not in the class folder"
                out.absent.append((student, why))
            continue
        if student is not None and student not in out.students.get(entry, ()):
            out.students[entry] = out.students.get(entry, ()) + (student,)
    claimed_by = {}
    for entry, students in out.students.items():
        for s in students:
            claimed_by.setdefault(s.id, []).append(entry)
    for entry, path in entries.items():
        said = []
        if source and entry not in out.students:
            said.append(f"no {'roster row' if roster else 'metadata entry'} claims this submission (its id here is "
                        "its name)")
        for s in out.students.get(entry, ()):
            others = [e for e in claimed_by[s.id] if e != entry]
            if others:
                said.append(f"id {s.id} is claimed by another submission too: {', '.join(others)}")
        inside = metadata_inside(path)
        if inside:
            said.append(f"metadata inside the submission ({inside}): ignored, identity and seed come from staff")
        if said:
            out.flags[entry] = said
    return out


def _from_export(person):
    sid, email = person.get("sid", "").strip(), person.get("email", "").strip()
    return Student(sid or email or person.get("name", "").strip(), person.get("name", "").strip(), email)


def _not_one_level_down(folder, entries):
    """A class folder whose one entry is Gradescope's export folder: say which folder to give."""
    if len(entries) == 1:
        only = next(iter(entries.values()))
        if Path(only).is_dir() and (Path(only) / export.METADATA).is_file():
            raise RosterError(f"{folder} holds Gradescope's export one level down: give DIR={only}")


def metadata_inside(path):
    """The relative path of a submission_metadata file inside a submission (a folder at any depth,
    or a zip's member), or ""."""
    path = Path(path)
    if path.is_dir():
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name.lower() in INSIDE:
                    return Path(root, name).relative_to(path).as_posix()
    elif path.suffix.lower() == ".zip":
        try:
            with zipfile.ZipFile(path) as z:
                return next((n for n in z.namelist() if Path(n).name.lower() in INSIDE), "")
        except (OSError, zipfile.BadZipFile, ValueError):
            return ""
    return ""


def _read_roster(path):
    """[(Student, submission name)] of a roster CSV; RosterError naming what to fix."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeError) as e:
        raise RosterError(f"cannot read the roster {path}: {e}") from None
    try:
        dialect = csv.Sniffer().sniff(text.split("\n", 1)[0], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    header = [h.strip() for h in next(reader, [])]
    lower = [h.lower() for h in header]

    def column(names):
        return next((lower.index(n) for n in names if n in lower), None)
    ids = [lower.index(n) for n in ID_COLUMNS if n in lower]
    email = column(EMAIL_COLUMNS)
    name = column(NAME_COLUMNS)
    first_last = next(((lower.index(f), lower.index(s)) for f, s in FIRST_LAST if f in lower and s in lower), None)
    submission = column(SUBMISSION_COLUMNS)
    lacking = [what for what, there in (("an id (" + ", ".join(ID_COLUMNS) + ")", ids or email is not None),
                                        ("a name (" + ", ".join(NAME_COLUMNS) + ", or first and last name)",
                                         name is not None or first_last),
                                        ("a submission (the file or folder name in the class folder)",
                                         submission is not None)) if not there]
    if lacking:
        raise RosterError(f"the roster {path} has no column for {' and no column for '.join(lacking)}; its columns: "
                          f"{', '.join(header) or 'none'}")
    out = []
    for number, row in enumerate(reader, 2):
        cells = [c.strip() for c in row] + [""] * len(header)
        if not any(cells):
            continue
        who = cells[name] if name is not None else f"{cells[first_last[0]]} {cells[first_last[1]]}".strip()
        if who.lower() in NOT_STUDENTS or cells[0].lower() in NOT_STUDENTS:
            continue
        mail = cells[email] if email is not None else ""
        sid = next((cells[i] for i in ids if cells[i]), "") or mail
        if not sid:
            raise RosterError(f"the roster {path}, line {number}: no id for {who or 'this row'} (fill in its "
                              f"{header[ids[0]] if ids else header[email]} cell)")
        sub = cells[submission]
        if "/" in sub or "\\" in sub:
            raise RosterError(f"the roster {path}, line {number}: submission {sub!r} is a path; give the file or "
                              "folder name in the class folder")
        out.append((Student(sid, who, mail), sub))
    if not out:
        raise RosterError(f"the roster {path} has no student rows")
    return out
