"""What grading produces: Gradescope's results.json, a terminal table, and the text a student sees
of a results.json (visible_text: the feedback files of an offline batch).

Who reads what. Gradescope shows students results.json's `output` at the top, then every test;
it shows instructors, and only them, what run_autograder printed (results/stdout, "only shown to
instructors" by default, and `stdout_visibility` is set to "hidden" to say so). So:
  - `output` is for the student: the score, the score per part, and for each part that lost points
    the first thing to fix (its first failing check and the first lines of what differed);
  - what is for staff (the sandbox's protections, the seed, hashes of the file and of the grader)
    goes to stdout, which is the terminal table of `make grade`, and to results.json's
    `extra_data`, which Gradescope stores without showing it.
A hidden test would have been the other way, and is not used: Gradescope's current specification
says "If test cases are hidden, students will not be able to see their total score" (an older
edition exempted hidden tests without points; the current one does not), and the contract gives
every test a part in `tags`, which a staff note has not.

Bonus parts (rubric.BONUS_PARTS) are extra credit: their points add to `score` above `max_score`
(rubric.TOTAL), which Gradescope's format allows; their tests carry their part's tag and say
"extra credit" in their name.

Everything here formats trusted data only: rubric entries, numbers, and feedback strings that the
hidden suites built from validated plain data.
"""
import json
import os
import re
import tempfile

from grader import firstdiff, rubric
from grader.score import part_totals

MAX_FEEDBACK = 3        # failed cases shown per check; the rest are counted
FIRST_LINES = 3         # lines of the first difference quoted in the summary, per part (whole pieces only)


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


def part_label(part):
    """"Part 1: the block allocator", and for a bonus part its section name plus "extra credit"."""
    label = rubric.SECTIONS.get(part, part)
    return f"{label} (extra credit)" if part in rubric.BONUS_PARTS else label


def total(rows):
    return round(sum(r["points"] for r in rows), 2)


def score_line(rows):
    got = total(rows)
    bonus = round(sum(r["points"] for r in rows if r["check"].part in rubric.BONUS_PARTS), 2)
    extra = f" ({bonus:.2f} of it extra credit)" if bonus else ""
    return f"Score: {got:.2f} / {rubric.TOTAL}{extra}"


def not_graded(rows, part):
    """The one reason a part was not graded at all (a bonus not attempted), else None."""
    mine = [r for r in rows if r["check"].part == part]
    reasons = {tuple(r["failures"]) for r in mine}
    return mine[0]["failures"][0] if mine and all(not r["cases"] for r in mine) and len(reasons) == 1 else None


def first_to_fix(rows, part):
    """Lines naming the part's first failing check and the start of its first difference (whole
    pieces of it: firstdiff.quote), then, once, the other checks of the part whose first difference
    is the same (one cause, many checks). Of the checks that share the first cause, the one named is
    the one it fails most (fewest cases passed): the check about what differed, not merely the first
    that met it (an alloc on a full pool is the exhaustion check's, though peak_used's scripts fill a
    pool too)."""
    failing = [r for r in rows if r["check"].part == part and r["points"] < r["check"].points]
    if not failing:
        return []
    if part in rubric.BONUS_PARTS and not_graded(rows, part):
        return [f"  {not_graded(rows, part)}"]
    said = firstdiff.cause(failing[0]["check"].title, (failing[0]["failures"] or [""])[0])
    group = [r for r in failing if said is not None and r["failures"]
             and firstdiff.cause(r["check"].title, r["failures"][0]) == said] or failing[:1]
    row = min(group, key=lambda r: (r["passed"] / r["cases"] if r["cases"] else 0.0, failing.index(r)))
    cases = f" ({row['passed']} of {row['cases']} cases passed)" if row["cases"] else ""
    first = (row["failures"] or [""])[0]
    lines = [f"  First to fix: {row['check'].title}{cases}",
             *(f"      {line}" for line in firstdiff.quote(row["check"].title, first, FIRST_LINES))]
    same = [r["check"] for r in group if r is not row]
    if same:
        names = "; ".join(re.split(r"[:;]", c.title)[0] for c in same)
        lines.append(f"  The same first difference fails {len(same)} more check{'s' * (len(same) > 1)} of this part "
                     f"(one cause, most likely): {names}")
    return lines


