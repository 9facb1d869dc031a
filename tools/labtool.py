"""The one place the handout's workflow lives: check, test and submit an implementation.

    python tools/labtool.py check  [--impl DIR]               does DIR/paged_kv.py import and define the contract?
    python tools/labtool.py test   [--impl DIR] [--part P]    the public tests (tests/) on DIR
    python tools/labtool.py submit [--impl DIR] [--out ZIP]   check, then a zip holding exactly paged_kv.py
                                                              (default build/submission.zip; for another DIR
                                                              build/submission-DIR.zip)

The staff Makefile, the students' Makefile and tests/conftest.py all use this module, so a broken
submission gets the same one clear message (file, line, what to fix) everywhere. DIR defaults to
starter/, the student's working folder.
"""
import argparse
import contextlib
import importlib.util
import inspect
import io
import os
import re
import subprocess
import sys
import traceback
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "lab"
TESTS = ROOT / "tests"
DEFAULT_IMPL = ROOT / "starter"
FILE = "paged_kv.py"
sys.path.insert(0, str(TESTS))
import registry  # noqa: E402    tests/registry.py: the parts, their contract names and TODOs

PARTS = tuple(p.id for p in registry.PARTS)     # the bonus parts last
IMPORT_TIMEOUT = float(os.environ.get("PAGED_KV_IMPORT_TIMEOUT", 60))    # seconds; the env var is for our tests



def _contract(parts):
    """The contract's names of these parts as the checks below read them: functions {name: (part,
    args)}, classes {name: (part, {method: args})} (__init__ included), moved {(class, method):
    part} for a method of a later part on an earlier part's class, and the reexports."""
    functions, classes, moved, reexports = {}, {}, {}, []
    for part in parts:
        for name in part.names:
            if name.kind == "function":
                functions[name.dotted] = (part.number, name.args)
            elif name.kind == "class":
                classes[name.dotted] = (part.number, {"__init__": name.args})
            elif name.kind == "reexport":
                reexports.append(name.dotted)
    for part in parts:
        for name in part.names:
            if name.kind == "method":
                cls, meth = name.dotted.split(".")
                classes[cls][1][meth] = name.args
                if classes[cls][0] != part.number:
                    moved[(cls, meth)] = part.number
    return functions, classes, moved, tuple(reexports)


# The contract's names: what must exist and how the tests call it (positional arguments, self excluded).
FUNCTIONS, CLASSES, MOVED, REEXPORTS = _contract(registry.core())
# The bonus parts' names are optional. A file without any of them (written before the bonus
# existed) is checked, tested and submitted exactly as before; a file with some is told what is wrong.
BONUS_PARTS = tuple(p.id for p in registry.bonus())


class ImplError(Exception):
    """An implementation that cannot be tested at all; str() is the whole message for the student."""


