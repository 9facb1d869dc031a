"""python -m grader.gradescope.build ZIP [--feedback LEVEL] [--secret-file PATH | --throwaway-secret]: the
autograder archive Gradescope unpacks into /autograder/source (setup.sh and run_autograder at its top,
as Gradescope requires), with config.json holding the staff's settings: how much the hidden feedback
explains (grader/feedback.py), which run_autograder passes to the grader; and course_secret, the
course secret the per-student seeds are keyed with (grader/coursesecret.py: from --secret-file, else
$CS349E_COURSE_SECRET; without one the build stops). The zip is staff-only: upload it to
Gradescope, never hand it out. --throwaway-secret (checks, simulations) bakes a fresh random one."""
import argparse
import json
import sys
import zipfile
from pathlib import Path

from grader import coursesecret, feedback
from grader.paths import GRADER, REPO

CONTENTS = ["requirements.txt", "lab", "solution", "tests/scenarios.py", "tests/explain.py", "tests/rules.py",
            "tests/registry.py", "grader"]
LEAVE_OUT = ("__pycache__", ".pyc", "grader/selftest", "grader/gradescope/sim.py", "grader/gradescope/image.py",
             "grader/gradescope/neighbour.py", "grader/similarity.py")  # staff tools


def files():
    for name in CONTENTS:
        path = REPO / name
        for f in sorted([path] if path.is_file() else path.rglob("*")):
            rel = f.relative_to(REPO).as_posix()
            if f.is_file() and not any(x in rel for x in LEAVE_OUT):
                yield f, rel


def build(target, level=feedback.DEFAULT, secret=None):
    """Write the zip; `secret`: the course secret (bytes), else the one coursesecret.load finds
    (SecretError when there is none)."""
    if level not in feedback.LEVELS:
        raise ValueError(f"feedback level {level!r}: one of {', '.join(feedback.LEVELS)}")
    secret = secret or coursesecret.load()
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for script in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(script)
            info.external_attr = 0o755 << 16
            z.writestr(info, (GRADER / "gradescope" / script).read_bytes())
        for f, rel in files():
            z.write(f, rel)
        z.writestr(CONFIG, json.dumps({"feedback": level}, indent=1) + "\n")
        info = zipfile.ZipInfo(coursesecret.FILE_IN_ZIP)
        info.external_attr = 0o600 << 16
        z.writestr(info, secret + b"\n")
    return target


CONFIG = "config.json"      # run_autograder: python -m grader ... --config /autograder/source/config.json


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m grader.gradescope.build", description=__doc__.splitlines()[0])
    ap.add_argument("zip", nargs="?", default="build/autograder.zip")
    ap.add_argument("--feedback", default=feedback.DEFAULT, choices=feedback.LEVELS,
                    help="how much a failing hidden check explains to students (default: full)")
    secret = ap.add_mutually_exclusive_group()
    secret.add_argument("--secret-file", help=f"the course secret (default: ${coursesecret.ENV})")
    secret.add_argument("--throwaway-secret", action="store_true",
                        help="a fresh random secret (for checks and simulations, never for the course)")
    args = ap.parse_args(argv)
    try:
        key = coursesecret.throwaway() if args.throwaway_secret else coursesecret.load(args.secret_file)
    except coursesecret.SecretError as e:
        print(f"make autograder: {e}", file=sys.stderr)
        return 2
    out = build(args.zip, args.feedback, key)
    print(f"wrote {out} (feedback: {args.feedback}; the course secret is in it: staff only, never hand it out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
