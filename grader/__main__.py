"""python -m grader SUBMISSION [--results PATH] [--seed N] [--secret-file PATH] | python -m grader batch DIR [options]

SUBMISSION: a paged_kv.py, a folder holding one (Gradescope's /autograder/submission), or the zip
`make submit` writes.

Exit status: 0 when grading finished, whatever the score; 2 for a missing file or a results path that
cannot be written; 3 when the grader failed, not the submission (it cannot start, or the machine
failed a call twice: see grade.py), with no results.json and the reason on stdout and stderr."""
import argparse
import os
import signal
import sys

for _blas in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_blas, "1")    # before numpy: the reference's small products, on the core the workers leave

from grader import coursesecret, feedback  # noqa: E402
from grader.grade import GraderBroken, ResultsNotWritten, grade, seed_for  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C (SIGINT) stops a grading or a batch, and a batch stops its gradings with it, even when
    # started where SIGINT is ignored (a shell's background job, a CI runner): an ignored signal is
    # inherited through exec, a handler is not, so its gradings get the default again.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if argv[:1] == ["batch"]:
        from grader.batch import main as batch_main
        return batch_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m grader", description="Grade one paged_kv.py submission.",
                                 epilog="To grade a class: python -m grader batch DIR [--jobs N] [--csv PATH] [--roster CSV] "
                                        "[--secret-file PATH] [--seed N] [--isolate auto|yes|no] [--regrade NAME]; "
                                        "python -m grader batch --help says more.")
    ap.add_argument("submission", help="a paged_kv.py file, a folder holding one, or a zip")
    ap.add_argument("--results", default="results.json", help="where to write Gradescope's results.json")
    ap.add_argument("--seed", type=int, help="seed of the hidden inputs (default: from --metadata, else 0)")
    ap.add_argument("--metadata", default="/autograder/submission_metadata.json",
                    help="Gradescope's submission_metadata.json (for the per-student seed)")
    ap.add_argument("--secret-file", help=f"the course secret the per-student seed is keyed with (default: "
                                          f"${coursesecret.ENV}; the autograder zip holds it)")
    ap.add_argument("--job", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)     # batch: die with it
    ap.add_argument("--isolate", choices=("auto", "yes", "no"), default="auto",
                    help="run the submission as an unprivileged user in namespaces (auto: when root)")
    ap.add_argument("--quiet", action="store_true", help="no terminal table")
    ap.add_argument("--feedback", choices=feedback.LEVELS,
                    help="how much a failing check explains: full (the default: what differed, expected vs got, a few "
                         "of the submission's values), brief (what differed, no values), points (points only)")
    ap.add_argument("--config", help="the autograder's config.json (make autograder writes it): its feedback level")
    args = ap.parse_args(argv)
    if args.parent_pid:
        from grader.batch import die_with_parent
        die_with_parent(args.parent_pid)
    try:
        level = args.feedback or (feedback.level_from(args.config) if args.config else feedback.DEFAULT)
        seed = seed_for(args.metadata, args.seed, coursesecret.load(args.secret_file, required=False))
    except ValueError as e:
        print(f"grader: {e}", file=sys.stderr)
        return 2
    try:
        grade(args.submission, args.results, seed=seed, job=args.job,
              isolate={"auto": None, "yes": True, "no": False}[args.isolate], quiet=args.quiet, level=level)
    except (FileNotFoundError, ResultsNotWritten) as e:
        print(f"grader: {e}", file=sys.stderr)
        return 2
    except GraderBroken as e:
        _no_results(args.results)
        said = f"grader: the grader itself failed, not the submission: {e}"
        print(said, file=sys.stderr, flush=True)
        if not _same_file(sys.stdout, sys.stderr):
            print(said, flush=True)        # Gradescope shows staff run_autograder's stdout
        return 3
    return 0


def _same_file(a, b):
    try:
        x, y = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def _no_results(path):
    """No results.json after a grader error, not even an earlier one: a reader must not take it for this grading's."""
    try:
        if os.path.isfile(path) and not os.path.islink(path):
            os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