def shown(path):
    """A path as the student typed it: relative to the current folder when it is inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ------------------------------------------------------------------------------------ loading
def _syntax_message(e, path):
    where = f"{shown(e.filename or path)}, line {e.lineno}"
    lines = [f"{where}: {type(e).__name__}: {e.msg}"]
    if e.text:
        text = e.text.rstrip("\n")
        lines.append("    " + text.strip())
        if e.offset:
            lines.append("    " + " " * max(0, e.offset - 1 - (len(text) - len(text.lstrip()))) + "^")
    lines.append("Fix this line (Python reports only the first syntax error), then run this again.")
    return "\n".join(lines)


def _import_message(e, path):
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).name == FILE]
    where = f"{shown(path)}, line {frames[-1].lineno}" if frames else shown(path)
    lines = [f"{where}: importing it raised {type(e).__name__}: {e}"]
    if frames and frames[-1].line:
        lines.append("    " + frames[-1].line)
    if isinstance(e, ImportError):
        lines.append("paged_kv.py may import only numpy, the standard library and the lab modules "
                     "(transformer_lab, decoding).")
    else:
        lines.append("Code at the top level of paged_kv.py runs on import: fix it, or move it into a function "
                     "or under `if __name__ == \"__main__\":`.")
    return "\n".join(lines)


def _callable_as(fn, n_args):
    try:
        inspect.signature(fn).bind(*([None] * n_args))
        return True
    except TypeError:
        return False
    except ValueError:          # no signature to inspect (a builtin): give it the benefit of the doubt
        return True


def missing_names(module):
    """Every contract name of Parts 1-4 the module lacks or defines uncallably, as lines for the student."""
    problems = _name_problems(module, FUNCTIONS, CLASSES, MOVED)
    for name in REEXPORTS:
        if not callable(getattr(module, name, None)):
            problems.append(f"{name}: keep the starter's line `from {registry.REEXPORTED_FROM} import "
                            f"{', '.join(REEXPORTS)}`")
    return problems


def bonus_problems(module, part):
    """None when the module defines no name of the bonus part (not attempted), else the problems
    with its names, as missing_names words them (an empty list: all there)."""
    functions, classes, moved, _ = _contract([registry.BY_ID[part]])
    if not any(hasattr(module, name) for name in registry.top_names(part)):
        return None
    return _name_problems(module, functions, classes, moved)


# What a file's bonus part is, for make test, make submit and the bonus demos alike (the grader decides the
# same from what the sandbox reports: grader/grade.py, bonus_stubbed).
BONUS_ABSENT = "absent"            # none of its names: written before the part existed, or without it
BONUS_INCOMPLETE = "incomplete"    # some of its names missing or not callable as the contract does
BONUS_STUBBED = "stubbed"          # every entry point still raises the starter's NotImplementedError("TODO Part N ...")
BONUS_ATTEMPTED = "attempted"
NOT_ATTEMPTED = (BONUS_ABSENT, BONUS_STUBBED)      # the states that are "bonus not attempted"
CORE_SPAN = f"Parts {registry.core()[0].number}-{registry.core()[-1].number}"     # "Parts 1-4": the 100 points


def not_attempted(state, part):
    """The one reason a bonus part not attempted gives, everywhere (make test's skips, make check and
    submit, the bonus demos), in the registry's words for that part; None for a state that is an attempt."""
    if state == BONUS_ABSENT:
        return f"bonus not attempted: paged_kv.py defines no {' and no '.join(registry.top_names(part))}"
    if state == BONUS_STUBBED:
        return f'bonus not attempted: its stubs still raise NotImplementedError("{registry.todo_prefix(part)} ...")'
    return None


def bonus_state(module, part):
    """BONUS_ABSENT, BONUS_INCOMPLETE, BONUS_STUBBED or BONUS_ATTEMPTED, decided from what the module
    defines and does, not from its text: a stub is a function that raises the starter's TODO
    (scenarios.bonus_stub, which the grader's sandbox runs too)."""
    problems = bonus_problems(module, part)
    if problems is None:
        return BONUS_ABSENT
    if problems:
        return BONUS_INCOMPLETE
    return BONUS_STUBBED if _scenarios().bonus_stub(module, part) is not None else BONUS_ATTEMPTED


def _scenarios():
    """tests/scenarios.py (it needs lab/ on sys.path), the code the public tests and the grader share."""
    for d in (str(TESTS), str(LAB)):
        if d not in sys.path:
            sys.path.append(d)
    import scenarios
    return scenarios


def bonus_line(module, part):
    """What check and submit say about a bonus part (never an error: the bonus is extra credit)."""
    state, n = bonus_state(module, part), registry.number(part)
    if state in NOT_ATTEMPTED:
        return f"Part {n}: {not_attempted(state, part)} (extra credit only: {CORE_SPAN} are graded as usual)."
    if state == BONUS_INCOMPLETE:
        return (f"Part {n} (bonus): only its extra credit is at stake, but as it is it cannot be graded:\n"
                + "\n".join("  - " + p for p in bonus_problems(module, part)))
    top = registry.top_names(part)
    return f"Part {n} (bonus): {' and '.join(top)} {'are' if len(top) > 1 else 'is'} defined."


def bonus_lines(module):
    """bonus_line for every bonus part, in order."""
    return "\n".join(bonus_line(module, part) for part in BONUS_PARTS)


