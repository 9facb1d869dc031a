"""The second lane: the checks marked `lane`, run by a pytest process of their own that conftest.py
started when collection ended (and deselected here), pass. Without any such check collected (a
run of some modules only) there is nothing to wait for. Below, the lane itself on a small tree of
checks: what it moves, what it leaves, and that a failure there is a failure here."""
import inspect
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parent


class LaneSkip(UserWarning):
    """A check of the second lane that skipped: said in this session's warnings, with its reason."""


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_the_checks_marked_lane_pass_in_a_process_of_their_own(background):
    if background is None:
        pytest.skip("no check marked lane was collected: they run in this process")
    code, said = background.wait(2300)
    print(said[-16000:])
    assert code == 0, "a check of the second lane failed: see its report above"
    for line in said.splitlines():         # its -ra summary: a skip there is not lost here
        if line.startswith("SKIPPED "):
            warnings.warn(LaneSkip(line), stacklevel=1)


def tree(tmp_path, lane_test_fails=False):
    """checks/ with this conftest's hooks, the waiter above, and test_x.py: a check marked lane, one
    that skips there, one marked lane and quiet, one plain; each writes down the pid it ran in."""
    checks = tmp_path / "checks"
    checks.mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = checks\nmarkers =\n    lane: l\n    quiet: q\n"
                                         "    slow: s\naddopts = -p no:cacheprovider\n")
    (checks / "conftest.py").write_text(textwrap.dedent(f"""\
        import importlib.util, sys
        sys.path.insert(0, {str(CHECKS)!r})
        spec = importlib.util.spec_from_file_location("project_conftest", {str(CHECKS / "conftest.py")!r})
        project = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(project)
        pytest_collection_modifyitems = project.pytest_collection_modifyitems
        pytest_unconfigure = project.pytest_unconfigure
        background = project.background
        """))
    waiter = [inspect.getsource(x) for x in (LaneSkip, test_the_checks_marked_lane_pass_in_a_process_of_their_own)]
    (checks / "test_lane.py").write_text("import warnings\n\nimport pytest\n\n\n" + "\n\n".join(waiter))
    (checks / "test_x.py").write_text(textwrap.dedent(f"""\
        import os
        import pytest

        def note(name):
            with open({str(tmp_path / "pids")!r}, "a") as f:
                f.write(f"{{name}} {{os.getpid()}}\\n")

        @pytest.mark.lane
        def test_in_the_lane():
            note("lane")
            assert not {lane_test_fails!r}, "the lane's check fails"

        @pytest.mark.lane
        def test_skips_in_the_lane():
            pytest.skip("nothing to do here")

        @pytest.mark.lane
        @pytest.mark.quiet
        def test_quiet_stays():
            note("quiet")

        def test_plain():
            note("plain")
        """))
    return tmp_path


def pytest_run(root, *args):
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", *args], cwd=root, capture_output=True,
                       text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})
    pids = dict(line.split() for line in (root / "pids").read_text().splitlines()) if (root / "pids").exists() else {}
    return r, pids


def test_a_lane_check_runs_in_another_process_and_the_quiet_one_stays(tmp_path):
    r, pids = pytest_run(tree(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:]
    assert "3 passed, 2 deselected, 1 warning" in r.stdout, r.stdout[-3000:]
    assert pids["plain"] == pids["quiet"] != pids["lane"], pids
    assert "LaneSkip: SKIPPED [1] checks/test_x.py:" in r.stdout and ": nothing to do here" in r.stdout, \
        r.stdout[-3000:]


def test_a_failure_in_the_lane_fails_its_waiter_and_says_which(tmp_path):
    r, pids = pytest_run(tree(tmp_path, lane_test_fails=True))
    assert r.returncode == 1 and "FAILED checks/test_lane.py::test_the_checks_marked_lane_pass" in r.stdout, \
        r.stdout[-3000:]
    assert "the lane's check fails" in r.stdout and "test_in_the_lane" in r.stdout, r.stdout[-3000:]


def test_without_the_waiter_a_lane_check_runs_here(tmp_path):
    r, pids = pytest_run(tree(tmp_path), "checks/test_x.py")
    assert r.returncode == 0 and "3 passed, 1 skipped" in r.stdout, r.stdout[-3000:]
    assert pids["plain"] == pids["quiet"] == pids["lane"], pids
