"""The handout as a student gets it: built, unpacked in an empty folder, `make test` / `make submit`
run from scratch (their own .venv), and assignment.md's grading table equal to the rubric.
The students' Pythons: the requirements' markers pick one pin per package for 3.9-3.13 (no
network), older Pythons stop at the Makefile's one-line gate, and (slow) a real .venv on every
other Python the machine has.

The slow tests share one unpacked handout and one .venv bootstrap (module-scoped fixture)."""
import os
import re
import shlex
import shutil
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


def make(folder, *args, timeout=600, path=None):
    """`make ARGS` in FOLDER as a student's shell runs it; PATH replaced when `path` is given."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if path is not None:
        env["PATH"] = path
    return subprocess.run([shutil.which("make"), "--no-print-directory", *args], cwd=folder, capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def unpack_handout(tmp):
    """The handout zip, built and unpacked into an empty folder: the folder a student starts in."""
    zip_path = build_handout.build(tmp / "handout.zip")
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(tmp / "unpacked")
    return tmp / "unpacked" / build_handout.TOP


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
    folder = unpack_handout(tmp_path_factory.mktemp("handout"))
    r = make(folder, ".venv/.ready")
    assert r.returncode == 0, f"the handout's .venv bootstrap failed:\n{r.stdout}\n{r.stderr}"
    return folder


# ---------------------------------------------------------------------------------- fast checks
def test_handout_holds_no_staff_files():
    names = [name for _, name in build_handout.handout_files()]
    bad = [n for n in names if set(Path(n).parts) & set(FORBIDDEN_DIRS) or n.endswith(".pyc")]
    assert not bad, f"staff-only files in the handout: {bad}"
    for must in ("starter/paged_kv.py", "assignment.md", "Makefile", "README.md", "requirements.txt",
                 "tools/labtool.py", "tools/check_python.py", "tests/conftest.py", "tests/pytest.ini", "tests/registry.py",
                 "lab/transformer_lab.py"):
        assert must in names, f"{must} is missing from the handout"


def test_no_handout_file_contains_reference_code():
    secret = distinctive_reference_lines()
    assert len(secret) > 20, "too few distinctive lines found: has solution/paged_kv.py moved?"
    leaks = [(name, line.strip()) for src, name in build_handout.handout_files()
             for line in src.read_text(errors="replace").splitlines() if line.strip() in secret]
    assert not leaks, f"reference code in the handout: {leaks}"


def test_submit_names_the_zip_after_the_folder_it_packs(tmp_path):
    """make submit (starter/) writes build/submission.zip; IMPL=DIR writes build/submission-DIR.zip,
    DIR's name kept to letters, digits, '.', '-' and '_' (issue 15, item 4)."""
    import labtool
    build = labtool.ROOT / "build"
    assert labtool.default_zip(labtool.ROOT / "starter") == labtool.default_zip(labtool.ROOT / "starter" / ".") \
        == build / "submission.zip"
    assert labtool.default_zip(tmp_path / "sol") == build / "submission-sol.zip"
    assert labtool.default_zip(tmp_path / "my copy (2)") == build / "submission-my_copy_2.zip"
    assert labtool.default_zip(tmp_path / "x" / "starter") == build / "submission-starter.zip"   # not the real one
    assert labtool.default_zip(tmp_path / "sol", build=tmp_path) == tmp_path / "submission-sol.zip"


def test_requirements_are_pinned():
    pins = (ROOT / "requirements.txt").read_text().split()
    assert pins == ["numpy==2.4.6", "pytest==9.0.3", "pytest-timeout==2.4.0"]


# ------------------------------------------------------------------------- the students' Pythons
SUPPORTED = [(3, 9), (3, 10), (3, 11), (3, 12), (3, 13)]      # tested on each (pyenv); 3.14 resolves too
PACKAGES = ["numpy", "pytest", "pytest-timeout"]
# The Pythons each pinned release installs on, read from the package index with `pip download
# --only-binary=:all:` on each interpreter and platform (lowest, highest; None: pure Python, no ceiling).
# A new pin needs its line here, checked the same way: a pin outside its range breaks the first make.
INSTALLS_ON = {("numpy", "2.0.2"): ((3, 9), (3, 13)), ("numpy", "2.2.6"): ((3, 10), (3, 13)),
               ("numpy", "2.4.6"): ((3, 11), (3, 14)), ("pytest", "8.4.2"): ((3, 9), None),
               ("pytest", "9.0.3"): ((3, 10), None), ("pytest-timeout", "2.4.0"): ((3, 7), None)}
