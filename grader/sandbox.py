"""Run one scenario on a submission in a fresh, locked-down worker process, and kill all of it after.

Every `call` starts a new interpreter (`python -I -S`, minimal environment) in a new private folder
holding only copies of the submission (as paged_kv.py) and of WORKER_FILES. The request goes in on
stdin, the reply comes back on its own pipe as a wire frame (plain data, checked by wire.decode);
the submission's prints go to /dev/null. The parent enforces a wall-clock deadline and a size cap,
then kills the whole process tree, whatever the submission did (setsid, double fork, ignored signals).

A failure the submission did not cause is never its verdict. The worker writes wire.STARTED before
it loads the submission, and the deadline runs from then. A worker still running at its deadline
that has used less than half of it in CPU, but wanted one (ran, or waited on the run queue: a busy
machine), gets more time, up to EXTRA_TIME deadlines (_Clock); a timeout is the submission's when it
had that CPU, or did not want one (asleep, blocked). A worker that dies without a reply, or starves
past EXTRA_TIME, is called again once in a fresh worker. Only the same failure twice is a verdict:
dying after "started" twice is "crashed" (the submission's); twice before "started", or starved
twice, is "grader_error" (the machine's: the grading must be redone, and no student is charged).
The worker's stderr (what the launch chain and the interpreter say before the submission runs: its
own fds 1 and 2 are /dev/null) is kept, bounded, in Reply.staff with the attempts, for staff only.

When root (isolate=None means "isolate when root"), the worker also runs
  - in new pid, network, mount and IPC namespaces (`unshare`): killing the namespace's first process
    kills every process in it; there is no network; /proc shows only the sandbox;
  - with tmpfs over the project (the reference, the grader, the hidden suites), /autograder, /home,
    /root and any `hide` paths, and fresh size-capped tmpfs over /tmp, /var/tmp, /dev/shm,
    /run/lock and the cwd, so nothing persists between calls and jobs share no writable folder;
  - as an unprivileged uid of its own (UID_BASE + job, or the next free one: runtime.claim_uid takes
    a uid only when its lock file is free and no process of the machine runs as it, and holds it
    with a process of its own, so graders in other roots or containers, which have other lock
    files, find it in use), without groups or capabilities; the clean-up kills only processes in
    the pid namespaces its own workers made, never another grader's, whatever their uid;
  - under rlimits (prlimit): address space, CPU, processes, file size, open files, no core dumps.
Without root there is no uid change and no namespace: rlimits, a process group, and this process
as a child subreaper (to find and kill orphaned grandchildren) are all there is, and protections()
says so plainly.
"""
from __future__ import annotations

import builtins
import ctypes
import os
import py_compile
import secrets
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from grader import runtime, wire
from grader.worker import EACH
from grader.rubric import registry      # tests/registry.py: the parts, their names and numbers

DEFAULT_DEADLINE = 6.0    # seconds of wall time per call, from "started"; one constant, easy to change
STARTUP_DEADLINE = 60.0   # seconds from the spawn to "started": the interpreter and numpy, no student code

GRADER_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = GRADER_DIR.parent
WORKER_FILES = {          # file name inside the sandbox -> trusted source (plus the submission as paged_kv.py)
    "worker.py": GRADER_DIR / "worker.py",
    "wire.py": GRADER_DIR / "wire.py",
    "transformer_lab.py": PROJECT_ROOT / "lab" / "transformer_lab.py",
    "console.py": PROJECT_ROOT / "lab" / "console.py",
    "decoding.py": PROJECT_ROOT / "lab" / "decoding.py",
    "scenarios.py": PROJECT_ROOT / "tests" / "scenarios.py",
    "registry.py": PROJECT_ROOT / "tests" / "registry.py",      # the part numbers a stub's TODO may name
}
REQUIRED_NAMES = registry.names(registry.core())     # what check_import looks for (CONTRACT.md)
BONUS_NAMES = {p.id: registry.names([p]) for p in registry.bonus()}      # per bonus part (rubric.BONUS_PARTS)
BONUS_TOP = {p.id: registry.top_names(p.id) for p in registry.bonus()}   # a file with none: not attempted
_PART_NUMBERS = frozenset(p.number for p in registry.PARTS)
STATUSES = ("ok", "raised", "timeout", "crashed", "bad_reply", "import_error", "grader_error")
STDERR_CAP = 2048         # bytes of a worker's stderr kept for staff (its end: where the error is)
BUSY_CPU, BUSY_WAIT = 0.5, 0.25   # past its deadline a worker gets more time while it has used less than
EXTRA_TIME = 4.0                  # BUSY_CPU of it in CPU and wanted one BUSY_WAIT of the time, up to
                                  # EXTRA_TIME deadlines (_Clock)
EXIT_GRACE = 2.0          # seconds a worker that closed its reply pipe may take to exit, whatever its deadline

