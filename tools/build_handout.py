"""Build the students' handout zip (staff only: this file is not in the handout).

    python tools/build_handout.py [--out build/handout.zip]

The handout is an allowlist: the lab, the starter (the student's working folder), the public
tests, tools/labtool.py (what make test / make submit run) and tools/check_python.py (the
Makefile's Python version gate), assignment.md and its Chinese edition assignment.zh-CN.md, and
the student Makefile, README (Chinese, then English), .gitignore and requirements.txt from
handout/ (the students' requirements select versions for Python 3.9+; the root requirements.txt
stays the grader's pins). Never solution/, grader/, checks/ or .ci/.
"""
import argparse
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = "paged-attention"                       # the folder the zip unpacks to
STAMP = (2025, 1, 1, 0, 0, 0)                 # fixed timestamps: the same sources give the same zip


def handout_files():
    """(source path, path inside the handout) for every file, sorted."""
    files = [(p, f"lab/{p.name}") for p in (ROOT / "lab").glob("*.py")]
    files += [(ROOT / "starter" / "paged_kv.py", "starter/paged_kv.py")]
    files += [(p, f"tests/{p.name}") for p in (ROOT / "tests").iterdir()
              if p.is_file() and p.suffix in (".py", ".ini")]
    files += [(ROOT / "tools" / name, f"tools/{name}") for name in ("labtool.py", "check_python.py")]
    files += [(ROOT / "assignment.md", "assignment.md"),
              (ROOT / "assignment.zh-CN.md", "assignment.zh-CN.md"),
              (ROOT / "handout" / "requirements.txt", "requirements.txt"),
              (ROOT / "handout" / "Makefile", "Makefile"),
              (ROOT / "handout" / "README.md", "README.md"),
              (ROOT / "handout" / "gitignore", ".gitignore")]
    return sorted(files, key=lambda f: f[1])


def build(out):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for src, name in handout_files():
            info = zipfile.ZipInfo(f"{TOP}/{name}", STAMP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, src.read_bytes())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "handout.zip"))
    out = build(ap.parse_args(argv).out)
    print(f"Wrote {out} ({len(handout_files())} files under {TOP}/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