GATE = re.compile(r"Makefile:\d+: \*\*\* (.+)\.  Stop\.")         # how make prints $(error ...)


def requirement_lines(path):
    """(name, version, marker or None) for each line of a requirements file."""
    lines = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9.]+)\s*(?:;\s*(.+))?", line)
            assert m, f"{path.name}: not `name==version[; marker]`: {line}"
            lines.append(m.groups())
    return lines


def marker_holds(marker, python):
    """Does `python_version OP "X.Y"` hold for python (X, Y)? The only marker form the file may use."""
    if marker is None:
        return True
    m = re.fullmatch(r'python_version\s*(<=|>=|==|!=|<|>)\s*"(\d+)\.(\d+)"', marker.strip())
    assert m, f"this check understands only python_version markers: {marker}"
    bound = (int(m.group(2)), int(m.group(3)))
    return {"<": python < bound, "<=": python <= bound, "==": python == bound, "!=": python != bound,
            ">=": python >= bound, ">": python > bound}[m.group(1)]


def selected_pins(python):
    """{package: version} that pip installs from the students' requirements on python (X, Y)."""
    pins = {}
    for name, version, marker in requirement_lines(ROOT / "handout" / "requirements.txt"):
        if marker_holds(marker, python):
            assert name not in pins, f"Python {python}: two lines for {name}: {pins[name]} and {version}"
            pins[name] = version
    return pins


def find_python(minor):
    """A working interpreter of version minor = (X, Y): pythonX.Y on PATH, or one pyenv installed."""
    name = "python%d.%d" % minor
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(name)] + sorted(str(p) for p in root.glob("%d.%d.*/bin/%s" % (*minor, name)))
    for exe in filter(None, candidates):
        try:
            r = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and r.stdout.strip() == "%d.%d" % minor:
            return exe
    return None


def fake_python3(folder, version, hide=()):
    """A `python3` (in folder) that is the current Python reporting VERSION as its own, and
    without the modules in `hide` (as Debian's python3 lacks ensurepip until pythonX.Y-venv)."""
    code = (f"import runpy, sys; sys.version_info = {tuple(version) + ('final', 0)!r}; "
            f"sys.version = {'.'.join(map(str, version)) + ' (fake)'!r}; sys.argv = sys.argv[1:]; "
            f"sys.modules.update(dict.fromkeys({list(hide)!r})); "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    exe = folder / "python3"
    exe.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(code)} "$@"\n')
    exe.chmod(0o755)
    return folder


def test_the_students_requirements_pick_one_pin_per_package_on_each_python():
    try:
        from packaging.markers import Marker       # what pip evaluates markers with, when present
    except ImportError:
        Marker = None
    for python in SUPPORTED + [(3, 14)]:
        pins = selected_pins(python)
        assert sorted(pins) == PACKAGES, f"Python {python}: {pins}"
        for name, version in pins.items():
            assert (name, version) in INSTALLS_ON, f"{name}=={version}: check it on the index, add it to INSTALLS_ON"
            low, high = INSTALLS_ON[name, version]
            assert low <= python and (high is None or python <= high), \
                f"{name}=={version} does not install on Python {python} (only {low} to {high})"
        if Marker is not None:
            env = {"python_version": "%d.%d" % python, "python_full_version": "%d.%d.0" % python}
            for name, version, marker in requirement_lines(ROOT / "handout" / "requirements.txt"):
                if marker:
                    assert Marker(marker).evaluate(env) == marker_holds(marker, python), (marker, python)
    assert selected_pins((3, 9))["numpy"] == "2.0.2"    # the oldest numpy the lab must run on (issue 9)


def test_the_grader_keeps_its_pins_and_students_on_3_11_get_the_same():
    grader = {name: version for name, version, marker in requirement_lines(ROOT / "requirements.txt")}
    assert all(marker is None for *_, marker in requirement_lines(ROOT / "requirements.txt"))
    for python in [(3, 11), (3, 12), (3, 13)]:
        assert selected_pins(python) == grader, python
    assert dict(build_handout.handout_files())[ROOT / "handout" / "requirements.txt"] == "requirements.txt"