def _name_problems(module, functions, classes, moved):
    """functions: {name: (part, args)}; classes: {name: (part, {method: args})}; moved: {(class,
    method): part} for a method of a later part that lives on an earlier part's class."""
    problems = []
    for name, (part, args) in functions.items():
        fn = getattr(module, name, None)
        if not callable(fn):
            problems.append(f"{name}: the Part {part} function is missing (def {name}({', '.join(args)}))")
        elif not _callable_as(fn, len(args)):
            problems.append(f"{name} cannot be called as {name}({', '.join(args)})")
    methods = {cls: dict(spec) for cls, (_, spec) in classes.items()}
    for cls, meth in moved:
        methods[cls][meth] = ()
    for cls, spec in methods.items():
        part = classes[cls][0]
        klass = getattr(module, cls, None)
        if not isinstance(klass, type):
            problems.append(f"{cls}: the Part {part} class is missing (class {cls}:)")
            continue
        for meth, args in spec.items():
            fn = getattr(klass, meth, None)
            sig = f"def {meth}({', '.join(('self',) + args)})"
            if meth != "__init__" and not callable(fn):
                where = moved.get((cls, meth), part)
                problems.append(f"{cls}.{meth}: the Part {where} method is missing ({sig})")
            elif callable(fn) and not _callable_as(fn, len(args) + 1):
                problems.append(f"{cls}.{meth} cannot be called as the contract does: {sig}")
    return problems


