"""The class's CSV gradebook, ready for an LMS import.

One header line, then a "Points Possible" row (the maximum of every numeric column, where Canvas
and most LMS imports look for it), then one row per student of each submission (a group's
submission: one row per member, the same points), then one row per roster student without a
submission:

    submission       the entry's name in the class folder (file or folder name without .py / .zip;
                     empty for a roster student without one)
    student_id       the LMS id, from staff only (grader/roster.py: the roster, or Gradescope's export
                     metadata); without either, the entry's name. Never from a file inside a submission
    name             the student's name from the same source ("" without one)
    base             points of Parts 1-4, out of rubric.TOTAL (100)
    extra_credit     points of the bonus parts (up to rubric.BONUS_TOTAL), never mixed into base
    <part>_attempted for each bonus part (rubric.BONUS_PARTS): yes / no (none of its names in the
                     file, or the starter's stubs of it left as they are) / not graded (some of its
                     names missing, or the file not graded at all)
    total            base + extra_credit: Gradescope's score
    <part>           points per part (rubric.ALL_PARTS)
    status           graded / not graded: <why> / grader failed: <why> / no submission
    flags            integrity and identity flags (grader/integrity.py, grader/roster.py), "; " between them
    from_zip         yes when the file graded came out of a zip
    seed             the seed of the hidden inputs (regrading with it reproduces the row)

The bonus columns (extra_credit, each <part>_attempted, total) exist only while a bonus part is on
(rubric.BONUS).

Names, ids and flags may come from what students named their files, so a cell may start like a
spreadsheet formula (=, +, -, @, a tab or a carriage return: a file named `=HYPERLINK(...).py`). As
OWASP advises against CSV injection, such a text cell is written with a leading ' (what a
spreadsheet shows as text and hides), and every text cell is wrapped in double quotes; numbers stay
bare numbers.
"""
import csv
import os
from pathlib import Path

from grader import report, rubric
from grader.integrity import untouched

POINTS_ROW = "Points Possible"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")


def attempted_column(part):
    return f"{part}_attempted"


def fields():
    bonus = ["extra_credit", *map(attempted_column, rubric.BONUS_PARTS), "total"] if rubric.BONUS_PARTS else []
    return ["submission", "student_id", "name", "base", *bonus, *rubric.ALL_PARTS, "status", "flags", "from_zip",
            "seed"]


def points_row():
    row = dict.fromkeys(fields(), "")
    row.update({"submission": POINTS_ROW, "base": rubric.TOTAL, **{p: rubric.part_points(p) for p in rubric.ALL_PARTS}})
    if rubric.BONUS_PARTS:
        row.update(extra_credit=rubric.BONUS_TOTAL, total=rubric.TOTAL)
    return row


def base_and_extra(results):
    """(points of Parts 1-4, points of the bonus parts) of a results.json."""
    scores = report.part_scores(results)
    return (round(sum(scores[p] for p in rubric.PARTS), 2),
            round(sum(scores[p] for p in rubric.BONUS_PARTS), 2))


def bonus_attempted(results, part):
    """yes; no (none of the part's names in the file, or the starter's stubs of it left as they
    are); not graded (some of its names missing, or the file not graded at all)."""
    staff = results.get("extra_data") or {}
    if staff.get("not_graded"):
        return "not graded"
    why = (staff.get("bonus") or {}).get(part)
    if why:
        return "no" if why.startswith("bonus not attempted") else "not graded"
    return "no" if untouched(results, part) else "yes"


def row(name, results, *, error="", student=None, flags=(), from_zip=False, seed=""):
    """The row of one student (a roster.Student, or None: the entry's name is the id) of submission
    `name`; results None when the grader failed on it."""
    out = dict.fromkeys(fields(), "")
    out.update(submission=name, student_id=student.id if student else name, name=student.name if student else "",
               flags="; ".join(flags), from_zip="yes" if from_zip else "no", seed=seed)
    if results is None:
        out["status"] = f"grader failed: {error}"
        return out
    problem = (results.get("extra_data") or {}).get("not_graded")
    base, extra = base_and_extra(results)
    out.update(report.part_scores(results), base=base,
               status=f"not graded: {problem.splitlines()[0][:200]}" if problem else "graded")
    if rubric.BONUS_PARTS:
        out.update(extra_credit=extra, total=round(base + extra, 2),
                   **{attempted_column(p): bonus_attempted(results, p) for p in rubric.BONUS_PARTS})
    return out


def absent_row(student, why):
    """The row of a roster student whose submission is not in the class folder: no points."""
    out = dict.fromkeys(fields(), "")
    out.update(student_id=student.id, name=student.name, status="no submission", flags=why, from_zip="no")
    return out


def cell(value):
    """A text cell no spreadsheet reads as a formula: one that starts like one gets a leading '."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_START) else value


def write(path, rows):
    """The gradebook, written atomically (a reader never sees half of it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.writing")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields(), quoting=csv.QUOTE_NONNUMERIC)
        w.writeheader()
        w.writerow(points_row())
        for r in rows:
            w.writerow({k: cell(v) for k, v in r.items()})
    os.replace(tmp, path)
