"""An interpreter plus numpy that the sandbox's unprivileged uid can actually run.

The project's venv python usually lives somewhere other users cannot reach (pyenv under /root,
mode 0700), and its site-packages also holds pytest, which a submission must not be able to import.
So the sandbox runs `PY -I -S` (no site-packages at all) and the worker puts one folder holding only
numpy on sys.path itself:

- isolated (root): PY is the grader's own interpreter if every user can run it (a Docker image's
  /usr/local/bin/python3.11), else a system python of the same minor version; numpy and numpy.libs
  are copied once per machine into STATE_DIR/runtime-numpy<version>-<cache tag>/, root-owned and
  world-readable, written to a temp dir and renamed into place so two graders cannot collide;
- not isolated: PY is sys.executable and the folder holds symlinks to the venv's numpy.

`check` proves it works by running a smoke program as the sandbox uid, and otherwise names the real
cause and its fix: the launch step that failed (isolation cannot start), a folder on the way that the
sandbox's uid cannot enter, numpy missing from the runtime, or (only then) a missing interpreter.

    python -m grader.runtime [--check]     provision, check, then start a whole sandbox, as root
                                           (what setup.sh runs, so a broken image fails at build time)
"""
from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

STATE_DIR = Path("/var/lib/cs349e-grader")   # root-owned: runtime, scratch, uid locks
# The sandbox hides or replaces these (and the project), so an interpreter there cannot serve it.
UNSUITABLE = ("/home/", "/root/", "/autograder/", "/tmp/", "/var/tmp/", "/dev/shm/",
              str(Path(__file__).resolve().parents[1]) + "/")
UID_BASE, UID_SLOTS = 64100, 1000           # reserved for sandboxes; no /etc/passwd entry needed
_SMOKE = ("import sys; sys.path.insert(0, sys.argv[1]); import numpy as np; "
          "a = np.arange(6.0).reshape(2, 3); assert float((a @ a.T).sum()) == 83.0; "
          "print(np.__version__)")


@dataclass(frozen=True)
class Runtime:
    python: str      # absolute path of the interpreter, run as `python -I -S`
    site: str        # the folder the worker puts on sys.path: numpy (+ numpy.libs) and nothing else