def student_output(rows, notes=(), problem=None):
    """results.json's `output`: the student's message first (a problem, else the score), then the
    notes (a renamed file), then the score per part and, per part that lost points, what to fix."""
    head = [f"Not graded: {problem}", score_line(rows)] if problem else [score_line(rows)]
    lines = [*head, *notes, ""]
    totals = part_totals(rows)
    width = max([44] + [len(part_label(p)) + 1 for p in rubric.ALL_PARTS])
    for part in rubric.ALL_PARTS:
        got, out_of = totals[part]
        lines.append(f"{part_label(part):<{width}} {got:>6.2f} / {out_of}")
        if not problem:
            lines += first_to_fix(rows, part)
    if not problem:
        lines += ["", "Each test below is one check of the rubric: how many of its cases passed and, for "
                      "a failing one, what differed and which section of assignment.md to read."]
    return "\n".join(lines)


def test_name(check):
    bonus = " (extra credit)" if check.part in rubric.BONUS_PARTS else ""
    return f"{check.part}{bonus}: {check.title}"


def results_json(rows, output, seconds, extra_data=None):
    """Gradescope's format (score, execution_time, output, tests with name, number, score, max_score,
    status, output, tags, visibility; extra_data for staff). Deterministic apart from execution_time."""
    tests = []
    for i, row in enumerate(rows):
        check = row["check"]
        part_no = rubric.registry.number(check.part)
        number = f"{part_no}.{1 + sum(1 for r in rows[:i] if r['check'].part == check.part)}"
        tests.append({"name": test_name(check), "number": number, "score": row["points"],
                      "max_score": check.points, "status": "passed" if row["points"] == check.points else "failed",
                      "output": feedback(row), "tags": [check.part], "visibility": "visible"})
    return {"score": total(rows), "max_score": rubric.TOTAL,
            "execution_time": round(seconds, 2), "output": output, "output_format": "text",
            "visibility": "visible", "stdout_visibility": "hidden", "extra_data": extra_data or {},
            "tests": tests}


def write_atomically(path, data):
    """Write to a temp file in the same folder, then rename: a reader never sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".results-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def table(rows, header):
    """The terminal view for staff: the header (what was graded, how), one line per check, part
    totals, the first feedback lines of each failure."""
    lines = [header, ""]
    totals = part_totals(rows)
    for part in rubric.ALL_PARTS:
        got, out_of = totals[part]
        name = part + (" (extra credit)" if part in rubric.BONUS_PARTS else "")
        lines.append(f"{name:<28} {got:>6.2f} / {out_of}")
        skipped = not_graded(rows, part) if part in rubric.BONUS_PARTS else None
        if skipped:
            lines.append(f"  {skipped}")
        for row in (r for r in rows if r["check"].part == part):
            check = row["check"]
            mark = "ok " if row["points"] == check.points else "FAIL"
            lines.append(f"  {mark} {row['points']:>5.2f}/{check.points:<2} {check.title}")
            if row["points"] != check.points and not skipped:
                said = [line for line in feedback(row).splitlines() if line.strip()]
                lines += [f"         {line}" for line in said[:4]]
    bonus = f" (+ up to {rubric.BONUS_TOTAL} extra credit)" if rubric.BONUS_PARTS else ""
    lines += ["", f"{'TOTAL':<28} {total(rows):>6.2f} / {rubric.TOTAL}{bonus}"]
    return "\n".join(lines)


def part_scores(results):
    """part -> points, from a results.json's tests (their tags)."""
    return {part: round(sum(t["score"] for t in results["tests"] if part in t["tags"]), 2)
            for part in rubric.ALL_PARTS}


RULE = "-" * 72


def visible_text(results):
    """What a student sees of a results.json, as one text: `output`, then every test that is not
    hidden (its number, name, points and output), as Gradescope shows them. Nothing of extra_data or
    of the staff's stdout is in it."""
    out = [results.get("output", "")]
    default = results.get("visibility", "visible")
    for test in results.get("tests", []):
        if test.get("visibility", default) == "hidden":
            continue
        head = f"{test.get('number', '')} {test['name']}".strip()
        out += ["", RULE, f"{head}: {float(test['score']):.2f} / {test['max_score']} ({test.get('status', '')})",
                test.get("output", "")]
    return "\n".join(out).rstrip("\n") + "\n"
