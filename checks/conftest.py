"""Shared setup for the checks of the lab and the reference: lab/ and solution/ on sys.path, and
`paged_kv` imported from solution/ (the reference), the way the contract imports an implementation."""
import os
import secrets
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

# A throwaway course secret for this session and every command it starts (grader/coursesecret.py): the
# checks never use, print or bake in the course's own, and the commands that need one have one.
os.environ["CS349E_COURSE_SECRET"] = secrets.token_urlsafe(32)


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


# ------------------------------------------------------------------ long commands, in the background
STARTED = pytest.StashKey()


class Background:
    """One long command of a check, started when collection ended (see below); `wait` gives its exit
    code and output once it is done."""

    def __init__(self, argv, cwd=ROOT):
        self.out = tempfile.TemporaryFile()         # its output; gone when closed, at the session's end
        self.proc = subprocess.Popen(argv, cwd=cwd, stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def wait(self, timeout):
        """(exit code, output); a command past `timeout` s is killed (its code then says so)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.out.seek(0)
        return code, self.out.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:          # the session ended before its test waited for it
            self.proc.kill()
            self.proc.wait()
        self.out.close()


@pytest.hookimpl(trylast=True)         # after -k / -m have deselected what they deselect
def pytest_collection_modifyitems(config, items):
    """A check whose work is one long command (its module's BACKGROUND: test name -> a function
    giving the argv, or None when it cannot run here) has it started as soon as collection ends, and runs
    last, waiting for it (the `background` fixture): the other checks run meanwhile, on the cores
    it leaves idle (the selftest, most of make check's CPU; the Gradescope simulation). They write
    nothing into the folders the selftest watches (make check compiles into build/pycache: the Makefile).
    The checks marked `lane` go to a pytest process of their own, started with them (_second_lane).
    A check marked `parallel` (it runs two processes at once itself) runs after them too, on the cores
    they leave, and one marked `quiet` (it starves the machine itself) last, on a machine they left."""
    if config.option.collectonly:
        return
    import outside
    started, late = {}, []
    lane = _second_lane(config, items)
    if lane:
        waiter, argv = lane
        started[waiter.nodeid] = Background(argv, cwd=config.rootpath)     # where the node ids are from
        outside.EXCLUDED.add(started[waiter.nodeid].proc.pid)
        late.append(waiter)
    for item in items:
        command = getattr(getattr(item, "module", None), "BACKGROUND", {}).get(getattr(item, "originalname", None))
        argv = command() if command else None
        if argv:
            started[item.nodeid] = Background(argv)
            outside.EXCLUDED.add(started[item.nodeid].proc.pid)   # the checks that kill workers kill only their own
            late.append(item)
    after = [item for item in items if item.get_closest_marker("parallel") and item not in late]
    quiet = [item for item in items if item.get_closest_marker("quiet")]   # after the background's tests
    for item in late + after + quiet:
        items.remove(item)
        items.append(item)
    config.stash[STARTED] = started


LANE_TEST = "checks/test_lane.py::test_the_checks_marked_lane_pass_in_a_process_of_their_own"


def _second_lane(config, items):
    """The checks marked `lane` (long, self-contained, mostly other processes: a .venv on every
    Python, a copy of the project changed and graded) run in a pytest process of their own, started
    now beside the background commands, so that the selftest's two workers, this session and that
    one share the two cores to the end instead of this session's serial tail running alone (a check
    marked `quiet` too stays here: it runs last, alone). Only when LANE_TEST was collected too, which
    waits for that process and fails with its output: a run of one module or one check runs them
    here as usual. (the waiting check, the lane's argv), or None."""
    waiter = next((item for item in items if item.nodeid == LANE_TEST), None)
    marked = [item for item in items if item.get_closest_marker("lane") and not item.get_closest_marker("quiet")]
    if waiter is None or not marked:
        return None
    for item in marked:
        items.remove(item)
    config.hook.pytest_deselected(items=marked)
    argv = [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", *(i.nodeid for i in marked)]
    return waiter, argv


def pytest_unconfigure(config):
    for run in config.stash.get(STARTED, {}).values():
        run.stop()


@pytest.fixture
def background(request):
    """This test's Background, started at collection (see above), or None when its command cannot run
    here (its test then skips, saying why)."""
    return request.config.stash.get(STARTED, {}).get(request.node.nodeid)
