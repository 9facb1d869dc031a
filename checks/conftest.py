"""Shared setup for the checks of the lab and the reference: lab/ and solution/ on sys.path, and
`paged_kv` imported from solution/ (the reference), the way the contract imports an implementation."""
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
for _d in ("lab", "solution"):
    if str(ROOT / _d) not in sys.path:
        sys.path.insert(0, str(ROOT / _d))

import paged_kv  # noqa: E402

assert Path(paged_kv.__file__).resolve().parent == ROOT / "solution", \
    f"checks expect the reference paged_kv, got {paged_kv.__file__}"


def _switched(on):
    from grader import rubric
    was = rubric.BONUS
    rubric.switch_bonus(on)
    yield
    rubric.switch_bonus(was)


@pytest.fixture
def bonus_off():
    """The rubric with the bonus switched off (as a course would, in rubric.py), restored after."""
    yield from _switched(False)


@pytest.fixture
def bonus_on():
    yield from _switched(True)


# ------------------------------------------------------------------ the selftest, in the background
SELFTEST = "checks/test_selftest.py::test_grader_passes_its_selftest"
SELFTEST_RUN = pytest.StashKey()


@pytest.hookimpl(trylast=True)         # after -k / -m have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """The selftest (grader/selftest/run.py: most of make check's CPU, in a process of its own) starts
    as soon as collection ends, and its test runs last, waiting for it: the other checks run
    meanwhile, on the cores it leaves idle. They write nothing into the folders it watches (make check
    runs with PYTHONDONTWRITEBYTECODE)."""
    mine = [item for item in items if item.nodeid == SELFTEST]
    if not mine or config.option.collectonly:
        return
    items.remove(mine[0])
    items.append(mine[0])
    folder = Path(tempfile.mkdtemp(prefix="cs349e-check-selftest-"))
    out = open(folder / "report.txt", "w+b")      # noqa: SIM115  (read by the test, closed at the end)
    proc = subprocess.Popen([sys.executable, "-m", "grader.selftest.run", "--json", str(folder / "selftest.json")],
                            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    config.stash[SELFTEST_RUN] = (proc, out, folder)
    import outside
    outside.EXCLUDED.add(proc.pid)        # the checks that kill workers kill only their own


def pytest_unconfigure(config):
    run = config.stash.get(SELFTEST_RUN, None)
    if run is not None:
        proc, out, _ = run
        if proc.poll() is None:          # the session ended before its test waited for it
            proc.kill()
            proc.wait()
        out.close()


@pytest.fixture
def background_selftest(request):
    """(the selftest's process, its output file, its folder) started at collection (see above), or
    None when this session did not start it (the test was collected alone with --co, say)."""
    return request.config.stash.get(SELFTEST_RUN, None)
