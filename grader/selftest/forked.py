"""The selftest's honest corpus (its mutants, its correct variants, the strategic corpus's plain bugs)
graded with every sandbox call forked from the grading process instead of launched through the
sandbox's chain (a fresh interpreter importing numpy inside new namespaces: about 0.1 s of CPU per
call, four or more calls per grading). The rest is the grader's own: the same requests and replies
on the same pipes, read by the same _collect and judged by the same _attempt and _verdict; in the
child, the call's own files imported (its scenarios, not the grading's), the sandbox's rlimits, and
fresh standard streams on /dev/null (the grading's are pytest's captures), so a print, a death, a
hang or an exhausted limit is seen as the sandbox sees it (checks/test_sandbox.py compares the two
on each).

Never for a submission, nor for the hostile corpus or a strategic trick (strategic.honest): the
child shares the grading process's memory (the reference, its answers) and runs as its user. run.py
grades the DETERMINISM twins (a mutant of every part, two variants) again by the real command line
and requires identical results.

    forked.install()     in the warm start's child (warm.py), before the grader's main
"""
import gc
import os
import resource
import sys

from grader import sandbox


class _Child:
    """What sandbox._Worker needs of a Popen, for a forked child (it reaps it with wait4 itself)."""

    def __init__(self, pid):
        self.pid, self.returncode = pid, None

    def poll(self):
        return self.returncode


def _spawn(self, call_dir, request, deadline, reply_fd, err_fd):
    pid = os.fork()
    if pid == 0:
        _serve(call_dir, request, deadline, reply_fd, err_fd)
    return sandbox._Worker(_Child(pid))


def _kill_tree(self, worker):
    for kill in (os.killpg, os.kill):         # its session, and itself should it not have made one yet
        try:
            kill(worker.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    worker.wait()
    with sandbox._SPAWN_LOCK:
        sandbox._LIVE.discard(worker.pid)


def _limit(deadline):
    """The rlimits the launch chain sets (sandbox._prefix), address space counted from what this
    process already maps, so the child has a fresh worker's room and no more."""
    with open("/proc/self/status") as f:
        mapped = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))
    cpu = sandbox._cpu_limit(deadline)
    limits = sandbox.LIMITS
    for which, value in ((resource.RLIMIT_AS, mapped + limits["as"]), (resource.RLIMIT_CPU, (cpu, cpu + 1)),
                         (resource.RLIMIT_FSIZE, limits["fsize"]), (resource.RLIMIT_NOFILE, limits["nofile"]),
                         (resource.RLIMIT_CORE, limits["core"])):
        resource.setrlimit(which, value if isinstance(value, tuple) else (value, value))


def _serve(call_dir, request, deadline, reply_fd, err_fd):
    """In the child: what the launch chain and worker.main do before worker.serve, then it; exit (never returns)."""
    code = 70
    try:
        gc.freeze()          # the grading's heap, inherited: a fresh worker has none to traverse
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(null, fd)
        os.dup2(err_fd, 2)
        os.closerange(3, reply_fd)             # the other workers' pipes, the grading's files
        os.closerange(reply_fd + 1, 1 << 16)
        os.chdir(call_dir / "work")
        _limit(deadline)
        sys.path.insert(0, str(call_dir))
        sys.pycache_prefix, sys.dont_write_bytecode = None, True   # the call's bytecode, as `python -B` reads it
        for name in os.listdir(call_dir):      # the call's own files, not the grading's modules: as a worker
            if name.endswith(".py"):
                sys.modules.pop(name[:-3], None)
        from grader import worker
        sys.stdin, sys.stdout, sys.stderr = (open(fd, mode, closefd=False) for fd, mode in ((0, "r"), (1, "w"), (2, "w")))
        worker.REPLY_FD = reply_fd
        worker.serve(request, str(call_dir))   # worker.py's own steps: imports, /dev/null, STARTED, the call, the reply
        code = 0
    finally:
        os._exit(code)


def install():
    sandbox.Sandbox._spawn = _spawn
    sandbox.Sandbox._kill_tree = _kill_tree
