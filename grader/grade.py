"""Grade one submission: find the file, check that it imports (in the sandbox), run the hidden suites
with pytest in this trusted process (their scenario calls go to the sandbox), score, write results.
What the student reads and what staff read are separated in report.py.

A grading the machine spoiled is no grading: when the sandbox cannot start, or a call (the import
probe included) failed for the machine's reasons twice (sandbox.py: "grader_error"), GraderBroken
says so and no results are written (exit 3: regrade), never a 0 or "fix this first"."""
import contextlib
import io
import json
import os
import re
import time
from pathlib import Path

from grader import coursesecret, feedback, paths, report, rubric
from grader.collect import Collector
from grader.fingerprint import bytes_hash, grader_hash
from grader.score import score
from grader.submission import SubmissionError, opened

STAFF_LINES = 30        # the sandbox's notes kept per grading (extra_data["sandbox"] and the staff table)


class GraderBroken(RuntimeError):
    """The grader itself could not run or could not judge (the installation or the machine), not the
    submission: nothing is written, and the submission is to be graded again."""


class ResultsNotWritten(OSError):
    """The results path cannot be written (a folder or another user's file in its place, no space)."""


def seed_for(metadata_path, override=None, secret=None):
    """Hidden inputs per student: from Gradescope's submission_metadata.json when present, keyed by
    the course secret (coursesecret.seed of the users' key: a resubmission sees the same inputs, and
    nobody without the secret can rebuild them), else seed 0 (a grading without a student). A file
    naming students without a secret: coursesecret.SecretError."""
    if override is not None:
        return override
    try:
        key = coursesecret.key_of(json.loads(Path(metadata_path).read_text()).get("users") or [])
    except (OSError, ValueError, AttributeError, TypeError):
        return 0
    if not key:
        return 0
    if secret is None:
        raise coursesecret.SecretError(f"{metadata_path} names the students, but there is no course secret to seed "
                                       f"their inputs with: {coursesecret.HOW}")
    return coursesecret.seed(secret, key)


def grade(submission, results_path, *, seed=0, job=0, isolate=None, quiet=False, level=feedback.DEFAULT):
    """Grade and write results.json; returns the results dict. level: how much the feedback explains
    (grader/feedback.py)."""
    start = time.perf_counter()
    paths.trusted_imports()
    try:
        with opened(submission) as found:
            return _grade_file(found, results_path, seed, job, isolate, quiet, start, level)
    except SubmissionError as e:
        staff = {"seed": seed, "grader": grader_hash(), "not_graded": str(e)}
        return _finish(results_path, score({}, str(e)), start, quiet, problem=str(e),
                       header=f"Not graded (seed {seed}): {e}", staff=staff)


def _grade_file(found, results_path, seed, job, isolate, quiet, start, level):
    from grader.sandbox import Sandbox
    file = found.path
    hide = [os.path.dirname(os.path.abspath(results_path))] if results_path else []
    from grader.sandbox import BONUS_NAMES, REQUIRED_NAMES
    bonus_names = [n for part in rubric.BONUS_PARTS for n in BONUS_NAMES.get(part, ())]
    try:                                      # the probe's worker proves the launch chain (check=False)
        probe = Sandbox(file, isolate=isolate, job=job * 2, hide=hide, check=False)
        try:
            protections = [_stable(p) for p in probe.protections()]
            imported = probe.check_import(REQUIRED_NAMES + tuple(bonus_names))
        finally:
            probe.close()
    except RuntimeError as e:                 # the runtime or the isolation cannot start here
        raise GraderBroken(f"the sandbox cannot start: {e}") from None
    sandbox_notes = [f"import probe: {line}" for line in imported.staff]
    if imported.status == "grader_error":
        raise GraderBroken(_regrade(f"the import probe: {imported.error}", sandbox_notes))
    staff = {"submission": found.shown, "sha256": bytes_hash(file.read_bytes()), "seed": seed,
             "grader": grader_hash(), "isolation": protections}
    header = (f"Graded {found.shown} (seed {seed}, sha256 {staff['sha256'][:12]}, grader {staff['grader'][:12]}). "
              f"Isolation: {'; '.join(protections)}.")
    found_missing = imported.data.get("missing") if imported.status == "ok" and isinstance(imported.data, dict) else None
    missing = [m for m in found_missing or [] if m not in bonus_names]
    left_out = bonus_left_out(found_missing or [])
    if left_out:
        staff["bonus"] = left_out
    if imported.status != "ok" or missing:
        problem = f"it does not define {', '.join(missing)}" if missing else imported.error or imported.status
        why = f"paged_kv.py cannot be graded: {problem}. Fix this first (start from the starter, which " \
              f"defines every name): `make test` and `make submit` show the same problem."
        staff, header = _with_notes(staff, header, sandbox_notes)
        return _finish(results_path, score({}, why), start, quiet, problem=why, notes=found.notes,
                       header=f"{header}\n{why}", staff={**staff, "not_graded": why})
    collector = Collector()
    args = [str(paths.HIDDEN), "-c", str(paths.HIDDEN / "pytest.ini"), "--rootdir", str(paths.HIDDEN),
            "-q", "--no-header", "--tb=no", "-p", "pytest_timeout",
            "-p", "no:unraisableexception",   # its clean-up runs 5 full gc passes over the answers: 0.2 s of CPU
            "--submission", str(file), "--seed", str(seed), "--job", str(job),
            "--isolate", {None: "auto", True: "yes", False: "no"}[isolate], *(f"--hide={h}" for h in hide),
            *(f"--leave-out={part}" for part in left_out)]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS"):       # a staff shell's options never change a grading
        os.environ.pop(name, None)
    import pytest
    with contextlib.redirect_stdout(io.StringIO()) as pytest_output:   # the table below says it better
        code = pytest.main(args, plugins=[collector])
    if collector.errors or code not in (0, 1) or not collector.checks:
        raise GraderBroken(f"the hidden suites did not run (pytest exit {code}): " + " | ".join(collector.errors)
                           + pytest_output.getvalue()[-3000:])
    missing = {c for c in rubric.CHECKS if rubric.CHECKS[c].part not in left_out} - set(collector.checks.values())
    if missing:
        raise GraderBroken(f"rubric checks without cases: {sorted(missing)}")
    sandbox_notes += collector.staff
    if collector.grader_errors:
        raise GraderBroken(_regrade("; ".join(f"{c}: {why}" for c, why in collector.grader_errors), sandbox_notes))
    staff, header = _with_notes(staff, header, sandbox_notes)
    by_check = collector.by_check()
    stubbed = bonus_stubbed(by_check, collector.todo_parts)
    if stubbed:
        left_out = {**left_out, **stubbed}
        staff["bonus"] = left_out
    rows = feedback.finish(score(by_check, left_out=left_out), level)
    return _finish(results_path, rows, start, quiet, notes=found.notes, header=header,
                   staff={**staff, "feedback": level})


