"""What grading produces: Gradescope's results.json, a terminal table, and a gradebook row.

Everything here formats trusted data only: rubric entries, numbers, and feedback strings that the
hidden suites built from validated plain data.
"""
import json
import os
import tempfile

from grader import rubric
from grader.score import part_totals

MAX_FEEDBACK = 3        # failed cases shown per check; the rest are counted


def feedback(row):
    if row["passed"] == row["cases"] and row["cases"]:
        return f"All {row['cases']} cases passed."
    distinct = list(dict.fromkeys(row["failures"]))          # one reason shared by many cases is said once
    shown = [m if row["failures"].count(m) == 1 else f"{m}\n({row['failures'].count(m)} cases)"
             for m in distinct[:MAX_FEEDBACK]]
    more = len(distinct) - len(shown)
    head = f"{row['passed']} of {row['cases']} cases passed." if row["cases"] else ""
    tail = [f"(and {more} more failing cases)"] if more > 0 else []
    return "\n\n".join(filter(None, [head, *shown, *tail]))


def results_json(rows, summary, seconds):
    """Gradescope's format (score, execution_time, output, tests with name, number, score, max_score,
    status, output, tags, visibility). Deterministic apart from execution_time."""
    tests = []
    for i, row in enumerate(rows):
        check = row["check"]
        part_no = rubric.PARTS.index(check.part) + 1
        number = f"{part_no}.{1 + sum(1 for r in rows[:i] if r['check'].part == check.part)}"
        tests.append({"name": f"{check.part}: {check.title}", "number": number, "score": row["points"],
                      "max_score": check.points, "status": "passed" if row["points"] == check.points else "failed",
                      "output": feedback(row), "tags": [check.part], "visibility": "visible"})
    return {"score": round(sum(r["points"] for r in rows), 2), "max_score": rubric.TOTAL,
            "execution_time": round(seconds, 2), "output": summary, "output_format": "text",
            "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


def write_atomically(path, data):
    """Write to a temp file in the same folder, then rename: a reader never sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".results-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def table(rows, summary):
    """The terminal view: one line per check, part totals, the first feedback line of each failure."""
    lines = [summary, ""]
    totals = part_totals(rows)
    for part in rubric.PARTS:
        got, out_of = totals[part]
        lines.append(f"{part:<22} {got:>6.2f} / {out_of}")
        for row in (r for r in rows if r["check"].part == part):
            check = row["check"]
            mark = "ok " if row["points"] == check.points else "FAIL"
            lines.append(f"  {mark} {row['points']:>5.2f}/{check.points:<2} {check.title}")
            if row["points"] != check.points:
                said = [line for line in feedback(row).splitlines() if line.strip()]
                lines += [f"         {line}" for line in said[:4]]
    total = round(sum(r["points"] for r in rows), 2)
    lines += ["", f"{'TOTAL':<22} {total:>6.2f} / {rubric.TOTAL}"]
    return "\n".join(lines)


def csv_row(name, rows, status):
    totals = part_totals(rows)
    return {"submission": name, "score": round(sum(r["points"] for r in rows), 2), "status": status,
            **{part: totals[part][0] for part in rubric.PARTS}}


CSV_FIELDS = ["submission", "score", *rubric.PARTS, "status"]