def test_the_students_readme_states_the_pythons_and_numpys():
    readme = (ROOT / "handout" / "README.md").read_text()
    oldest = "%d.%d" % SUPPORTED[0]
    assert f"`python3` ({oldest} or newer)" in readme
    assert f"numpy {selected_pins(SUPPORTED[0])['numpy']} on {oldest}" in readme
    for python in SUPPORTED[1:3]:
        assert f"{selected_pins(python)['numpy']} on %d.%d" % python in readme, python


def test_the_gate_stops_an_old_python3_with_one_line(tmp_path):
    folder = unpack_handout(tmp_path)
    fake = fake_python3(tmp_path, (3, 8, 18))
    r = make(folder, "test", path=f"{fake}{os.pathsep}{os.environ['PATH']}")
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, lines
    m = GATE.fullmatch(lines[0])
    assert m and m.group(1).startswith("Python 3.8.18 (") and "is too old for this lab" in m.group(1), lines[0]
    assert "install Python 3.9 or newer" in m.group(1) and "make PYTHON=" in m.group(1), lines[0]
    assert not (folder / ".venv").exists()


def test_the_gate_lets_3_9_through(tmp_path):
    """The control for the test above: the same fake reporting 3.9 gets past the gate (make -n:
    the recipe is expanded, so the gate runs, but the .venv is not built)."""
    folder = unpack_handout(tmp_path)
    fake = fake_python3(tmp_path, (3, 9, 0))
    r = make(folder, "-n", ".venv/.ready", path=f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert r.returncode == 0 and "python3 -m venv" in r.stdout, r.stdout + r.stderr
    assert not GATE.search(r.stdout + r.stderr)


def test_the_gate_names_the_package_when_venv_is_missing(tmp_path):
    folder = unpack_handout(tmp_path)
    fake = fake_python3(tmp_path, (3, 10, 12), hide=["ensurepip"])
    r = make(folder, "test", path=f"{fake}{os.pathsep}{os.environ['PATH']}")
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, lines
    m = GATE.fullmatch(lines[0])
    assert m and m.group(1).startswith("Python 3.10.12 (") and "sudo apt install python3.10-venv" in m.group(1), lines
    assert not (folder / ".venv").exists()


def test_the_gate_says_when_there_is_no_python3(tmp_path):
    folder = unpack_handout(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    for args, name in [(["test"], "python3"), (["test", f"PYTHON={tmp_path}/no-such-python"], f"{tmp_path}/no-such-python")]:
        r = make(folder, *args, path=str(empty))
        lines = (r.stdout + r.stderr).strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1, lines
        assert GATE.fullmatch(lines[0]) and lines[0].startswith("Makefile:"), lines[0]
        assert f"*** {name} not found: install Python 3.9 or newer" in lines[0], lines[0]
    assert not (folder / ".venv").exists()


@pytest.mark.parametrize("minor", [(2, 7), (3, 6), (3, 7), (3, 8)], ids="{0[0]}.{0[1]}".format)
def test_the_gate_stops_a_real_old_python(tmp_path, minor):
    exe = find_python(minor)
    if exe is None:
        pytest.skip("no Python %d.%d on this machine" % minor)
    folder = unpack_handout(tmp_path)
    r = make(folder, "test", f"PYTHON={exe}")
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, lines
    m = GATE.fullmatch(lines[0])
    assert m and re.match(r"Python %d\.%d\.\d+ \(" % minor, m.group(1)) and "too old" in m.group(1), lines[0]
    assert not (folder / ".venv").exists()


def grading_table(text=None, header="| Part | Check | Points |"):
    """The rows of a grading table (assignment.md's by default; the Chinese edition's with its own
    text; the bonus table with its `header`): (part, check title, points), and apart the totals,
    whose titles are bold. None when there is no such table."""
    lines = (text if text is not None else (ROOT / "assignment.md").read_text()).splitlines()
    if header not in lines:
        return None
    start = lines.index(header)
    checks, totals = [], []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [re.sub(r"\\(.)", r"\1", c).strip().strip("`") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        part, title, points = cells
        if title.startswith("**"):
            totals.append((part, int(points.strip("*"))))
        else:
            checks.append((part, title, int(points)))
    return checks, totals


BONUS_TABLE = "| Bonus part | Check | Extra points |"


def test_grading_table_equals_the_rubric():
    checks, totals = grading_table()
    assert checks == [(c.part, c.title, c.points) for c in rubric.CHECKS.values() if c.part in rubric.PARTS]
    assert totals == [(p, rubric.part_points(p)) for p in rubric.PARTS] + [("", 100)]


def test_the_bonus_table_equals_the_bonus_rubric():
    """The extra-credit table lists every bonus check, whether or not the course switched it on."""
    checks, totals = grading_table(header=BONUS_TABLE)
    bonus = [c for c in rubric._checks(True).values() if c.part not in rubric.PARTS]
    assert checks == [(c.part, c.title, c.points) for c in bonus]
    assert totals == [(p, sum(c.points for c in bonus if c.part == p)) for p in dict.fromkeys(c.part for c in bonus)]
    assert totals == [(p.id, rubric.registry.points(p.id)) for p in rubric.registry.bonus()]


def test_switching_the_bonus_off_leaves_the_assignment_of_parts_1_to_4(tmp_path):
    """rubric.BONUS = False: the handout has no text, stubs, tests or demo of any bonus part (the grader
    side is checked in test_grader_end_to_end.py); on, it has them all."""
    off = unpack(build_handout.build(tmp_path / "off.zip", bonus=False), tmp_path / "off")
    on = unpack(build_handout.build(tmp_path / "on.zip", bonus=True), tmp_path / "on")
    text, starter = (off / "assignment.md").read_text(), (off / "starter" / "paged_kv.py").read_text()
    bonus = rubric.registry.bonus()
    names = [n for p in bonus for n in (f"Part {p.number}", p.id, *rubric.registry.top_names(p.id))]
    for word in ("bonus", "Bonus", "extra credit", *names):
        assert word not in text, word
    for word in ("bonus", *names):
        assert word not in starter, word
    compile(starter, "paged_kv.py", "exec")
    readme = (off / "README.md").read_text()      # the students' README, both halves
    for word in ("bonus", "加分", *(f"Part {p.number}" for p in bonus)):
        assert word not in readme, word
    assert "加分" in (on / "README.md").read_text()
    helped = {d: subprocess.run(["make", "-s", "help"], cwd=d, capture_output=True, text=True, timeout=120).stdout
              for d in (on, off)}                  # `make help`: the bonus parts' ids, from the registry
    assert all(p.id in helped[on] for p in bonus) and not any(p.id in helped[off] for p in bonus), helped
    checks, totals = grading_table(text)
    assert checks == [(c.part, c.title, c.points) for c in rubric._checks(False).values()]
    assert totals == [(p, rubric.part_points(p)) for p in rubric.PARTS] + [("", 100)]
    assert grading_table(text, BONUS_TABLE) is None
    left_out = {p.relative_to(on) for p in on.rglob("*")} - {p.relative_to(off) for p in off.rglob("*")}
    bonus_tests = {Path("tests") / p.test_file for p in bonus}       # tests/test_prefix_cache.py, ...
    assert bonus_tests <= left_out == set(map(Path, build_handout.BONUS_FILES))     # their benches too
    assert {p.relative_to(off) for p in off.rglob("*")} <= {p.relative_to(on) for p in on.rglob("*")}
    for p in bonus:
        assert f"## Part {p.number} (bonus)" in (on / "assignment.md").read_text()
        assert all(f"{kind} {n}" in (on / "starter" / "paged_kv.py").read_text() for n in rubric.registry.top_names(p.id)
                   for kind in ("class", "def") if f"{kind} {n}" in (ROOT / "starter" / "paged_kv.py").read_text())
        assert f"DEMOS.append(demo{p.number}_" in (on / "lab" / "demo.py").read_text()
        assert f"DEMOS.append(demo{p.number}_" not in (off / "lab" / "demo.py").read_text()    # never run
    assert (on / "assignment.md").read_text() == (ROOT / "assignment.md").read_text()


@pytest.mark.slow
def test_with_the_bonus_off_make_demo_is_the_lecture_s_four_demos(tmp_path):
    """A course without the bonus: a file without the bonus parts gets the four demos and no word of the
    others (with the bonus on, each bonus demo says "bonus not attempted": checks/test_lecture.py)."""
    off = unpack(build_handout.build(tmp_path / "off.zip", bonus=False), tmp_path / "off")
    text = (ROOT / "solution" / "paged_kv.py").read_text()
    first = rubric.registry.bonus()[0].number
    four = impl(tmp_path, "four", text[:text.index("\n# ------------------------------------------------"
                                                     f"---------------- Part {first} (bonus)")] + "\n")
    r = subprocess.run([sys.executable, str(off / "lab" / "demo.py"), "--impl", str(four), "--lang", "en"],
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert [n for n in range(1, 10) if f"Demo {n}:" in r.stdout] == [1, 2, 3, 4], r.stdout[-2000:]
    assert "bonus" not in r.stdout and not any(f"demo{p.number}" in r.stdout or f"Part {p.number}" in r.stdout
                                               for p in rubric.registry.bonus())


def unpack(zip_path, folder):
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(folder)
    return folder / build_handout.TOP


def test_assignment_has_the_sections_the_feedback_points_to():
    headings = {line for line in (ROOT / "assignment.md").read_text().splitlines() if line.startswith("## ")}
    for title in [*rubric.SECTIONS.values(), "Grading"]:
        assert f"## {title}" in headings, f"assignment.md lacks the heading '## {title}'"


def test_assignment_part_summary_matches_the_rubric():
    text = (ROOT / "assignment.md").read_text()
    for i, part in enumerate(rubric.PARTS, 1):
        assert re.search(rf"^\| {i} \| .* \| {rubric.part_points(part)} \|$", text, re.M), f"part {i} points"


# ---------------------------------------------------------------------------------- slow checks
def assert_every_test_passed(r):
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    m = re.search(r"=+ (\d+) passed in ", r.stdout)
    assert m, r.stdout[-1000:]
    assert "failed" not in r.stdout.splitlines()[-1]
    return int(m.group(1))


def assert_every_test_failed_not_implemented(r):
    """`make test` on the starter: only failures, each one line naming the TODO, no errors; each bonus part
    (its stubs as they are) skipped with one line, when the handout has it."""
    assert r.returncode != 0
    summary = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"=+ (\d+) failed(, (\d+) skipped)? in [\d.]+s =+", summary)
    assert m, f"expected only failures (no errors, no passes) and the bonus's skips: {summary}"
    said = [line for line in r.stdout.splitlines() if "bonus not attempted" in line]
    bonus = rubric.registry.bonus() if m.group(2) else ()
    assert len(said) == len(bonus), said
    assert all(f'its stubs still raise NotImplementedError("TODO Part {p.number} ...")' in line
               for p, line in zip(bonus, said)), said
    sections = failure_sections(r.stdout)
    assert len(sections) == int(m.group(1))
    for name, lines in sections.items():
        assert len(lines) == 1 and re.fullmatch(r"not implemented yet: TODO Part [1-4]: \S+", lines[0]), (name, lines)
    assert "ERROR" not in r.stdout and "Traceback" not in r.stdout     # no collection errors, no tracebacks
    return int(m.group(1))


@pytest.mark.slow
def test_the_solution_passes_every_public_test(handout, tmp_path):
    assert_every_test_passed(
        make(handout, "test", f"IMPL={impl(tmp_path, 'sol', (ROOT / 'solution' / 'paged_kv.py').read_text())}"))


@pytest.mark.slow
def test_the_starter_fails_every_test_with_one_line(handout):
    assert_every_test_failed_not_implemented(make(handout, "test"))


@pytest.mark.slow
def test_the_starter_demo_says_not_implemented(handout):
    r = make(handout, "demo")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("not implemented yet") == 4 and "Traceback" not in r.stdout     # demos 1-4
    for p in rubric.registry.bonus():      # demo N of bonus Part N
        assert len(re.findall(rf"\[demo{p.number}_\w+\] bonus not attempted: its stubs still raise", r.stdout)) == 1, \
            r.stdout


@pytest.mark.slow
def test_make_demo_lang_zh_prints_the_same_demos_in_chinese(handout, tmp_path):
    """`make demo LANG=zh`, as both halves of the README say: the lecture's Chinese headings, and
    the same numbers as the English demos (LANG=C)."""
    from test_handout_sync import NUMBER
    sol = impl(tmp_path, "sol", (ROOT / "solution" / "paged_kv.py").read_text())
    zh, en = (make(handout, "demo", f"LANG={lang}", f"IMPL={sol}") for lang in ("zh", "C"))
    for r in (zh, en):
        assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert [n for n in range(1, 5) if f"演示 {n}：" in zh.stdout] == [1, 2, 3, 4], zh.stdout[-2000:]
    assert "Demo 1:" not in zh.stdout and "观察：" in zh.stdout and "演示 1：" not in en.stdout
    assert sorted(re.findall(NUMBER, zh.stdout)) == sorted(re.findall(NUMBER, en.stdout))


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
    assert not (handout / "build" / "submission-broken.zip").exists()


def zipped(path):
    with zipfile.ZipFile(path) as z:
        assert z.namelist() == ["paged_kv.py"]
        return z.read("paged_kv.py")


@pytest.mark.slow
def test_submit_zips_exactly_paged_kv(handout, tmp_path):
    """`make submit` writes build/submission.zip from starter/; IMPL=sol writes build/submission-sol.zip,
    so a test copy never replaces the real zip (issue 15, item 4); each run says what it wrote from
    what, and a zip replaced with another paged_kv.py is said too."""
    sol = impl(tmp_path, "sol", (ROOT / "solution" / "paged_kv.py").read_text())
    real, copy = handout / "build" / "submission.zip", handout / "build" / "submission-sol.zip"
    first = make(handout, "submit")
    assert first.returncode == 0 and zipped(real) == (handout / "starter" / "paged_kv.py").read_bytes(), first.stdout
    r = make(handout, "submit", f"IMPL={sol}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert zipped(real) == (handout / "starter" / "paged_kv.py").read_bytes(), "the real zip was replaced"
    assert zipped(copy) == (sol / "paged_kv.py").read_bytes()
    assert "Wrote build/submission.zip: exactly one file, paged_kv.py, copied from starter/paged_kv.py (" \
        in first.stdout, first.stdout
    assert f"Wrote build/submission-sol.zip: exactly one file, paged_kv.py, copied from {sol / 'paged_kv.py'} (" \
        in r.stdout, r.stdout
    assert "Note:" not in r.stdout         # no TODO left in the reference, no zip replaced
    (sol / "paged_kv.py").write_text((sol / "paged_kv.py").read_text() + "\n# changed\n")
    r = make(handout, "submit", f"IMPL={sol}")
    assert r.returncode == 0 and zipped(copy) == (sol / "paged_kv.py").read_bytes(), r.stdout + r.stderr
    assert "Note: build/submission-sol.zip was there already, with another paged_kv.py (" in r.stdout, r.stdout
    real.unlink()
    copy.unlink()


# Signs in pip's output that the package index could not be reached (then the test skips).
OFFLINE = ("NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
           "Name or service not known", "Network is unreachable", "ConnectTimeoutError", "ReadTimeoutError",
           "ProxyError", "Could not fetch URL")


@pytest.mark.lane          # a process of its own beside the selftest (conftest.py)
@pytest.mark.slow
@pytest.mark.parametrize("minor", SUPPORTED, ids="{0[0]}.{0[1]}".format)
def test_the_handout_works_on_each_supported_python(tmp_path, minor):
    """As a student on that Python: the first make installs the pins its markers select, the
    starter fails cleanly, the reference dropped into starter/ passes every test, the demo runs."""
    exe = find_python(minor)
    if exe is None:
        pytest.skip("no Python %d.%d on this machine" % minor)
    default = subprocess.run(["python3", "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    if default == str(minor):
        pytest.skip("python3 is %d.%d: the module's handout fixture covers it" % minor)
    folder = unpack_handout(tmp_path)
    r = make(folder, ".venv/.ready", f"PYTHON={exe}")
    if r.returncode != 0 and any(sign in r.stdout + r.stderr for sign in OFFLINE):
        pytest.skip("the package index is unreachable: " + (r.stdout + r.stderr).strip().splitlines()[-1][:200])
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got = subprocess.run([str(folder / ".venv" / "bin" / "python"), "-c",
                          "import sys, importlib.metadata as m; print(sys.version_info[:2], "
                          "{p: m.version(p) for p in sys.argv[1:]})", *PACKAGES],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert got == f"{minor} {selected_pins(minor)}"
    assert assert_every_test_failed_not_implemented(make(folder, "test")) > 0
    shutil.copy(ROOT / "solution" / "paged_kv.py", folder / "starter" / "paged_kv.py")
    assert assert_every_test_passed(make(folder, "test")) > 0
    r = make(folder, "demo")
    assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    assert [n for n in range(1, 5) if f"Demo {n}:" in r.stdout] == [1, 2, 3, 4], r.stdout[-2000:]
    assert "not implemented" not in r.stdout