def drop_privileges_argv(uid: int, pdeathsig: bool = True) -> list[str]:
    """setpriv prefix: become uid/gid `uid`, no groups, no capabilities, no way back (no_new_privs).
    The kernel clears the parent-death signal on a uid change, so it is set again here."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", *(["--pdeathsig=KILL"] if pdeathsig else []), "--"]


class UidClaim:
    """A sandbox uid that is this process's alone on the machine, whatever root or container another
    grader runs in, so its sandbox may kill whatever it started as this uid. Two things hold it:
    the lock file (graders that share this root's STATE_DIR) and a holder process running as the
    uid (graders in other roots, which have other lock files: they find the uid in use, see
    claim_uid). release() ends both; so does this process's death (the holder reads EOF)."""

    def __init__(self, uid: int, lock_fd: int, holder: subprocess.Popen):
        self.uid, self._lock_fd, self._holder = uid, lock_fd, holder

    @property
    def pid(self) -> int:
        """The holder's pid: the one process of this uid that is not a sandbox's."""
        return self._holder.pid

    def release(self) -> None:
        if self._holder is not None:
            _stop_holder(self._holder)
            self._holder = None
            os.close(self._lock_fd)


def claim_uid(job: int = 0) -> UidClaim:
    """The first free uid from UID_BASE + job on: one whose lock file no grader holds and that no live
    process of the machine runs as (`_hold`)."""
    locks = secure_dir(state_dir() / "locks", 0o700)
    for k in range(UID_SLOTS):
        uid = UID_BASE + (job + k) % UID_SLOTS
        fd = os.open(locks / f"uid-{uid}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            holder = _hold(uid)
        except BaseException:
            os.close(fd)
            raise
        if holder is not None:
            return UidClaim(uid, fd, holder)
        os.close(fd)
    raise RuntimeError(f"all {UID_SLOTS} sandbox uids are in use")


_HELD = b"held\n"


def _hold(uid: int) -> subprocess.Popen | None:
    """A process running as `uid` until its stdin closes, when no other process of the machine runs as
    `uid`; else None. The kernel decides, not /proc (a grader in another pid namespace cannot see
    ours): it counts the processes of each uid across every pid namespace and root, and with
    RLIMIT_NPROC 0 an exec right after becoming a uid fails (EAGAIN) if that uid already has a
    process. Two claimers that start holders at the same moment can both get through; so each then
    checks, with a limit of 1, that its holder is the uid's only process, and at most one of them
    passes (the later holder exists when the later check runs)."""
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin:/usr/sbin:/sbin") or "prlimit"
    holder = subprocess.Popen([prlimit, "--nproc=0", "--", *drop_privileges_argv(uid, pdeathsig=False),
                               "/bin/sh", "-c", "echo held; read _"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", env={"PATH": "/usr/bin:/bin"})
    ready, _, _ = select.select([holder.stdout], [], [], 60.0)
    if ready and holder.stdout.readline() == _HELD:
        alone = subprocess.run([prlimit, "--nproc=1", "--", *drop_privileges_argv(uid), "/bin/true"],
                               stdin=subprocess.DEVNULL, capture_output=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
        if alone.returncode == 0:
            holder.stdout.close()
            holder.stderr.close()
            return holder
    _stop_holder(holder)
    said = holder.stderr.read().decode("utf-8", "replace").strip() if ready else "no answer in 60 s"
    holder.stderr.close()
    if said and "Resource temporarily unavailable" not in said:        # not "in use": it cannot work at all
        raise RuntimeError(f"cannot run a process as sandbox uid {uid} (`setpriv --reuid={uid} /bin/sh`): {said}")
    return None


def _stop_holder(holder: subprocess.Popen) -> None:
    for pipe in (holder.stdin, holder.stdout):
        if pipe is not None and not pipe.closed:
            pipe.close()
    holder.kill()
    holder.wait()


def _numpy_source() -> tuple[Path, str]:
    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("numpy is not installed for the grader (make .venv/.ready)")
    return Path(spec.submodule_search_locations[0]).resolve(), importlib.metadata.version("numpy")


def _numpy_parts(numpy_dir: Path) -> list[Path]:
    """numpy itself and the shared libraries its wheel ships next to it."""
    parts = [numpy_dir]
    libs = numpy_dir.parent / "numpy.libs"
    if libs.is_dir():
        parts.append(libs)
    return parts


def reachable_by_others(path: str | os.PathLike) -> bool:
    """Whether a user with no special rights can execute `path`: o+x on the file and every folder."""
    p = Path(os.path.realpath(path))
    try:
        if not (p.is_file() and p.stat().st_mode & stat.S_IXOTH):
            return False
        return all(d.stat().st_mode & stat.S_IXOTH for d in p.parents)
    except OSError:
        return False


def _cache_tag(python: str) -> str | None:
    try:
        out = subprocess.run([python, "-I", "-S", "-c", "import sys; print(sys.implementation.cache_tag)"],
                             capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def closed_folder(path: str | os.PathLike) -> str | None:
    """The first folder, from / down, on the way to `path` (or `path` itself if a folder) that other
    users cannot enter (no o+x): a 0700 root folder, as an unpacked tarball or mktemp -d leaves it.
    None when every existing one is open."""
    p = Path(os.path.realpath(path))
    for d in [*reversed(p.parents), p]:
        try:
            st = d.stat()
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        if not st.st_mode & stat.S_IXOTH:
            return str(d)
    return None


def _mode(path: str) -> str:
    try:
        return f"{stat.S_IMODE(os.stat(path).st_mode):04o}"
    except OSError:
        return "unknown"


def _closed_fix(path: str, closed: str) -> str:
    return (f"the sandbox's unprivileged uid cannot enter {closed} (mode {_mode(closed)}), which lies on the "
            f"way to {path}. Fix: chmod o+x {closed} (as root); every folder from / down must let other "
            f"users pass (an unpacked tarball or mktemp -d leaves its folder 0700)")


def _candidates() -> list[str]:
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return [sys.executable, f"/usr/local/bin/{minor}", f"/usr/bin/{minor}"]


def _shared_python() -> str:
    """An interpreter of the grader's own version that every user can run. When none qualifies, an
    installed one that the sandbox's uid cannot reach is named with its fix; only when there is none
    at all does the error say to install one."""
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates, seen, blocked, tried = _candidates(), set(), [], []
    for cand in candidates:
        real = os.path.realpath(cand)
        if real in seen:
            continue
        seen.add(real)
        if not os.path.isfile(real):
            tried.append(f"{cand}: missing")
        elif real.startswith(UNSUITABLE):
            tried.append(f"{real}: in a folder the sandbox hides")
        elif closed_folder(os.path.dirname(real)):
            blocked.append(_closed_fix(real, closed_folder(os.path.dirname(real))))
        elif not os.stat(real).st_mode & stat.S_IXOTH:
            blocked.append(f"{real} is not executable by other users. Fix: chmod o+rx {real}")
        elif _cache_tag(real) != sys.implementation.cache_tag:
            tried.append(f"{real}: not {sys.implementation.cache_tag}")
        else:
            return real
    if blocked:
        raise RuntimeError(f"{minor} is installed but the sandbox cannot run it: {blocked[0]}.")
    raise RuntimeError(
        f"no {minor} interpreter that an unprivileged user can run ({'; '.join(tried)}); "
        f"the grader's numpy wheel needs {sys.implementation.cache_tag}. Install one "
        f"(Debian: apt-get install {minor}) or run the grader's gradescope/setup.sh.")


def secure_dir(path: Path, mode: int) -> Path:
    """Create `path` root-owned with `mode`, or make sure an existing one is exactly that."""
    path.mkdir(mode=mode, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        raise RuntimeError(f"{path} must be a directory owned by root")
    os.chmod(path, mode)
    return path


def state_dir() -> Path:
    return secure_dir(STATE_DIR, 0o755)


def _publish_readonly(tree: Path) -> None:
    """Folders 0755, files 0644 (0755 if executable): readable by all, writable by root only."""
    for root, _dirs, files in os.walk(tree):
        os.chmod(root, 0o755)
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                os.chmod(p, 0o755 if os.stat(p).st_mode & 0o111 else 0o644)


def provision() -> Runtime:
    """The isolated runtime (root only). Idempotent; concurrent callers agree on one folder."""
    if os.geteuid() != 0:
        raise RuntimeError("provisioning the sandbox runtime needs root")
    python = _shared_python()
    numpy_dir, version = _numpy_source()
    final = state_dir() / f"runtime-numpy{version}-{sys.implementation.cache_tag}"
    if not final.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=".runtime-", dir=STATE_DIR))
        try:
            for part in _numpy_parts(numpy_dir):
                shutil.copytree(part, tmp / part.name, symlinks=False)
            _publish_readonly(tmp)
            os.rename(tmp, final)          # atomic; fails if another grader got there first
        except OSError:
            if not final.is_dir():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Runtime(python=python, site=str(final))


def for_this_user(folder: str | os.PathLike) -> Runtime:
    """The non-isolated runtime: this interpreter, and `folder` holding links to this numpy only."""
    numpy_dir, _ = _numpy_source()
    site = Path(folder)
    site.mkdir(mode=0o700, exist_ok=True)
    for part in _numpy_parts(numpy_dir):
        link = site / part.name
        if not link.is_symlink():
            link.symlink_to(part, target_is_directory=True)
    return Runtime(python=sys.executable, site=str(site))


def check(rt: Runtime, prefix: list[str] | None = None, *, cwd: str = "/") -> None:
    """Run the smoke program under `prefix` (default: as a free sandbox uid when root, else as this
    user); RuntimeError naming the real cause and its fix if it fails (see diagnose)."""
    if prefix is None and os.geteuid() == 0:
        claim = claim_uid()
        try:
            return check(rt, drop_privileges_argv(claim.uid), cwd=cwd)
        finally:
            claim.release()
    _, version = _numpy_source()
    argv = [*(prefix or []), rt.python, "-I", "-S", "-c", _SMOKE, rt.site]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd,
                             env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1"})
        if out.returncode == 0 and out.stdout.strip() == version:
            return
        stderr = out.stderr
        detail = (stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired) as e:
        stderr, detail = "", f"{type(e).__name__}: {e}"
    raise RuntimeError(diagnose(rt, list(prefix or []), stderr, detail, version))


# Tools of the sandbox's launch chain (sandbox.Sandbox._prefix): util-linux's message format is
# "tool: message"; the launch script's shell says "sh: LINE: ...".
_LAUNCH_LINE = re.compile(r"^(?:\S*/)?(prlimit|setpriv|unshare|mount|umount|chroot|mkdir|chmod|ln|sh)(?::| \d+:)")


def _failed_command(tool: str, prefix: list[str]) -> str:
    """The failing tool's own argv from the prefix (its last occurrence: the one nearest the
    interpreter), up to its `--`; or where it ran, when it ran inside the launch script."""
    at = [i for i, a in enumerate(prefix) if os.path.basename(a) == tool]
    if not at:
        return f"{tool} (in the sandbox's launch script)"
    args = prefix[at[-1]:]
    end = args.index("--") if "--" in args else len(args)
    return " ".join([tool, *args[1:end]])


def _isolation_fix(message: str) -> str:
    if "propagation" in message:
        return ("The root folder is not a mount point (a plain chroot does that), so no mount namespace can "
                "be made private. Run the grader in a container, whose root is a mount point (Docker, "
                "Gradescope), or bind-mount the root on itself before entering it "
                "(mount --bind ROOT ROOT, then chroot ROOT or pivot_root).")
    if "not permitted" in message or "ermission denied" in message:
        return ("This machine or container refuses root new namespaces or mounts (a container without "
                "CAP_SYS_ADMIN, a seccomp profile, a user namespace). Run the grader as real root: in a "
                "privileged container, a VM, or on Gradescope; or grade only trusted code with --isolate no.")
    if "not found" in message or "No such file" in message:
        return "A tool of the sandbox is missing: apt-get install util-linux coreutils."
    return ("The sandbox needs root, util-linux (prlimit, setpriv, unshare, mount) and permission to make "
            "pid, network, mount and IPC namespaces.")


def diagnose(rt: Runtime, prefix: list[str], stderr: str, detail: str, version: str) -> str:
    """Why `prefix + [rt.python, ...]` could not run numpy, most specific cause first: the interpreter
    is missing; a step of the launch chain failed (the command, its message, the fix); a folder on the
    way to the interpreter or the runtime is closed to the sandbox's uid; else numpy itself."""
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not os.path.isfile(rt.python):
        return (f"the sandbox's interpreter {rt.python} is missing. Install {minor} (Debian: apt-get install "
                f"{minor}) or run the grader's gradescope/setup.sh, as root, then retry.")
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    launch = [line for line in lines if _LAUNCH_LINE.match(line) and not line.startswith("setpriv: failed to execute")]
    if launch:
        tool = _LAUNCH_LINE.match(launch[-1]).group(1)
        return (f"isolation cannot start: `{_failed_command(tool, prefix)}` failed: {launch[-1]}. "
                f"{_isolation_fix(launch[-1])}")
    if prefix:                                           # another uid ran it: can it get there?
        for path in (rt.python, rt.site):
            closed = closed_folder(path if os.path.isdir(path) else os.path.dirname(path))
            if closed:
                return f"the sandbox cannot run `{rt.python} -I -S` ({detail}): {_closed_fix(path, closed)}."
    if detail.startswith("setpriv: failed to execute"):
        return (f"the sandbox could not start its interpreter ({detail}): {rt.python} must exist inside the "
                f"sandbox's new root, outside the folders it hides ({', '.join(UNSUITABLE)}).")
    return (f"the sandbox's interpreter {rt.python} runs, but not numpy {version} from {rt.site} ({detail}). "
            f"Provision the runtime again, as root: python -m grader.runtime (setup.sh does it), then retry.")


def self_check() -> str:
    """What setup.sh runs: provision, check as the sandbox uid, then start a whole sandbox on the
    reference (namespaces, new root, privilege drop) and import it. Returns the protections in force."""
    rt = provision()
    check(rt)
    from grader.sandbox import Sandbox          # here: the sandbox imports this module
    reference = Path(__file__).resolve().parents[1] / "solution" / "paged_kv.py"
    with Sandbox(reference) as box:             # its constructor runs the smoke program through the chain
        reply = box.check_import()
        if reply.status != "ok" or reply.data["missing"]:
            raise RuntimeError(f"the sandbox started but could not import the reference: {reply.error}")
        return f"sandbox ok: {rt.python} + {rt.site}; " + "; ".join(box.protections())


if __name__ == "__main__":              # `--check` (what setup.sh passes) is what it always does
    try:
        print(self_check())
    except RuntimeError as e:
        print(f"grader.runtime: the sandbox cannot run on this machine: {e}", file=sys.stderr)
        sys.exit(1)