UID_BASE, UID_SLOTS = runtime.UID_BASE, runtime.UID_SLOTS
LIMITS = {"as": 2 << 30, "nproc": 64, "fsize": 16 << 20, "nofile": 64, "core": 0}
HIDDEN = ("/autograder", "/home", "/root")                 # besides the project root and `hide`
FRESH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")      # world-writable: a new tmpfs per call
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")  # all the new root shows
NEW_ROOT = "/tmp/.cs349e-root"      # inside the call's fresh /tmp: gone with the namespace
SUBMISSION_CAP = 4 << 20
REPLY_CAP = wire.MAX_BYTES
_TOOL_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class Reply:
    status: str            # one of STATUSES
    data: object = None    # "ok": the scenario's result (wire.decode'd); "import_error": {"line", "missing"}
    error: str = ""        # trusted-side text, safe to show a student; built from validated values only
    seconds: float = 0.0   # wall time of the call measured by the parent, every attempt included
    staff: tuple = ()      # for staff only, never a student: the attempts that failed, the workers' stderr


class Sandbox:
    def __init__(self, submission: str | os.PathLike, *, isolate: bool | None = None, job: int = 0,
                 scenarios_file: str | os.PathLike | None = None, hide=(), share=(), check=True):
        """submission: a paged_kv.py (or a folder holding one). job: index of a parallel grading job,
        so concurrent sandboxes use distinct uids and folders. scenarios_file replaces
        tests/scenarios.py (tests); hide: more paths the submission must not see (results; for a
        file, its folder is hidden); share: folders the worker sees, at their own paths, in its new
        root (for tests that watch a submission's side effects; nothing else outside exists).
        check=False: no smoke program now; the first call proves the chain instead (its worker
        imports numpy before "started"), and only a call the machine failed runs it, to raise the
        diagnosis (grade.py's import probe: one launch fewer per grading)."""
        root = os.geteuid() == 0
        self.isolate = root if isolate is None else bool(isolate)
        if self.isolate and not root:
            raise RuntimeError("isolation needs root (namespaces, a separate uid); use isolate=False")
        if type(job) is not int or job < 0:
            raise ValueError("job must be a non-negative int")
        self._files = _read_files(submission, scenarios_file)
        self._bytecode = _bytecode(self._files)
        self._hide = tuple(os.fspath(p) for p in hide)
        self._share = tuple(os.fspath(p) for p in share)
        self._lock = threading.Lock()
        self._closed = False
        self._tools = {t: _tool(t) for t in ("setpriv", "prlimit") + (("unshare", "mount", "chroot") if self.isolate else ())}
        if self.isolate:
            claim = runtime.claim_uid(job)                         # no process of the machine runs as it
            self.uid, self._holder = claim.uid, claim.pid          # the holder: the uid's one process outside calls
            self._finalizer = weakref.finalize(self, _release, claim, None)
            self._scratch = runtime.secure_dir(runtime.state_dir() / "scratch", 0o711)  # pass through, never list
            for stale in self._scratch.glob(f"call-{self.uid}-*"):  # left by a grader that was killed
                _rmtree(stale)
            self._runtime = _isolated_runtime()
            self._env_extra = {}
        else:
            self.uid, self._holder = os.getuid(), None
            _become_subreaper()
            self._scratch = Path(tempfile.mkdtemp(prefix="cs349e-sandbox-"))
            self._finalizer = weakref.finalize(self, _release, None, self._scratch)
            self._runtime = runtime.for_this_user(self._scratch / "site")
            self._env_extra = {"CS349E_SANDBOX": secrets.token_hex(8)}   # marks orphans to reap
        if check:
            self._check_runtime()

    # ------------------------------------------------------------------------------ public API

    def call(self, scenario: str, inputs: dict, deadline: float = DEFAULT_DEADLINE, retry: bool = True) -> Reply:
        """Run scenarios.SCENARIOS[scenario](paged_kv, **inputs) in a fresh worker. retry=False: one
        worker only, for a caller that calls again itself when a call fails (grader/hidden/conftest.py):
        a death is then "crashed" and the machine's failure "grader_error" at once."""
        _check_call(scenario, inputs)
        return self._call(scenario, inputs, float(deadline), names=None, retry=retry)

    def each(self, calls, deadline: float = DEFAULT_DEADLINE, retry: bool = True) -> Reply:
        """Several calls ([[scenario, inputs], ...]) in one fresh worker, each answered as a call of its
        own would be: "ok" with data [a Reply per call, "ok" or "raised"], so one that raises (a stub,
        SystemExit) ends none of the others. Anything else (a death, a hang, a malformed answer) is the
        whole call's Reply, as `call` gives it."""
        calls = [list(c) for c in calls]
        for scenario, inputs in calls:
            _check_call(scenario, inputs)
        reply = self._call(EACH, {"calls": calls}, float(deadline), names=None, retry=retry)
        if reply.status != "ok":
            return reply
        answers = [_interpret(a, None) for a in reply.data] if type(reply.data) is list else []
        if len(answers) != len(calls) or not all(a and a.status in ("ok", "raised") for a in answers):
            return replace(reply, status="bad_reply", data=None, error="the worker's answers have the wrong form")
        return replace(reply, data=answers)

    def check_import(self, names=REQUIRED_NAMES, deadline: float = DEFAULT_DEADLINE) -> Reply:
        """Import paged_kv in a worker and look for `names` (dotted: Class.method), running no
        scenario. "ok" when the module imports, with data {"missing": [names not found]} (and error
        "missing: ..." when there are some: parts are graded on their own, so a missing name is not
        fatal); "import_error" when it does not import: a SyntaxError with its line, or the
        exception the module body raised, its line, and for an ImportError the module."""
        names = [n for n in names if type(n) is str]
        return self._call("__import__", {"names": names}, float(deadline), names=names, retry=True)

    def protections(self) -> list[str]:
        limits = (f"rlimits: AS {LIMITS['as'] >> 30}GiB, CPU deadline+1 s (killed at +2), "
                  + (f"NPROC {LIMITS['nproc']}, " if self.isolate else "")
                  + f"FSIZE {LIMITS['fsize'] >> 20}MiB, NOFILE {LIMITS['nofile']}, CORE 0")
        common = ["separate process, fresh for every call", "python -I -S, minimal environment", limits,
                  "wall-clock deadline, then SIGKILL"]
        if not self.isolate:
            who = "not root" if os.geteuid() != 0 else "isolation turned off (isolate=False)"
            return [f"NOT ISOLATED: {who}, the submission runs as this user (uid {os.getuid()}) and can "
                    f"read and write this user's files", *common,
                    "process group and child subreaper (orphans killed)"]
        hidden, fresh = self._masks()
        return [*common, f"unprivileged uid {self.uid} (no groups, no capabilities, no_new_privs)",
                "pid namespace (whole tree killed)", "no network (network namespace)", "IPC namespace",
                "a new root: only " + ", ".join(d for d in SYSTEM if os.path.isdir(d) and not os.path.islink(d))
                + ", the runtime and the call's folder exist (chroot)",
                "project and results hidden (mount namespace): " + ", ".join(hidden),
                "fresh tmpfs for the cwd and " + ", ".join(fresh) + " (nothing persists)"]

    def close(self) -> None:
        """Release the uid, remove the scratch folder (every worker is dead once a call returns). Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------------------ one call

    def _call(self, scenario, inputs, deadline, names, retry):
        request = wire.encode({"scenario": scenario, "inputs": inputs})
        try:
            wire.decode(request)          # the worker decodes it under the same caps
        except wire.WireError as e:
            raise ValueError(f"inputs too large or too deep for the wire: {e}") from None
        with self._lock:
            if self._closed:
                raise RuntimeError("this sandbox is closed")
            start, attempts = time.monotonic(), []
            while True:
                call_dir = self._new_call_dir()
                try:
                    attempts.append(_attempt(*self._run(call_dir, request, deadline), deadline, names))
                finally:
                    _rmtree(call_dir)
                reply = _verdict(attempts, retry)
                if reply and reply.status == "grader_error":
                    self._check_runtime()       # a chain that cannot run numpy says why (RuntimeError)
                if reply:
                    return replace(reply, seconds=time.monotonic() - start, staff=_staff(attempts))

    def _run(self, call_dir, request, deadline):
        """Start the worker, collect its reply until EOF, exit or deadline, then kill the tree.
        Returns (a _Collected, the CPU seconds of the whole tree)."""
        read_end, write_end = os.pipe()
        err_read, err_write = os.pipe()
        try:
            with _SPAWN_LOCK:
                worker = self._spawn(call_dir, request, deadline, write_end, err_write)
                _LIVE.add(worker.pid)
            for fd in (write_end, err_write):
                os.close(fd)
            write_end = err_write = None
            try:
                got = _collect(read_end, err_read, worker, deadline)
                if got.started:                 # the chain ran numpy: what the smoke program proves
                    self._checked()
            finally:
                self._kill_tree(worker)
            if got.outcome == "exited":
                got.raw += _drain(read_end, REPLY_CAP + 1 - len(got.raw))   # anything a stray process added
                if len(got.raw) > REPLY_CAP:
                    got.outcome = "overflow"
            got.stderr = _tail(got.stderr + _drain(err_read, 1 << 20))
            got.returncode = worker.returncode
            return got, worker.cpu
        finally:
            for fd in (read_end, err_read, write_end, err_write):
                if fd is not None:
                    os.close(fd)

    def _spawn(self, call_dir, request, deadline, reply_fd, err_fd):
        """The worker, started through the launch chain (_prefix) with the request on its stdin, its
        reply going to reply_fd and its stderr to err_fd (called under _SPAWN_LOCK)."""
        with tempfile.TemporaryFile() as stdin:
            stdin.write(request)
            stdin.seek(0)
            argv = [*self._prefix(call_dir, deadline), self._runtime.python, "-I", "-S", "-B",
                    str(call_dir / "worker.py"), self._runtime.site, str(reply_fd)]
            return _Worker(subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=err_fd,
                                            pass_fds=(reply_fd,), cwd=call_dir if self.isolate else call_dir / "work",
                                            env=self._env(call_dir), start_new_session=True))

    def _kill_tree(self, worker):
        try:
            if self.isolate:
                _kill_namespace(worker, self.uid)
            else:
                _kill_group(worker, self._env_extra["CS349E_SANDBOX"])
        finally:
            with _SPAWN_LOCK:
                _LIVE.discard(worker.pid)

    # ------------------------------------------------------------------------------ the launch

    def _prefix(self, call_dir, deadline):
        """argv that runs what follows it inside the sandbox. rlimits first, so they bind every
        process of the chain (no core dump even from the wrappers); all survive exec and setuid."""
        cpu = _cpu_limit(deadline)
        limits = [self._tools["prlimit"], f"--as={LIMITS['as']}", f"--cpu={cpu}:{cpu + 1}",
                  f"--fsize={LIMITS['fsize']}", f"--nofile={LIMITS['nofile']}", f"--core={LIMITS['core']}"]
        if self.isolate:
            limits.append(f"--nproc={LIMITS['nproc']}")   # per real uid: root (the wrappers) is exempt
        outer = [*limits, "--", self._tools["setpriv"], "--pdeathsig=KILL", "--"]  # grader dies -> so does this
        if not self.isolate:
            return outer
        hidden, fresh = self._masks()
        mount, q = self._tools["mount"], shlex.quote
        work = q(str(call_dir / "work"))
        lines = ["set -e"]
        lines += [f"{mount} -t tmpfs -o ro,nosuid,nodev,noexec,size=4k,mode=0755 cs349e-hidden {q(p)}" for p in hidden]
        lines += [f"{mount} -t tmpfs -o nosuid,nodev,size=16m,mode=1777 cs349e-tmp {q(p)}" for p in fresh]
        lines += [f"{mount} -t tmpfs -o nosuid,nodev,size=64m,mode=0700,uid={self.uid},gid={self.uid} "
                  f"cs349e-work {work}"]
        lines += self._new_root(call_dir, fresh)
        lines += ["cd /", "unset PWD OLDPWD",
                  f"exec {self._tools['chroot']} {NEW_ROOT} /bin/sh -c 'cd \"$0\" && unset PWD OLDPWD && exec \"$@\"' {work} \"$@\""]
        namespaces = [self._tools["unshare"], "--pid", "--net", "--mount", "--ipc", "--fork",
                      "--kill-child", "--mount-proc", "--"]
        return [*outer, *namespaces, "/bin/sh", "-c", "\n".join(lines), "sh",
                *runtime.drop_privileges_argv(self.uid)]

    def _new_root(self, call_dir, fresh):
        """Deny by default: the worker's root holds only the system folders, /proc, /dev, fresh tmpfs
        and, at their own paths, the runtime and this call's folder. Whatever else the machine holds
        (other checkouts of the project, other jobs, staff files) does not exist for the submission."""
        if "/tmp" not in fresh:
            raise RuntimeError("the sandbox needs /tmp (its new root lives in the call's fresh /tmp)")
        mount, q, r = self._tools["mount"], shlex.quote, NEW_ROOT
        links, mounts = [], []                          # mounts: (folder in the new root, how it is mounted)
        for d in SYSTEM:
            if os.path.islink(d):
                links.append(f"ln -s {q(os.readlink(d))} {r}{d}")
            elif os.path.isdir(d):
                mounts.append((d, f"--rbind {d}"))
        mounts += [("/proc", "-t proc -o nosuid,nodev,noexec proc"), ("/dev", "--rbind /dev")]
        mounts += [(p, "-t tmpfs -o nosuid,nodev,size=16m,mode=1777 cs349e-tmp") for p in fresh]
        python_home = os.path.dirname(os.path.dirname(self._runtime.python))
        needed = [self._runtime.site, str(call_dir), *self._share]
        if not any(_inside(os.path.realpath(python_home), os.path.realpath(d)) for d in SYSTEM if os.path.isdir(d)):
            needed.append(python_home)                  # e.g. a venv in /opt (Gradescope's setup.sh)
        mounts += [(p, f"--rbind {q(p)}") for p in needed]
        system = [os.path.realpath(d) for d in SYSTEM if os.path.isdir(d)]
        # the folders made on the way to a needed one: pass through, never list
        passes = dict.fromkeys(str(parent) for p in needed for parent in Path(p).parents
                               if str(parent) != "/" and not any(_inside(str(parent), d) for d in system))
        # Each mount point is made just before its mount when it lies under another one (/dev/shm, a folder
        # in the fresh /tmp), else all at once in one mkdir, first: one process instead of one each.
        under = lambda p: any(o != p and _inside(p, o) for o, _ in mounts)   # noqa: E731
        lines = [f"mkdir -m 0755 {r}", f"{mount} -t tmpfs -o nosuid,nodev,mode=0755,size=1m cs349e-root {r}",
                 *links, "mkdir -p " + " ".join(f"{r}{q(p)}" for p, _ in mounts if not under(p))]
        for p, how in mounts:
            lines += [f"mkdir -p {r}{q(p)}"] if under(p) else []
            lines.append(f"{mount} {how} {r}{q(p)}")
        if passes:
            lines.append("chmod 0711 " + " ".join(f"{r}{q(p)}" for p in passes))
        return lines

    def _masks(self):
        """(paths hidden behind an empty read-only tmpfs, world-writable paths given a fresh tmpfs),
        parents before children, nested ones dropped; refuses to hide what the sandbox needs."""
        hidden = set()
        for p in (str(PROJECT_ROOT), *HIDDEN, *self._hide):
            real = os.path.realpath(p)
            if os.path.exists(real):
                hidden.add(real if os.path.isdir(real) else os.path.dirname(real))
        fresh = {os.path.realpath(p) for p in FRESH if os.path.isdir(p)}
        chosen, kinds = [], {}
        for p in sorted(hidden | fresh, key=lambda s: (s.count("/"), s)):
            if p == "/" or any(_inside(p, c) for c in chosen):
                continue
            chosen.append(p)
            kinds[p] = p in fresh      # to hide /tmp (a results folder), its fresh tmpfs is enough
        for needed in (self._runtime.python, self._runtime.site, str(self._scratch)):
            if any(_inside(os.path.realpath(needed), c) for c in chosen):
                raise RuntimeError(f"{needed} is needed inside the sandbox but lies in a hidden folder")
        return [p for p in chosen if not kinds[p]], [p for p in chosen if kinds[p]]

    def _env(self, call_dir):
        home = call_dir / "work"
        return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                **self._env_extra}

    def _new_call_dir(self):
        """A fresh folder: the code files (read-only) and an empty cwd. Isolated: root:uid 0750, files
        root:uid 0440, so this uid can read them, change nothing, and no other job's uid can look."""
        d = Path(tempfile.mkdtemp(prefix=f"call-{self.uid}-", dir=self._scratch))
        (d / "__pycache__").mkdir()
        for name, data in {**self._files, **self._bytecode}.items():
            (d / name).write_bytes(data)
            os.chmod(d / name, 0o440 if self.isolate else 0o444)
        (d / "work").mkdir(mode=0o755 if self.isolate else 0o700)
        if self.isolate:
            for name in (*self._files, *self._bytecode, "__pycache__"):
                os.chown(d / name, 0, self.uid)
            os.chmod(d / "__pycache__", 0o750)
            os.chown(d, 0, self.uid)
            os.chmod(d, 0o750)
        return d

    def _checked(self):
        with _CHECKED_LOCK:
            _CHECKED.add((self.isolate, self._runtime.python))

    def _check_runtime(self):
        """Once per process and runtime: the whole launch chain runs numpy, or a clear RuntimeError."""
        key = (self.isolate, self._runtime.python)
        with _CHECKED_LOCK:
            if key in _CHECKED:
                return
            call_dir = self._new_call_dir()
            try:
                runtime.check(self._runtime, self._prefix(call_dir, 30.0),
                              cwd=str(call_dir if self.isolate else call_dir / "work"))
            finally:
                _rmtree(call_dir)
            _CHECKED.add(key)


