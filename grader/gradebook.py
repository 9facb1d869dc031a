"""The class's CSV gradebook, ready for an LMS import.

One header line, then a "Points Possible" row (the maximum of every numeric column, where Canvas
and most LMS imports look for it), then one row per submission:

    submission       the entry's name in the class folder (file or folder name without .py / .zip)
    student_id       from Gradescope's submission_metadata.json when the entry has one (the users'
                     emails, ";" between the members of a group), else the entry's name
    base             points of Parts 1-4, out of rubric.TOTAL (100)
    extra_credit     points of the bonus parts (up to rubric.BONUS_TOTAL), never mixed into base
    bonus_attempted  yes / no (no bonus names in the file, or the starter's bonus stubs left as
                     they are) / not graded (some of the names missing, or the file not graded at all)
    total            base + extra_credit: Gradescope's score
    <part>           points per part (rubric.ALL_PARTS)
    status           graded / not graded: <why> / grader failed: <why>
    flags            integrity flags (grader/integrity.py), "; " between them
    from_zip         yes when the file graded came out of a zip
    seed             the seed of the hidden inputs (regrading with it reproduces the row)

The three bonus columns exist only while the bonus is on (rubric.BONUS).

Names, ids and flags come from the submissions, so a cell may start like a spreadsheet formula
(=, +, -, @, a tab or a carriage return: a file named `=HYPERLINK(...).py`). As OWASP advises
against CSV injection, such a text cell is written with a leading ' (what a spreadsheet shows as
text and hides), and every text cell is wrapped in double quotes; numbers stay bare numbers.
"""
import csv
import json
import os
from pathlib import Path

from grader import report, rubric
from grader.integrity import untouched

POINTS_ROW = "Points Possible"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")


def fields():
    bonus = ["extra_credit", "bonus_attempted", "total"] if rubric.BONUS_PARTS else []
    return ["submission", "student_id", "base", *bonus, *rubric.ALL_PARTS, "status", "flags", "from_zip", "seed"]


def points_row():
    row = dict.fromkeys(fields(), "")
    row.update({"submission": POINTS_ROW, "base": rubric.TOTAL, **{p: rubric.part_points(p) for p in rubric.ALL_PARTS}})
    if rubric.BONUS_PARTS:
        row.update(extra_credit=rubric.BONUS_TOTAL, total=rubric.TOTAL)
    return row


def student_id(name, path):
    """Gradescope's users (their emails, else their ids) when the entry is a folder with its
    submission_metadata.json, else the entry's name."""
    meta = Path(path) / "submission_metadata.json"
    try:
        users = json.loads(meta.read_text()).get("users") if Path(path).is_dir() and meta.is_file() else None
        ids = [str(u.get("email") or u.get("id")) for u in users or [] if u.get("email") or u.get("id")]
    except (OSError, ValueError, AttributeError, TypeError):
        ids = []
    return ";".join(ids) or name


def base_and_extra(results):
    """(points of Parts 1-4, points of the bonus parts) of a results.json."""
    scores = report.part_scores(results)
    return (round(sum(scores[p] for p in rubric.PARTS), 2),
            round(sum(scores[p] for p in rubric.BONUS_PARTS), 2))


def bonus_attempted(results):
    """yes; no (no bonus name in the file, or the starter's bonus stubs left as they are); not graded."""
    staff = results.get("extra_data") or {}
    if staff.get("not_graded"):
        return "not graded"
    left_out = [why for part, why in (staff.get("bonus") or {}).items() if part in rubric.BONUS_PARTS]
    if left_out:
        return "no" if all(why.startswith("bonus not attempted") for why in left_out) else "not graded"
    return "no" if all(untouched(results, part) for part in rubric.BONUS_PARTS) else "yes"


def row(name, results, *, error="", student="", flags=(), from_zip=False, seed=""):
    out = dict.fromkeys(fields(), "")
    out.update(submission=name, student_id=student or name, flags="; ".join(flags),
               from_zip="yes" if from_zip else "no", seed=seed)
    if results is None:
        out["status"] = f"grader failed: {error}"
        return out
    problem = (results.get("extra_data") or {}).get("not_graded")
    base, extra = base_and_extra(results)
    out.update(report.part_scores(results), base=base,
               status=f"not graded: {problem.splitlines()[0][:200]}" if problem else "graded")
    if rubric.BONUS_PARTS:
        out.update(extra_credit=extra, bonus_attempted=bonus_attempted(results), total=round(base + extra, 2))
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
