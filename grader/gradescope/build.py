"""python -m grader.gradescope.build ZIP: the autograder archive Gradescope unpacks into
/autograder/source (setup.sh and run_autograder at its top, as Gradescope requires)."""
import sys
import zipfile
from pathlib import Path

from grader.paths import GRADER, REPO

CONTENTS = ["requirements.txt", "lab", "solution", "tests/scenarios.py", "tests/explain.py", "tests/rules.py", "grader"]
LEAVE_OUT = ("__pycache__", ".pyc", "grader/selftest", "grader/gradescope/sim.py", "grader/gradescope/image.py",
             "grader/gradescope/neighbour.py", "grader/similarity.py")  # staff tools


def files():
    for name in CONTENTS:
        path = REPO / name
        for f in sorted([path] if path.is_file() else path.rglob("*")):
            rel = f.relative_to(REPO).as_posix()
            if f.is_file() and not any(x in rel for x in LEAVE_OUT):
                yield f, rel


def build(target):
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for script in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(script)
            info.external_attr = 0o755 << 16
            z.writestr(info, (GRADER / "gradescope" / script).read_bytes())
        for f, rel in files():
            z.write(f, rel)
    return target


if __name__ == "__main__":
    out = build(sys.argv[1] if len(sys.argv) > 1 else "build/autograder.zip")
    print(f"wrote {out}")
