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
import ast
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import registry  # noqa: E402    which parts are bonus, their test files and numbers

TOP = "paged-attention"                       # the folder the zip unpacks to
STAMP = (2025, 1, 1, 0, 0, 0)                 # fixed timestamps: the same sources give the same zip


def _imports(path):
    """The top-level names of the modules a file imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def bonus_files():
    """The bonus parts' public test files and the tests/ modules only they import (a part's bench)."""
    tests, bonus = ROOT / "tests", {p.test_file for p in registry.bonus()}
    users = {}
    for f in tests.glob("*.py"):
        for name in _imports(f):
            users.setdefault(f"{name}.py", set()).add(f.name)
    only = {m for m, by in users.items() if (tests / m).is_file() and bonus and by <= bonus}
    return tuple(sorted(f"tests/{m}" for m in bonus | only))


BONUS_FILES = bonus_files()                   # left out when the bonus is switched off
BONUS_NUMBERS = "|".join(str(p.number) for p in registry.bonus())
BONUS_MARKDOWN = ("assignment.md", "assignment.zh-CN.md", "README.md")   # their <!-- bonus --> regions likewise
BONUS_LINES = ("Makefile", "lab/demo.py")     # and their lines that end with "# bonus" (make help, demo 5)


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


def bonus_on():
    """The course's switch (grader/rubric.py, BONUS)."""
    sys.path.insert(0, str(ROOT))
    from grader import rubric
    return rubric.BONUS


def without_bonus_markdown(text):
    """An edition of the assignment without the bonus: every region from a line `<!-- bonus -->` to
    the next line `<!-- /bonus -->` goes, the two lines included (regions may follow each other)."""
    return re.sub(r"^<!-- bonus -->\n.*?^<!-- /bonus -->\n", "", text, flags=re.S | re.M)


def without_bonus_python(text):
    """The starter without the bonus: its closing sections, from the first bonus part's banner
    (`# ===... Part N (bonus): ...`) to the end (the bonus parts come last), and the module
    docstring's lines that start with "Part N" of a bonus part, with the indented lines that follow
    them (however deep)."""
    if not BONUS_NUMBERS:
        return text
    text = re.sub(rf"\n\n+# =+ Part (?:{BONUS_NUMBERS}) \(bonus\).*\Z", "\n", text, flags=re.S)
    return re.sub(rf"^Part (?:{BONUS_NUMBERS})\b.*\n(?: +\S.*\n)*", "", text, flags=re.M)


def contents(src, name, bonus):
    data = src.read_bytes()
    if bonus:
        return data
    if name in BONUS_MARKDOWN:
        return without_bonus_markdown(data.decode("utf-8")).encode("utf-8")
    if name == "starter/paged_kv.py":
        return without_bonus_python(data.decode("utf-8")).encode("utf-8")
    if name in BONUS_LINES:     # the lines of the bonus end with "# bonus"
        return re.sub(rb"^.*# bonus\n", b"", data, flags=re.M)
    return data


def build(out, bonus=None):
    """The handout zip; with the bonus switched off (rubric.BONUS, or bonus=False) it is the
    assignment of Parts 1-4 alone: no Part 5 text, stubs or tests."""
    bonus = bonus_on() if bonus is None else bonus
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for src, name in handout_files():
            if not bonus and name in BONUS_FILES:
                continue
            info = zipfile.ZipInfo(f"{TOP}/{name}", STAMP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, contents(src, name, bonus))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "build" / "handout.zip"))
    out = build(ap.parse_args(argv).out)
    print(f"Wrote {out} ({len(handout_files())} files under {TOP}/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
