"""The handout as a student gets it: built, unpacked in an empty folder, `make test` / `make submit`
run from scratch (their own .venv), and assignment.md's grading table equal to the rubric.

The slow tests share one unpacked handout and one .venv bootstrap (module-scoped fixture)."""
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))
import build_handout  # noqa: E402
from grader import rubric  # noqa: E402

# Lines of the reference that only restate what the contract publishes (the storage layout).
PUBLIC_LINES = {"shape = (cfg.n_layers, n_blocks, block_size, cfg.n_heads, cfg.d_head)"}
FORBIDDEN_DIRS = ("solution", "grader", "checks", ".ci", "build", "__pycache__", ".venv", "handout", "bench")


# ------------------------------------------------------------------------------------- helpers
def distinctive_reference_lines():
    """Lines of the reference that give away its code: long enough to be specific, and not shared
    with the starter or the lab (the import lines, the signatures)."""
    given = set()
    for p in [ROOT / "starter" / "paged_kv.py", *(ROOT / "lab").glob("*.py")]:
        given |= {line.strip() for line in p.read_text().splitlines()}
    lines = set()
    for line in (ROOT / "solution" / "paged_kv.py").read_text().splitlines():
        s = line.strip()
        if len(s) >= 24 and s not in given | PUBLIC_LINES and not s.startswith(("#", '"""', "def ", "class ")):
            lines.add(s)
    return lines


