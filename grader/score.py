"""From case outcomes to points, failing closed: a check of the rubric that reported no case scores
0, and a check's points are shared equally among its cases."""
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


def part_totals(rows):
    return {part: (round(sum(r["points"] for r in rows if r["check"].part == part), 2), rubric.part_points(part))
            for part in rubric.ALL_PARTS}
