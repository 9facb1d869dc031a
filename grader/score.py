"""From case outcomes to points, failing closed: a check of the rubric that reported no case scores
0, and a check's points are shared equally among the cases it counts (counted: its drawn case only
once its core cases pass)."""
from grader import rubric


def score(by_check, default_message="did not run", left_out=None):
    """[{check, points, max, passed, failures}] in rubric order. left_out: {part: why} for parts
    not graded at all (a bonus not attempted): their checks score 0 with that one message."""
    rows = []
    left_out = left_out or {}
    for check in rubric.CHECKS.values():
        cases = by_check.get(check.id, []) if check.part not in left_out else []
        passed = sum(1 for ok, _ in cases if ok)
        points = round(check.points * passed / len(cases), 2) if cases else 0.0
        failures = [msg for ok, msg in cases if not ok] if cases else [left_out.get(check.part, default_message)]
        rows.append({"check": check, "points": points, "passed": passed, "cases": len(cases), "failures": failures})
    return rows


def counted(outcomes, drawn):
    """The outcomes a check's score is made of: a case drawn from the student's seed counts only once
    every core case (the same for every seed) passes, so a bug the core cases catch costs the same for
    every student, and failing a core case to hide a drawn one never pays (a core case then weighs at
    least as much as the drawn one it hides). drawn: a flag per outcome."""
    core_failed = any(not ok for (ok, _), d in zip(outcomes, drawn) if not d)
    return [o for o, d in zip(outcomes, drawn) if not (d and core_failed)]


def part_totals(rows):
    return {part: (round(sum(r["points"] for r in rows if r["check"].part == part), 2), rubric.part_points(part))
            for part in rubric.ALL_PARTS}