def make(folder, *args, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(["make", "--no-print-directory", *args], cwd=folder, capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def failure_sections(output):
    """{test name: [lines of its failure report]} from pytest's FAILURES section."""
    body = output.split("= FAILURES =", 1)[1].split("= results by part =", 1)[0]
    sections, name = {}, None
    for line in body.splitlines()[1:]:
        m = re.fullmatch(r"_+ (.+?) _+", line)
        if m:
            name = m.group(1)
            sections[name] = []
        elif name is not None and line.strip() and not re.fullmatch(r"=+.*=+", line):
            sections[name].append(line)
    return sections


def impl(tmp, name, text):
    """A folder holding one paged_kv.py, outside the handout."""
    d = tmp / name
    d.mkdir()
    (d / "paged_kv.py").write_text(text)
    return d


# -------------------------------------------------------------------------------------- fixture
@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    """The handout unpacked into an empty folder, with its .venv bootstrapped by its own Makefile."""
    tmp = tmp_path_factory.mktemp("handout")
    zip_path = build_handout.build(tmp / "handout.zip")
    unpacked = tmp / "unpacked"
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(unpacked)
    folder = unpacked / build_handout.TOP
    r = make(folder, ".venv/.ready")
    assert r.returncode == 0, f"the handout's .venv bootstrap failed:\n{r.stdout}\n{r.stderr}"
    return folder


# ---------------------------------------------------------------------------------- fast checks
def test_handout_holds_no_staff_files():
    names = [name for _, name in build_handout.handout_files()]
    bad = [n for n in names if set(Path(n).parts) & set(FORBIDDEN_DIRS) or n.endswith(".pyc")]
    assert not bad, f"staff-only files in the handout: {bad}"
    for must in ("starter/paged_kv.py", "assignment.md", "Makefile", "README.md", "requirements.txt",
                 "tools/labtool.py", "tests/conftest.py", "tests/pytest.ini", "lab/transformer_lab.py"):
        assert must in names, f"{must} is missing from the handout"


def test_no_handout_file_contains_reference_code():
    secret = distinctive_reference_lines()
    assert len(secret) > 20, "too few distinctive lines found: has solution/paged_kv.py moved?"
    leaks = [(name, line.strip()) for src, name in build_handout.handout_files()
             for line in src.read_text(errors="replace").splitlines() if line.strip() in secret]
    assert not leaks, f"reference code in the handout: {leaks}"


def test_requirements_are_pinned():
    pins = (ROOT / "requirements.txt").read_text().split()
    assert pins == ["numpy==2.4.6", "pytest==9.0.3", "pytest-timeout==2.4.0"]


def grading_table():
    """The rows of assignment.md's grading table: (part, check title, points), totals apart."""
    lines = (ROOT / "assignment.md").read_text().splitlines()
    start = lines.index("| Part | Check | Points |")
    checks, totals = [], []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [re.sub(r"\\(.)", r"\1", c).strip().strip("`") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        part, title, points = cells
        if title.startswith("**total"):
            totals.append((part, int(points.strip("*"))))
        else:
            checks.append((part, title, int(points)))
    return checks, totals


def test_grading_table_equals_the_rubric():
    checks, totals = grading_table()
    assert checks == [(c.part, c.title, c.points) for c in rubric.CHECKS.values()]
    assert totals == [(p, rubric.part_points(p)) for p in rubric.PARTS] + [("", 100)]


def test_assignment_has_the_sections_the_feedback_points_to():
    headings = {line for line in (ROOT / "assignment.md").read_text().splitlines() if line.startswith("## ")}
    for title in [*rubric.SECTIONS.values(), "Grading"]:
        assert f"## {title}" in headings, f"assignment.md lacks the heading '## {title}'"


def test_assignment_part_summary_matches_the_rubric():
    text = (ROOT / "assignment.md").read_text()
    for i, part in enumerate(rubric.PARTS, 1):
        assert re.search(rf"^\| {i} \| .* \| {rubric.part_points(part)} \|$", text, re.M), f"part {i} points"


# ---------------------------------------------------------------------------------- slow checks
@pytest.mark.slow
def test_the_solution_passes_every_public_test(handout, tmp_path):
    r = make(handout, "test", f"IMPL={impl(tmp_path, 'sol', (ROOT / 'solution' / 'paged_kv.py').read_text())}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(r"=+ \d+ passed in ", r.stdout), r.stdout[-1000:]
    assert "failed" not in r.stdout.splitlines()[-1]


@pytest.mark.slow
def test_the_starter_fails_every_test_with_one_line(handout):
    r = make(handout, "test")
    assert r.returncode != 0
    summary = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"=+ (\d+) failed in [\d.]+s =+", summary)
    assert m, f"expected only failures (no errors, no passes): {summary}"
    sections = failure_sections(r.stdout)
    assert len(sections) == int(m.group(1))
    for name, lines in sections.items():
        assert len(lines) == 1 and re.fullmatch(r"not implemented yet: TODO Part [1-4]: \S+", lines[0]), (name, lines)
    assert "ERROR" not in r.stdout and "Traceback" not in r.stdout     # no collection errors, no tracebacks


@pytest.mark.slow
def test_the_starter_demo_says_not_implemented(handout):
    r = make(handout, "demo")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("not implemented yet") == 5 and "Traceback" not in r.stdout     # demo 5: the bonus


BROKEN = {
    "syntax error": (lambda s: s.replace("    def alloc(self):", "    def alloc(self)", 1),
                     [r"paged_kv\.py, line \d+: SyntaxError", r"def alloc\(self\)"]),
    "missing name": (lambda s: s.replace("def blockwise_attention(", "def blockwise_attn(", 1),
                     [r"does not define the whole contract", r"blockwise_attention: the Part 3 function is missing"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", BROKEN)
@pytest.mark.parametrize("target", ["test", "submit"])
def test_a_broken_submission_gets_one_clear_message(handout, tmp_path, case, target):
    edit, patterns = BROKEN[case]
    text = (ROOT / "solution" / "paged_kv.py").read_text()
    assert edit(text) != text, "the breaking edit no longer applies"
    r = make(handout, target, f"IMPL={impl(tmp_path, 'broken', edit(text))}")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    for p in patterns:
        assert re.search(p, out), f"{p!r} not in:\n{out}"
    assert "Traceback" not in out and "ERROR collecting" not in out, out
    assert not (handout / "build" / "submission.zip").exists() or target == "test"


@pytest.mark.slow
def test_submit_zips_exactly_paged_kv(handout, tmp_path):
    sol = impl(tmp_path, "sol", (ROOT / "solution" / "paged_kv.py").read_text())
    zip_path = handout / "build" / "submission.zip"
    r = make(handout, "submit", f"IMPL={sol}")
    assert r.returncode == 0, r.stdout + r.stderr
    with zipfile.ZipFile(zip_path) as z:
        assert z.namelist() == ["paged_kv.py"]
        assert z.read("paged_kv.py") == (sol / "paged_kv.py").read_bytes()
    assert "Note:" not in r.stdout         # no TODO left in the reference
    zip_path.unlink()