def load(impl_dir):
    """Import DIR/paged_kv.py as the module `paged_kv` (lab/ and DIR on sys.path, as the contract
    says) and check its names. Returns the module; raises ImplError with the student's message."""
    impl_dir = Path(impl_dir).resolve()
    path = impl_dir / FILE
    if not path.is_file():
        raise ImplError(f"There is no {FILE} in {shown(impl_dir)}/ (use IMPL=folder to test another folder).")
    if not path.read_bytes().strip():
        raise ImplError(f"{shown(path)} is empty: there is nothing to test or submit. Start from the starter's "
                        f"{FILE} (it defines every name of the contract) and write your code in it.")
    for d in (str(LAB), str(impl_dir)):
        if d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
    spec = importlib.util.spec_from_file_location("paged_kv", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["paged_kv"] = module          # the lab's drivers import it by this name
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules["paged_kv"]
        raise ImplError(_syntax_message(e, path)) from None
    except BaseException as e:  # noqa: BLE001  (SystemExit at import time too)
        del sys.modules["paged_kv"]
        raise ImplError(_import_message(e, path)) from None
    problems = missing_names(module)
    if problems:
        raise ImplError(f"{shown(path)} does not define the whole contract:\n"
                        + "\n".join("  - " + p for p in problems)
                        + "\nKeep every name of the starter, even the ones you have not implemented yet: "
                          "the tests and the grader call them all.")
    return module


def check_in_subprocess(impl_dir, timeout=IMPORT_TIMEOUT):
    """load() in a separate Python, so a file that hangs or crashes at import cannot take the
    caller with it. Returns None when it is fine, else the message for the student."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "check", "--impl", str(impl_dir), "--quiet"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return (f"Importing {shown(Path(impl_dir) / FILE)} took more than {timeout} s. Does it run something at "
                "import time (a loop, a test, input())? Move it into a function or under "
                "`if __name__ == \"__main__\":`.")
    if r.returncode == 0:
        return None
    return r.stdout.strip() or f"Checking {shown(Path(impl_dir) / FILE)} failed:\n{r.stderr.strip()[-2000:]}"


def todos(path):
    """The TODOs still raised in a file, e.g. ["TODO Part 3: blockwise_attention"]."""
    return re.findall(r"raise\s+NotImplementedError\(\s*[\"'](TODO[^\"']*)", Path(path).read_text(errors="replace"))


# ------------------------------------------------------------------------------------ commands
def cmd_check(args):
    try:
        module = load(args.impl)
    except ImplError as e:
        print(e)
        return 1
    if not args.quiet:
        print(f"{shown(Path(args.impl) / FILE)} imports and defines every name of the contract.")
        if BONUS_PARTS:
            print(bonus_lines(module))
    return 0


def part_expression(part):
    """PART as a pytest -m expression: a part name, or several joined with and/or/not."""
    words = re.findall(r"\w+", part)
    unknown = [w for w in words if w not in PARTS + ("and", "or", "not")]
    if unknown:
        raise ImplError(f"PART={part}: unknown part {unknown[0]!r}; use one of {', '.join(PARTS)}.")
    return part


def cmd_test(args, extra):
    import pytest
    # -c and --rootdir: pytest must read tests/pytest.ini whatever folder it is started from, and
    # --impl=DIR as one word, or pytest takes DIR for a test path when it looks for its config.
    cmd = [str(TESTS), "-c", str(TESTS / "pytest.ini"), f"--rootdir={TESTS}", f"--impl={Path(args.impl).resolve()}"]
    if args.part:
        try:
            cmd += ["-m", part_expression(args.part)]
        except ImplError as e:
            print(e)
            return 2
    return int(pytest.main(cmd + extra))


def default_zip(impl_dir, build=ROOT / "build"):
    """Where submit writes when no --out is given: build/submission.zip for the student's working
    folder (starter/), build/submission-NAME.zip for any other folder NAME, so that submitting a
    test copy never replaces the zip of the real work."""
    impl_dir = Path(impl_dir).resolve()
    if impl_dir == DEFAULT_IMPL.resolve():
        return build / "submission.zip"
    name = re.sub(r"[^\w.-]+", "_", impl_dir.name).strip("._") or "folder"
    return build / f"submission-{name}.zip"


def _zipped_file(out):
    """The bytes of paged_kv.py in an existing zip, or None (no zip there, or not one of ours)."""
    try:
        with zipfile.ZipFile(out) as z:
            return z.read(FILE)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def cmd_submit(args):
    path = Path(args.impl) / FILE
    message = check_in_subprocess(args.impl)
    if message:
        print(f"Not submittable yet:\n{message}")
        return 1
    out = Path(args.out) if args.out else default_zip(args.impl)
    before = _zipped_file(out) if out.exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, FILE)
    print(f"{shown(path)} imports and defines every name of the contract.")
    try:
        module = load(args.impl)      # safe now: it imported in a separate Python
        if BONUS_PARTS:
            print(bonus_lines(module))
    except ImplError:
        module = None
    print(f"Wrote {shown(out)}: exactly one file, {FILE}, copied from {shown(path)} ({path.stat().st_size:,} bytes). "
          "Upload it to Gradescope.")
    if before is not None and before != path.read_bytes():
        print(f"Note: {shown(out)} was there already, with another {FILE} ({len(before):,} bytes): it is replaced.")
    quiet = tuple(registry.todo_prefix(p) for p in BONUS_PARTS    # a bonus not attempted: its TODOs cost nothing
                  if module is None or bonus_state(module, p) != BONUS_ATTEMPTED)
    left = [t for t in todos(path) if not t.startswith(quiet)]
    if left:
        parts = sorted({t.split(":")[0].replace("TODO ", "") for t in left})
        which = "; ".join(left) if len(left) <= 3 else ", ".join(parts)
        raise_ = "TODOs still raise" if len(left) > 1 else "TODO still raises"
        print(f"Note: {len(left)} {raise_} NotImplementedError ({which}): the checks that reach them will score 0.")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "test", "submit"):
        p = sub.add_parser(name)
        p.add_argument("--impl", default=str(DEFAULT_IMPL), help="folder holding paged_kv.py (default: starter)")
        if name == "check":
            p.add_argument("--quiet", action="store_true", help="print only problems")
        if name == "test":
            p.add_argument("--part", default="", help=" | ".join(PARTS))
        if name == "submit":
            p.add_argument("--out", default=None,
                           help="the zip to write (default: build/submission.zip for starter, "
                                "build/submission-DIR.zip for another folder DIR)")
    args, extra = ap.parse_known_args(argv)
    if args.cmd == "test":
        return cmd_test(args, extra)
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    return cmd_check(args) if args.cmd == "check" else cmd_submit(args)


if __name__ == "__main__":
    sys.exit(main())
