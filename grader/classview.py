"""What staff read after grading a class: how the scores are spread, per part, and which checks the
most submissions failed, i.e. what the class did not understand.

Input: the results.json of every submission (dicts as report.results_json writes them). Submissions
that were not graded at all (a syntax error, a missing name, no file) fail every check for one
reason; they are counted apart, so they do not drown the checks that real attempts fail.
"""
from grader import report, rubric

BAR = 40                # characters of the longest histogram bar
TOP_FAILED = 10
PART_BINS = ((0.0, 0.0, "0"), (0.0, 0.25, "1-24%"), (0.25, 0.5, "25-49%"), (0.5, 0.75, "50-74%"),
             (0.75, 1.0, "75-99%"), (1.0, 1.0, "100%"))


def summary(results):
    """Lines of the class summary; `results` maps a submission's name to its results dict or None
    (the grader failed on it)."""
    graded = {n: r for n, r in results.items() if r is not None and not _not_graded(r)}
    not_graded = sorted(n for n, r in results.items() if r is not None and _not_graded(r))
    failed = sorted(n for n, r in results.items() if r is None)
    lines = [f"Class summary: {len(results)} submissions, {len(graded)} graded, {len(not_graded)} not graded "
             f"(no file, syntax error, missing names), {len(failed)} the grader failed on."]
    if not_graded:
        lines.append("  not graded: " + ", ".join(not_graded))
    if failed:
        lines.append("  grader failed: " + ", ".join(failed))
    scored = [r for r in results.values() if r is not None]
    if not scored:
        return lines
    totals = [float(r["score"]) for r in scored]
    lines += ["", f"Score out of {rubric.TOTAL} (all {len(scored)} with a result): {_stats(totals)}"]
    lines += _histogram(_score_bins(totals))
    for part in rubric.ALL_PARTS:
        out_of = rubric.part_points(part)
        got = [report.part_scores(r)[part] for r in scored]
        extra = ", extra credit" if part in rubric.BONUS_PARTS else ""
        lines += ["", f"{part} ({out_of} points{extra}): {_stats(got)}"]
        lines += _histogram(_part_bins(got, out_of))
    lines += ["", f"Checks failed most often (by the {len(graded)} graded submissions):"]
    counts = _failed_counts(graded.values())
    if not any(counts.values()):
        lines.append("  none")
    ranked = sorted((c for c in counts.items() if c[1]), key=lambda c: (-c[1], list(rubric.CHECKS).index(c[0])))
    for check_id, n in ranked[:TOP_FAILED]:
        lines.append(f"  {n:>4} of {len(graded):<4} {check_id:<36} {rubric.CHECKS[check_id].title}")
    return lines


def _not_graded(results):
    return bool((results.get("extra_data") or {}).get("not_graded"))


def _failed_counts(graded):
    """check id -> how many submissions did not get all of its points."""
    by_name = {report.test_name(c): c.id for c in rubric.CHECKS.values()}
    counts = dict.fromkeys(rubric.CHECKS, 0)
    for results in graded:
        for test in results["tests"]:
            check_id = by_name.get(test["name"])
            skipped = (results.get("extra_data") or {}).get("bonus") or {}
            if check_id and float(test["score"]) < float(test["max_score"]) \
                    and rubric.CHECKS[check_id].part not in skipped:      # a bonus not attempted fails nothing
                counts[check_id] += 1
    return counts


def _stats(values):
    ordered = sorted(values)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return f"mean {sum(ordered) / n:.1f}, median {median:.1f}, min {ordered[0]:.1f}, max {ordered[-1]:.1f}"


def _score_bins(totals):
    """Tens of points, 100 on its own, and extra credit above it when there is any."""
    bins = [(f"{lo}-{lo + 9}", sum(1 for t in totals if lo <= t < lo + 10)) for lo in range(0, rubric.TOTAL, 10)]
    bins.append((str(rubric.TOTAL), sum(1 for t in totals if t == rubric.TOTAL)))
    above = sum(1 for t in totals if t > rubric.TOTAL)
    return bins + ([(f">{rubric.TOTAL}", above)] if above or rubric.BONUS_PARTS else [])


def _part_bins(got, out_of):
    bins = []
    for lo, hi, label in PART_BINS:
        if lo == hi:
            n = sum(1 for g in got if abs(g - lo * out_of) < 1e-9)
        else:
            n = sum(1 for g in got if lo * out_of <= g < hi * out_of and g > 1e-9 and g < out_of - 1e-9)
        bins.append((label, n))
    return bins


def _histogram(bins):
    top = max((n for _, n in bins), default=0) or 1
    width = max(len(label) for label, _ in bins)
    return [f"  {label:>{width}} |{'#' * round(BAR * n / top) if n else '':<{BAR}} {n}" for label, n in bins]