def bonus_left_out(missing):
    """{bonus part: why it is not graded} for the bonus parts whose names the submission lacks: none
    of its top-level names (written before the bonus existed, or without it) is "bonus not
    attempted", some of them missing says which. Never a reason not to grade Parts 1-4."""
    from grader.sandbox import BONUS_NAMES, BONUS_TOP
    out = {}
    for part in rubric.BONUS_PARTS:
        names = BONUS_NAMES.get(part, ())
        lacking = [n for n in names if n in missing]
        if set(BONUS_TOP[part]) <= set(lacking):
            out[part] = (f"bonus not attempted: paged_kv.py defines no {' and no '.join(BONUS_TOP[part])} "
                         "(extra credit only: the other parts are graded as usual)")
        elif lacking:
            out[part] = (f"bonus not graded: paged_kv.py does not define {', '.join(lacking)} (keep every name of "
                         f"the starter's Part {rubric.registry.number(part)})")
    return out


BONUS_STUBBED = ('bonus not attempted: every Part {n} check stopped at a stub that still raises '
                 'NotImplementedError("{todo} ...") (extra credit only: the other parts are graded as usual)')


def bonus_stubbed(by_check, todo_parts):
    """{bonus part: why} for the bonus parts left as the starter's stubs: every check of the part got
    no answer because the sandbox reported a stub of that very part (todo_parts: check id -> N of
    "TODO Part N"), and none of its cases passed. Decided from what the sandbox reported, not from
    the file's text; it relabels only a part that scored nothing, so it changes no score, and it
    never looks at another part: a failure of Parts 1-4 stays what it is."""
    out = {}
    for part in rubric.BONUS_PARTS:
        n = rubric.registry.number(part)
        ids = [cid for cid, check in rubric.CHECKS.items() if check.part == part]
        if ids and all(todo_parts.get(cid) == n for cid in ids) \
                and not any(ok for cid in ids for ok, _ in by_check.get(cid, [])):
            out[part] = BONUS_STUBBED.format(n=n, todo=rubric.registry.todo_prefix(part))
    return out


def _regrade(what, notes):
    lines = "\n  ".join(notes[:STAFF_LINES])
    return f"not graded: grader error, regrade this submission. The machine failed {what}" + \
        (f"\n  {lines}" if lines else "")


def _with_notes(staff, header, notes):
    """The sandbox's notes (failed attempts, workers' stderr) for staff: results.json's extra_data and
    the staff table, bounded; nothing when a grading went smoothly (so it stays deterministic)."""
    if not notes:
        return staff, header
    kept = notes[:STAFF_LINES] + ([f"(and {len(notes) - STAFF_LINES} more)"] if len(notes) > STAFF_LINES else [])
    return {**staff, "sandbox": kept}, header + "\nSandbox (staff only):\n  " + "\n  ".join(kept)


def _stable(protection):
    """A protection as the report states it: without the uid or temp paths of this run, so grading the
    same file twice gives the same results."""
    return re.sub(r"\(mount namespace\): .*", "(mount namespace)", re.sub(r"uid \d+", "uid", protection))


def _finish(results_path, rows, start, quiet, *, header, staff, problem=None, notes=()):
    """Write results.json (the student's summary in `output`, staff facts in `extra_data`) and print
    the staff's table."""
    output = report.student_output(rows, notes=notes, problem=problem)
    results = report.results_json(rows, output, time.perf_counter() - start, extra_data=staff)
    if results_path:
        try:
            report.write_atomically(results_path, results)
        except OSError as e:
            raise ResultsNotWritten(f"cannot write the results to {results_path}: {e}") from None
    if not quiet:
        print(report.table(rows, "\n".join([header, *notes])))
    return results