# ---------------------------------------------------------------------------------- helpers

_SPAWN_LOCK = threading.Lock()        # spawning and orphan-reaping never interleave
_LIVE: set[int] = set()               # pids of workers being run by some Sandbox of this process
_CHECKED: set = set()
_CHECKED_LOCK = threading.Lock()
_RUNTIME_LOCK = threading.Lock()
_RUNTIME: list = []
_PYC: dict = {}                       # (file name, source bytes) -> its checked-hash pyc (_bytecode)


def _isolated_runtime():
    with _RUNTIME_LOCK:
        if not _RUNTIME:
            _RUNTIME.append(runtime.provision())
        return _RUNTIME[0]


def _read_files(submission, scenarios_file):
    return {"paged_kv.py": _read_submission(submission), **{
        name: Path(src).read_bytes() for name, src in
        {**WORKER_FILES, **({"scenarios.py": scenarios_file} if scenarios_file else {})}.items()}}


def _bytecode(files):
    """{__pycache__/NAME.TAG.pyc: bytes} for the trusted modules the worker imports (never the
    submission, which the worker compiles itself): compiled once per process (_PYC) instead of in each
    worker (scenarios.py alone took a tenth of a worker's start). Checked-hash pycs, so a worker whose
    Python differs, or a source that differs, compiles from the source as before."""
    out = {}
    for name, data in files.items():
        if name in ("paged_kv.py", "worker.py") or not name.endswith(".py"):
            continue                         # the submission; the script (a script's pyc is never read)
        if (name, data) not in _PYC:
            with tempfile.TemporaryDirectory() as tmp:
                src, pyc = Path(tmp) / name, Path(tmp) / f"{name}c"
                src.write_bytes(data)
                py_compile.compile(str(src), str(pyc), doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
                _PYC[(name, data)] = pyc.read_bytes()
        out[f"__pycache__/{name[:-3]}.{sys.implementation.cache_tag}.pyc"] = _PYC[(name, data)]
    return out


def _read_submission(submission):
    """The submission's bytes. It must be a regular file reached without symlinks: as root, a
    submitted symlink (zips can hold them) to the reference would otherwise be graded as the
    student's own code."""
    path = Path(submission)
    if path.is_dir():
        path = path / "paged_kv.py"
    if os.path.realpath(path) != os.path.abspath(path):
        raise ValueError(f"{path}: a submission reached through a symlink is refused")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        source = f.read(SUBMISSION_CAP + 1)
    if len(source) > SUBMISSION_CAP:
        raise ValueError(f"{path} is larger than {SUBMISSION_CAP} bytes")
    return source


def _tool(name):
    found = shutil.which(name, path=_TOOL_PATH)
    if not found:
        raise RuntimeError(f"`{name}` is missing: install util-linux (apt-get install util-linux)")
    return found


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _release(claim, scratch):
    if claim is not None:
        claim.release()
    if scratch is not None:
        _rmtree(scratch)


def _rmtree(path):
    """rmtree that first gives back permissions a submission may have taken away (chmod 000)."""
    def retry(func, p, _exc):
        for target in (os.path.dirname(p), p):
            try:
                os.chmod(target, 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
        func(p)
    try:
        shutil.rmtree(path, onerror=retry)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


class _Worker:
    """A started worker's Popen, reaped with wait4 to keep its rusage: the CPU time of its whole tree
    (every process in it is reaped on the way up: the pid namespace's first process reaps the rest)."""

    def __init__(self, proc):
        self.proc, self.pid, self.cpu = proc, proc.pid, 0.0

    @property
    def returncode(self):
        return self.proc.returncode

    def poll(self):
        if self.proc.returncode is None:
            try:
                pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            except ChildProcessError:             # reaped elsewhere: no rusage, the status still counts
                return self.proc.poll()
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.cpu = usage.ru_utime + usage.ru_stime
        return self.proc.returncode

    def wait(self, timeout=None) -> bool:
        """Whether it has exited, waiting up to `timeout` s (None: as long as it takes)."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.002)
        return True

    def kill(self):
        if self.proc.returncode is None:
            _kill(self.pid)


@dataclass
class _Collected:
    outcome: str              # "exited" | "timeout" | "starved" | "overflow" | "startup_timeout" (no "started")
    started: bool             # wire.STARTED came first: no death before it is the submission's doing
    raw: bytearray            # what followed wire.STARTED: the reply
    returncode: int | None
    stderr: bytes = b""       # its end (STDERR_CAP), for staff
    clock: "_Clock | None" = None


def _collect(fd, err_fd, worker, deadline):
    """Read the reply pipe until EOF (every writer gone) or the worker's exit: until wire.STARTED within
    STARTUP_DEADLINE of the spawn, then as long as its _Clock allows. stderr is read as it comes."""
    buf, err, clock = bytearray(), b"", None
    spawned = time.monotonic()
    limit = spawned + STARTUP_DEADLINE
    poller = select.poll()
    for f in (fd, err_fd):
        poller.register(f, select.POLLIN)

    def late(outcome):
        if clock:
            clock.ended = time.monotonic()
        return _Collected(outcome, clock is not None, buf, worker.returncode, err, clock)
    while True:
        events = poller.poll(max(0.0, min(limit - time.monotonic(), 0.05)) * 1000)
        eof = False
        for f, _event in events:
            chunk = os.read(f, 1 << 20)
            if f == err_fd:
                err = _tail(err + chunk)
                if not chunk:
                    poller.unregister(err_fd)
                continue
            eof = eof or not chunk
            buf += chunk
            if clock is None and len(buf) >= len(wire.STARTED) and buf.startswith(wire.STARTED):
                clock = _Clock(worker.pid, deadline, spawned)
                limit = time.monotonic() + deadline
                del buf[:len(wire.STARTED)]
            if len(buf) > REPLY_CAP:
                return late("overflow")
        if eof or (not events and worker.poll() is not None):
            break
        now = time.monotonic()
        if now >= limit:
            if poller.poll(0) or worker.poll() is not None:
                continue                      # it answered or exited just now: read that first
            verdict = clock.verdict(now) if clock else "startup_timeout"
            if verdict:
                return late(verdict)
            limit = clock.next_check(now)
    # every writer closed the pipe, or the worker exited: it has little left to do (os._exit)
    if not worker.wait(max(limit - time.monotonic(), EXIT_GRACE)):
        return late("timeout" if clock else "startup_timeout")
    return late("exited")


def _tail(data, cap=STDERR_CAP):
    return bytes(data[-cap:])


class _Clock:
    """When a started worker's time is up. Its deadline is wall time, but a machine that gives it no
    CPU must not use up the submission's time: at the deadline, and every quarter deadline after, a
    worker that has used BUSY_CPU of its deadline in CPU is timed out (the submission's: it had its
    CPU), and so is one that ran or waited to run less than BUSY_WAIT of the time since the last look
    and is not runnable now (asleep or blocked: the submission's too); any other was kept from a CPU
    it wanted, and goes on, up to EXTRA_TIME deadlines, when it is the machine's ("starved"). (The
    kernel adds a wait to schedstat only when the wait ends: a worker that got no CPU at all since the
    last look shows none, but is runnable.)"""

    def __init__(self, root, deadline, spawned):
        self.root, self.deadline, self.started = root, deadline, time.monotonic()
        self.looked = (spawned, 0.0)               # the last look: when, CPU and run-queue wait until then
        self.cpu = self.waited = 0.0
        self.ended = self.started                  # when the worker answered, exited or was judged
        self.extended = False                      # whether a look gave it more time

    def next_check(self, now):
        return now + max(0.25, self.deadline / 4)

    @property
    def extra(self):
        """The wall time it was given past its deadline (0 when it never ran past it)."""
        return max(0.0, self.ended - self.started - self.deadline) if self.extended else 0.0

    def verdict(self, now):
        """None (more time), "timeout" (the submission's) or "starved" (the machine's)."""
        self.cpu, self.waited, runnable = _usage(self.root)
        then, wanted_then = self.looked
        self.looked = (now, self.cpu + self.waited)
        idle = self.cpu + self.waited - wanted_then < BUSY_WAIT * (now - then) and not runnable
        if self.cpu >= BUSY_CPU * self.deadline or idle:
            return "timeout"
        if now - self.started >= EXTRA_TIME * self.deadline:
            return "starved"
        self.extended = True
        return None

    def figures(self):
        return f"{self.cpu:.1f} s of CPU, {self.waited:.1f} s waiting for one"


_TICK = os.sysconf("SC_CLK_TCK")


def _usage(root):
    """(CPU seconds, seconds runnable but waiting for a CPU, whether one is runnable now) of the live
    processes under `root`, the CPU of the children they reaped included (/proc/PID/stat: state,
    times; schedstat: run time, run-queue wait)."""
    children = {}
    for p in _procs():
        children.setdefault(p.ppid, []).append(p.pid)
    cpu = wait = 0
    runnable = False
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/schedstat") as f:
                waited = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        cpu += sum(int(x) for x in fields[11:15])       # utime, stime, cutime, cstime
        wait += waited
        runnable = runnable or fields[0] == b"R"
    return cpu / _TICK, wait / 1e9, runnable


def _drain(fd, cap):
    """What is left in the pipe, without blocking (its writers are dead by now)."""
    os.set_blocking(fd, False)
    out = bytearray()
    while len(out) < cap:
        try:
            chunk = os.read(fd, min(1 << 20, cap - len(out)))
        except BlockingIOError:
            break
        if not chunk:
            break
        out += chunk
    return out


class _Proc(NamedTuple):
    pid: int
    ppid: int
    state: str     # "Z": a zombie
    session: int


def _procs():
    """Every process in /proc (of this pid namespace)."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()    # the command name may hold ")"
                yield _Proc(int(name), int(fields[1]), fields[0].decode(), int(fields[3]))
            except (OSError, IndexError, ValueError):
                continue


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_namespace(worker, uid):
    """Kill the pid namespace's first process: the kernel then kills every process in it, and the
    wrapper (unshare) exits only once they are all gone; falls back to the wrapper itself. Then, belt
    and braces, whatever still runs as `uid` in that namespace: provably this sandbox's own."""
    spaces = set()
    if worker.poll() is None:
        init = [p.pid for p in _procs() if p.ppid == worker.pid]
        for pid in init:
            spaces.add(_pid_namespace(pid))
            _kill(pid)
        if not init:
            worker.kill()
        if not worker.wait(2.0):
            worker.kill()
            worker.wait()
    _sweep(uid, spaces - {None, _pid_namespace(os.getpid())})


def _pid_namespace(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _uid_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _sweep(uid, spaces, timeout=2.0):
    """SIGKILL every live process of `uid` in one of the pid namespaces `spaces` (this sandbox's
    workers' own), until none. Never anything else: a process of this uid outside them is not ours
    (claim_uid makes it another grader's bug, not ours to fix by killing)."""
    end = time.monotonic() + timeout
    while spaces:
        victims = [p.pid for p in _procs() if p.state != "Z" and _uid_of(p.pid) == uid
                   and _pid_namespace(p.pid) in spaces]
        if not victims or time.monotonic() > end:
            return
        for pid in victims:
            _kill(pid)
        time.sleep(0.005)


def _become_subreaper():
    """Orphans of the worker (setsid'd grandchildren) get this process as their parent, so they can
    be found and killed. PR_SET_CHILD_SUBREAPER = 36."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _kill_group(worker, token):
    """Not isolated: kill the worker's process group, then every orphan it left, reparented to us."""
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    worker.wait()
    marker, me, my_session = f"CS349E_SANDBOX={token}".encode(), os.getpid(), os.getsid(0)
    with _SPAWN_LOCK:
        for _ in range(1000):
            # live orphans carry the marker in their environment; dead ones (zombies) keep their
            # session, which is never ours (workers start new sessions), unlike other children's
            orphans = [p.pid for p in _procs() if p.ppid == me and p.pid not in _LIVE and
                       (p.session != my_session if p.state == "Z" else _has_env(p.pid, marker))]
            if not orphans:
                return
            for pid in orphans:
                _kill(pid)
            for pid in orphans:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def _has_env(pid, marker):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


# ---------------------------------------------------------------------------------- the verdict

_BUILTIN_EXCEPTIONS = frozenset(name for name, cls in vars(builtins).items()
                                if isinstance(cls, type) and issubclass(cls, BaseException))


@dataclass(frozen=True)
class _Attempt:
    kind: str              # "answer": a verdict (a reply, or the submission's timeout); "died": no reply after
                           # "started" (maybe the submission's doing); "machine": never the submission's
    reply: Reply | None    # "answer" and "died": what the call says if this is its last attempt
    said: str = ""         # what happened, for staff
    stderr: str = ""


def _attempt(got, cpu, deadline, names):
    """What one worker's end says about the call (see _Attempt)."""
    rc, clock = got.returncode, got.clock
    lines = [line.strip() for line in got.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    if rc == 1 and lines and lines[-1] == _UNSHARE_KILLED:      # the namespace's first process got SIGKILL
        rc, lines = -signal.SIGKILL, lines[:-1]
    stderr = _printable(" | ".join(lines)[-STDERR_CAP:], STDERR_CAP)
    if not got.started:
        said = (f"did not start within {STARTUP_DEADLINE:g} s" if got.outcome == "startup_timeout"
                else f"died before it started ({_death(rc)})" if rc else "exited before it started")
        return _Attempt("machine", None, said, stderr)
    more = f"given {clock.extra:.1f} s more as it waited for a CPU" if clock.extra else ""
    if got.outcome == "starved":
        return _Attempt("machine", None, f"no reply within {EXTRA_TIME * deadline:g} s while the machine was "
                                         f"busy ({clock.figures()})", stderr)
    if got.outcome == "timeout":
        return _Attempt("answer", Reply("timeout", error=f"no reply within {deadline:g} s, so the worker was killed"),
                        f"timed out ({clock.figures()})" + (f", {more}" if more else ""), stderr)
    if got.outcome == "overflow":
        return _Attempt("answer", Reply("bad_reply", error=f"reply larger than {REPLY_CAP >> 20} MiB, so the worker "
                                                           f"was killed"), more, stderr)
    if rc in (-signal.SIGXCPU, -signal.SIGKILL) and cpu >= _cpu_limit(deadline):
        return _Attempt("answer", Reply("timeout", error=f"used up its {_cpu_limit(deadline)} s of CPU time, so the "
                                                         f"worker was killed"), f"{_death(rc)} at {cpu:.1f} s of CPU", stderr)
    if rc != 0 or not got.raw:
        error = _death(rc) if rc != 0 else "the worker exited without replying"
        return _Attempt("died", Reply("crashed", data={"returncode": rc}, error=error), f"{error}, after it started",
                        stderr)
    try:
        message = wire.decode(got.raw)
    except wire.WireError as e:
        return _Attempt("answer", Reply("bad_reply", error=f"malformed reply: {e}"), more, stderr)
    reply = _interpret(message, names) or Reply("bad_reply", error="malformed reply: not a worker reply")
    return _Attempt("answer", reply, more and f"answered, {more} ({clock.figures()})", stderr)


_UNSHARE_KILLED = "unshare: sigprocmask unblock failed: Invalid argument"   # util-linux 2.38's unshare, its
# child killed by SIGKILL: it exits 1 saying this, instead of dying of the same signal as for any other one


def _verdict(attempts, retry):
    """The call's Reply once its attempts decide it, else None (call again in a fresh worker). An answer
    decides at once; a death after "started", or the machine's failure, when it happens a second time
    (so at most three attempts); without retry, the first attempt decides."""
    last = attempts[-1]
    if last.kind == "answer":
        return last.reply
    if retry and sum(a.kind == last.kind for a in attempts) < 2:
        return None
    if last.kind == "died":
        return last.reply
    said = "; ".join(dict.fromkeys(a.said for a in attempts if a.kind == "machine"))
    return Reply("grader_error", error=f"the machine failed this call, not the submission: the worker {said}")


def _staff(attempts):
    """Staff's lines on a call: every attempt, when one failed or said something on stderr."""
    if len(attempts) == 1 and not attempts[0].said and not attempts[0].stderr:
        return ()
    return tuple(f"worker {n} of {len(attempts)}: {a.said or a.reply.status}"
                 + (f"; its stderr: {a.stderr}" if a.stderr else "") for n, a in enumerate(attempts, 1))


def _cpu_limit(deadline):
    """The CPU rlimit (soft; the hard one is 1 s more) of a call with this deadline, in seconds."""
    return max(1, int(deadline + 0.999)) + 1


def _death(returncode):
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown signal"
        return f"worker killed by signal {-returncode} ({name})"
    return f"worker exited with status {returncode} without a valid reply"


def _check_call(scenario, inputs):
    if not (isinstance(scenario, str) and scenario.isidentifier()) or scenario.startswith("__"):
        raise ValueError("scenario must be an identifier (and not __import__: see check_import)")
    if type(inputs) is not dict or not all(type(k) is str and k.isidentifier() for k in inputs):
        raise TypeError("inputs must be a dict of keyword arguments")


def _interpret(msg, names):
    """A decoded reply -> Reply, or None when it is not one of the shapes worker.py sends."""
    if type(msg) is not dict or type(msg.get("status")) is not str:
        return None
    status, keys = msg["status"], set(msg)
    if names is None and status == "ok" and keys == {"status", "result"}:
        return Reply("ok", data=msg["result"])
    if names is not None and status == "ok" and keys == {"status", "missing"}:
        missing = msg["missing"]
        if type(missing) is not list or any(m not in names for m in missing):
            return None
        return Reply("ok", data={"missing": list(missing)}, error="missing: " + ", ".join(missing) if missing else "")
    error = msg.get("error")
    if error is not None and (type(error) is not str or error not in _BUILTIN_EXCEPTIONS):
        return None
    if status == "raised" and keys <= {"status", "error", "todo_part"} and "error" in keys:
        todo = msg.get("todo_part")
        if todo is not None and (type(todo) is not int or todo not in _PART_NUMBERS or error != "NotImplementedError"):
            return None
        return Reply("raised", data={"todo_part": todo} if todo else None, error=error)
    if status == "unencodable" and keys == {"status", "error"}:
        return Reply("bad_reply", error=f"the scenario's result cannot cross the sandbox boundary ({error})")
    if status == "no_scenario" and keys == {"status"}:
        return Reply("crashed", error="the worker could not load the scenarios or find this one (grader bug?)")
    if status == "import_error" and error and keys <= {"status", "error", "line", "message", "module"}:
        return _import_error(error, msg.get("line"), msg.get("message"), msg.get("module"), names)
    return None


def _import_error(error, line, message, module, names):
    if line is not None and (type(line) is not int or not 0 < line < 10 ** 7):
        return None
    if message is not None and type(message) is not str:
        return None
    if module is not None and (names is None or type(module) is not str or len(module) > 100
                               or not module.isascii() or not all(p.isidentifier() for p in module.split("."))):
        return None
    text = error + (f" at line {line}" if line else "") + (f": {_printable(message)}" if message else "")
    if module:
        text += f" (module '{module}')"
    return Reply("import_error", data={"line": line, "missing": []}, error=text)


def _printable(text, cap=160):
    """Plain ASCII, no control characters, at most `cap` characters."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:cap])
