"""Killing a grader's sandbox workers from outside, as a broken or crowded machine does (issue 14).

A worker is a `python ... worker.py` process below a given ancestor (this test process, or a grader
it started). It has said "started" once it has written anything (wire.STARTED is its first write:
/proc/PID/io's wchar), which it does before it loads the submission.
"""
import os
import signal
import threading
import time


def _stat(pid):
    """(parent pid, start time): the second tells a process from a later one with the same pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None, None


def _parent(pid):
    return _stat(pid)[0]


EXCLUDED = set()      # processes whose workers are not a test's own: the background selftest (conftest.py)


def _descends(pid, ancestor):
    for _ in range(12):                  # the launch chain is a few processes deep
        pid = _parent(pid)
        if pid is None or pid <= 1 or pid in EXCLUDED:
            return False
        if pid == ancestor:
            return True
    return False


def _is_worker(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return os.path.basename(argv[0]).startswith(b"python") and any(a.endswith(b"/worker.py") for a in argv)


SLEEPS = {"x86_64": ("35", "230"), "aarch64": ("101", "115")}.get(os.uname().machine, ())   # nanosleep, clock_


def asleep(pid):
    """Whether the worker is in time.sleep (/proc/PID/syscall): no step of the worker's own sleeps, so
    it is in the submission's code, whichever grader runs it."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] in SLEEPS
    except (OSError, IndexError):
        return False


def started(pid):
    """Whether the worker has written anything yet (its first write is wire.STARTED)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return int(dict(line.split(": ") for line in f.read().splitlines())["wchar"]) > 0
    except (OSError, KeyError, ValueError):
        return False


class Watcher(threading.Thread):
    """Calls `act(n, pid, started)` for every worker below `ancestor`, every few milliseconds, until it
    returns True for that worker: n numbers the workers in the order they were first seen (1: the
    first), started says whether it has said "started". `seen` counts the workers seen. Use as a
    context manager."""

    def __init__(self, act, ancestor=None):
        super().__init__(daemon=True)
        self.act, self.ancestor = act, ancestor or os.getpid()
        self.numbers, self.done = {}, set()
        self._halt = threading.Event()

    @property
    def seen(self):
        return len(self.numbers)

    def run(self):
        while not self._halt.is_set():
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                pid = int(name)
                key = (pid, _stat(pid)[1])
                if key in self.done or not (_is_worker(pid) and _descends(pid, self.ancestor)):
                    continue
                n = self.numbers.setdefault(key, len(self.numbers) + 1)
                if self.act(n, pid, started(pid)):
                    self.done.add(key)
            time.sleep(0.005)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._halt.set()
        self.join()


class Killer(Watcher):
    """SIGKILLs the workers that `pick(n, pid, started)` chooses (see Watcher), each at most once.
    `killed` lists the n of each worker killed, `started` whether each had said "started" then."""

    def __init__(self, pick, ancestor=None):
        super().__init__(self._act, ancestor)
        self.pick, self.killed, self.started = pick, [], []

    def _act(self, n, pid, now_started):
        if not self.pick(n, pid, now_started):
            return False
        try:
            os.kill(pid, signal.SIGKILL)
            self.killed.append(n)
            self.started.append(now_started)
        except ProcessLookupError:
            pass
        return True
