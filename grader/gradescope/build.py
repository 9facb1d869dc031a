"""python -m grader.gradescope.build ZIP [--feedback LEVEL]: the autograder archive Gradescope unpacks
into /autograder/source (setup.sh and run_autograder at its top, as Gradescope requires), with
config.json holding the staff's settings: how much the hidden feedback explains (grader/feedback.py),
which run_autograder passes to the grader."""
import argparse
import json
import sys
import zipfile
from pathlib import Path

from grader import feedback
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


def build(target, level=feedback.DEFAULT):
    if level not in feedback.LEVELS:
        raise ValueError(f"feedback level {level!r}: one of {', '.join(feedback.LEVELS)}")
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
    return target


CONFIG = "config.json"      # run_autograder: python -m grader ... --config /autograder/source/config.json


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m grader.gradescope.build", description=__doc__.splitlines()[0])
    ap.add_argument("zip", nargs="?", default="build/autograder.zip")
    ap.add_argument("--feedback", default=feedback.DEFAULT, choices=feedback.LEVELS,
                    help="how much a failing hidden check explains to students (default: full)")
    args = ap.parse_args(argv)
    out = build(args.zip, args.feedback)
    print(f"wrote {out} (feedback: {args.feedback})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
