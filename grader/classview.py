"""What staff read after grading a class: how the scores are spread (the base score out of 100,
the extra credit apart, each part), which checks the most submissions failed, i.e. what the class
did not understand, the integrity flags (similar files in clusters, grader/triage.py) and where the
ids came from (grader/roster.py), with its flags.

Input: the results.json of every submission (dicts as report.results_json writes them) and the
class's integrity.Flags. Submissions that were not graded at all (a syntax error, a missing name,
no file) fail every check for one reason, and submissions that were not started (the starter, stubs
only) fail every check because nothing was written: both are counted apart, so they do not drown
the checks that real attempts fail. A part not attempted (a bonus without its names, or any part
left as the starter's stubs) fails nothing either. The most-failed
list is cut after TOP_FAILED checks, but never between two checks failed equally often.

classpage.py draws the same numbers as a web page.
"""
from grader import gradebook, report, rubric, triage
from grader.integrity import Flags, untouched

BAR = 40                # characters of the longest histogram bar
TOP_FAILED = 10
PART_BINS = ((0.0, 0.0, "0"), (0.0, 0.25, "1-24%"), (0.25, 0.5, "25-49%"), (0.5, 0.75, "50-74%"),
             (0.75, 1.0, "75-99%"), (1.0, 1.0, "100%"))


def not_graded(results):
    return bool((results.get("extra_data") or {}).get("not_graded"))


def attempted(results, part):
    """Whether a part was attempted: graded (a file that could not be graded at all, or a bonus part
    it does not define, is not), and not left as the starter's stubs (every case at a TODO)."""
    return not not_graded(results) and part not in ((results.get("extra_data") or {}).get("bonus") or {}) \
        and not untouched(results, part)


def groups(results, flags):
    """(graded and started, not graded, not started, grader failed): names, each list sorted."""
    failed = sorted(n for n, r in results.items() if r is None)
    ungraded = sorted(n for n, r in results.items() if r is not None and not_graded(r))
    idle = sorted(n for n, r in results.items() if r is not None and not not_graded(r) and n in flags.not_started)
    graded = sorted(n for n in results if n not in set(failed) | set(ungraded) | set(idle))
    return graded, ungraded, idle, failed


def counts(results, flags):
    """The sentence that counts the class, and [(label, names)] of the groups set apart."""
    graded, ungraded, idle, failed = groups(results, flags)
    said = (f"{len(results)} submissions, {len(graded) + len(idle)} graded ({len(idle)} of them not started), "
            f"{len(ungraded)} not graded (no file, syntax error, missing names), {len(failed)} the grader failed on.")
    return said, [(label, names) for label, names in (("not started", idle), ("not graded", ungraded),
                                                      ("grader failed", failed)) if names]


def base_scores(scored):
    return [gradebook.base_and_extra(r)[0] for r in scored]


def base_bins(values):
    """Tens of points, then 100 on its own: the base score never exceeds it."""
    bins = [(f"{lo}-{lo + 9}", sum(1 for t in values if lo <= t < lo + 10)) for lo in range(0, rubric.TOTAL, 10)]
    return bins + [(str(rubric.TOTAL), sum(1 for t in values if t >= rubric.TOTAL))]


def part_bins(got, out_of):
    bins = []
    for lo, hi, label in PART_BINS:
        if lo == hi:
            n = sum(1 for g in got if abs(g - lo * out_of) < 1e-9)
        else:
            n = sum(1 for g in got if lo * out_of <= g < hi * out_of and g > 1e-9 and g < out_of - 1e-9)
        bins.append((label, n))
    return bins


def part_view(scored, part):
    """(the points of a part, how many did not attempt it): a bonus part over those who attempted
    it, Parts 1-4 over everyone (they are the grade)."""
    tried = [r for r in scored if attempted(r, part)] if part in rubric.BONUS_PARTS else scored
    return [report.part_scores(r)[part] for r in tried], len(scored) - len(tried)


