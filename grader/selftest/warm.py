"""A warm start for the selftest's runs of our own corpus: one process that has imported what
`python -m grader` and `python -m pytest` import (numpy, pytest, the grader's modules) forks a
child per run, and the child does what the command line does with the same arguments
(grader.__main__.main, pytest.main), in its own session, cwd, environment and log. The selftest
makes about 200 gradings and 120 public-test runs: each saves the interpreter's start and its
imports (about 0.4 s of CPU).

Only for the reference, the mutants, the variants and the strategic corpus (run.py): the hostile
submissions and the determinism twins ("again") go through the real command line, and the twins
must give the same results as their warm gradings, so the two starts are shown to agree.

    server = Warm(); code = server.run("grader", argv, cwd=..., log=..., env=..., timeout=...)

The server is single-threaded (it forks); it answers "started ID PID" then "done ID CODE" per run.
"""
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback

PREWARM = ("numpy", "pytest", "pytest_timeout", "_pytest.junitxml", "grader.grade", "grader.sandbox",
           "grader.collect", "grader.report", "grader.wire", "grader.refcache", "grader.feedback")


class Warm:
    """The client: starts the server, runs commands through it (several threads at once)."""

    def __init__(self, cwd):
        from grader.selftest import cascade      # its own corpus's environment: the children's, from the start
        self.proc = subprocess.Popen([sys.executable, "-m", "grader.selftest.warm"], cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=None, start_new_session=True,
                                     env=cascade.own_corpus_env())
        self.lock, self.next, self.waiting = threading.Lock(), 0, {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            what, rid, value = line.decode().split()
            with self.lock:
                slot = self.waiting.get(int(rid))
            if slot is not None:
                slot[what] = int(value)
                slot["event" if what == "done" else "started_event"].set()
        with self.lock:                   # the server died: every run still waiting fails
            for slot in self.waiting.values():
                slot.setdefault("done", None)
                slot["event"].set()
                slot["started_event"].set()

    def run(self, kind, argv, cwd, log, env, timeout, forked=False):
        """kind: "grader" or "pytest"; the child's exit code, or None when the server died.
        Raises subprocess.TimeoutExpired (the child's session killed) after `timeout` s. forked: the
        grading's sandbox calls are forked from it (forked.py: the honest corpus only)."""
        with self.lock:
            rid, self.next = self.next, self.next + 1
            slot = self.waiting[rid] = {"event": threading.Event(), "started_event": threading.Event()}
            self.proc.stdin.write((json.dumps({"id": rid, "kind": kind, "argv": list(argv), "cwd": str(cwd),
                                               "log": str(log), "env": dict(env), "forked": forked}) + "\n").encode())
            self.proc.stdin.flush()
        try:
            if not slot["event"].wait(timeout):
                slot["started_event"].wait(5)
                if "started" in slot:
                    try:
                        os.killpg(slot["started"], signal.SIGKILL)
                    except OSError:
                        pass
                slot["event"].wait(30)
                raise subprocess.TimeoutExpired(argv, timeout)
            return slot.get("done")
        finally:
            with self.lock:
                self.waiting.pop(rid, None)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------- the server
def _child(req):
    """In the forked child: become what the command line would have started, run, exit."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    code = 1
    try:
        os.chdir(req["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ.clear()
        os.environ.update(req["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
        sys.path[0] = req["cwd"]           # what `python -m` puts first
        if req["kind"] == "grader":
            from grader.__main__ import main
            if req.get("forked"):
                from grader.selftest import forked
                forked.install()
            sys.argv = ["grader", *req["argv"]]
            code = main(req["argv"])
        else:
            import pytest
            sys.argv = ["pytest", *req["argv"]]
            code = pytest.main(req["argv"])
        code = int(code or 0)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001  (said in the log, as an uncaught exception would be)
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _preload():
    """What a grading's refcache.load would read (seed 0, this grader's folder), read here once."""
    from grader import refcache
    from grader.fingerprint import grader_hash
    where = refcache.folder(grader_hash()) if os.geteuid() == 0 else None
    return (lambda: refcache.preload(where, 0)) if where else (lambda: None)


def serve():
    for name in PREWARM:
        importlib.import_module(name)
    preload = _preload()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children, buf, open_ = {}, b"", True
    out = sys.stdout.buffer

    def say(*words):
        out.write((" ".join(str(w) for w in words) + "\n").encode())
        out.flush()

    while open_ or children:
        ready, _, _ = select.select([0, wake_r] if open_ else [wake_r], [], [], 1.0)
        if wake_r in ready:
            os.read(wake_r, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                say("done", children.pop(pid), os.waitstatus_to_exitcode(status))
        if open_ and 0 in ready:
            data = os.read(0, 1 << 16)
            open_ = bool(data)
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                if req["kind"] == "grader":
                    preload()
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    _child(req)
                children[pid] = req["id"]
                say("started", req["id"], pid)


if __name__ == "__main__":
    serve()
