"""Loads the implementation under test (--impl=DIR, default ../starter) once, and keeps the output
readable:

- a file that does not import or lacks a contract name: one message (file, line, what to fix), exit 3;
- a test that reaches a stub fails with one line: "not implemented yet: TODO Part 2: paged_step";
- a bonus part (Part 5) left as the starter's stubs, or not there at all, skips its tests with one
  reason, "bonus not attempted" (labtool.bonus_state decides, as make submit and demo 5 do);
- a test whose scenario cannot build what it needs (BlockPool(...) raised) fails in the part that
  owns it and is skipped elsewhere, naming the part to fix first;
- at the end, the results by part, each failure on one untrimmed line, and the tests skipped while
  they wait for another part, with the reason (support.wait).
"""
import sys
import traceback
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))
import labtool  # noqa: E402
import registry  # noqa: E402    the parts: their markers, titles and which are bonus

PART_TITLES = {p.id: registry.section(p.id) for p in registry.PARTS}     # each part's marker: its id
BONUS_PARTS = labtool.BONUS_PARTS     # extra credit: a file without them skips their tests


def pytest_addoption(parser):
    parser.addoption("--impl", default=str(HERE.parent / "starter"),
                     help="folder holding the paged_kv.py to test (default: ../starter); write --impl=DIR")


def pytest_configure(config):
    for part, title in PART_TITLES.items():      # also when pytest was started without tests/pytest.ini
        config.addinivalue_line("markers", f"{part}: {title}")
    impl = config.getoption("--impl", default=str(HERE.parent / "starter"))
    message = labtool.check_in_subprocess(impl)      # a file that hangs at import cannot hang the tests
    if message is None:
        try:
            config.paged_kv = labtool.load(impl)     # also puts lab/ and DIR on sys.path
        except labtool.ImplError as e:
            message = str(e)
    if message is not None:
        pytest.exit(f"cannot test {labtool.shown(Path(impl) / labtool.FILE)}:\n{message}", returncode=3)
    config.bonus_states = {part: labtool.bonus_state(config.paged_kv, part) for part in BONUS_PARTS}


def pytest_collection_modifyitems(config, items):
    """A bonus part left as the starter's stubs: its tests are skipped, as for a file without it (the
    fixture in test_prefix_cache.py skips those), not failed one by one."""
    for part, state in config.bonus_states.items():
        if state == labtool.BONUS_STUBBED:
            skip = pytest.mark.skip(reason=labtool.not_attempted(labtool.BONUS_STUBBED, part))
            for item in items:
                if part in item.keywords:
                    item.add_marker(skip)


def pytest_report_header(config):
    return f"implementation under test: {config.paged_kv.__file__}"


@pytest.fixture(scope="session")
def pk(request):
    """The implementation under test (the module `paged_kv`)."""
    return request.config.paged_kv


# ------------------------------------------------------------------------- "not implemented yet"
def _unfinished(e):
    """Where a NotImplementedError came from, in the starter's words when it has them."""
    if str(e):
        return str(e)
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.endswith(labtool.FILE)]
    return f"{frames[-1].name} (paged_kv.py, line {frames[-1].lineno})" if frames else "NotImplementedError"


def _one_line_if_unfinished(item):
    import scenarios
    reason = unbuilt = None
    try:
        yield
    except NotImplementedError as e:
        reason = _unfinished(e)
    except scenarios.Unbuilt as e:
        unbuilt = e
    if reason is not None:      # outside the except: no "during handling of the above exception"
        pytest.fail(f"not implemented yet: {reason}", pytrace=False)
    if unbuilt is not None:
        _unbuilt(item, unbuilt)


def _unbuilt(item, e):
    """A test whose scenario could not build what it needs (BlockPool(...) raised): the part that owns
    it fails, saying so; any other part's test waits for it (one bug, one charge)."""
    owner = list(PART_TITLES)[e.part - 1]
    if owner in item.keywords:
        pytest.fail(f"your {e}", pytrace=False)
    pytest.skip(f"this test needs a {e.what} first, and your {e}: fix Part {e.part} first")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _one_line_if_unfinished(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _one_line_if_unfinished(item))


# ------------------------------------------------------------------------------- results by part
def _first_line(rep):
    crash = getattr(rep.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(rep.longrepr)
    line = text.strip().splitlines()[0] if text.strip() else "failed"
    return line[len("Failed: "):] if line.startswith("Failed: ") else line


def _skip_reason(rep):
    """A skip's reason, without pytest's "Skipped: "."""
    text = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    return text[len("Skipped: "):] if text.startswith("Skipped: ") else text


def pytest_terminal_summary(terminalreporter):
    reports = [r for key in ("passed", "failed", "error") for r in terminalreporter.stats.get(key, [])
               if getattr(r, "when", None) in ("setup", "call") and not (r.passed and r.when == "setup")]
    skips = [r for r in terminalreporter.stats.get("skipped", []) if getattr(r, "when", None) in ("setup", "call")]
    if not reports and not skips:
        return
    tr = terminalreporter
    tr.ensure_newline()
    tr.section("results by part")
    for part, title in PART_TITLES.items():
        mine = [r for r in reports if part in r.keywords]
        waiting = [r for r in skips if part in r.keywords and not _not_attempted(r)]
        bonus = " (bonus)" if part in BONUS_PARTS and "bonus" not in title else ""
        if not mine and not waiting:
            absent = [r for r in skips if part in r.keywords]
            if absent and part in BONUS_PARTS:
                tr.write_line(f"{title} ({part}): {_skip_reason(absent[0])} ({len(absent)} test{'s' * (len(absent) != 1)} skipped; "
                              "extra credit only)")
            continue
        failed = [r for r in mine if not r.passed]
        reasons = {}
        for r in waiting:
            reasons[_skip_reason(r)] = reasons.get(_skip_reason(r), 0) + 1
        counts = f"{len(mine) - len(failed)} of {len(mine)} passed" if not waiting else \
            f"{len(mine) - len(failed)} passed, " + (f"{len(failed)} failed, " if failed else "") + \
            f"{len(waiting)} skipped" + (f": {next(iter(reasons))}" if len(reasons) == 1 else "")
        tr.write_line(f"{title}{bonus} ({part}{', extra credit' if part in BONUS_PARTS else ''}): {counts}")
        if len(reasons) > 1:
            for reason, n in reasons.items():
                tr.write_line(f"  {n} skipped: {reason}")
        unfinished = {}
        for r in failed:
            line = _first_line(r)
            if line.startswith("not implemented yet"):
                unfinished[line] = unfinished.get(line, 0) + 1
            else:
                tr.write_line(f"  FAILED {r.nodeid.split('::', 1)[-1]}: {line}")
        for line, n in unfinished.items():
            tr.write_line(f"  {line} ({n} test{'s' * (n != 1)})")


def _not_attempted(rep):
    """A skip that says the bonus is not attempted (not a test waiting for another part)."""
    return _skip_reason(rep).startswith("bonus not attempted")