def most_failed(graded):
    """[(check id, how many failed it, the first of them's first failure)], most failed first, cut
    after TOP_FAILED checks unless the next ones are failed as often as the last one kept."""
    by_name = {report.test_name(c): c.id for c in rubric.CHECKS.values()}
    counts, first = dict.fromkeys(rubric.CHECKS, 0), {}
    for results in graded:
        for test in results["tests"]:
            check_id = by_name.get(test["name"])
            if check_id and float(test["score"]) < float(test["max_score"]) \
                    and attempted(results, rubric.CHECKS[check_id].part):       # a part not attempted fails nothing
                counts[check_id] += 1
                first.setdefault(check_id, test["output"])
    ranked = sorted((c for c in counts.items() if c[1]), key=lambda c: (-c[1], list(rubric.CHECKS).index(c[0])))
    kept = [c for i, c in enumerate(ranked) if i < TOP_FAILED or c[1] == ranked[TOP_FAILED - 1][1]]
    return [(check_id, n, first_failure(first[check_id])) for check_id, n in kept]


def first_failure(test_output):
    """A test's first failure message (its output is "k of n cases passed." then the messages)."""
    said = [p for p in test_output.split("\n\n")[1:] if p.strip()]
    return said[0] if said else test_output


def stats(values):
    ordered = sorted(values)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return f"mean {sum(ordered) / n:.1f}, median {median:.1f}, min {ordered[0]:.1f}, max {ordered[-1]:.1f}"


def summary(results, flags=None):
    """Lines of the class summary; `results` maps a submission's name to its results dict or None
    (the grader failed on it); `flags`: the class's integrity.Flags."""
    flags = flags or Flags()
    graded = groups(results, flags)[0]
    said, apart = counts(results, flags)
    lines = [f"Class summary: {said}", *(f"  {label}: " + ", ".join(names) for label, names in apart)]
    lines += [f"  {flags.ids}"] if flags.ids else []
    scored = [r for r in results.values() if r is not None]
    if not scored:
        return lines + _flag_lines(flags)
    values = base_scores(scored)
    lines += ["", f"Base score out of {rubric.TOTAL}, Parts 1-4 (all {len(scored)} with a result): {stats(values)}"]
    lines += _histogram(base_bins(values))
    for part in rubric.ALL_PARTS:
        out_of = rubric.part_points(part)
        got, skipped = part_view(scored, part)
        if part in rubric.BONUS_PARTS:
            head = f"{part} ({out_of} points, extra credit; attempted by {len(got)}, not by {skipped})"
        else:
            head = f"{part} ({out_of} points)"
        lines += ["", f"{head}: {stats(got)}" if got else f"{head}: nobody"]
        lines += _histogram(part_bins(got, out_of)) if got else []
    lines += ["", f"Checks failed most often (by the {len(graded)} graded submissions that were started):"]
    ranked = most_failed([results[n] for n in graded])
    lines += [f"  {n:>4} of {len(graded):<4} {check_id:<36} {rubric.CHECKS[check_id].title}"
              for check_id, n, _ in ranked] or ["  none"]
    return lines + _flag_lines(flags)


def flag_groups(flags):
    """[(label, [lines])] of the class's flags, each group that has any (the summary and the page)."""
    said = [("not started", [f"{n} ({why})" for n, why in sorted(flags.not_started.items())]),
            ("identical files", [" = ".join(g) for g in flags.identical]),
            ("near-copies of solution/paged_kv.py", [f"{n} ({p.norm_a:.0%} of its code normalized, {p.raw_a:.0%} raw)"
                                                     for n, p in sorted(flags.near_copies.items())]),
            ("similar files, in clusters (make similarity DIR=... shows them side by side)",
             [c.line() for c in flags.similar]),
            ("who it is", [f"{n}: {'; '.join(why)}" for n, why in sorted(flags.identity.items())]),
            ("roster rows without their submission", list(flags.absent))]
    return [(label, lines) for label, lines in said if lines]


def _flag_lines(flags):
    lines = ["", "Integrity flags (look before publishing; no flag changes a grade):"]
    for label, said in flag_groups(flags):
        lines += [f"  {label}: " + ", ".join(said)] if label in ("not started", "identical files") or len(said) == 1 \
            else [f"  {label}:", *(f"    {line}" for line in said)]
    if len(lines) == 2:
        lines.append("  none")
    others = triage.closest_others(flags.pairs, flags.similar, top=1)
    if others:
        lines.append(f"  (the closest pair outside the clusters: {triage.pair_line(others[0])})")
    return lines


def _histogram(bins):
    top = max((n for _, n in bins), default=0) or 1
    width = max(len(label) for label, _ in bins)
    return [f"  {label:>{width}} |{'#' * round(BAR * n / top) if n else '':<{BAR}} {n}" for label, n in bins]
