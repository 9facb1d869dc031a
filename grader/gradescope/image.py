"""A fresh Debian root, entered the way a container is (staff only: left out of the autograder zip).

sim.py uses it to try the autograder as Gradescope builds and runs it, and to run the project's own
checks on a bare machine. Everything here needs root.

    base_tree(suite, include)  `debootstrap --variant=minbase`, cached as CACHE/<suite>-minbase*/image
                               (built when missing; delete the folder to rebuild). CACHE is the
                               machine's (/var/cache/cs349e-gsim, or build/gsim/ when that lies on
                               an overlay; CS349E_GSIM_CACHE moves it), not the checkout's: a fresh
                               clone reuses the roots an earlier one built (two suites: a minute of
                               make check). Never changed after.
    Image(suite, include)      a fresh root: the cached tree under an overlay whose upper layer is new
                               (as Docker layers a container on its image), carrying the host's CA
                               certificates, apt sources and fetch settings, pip settings and resolver,
                               so it reaches the package mirrors the host reaches. Files the host writes
                               or reads through Image.path() live in that upper layer: what changed.
    Image.run(argv)            argv inside it, with its own mount, pid, UTS and IPC namespaces (the
                               host's network): the root bind-mounted on itself, so it is a mount point
                               as a container's root is, then made the root with pivot_root; /proc, a
                               minimal /dev and a read-only /sys are mounted. enter="chroot": the same
                               mount point entered with chroot (a chroot refuses user namespaces);
                               enter="plain": chroot alone, so the root is not a mount point.
                               pids="shared": no pid namespace, so the image and the host see each
                               other's processes (a chroot on a grading machine: neighbour.py).
    Image.start(argv)          the same, in the background (a Popen).
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from grader import runtime
from grader.paths import REPO

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
HOST_CA_COPY = "/usr/local/share/ca-certificates/cs349e-host-bundle.crt"   # survives update-ca-certificates
PIP_FILES = ["/etc/pip.conf", "/etc/xdg/pip", str(Path.home() / ".config/pip/pip.conf"), str(Path.home() / ".pip/pip.conf")]
PASSED_ENV = re.compile(r"^(PIP_\w+|https?_proxy|no_proxy|HTTPS?_PROXY|NO_PROXY)$")
DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
NO_OVERLAY_ON = ("overlay", "tmpfs")   # filesystems a fresh root's overlay cannot be layered on
ENTER = ("pivot", "chroot", "plain")   # how Image.run enters the root (see the module's docstring)
PIDS = ("own", "shared")               # a pid namespace of its own, or the host's process table
RESERVED_UIDS = 16          # sandbox uids the image's graders may use (runtime.UID_BASE on)


class ImageError(RuntimeError):
    pass


# ------------------------------------------------------------------------ what the host reaches

def host_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise ImageError("no VERSION_CODENAME in /etc/os-release: not a Debian host")


def _source_files() -> list[Path]:
    d = Path("/etc/apt/sources.list.d")
    files = [Path("/etc/apt/sources.list")] + (sorted(d.iterdir()) if d.is_dir() else [])
    return [f for f in files if f.is_file() and f.suffix in (".list", ".sources")]


def _stanzas(text: str) -> list[str]:
    """deb822 stanzas (blank-line separated), comments kept with their stanza."""
    return [s for s in re.split(r"\n\s*\n", text) if s.strip()]


def _deb822_field(stanza: str, name: str) -> str:
    m = re.search(rf"^{name}:[ \t]*(.*(?:\n[ \t]+.*)*)", stanza, re.M | re.I)
    return " ".join(m.group(1).split()) if m else ""


def apt_entries() -> list[dict]:
    """Each enabled binary entry of the host's apt sources: {uri, suites, signed_by}."""
    out = []
    for f in _source_files():
        text = f.read_text()
        if f.suffix == ".sources":
            for st in _stanzas(text):
                body = "\n".join(l for l in st.splitlines() if not l.lstrip().startswith("#"))
                if "deb" not in _deb822_field(body, "Types").split() or _deb822_field(body, "Enabled") == "no":
                    continue
                for uri in _deb822_field(body, "URIs").split():
                    out.append({"uri": uri, "suites": _deb822_field(body, "Suites").split(),
                                "signed_by": _deb822_field(body, "Signed-By")})
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    opts = re.search(r"signed-by=(\S+?)[\s\]]", m.group(1) or "")
                    out.append({"uri": m.group(2), "suites": [m.group(3)], "signed_by": opts.group(1) if opts else ""})
    return out


def mirror() -> str:
    """The Debian archive the host installs its own release from (what debootstrap fetches from)."""
    codename = host_codename()
    for e in apt_entries():
        if codename in e["suites"]:
            return e["uri"].rstrip("/")
    raise ImageError(f"no apt source of the host serves {codename}: cannot tell which mirror it reaches")


def _sources_for(text: str, suite: str, deb822: bool, image_root: Path) -> str:
    """The host's sources file for `suite` instead of the host's release, keeping only entries whose
    keyring exists in the image (a third-party repository's would make apt-get update fail)."""
    text = re.sub(rf"\b{re.escape(host_codename())}\b", suite, text)

    def verifiable(signed_by):
        return not signed_by or not signed_by.startswith("/") or (image_root / signed_by.lstrip("/")).is_file()
    if deb822:
        keep = [st for st in _stanzas(text) if verifiable(_deb822_field(st, "Signed-By"))]
        return "\n\n".join(keep) + "\n"
    lines = []
    for line in text.splitlines():
        opts = re.search(r"signed-by=(\S+?)[\s\]]", line)
        lines.append(line if verifiable(opts.group(1) if opts else "") else "# (no keyring in the image) " + line)
    return "\n".join(lines) + "\n"


def passed_env() -> dict:
    """The host's pip and proxy settings from the environment (PIP_*, http(s)_proxy, no_proxy)."""
    return {k: v for k, v in os.environ.items() if PASSED_ENV.match(k)}


def reachable(url: str, timeout: float = 15.0) -> str:
    """'' when `url` answers, else why not (for a clear skip)."""
    import ssl
    import urllib.request
    try:
        ctx = ssl.create_default_context(cafile=CA_BUNDLE if os.path.isfile(CA_BUNDLE) else None)
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            r.read(1)
        return ""
    except Exception as e:  # noqa: BLE001  (any failure is a reason to report)
        return f"{url} is not reachable: {type(e).__name__}: {e}"


# ------------------------------------------------------------------------------ the base image

def _key(suite: str, include: tuple) -> str:
    return f"{suite}-minbase" + (("-" + "-".join(sorted(include))) if include else "")


def base_tree(suite: str, include: tuple = (), log=print) -> tuple[Path, float]:
    """(the cached folder whose `image/` is the debootstrapped root, seconds spent building it: 0
    when cached). Built in a temp folder and renamed into place, so a cached one is complete."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / _key(suite, include)
    if (out / "image").is_dir():
        return out, 0.0
    if not shutil.which("debootstrap", path=PATH):
        raise ImageError("debootstrap is missing: apt-get install debootstrap")
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=CACHE))
    try:
        argv = ["debootstrap", "--variant=minbase", f"--keyring={KEYRING}", "--components=main"]
        argv += [f"--include={','.join(include)}"] if include else []
        log(f"building the {suite} root, cached in {out}: {' '.join(argv)} {suite} ROOT MIRROR")
        done = subprocess.run([*argv, suite, str(work / "image"), mirror()], capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ImageError(f"debootstrap {suite} failed (exit {done.returncode}):\n{tail}")
        (work / "built.json").write_text(json.dumps({"suite": suite, "include": list(include),
                                                     "mirror": mirror(), "built": time.time()}) + "\n")
        work.chmod(0o755)
        try:
            os.rename(work, out)
        except OSError:               # another checkout's run built it meanwhile: theirs is complete too
            if not (out / "image").is_dir():
                raise
    finally:
        _remove(work)
    return out, time.monotonic() - start


def fs_type(path: Path) -> str:
    """The filesystem type of the mount holding `path` (its nearest existing folder)."""
    path = Path(path)
    while not path.exists():
        path = path.parent
    real, best, kind = os.path.realpath(path), "", ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point, fstype = fields[4], fields[fields.index("-") + 1]
            if (real + "/").startswith(point.rstrip("/") + "/") and len(point) >= len(best):
                best, kind = point, fstype
    return kind


def _cache() -> Path:
    """Where the base roots (and the fresh ones) live: the machine's, so that a fresh clone reuses the
    roots an earlier checkout built, unless that folder lies where no overlay can be layered (a
    container's own root): then the checkout's build/gsim/, as a bind-mounted checkout usually can."""
    if os.environ.get("CS349E_GSIM_CACHE"):
        return Path(os.environ["CS349E_GSIM_CACHE"])
    machine = Path("/var/cache/cs349e-gsim")
    return REPO / "build" / "gsim" if fs_type(machine) in NO_OVERLAY_ON else machine


CACHE = _cache()


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if (p + "/").startswith(prefix)]


def _remove(path: Path) -> None:
    """rm -r, refusing when something is mounted inside (it would delete through the mount)."""
    if not path.exists():
        return
    mounted = _mounts_under(path)
    if mounted:
        raise ImageError(f"not removing {path}: still mounted inside: {', '.join(mounted)}")
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


# ------------------------------------------------------------------------------ a fresh root

def reserve_uids(n: int = RESERVED_UIDS, wait: float = 900.0, log=print) -> list[int]:
    """Hold the host's locks on the first n sandbox uids (lock fds, to close when done). The image
    has its own lock folder; its graders take no uid a live process runs as (runtime.claim_uid), but
    a grader older than that rule on the host (another checkout) takes any uid its own locks leave
    and kills whatever runs as it. Held here, such graders take other uids meanwhile. Waits for each
    lock (a host grader holds one for one grading)."""
    locks = runtime.secure_dir(runtime.state_dir() / "locks", 0o700)
    fds, end = [], time.monotonic() + wait
    try:
        for uid in range(runtime.UID_BASE, runtime.UID_BASE + n):
            fd = os.open(locks / f"uid-{uid}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fds.append(fd)
            said = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > end:
                        raise ImageError(f"sandbox uid {uid} stayed in use on this machine for {wait:.0f} s")
                    if not said:
                        log(f"waiting for this machine's graders to release sandbox uid {uid}")
                        said = True
                    time.sleep(0.2)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


class Image:
    """A fresh root of `suite` (plus `include` packages) under CACHE/roots/, removed on close.
    hold_host_uids: hold the host's locks on RESERVED_UIDS sandbox uids while it lives (reserve_uids)."""

    def __init__(self, suite: str, include: tuple = (), log=print, hold_host_uids: bool = True):
        if os.geteuid() != 0:
            raise ImageError("a fresh root needs root (debootstrap, mounts, namespaces)")
        self.suite, self.log, self._uid_locks = suite, log, []
        self.lower, self.build_seconds = base_tree(suite, tuple(include), log)
        roots = CACHE / "roots"
        roots.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{suite}-", dir=roots))
        try:
            for d in ("upper/image", "work", "merged"):
                (self.dir / d).mkdir(parents=True)
            self.root_mode = 0o755                  # as a container's root
            self._carry_host_settings()
            if hold_host_uids:
                self._uid_locks = reserve_uids(log=log)
        except BaseException:
            self.close()
            raise

    def path(self, inside: str) -> Path:
        """The host path of `inside` (absolute, in the image) in the upper layer: where the host
        writes into the image, and where whatever the image created or changed is found."""
        return self.dir / "upper" / "image" / inside.lstrip("/")

    def in_base(self, inside: str) -> Path:
        return self.lower / "image" / inside.lstrip("/")

    def _copy_in(self, src: str, dest: str | None = None) -> None:
        target = self.path(dest or src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.isdir(src):
            shutil.copytree(src, target, dirs_exist_ok=True)
        else:
            shutil.copy2(src, target)

    def _carry_host_settings(self) -> None:
        """CA certificates, apt sources (for this suite) and fetch settings, pip settings, resolver."""
        if os.path.isfile(CA_BUNDLE):
            self._copy_in(CA_BUNDLE)
            self._copy_in(CA_BUNDLE, HOST_CA_COPY)
        if os.path.isdir("/usr/local/share/ca-certificates"):
            self._copy_in("/usr/local/share/ca-certificates")
        self.path("/etc/apt/sources.list").parent.mkdir(parents=True, exist_ok=True)
        self.path("/etc/apt/sources.list").write_text("# the host's sources are in sources.list.d\n")
        for f in _source_files():
            text = _sources_for(f.read_text(), self.suite, f.suffix == ".sources", self.lower / "image")
            self.path(str(f)).parent.mkdir(parents=True, exist_ok=True)
            self.path(str(f)).write_text(text)
        conf = [Path("/etc/apt/apt.conf")] + sorted(Path("/etc/apt/apt.conf.d").glob("*"))
        for f in conf:
            if f.is_file() and re.search(r"acquire", f.read_text(errors="replace"), re.I):
                self._copy_in(str(f))
        for f in PIP_FILES:
            if os.path.exists(f):
                dest = f.replace(str(Path.home()), "/root", 1) if f.startswith(str(Path.home())) else f
                self._copy_in(f, dest)
        for f in ("/etc/resolv.conf", "/etc/hosts"):
            if os.path.isfile(f):
                self._copy_in(os.path.realpath(f), f)

    def _script(self, enter: str) -> str:
        """The host side: the overlay, then the root, its mounts, and the way in."""
        d = shlex.quote(str(self.dir))
        r = f"{d}/merged/image"
        lines = ["set -e",
                 f"mount -t overlay -o lowerdir={shlex.quote(str(self.lower))},upperdir={d}/upper,workdir={d}/work "
                 f"gsim-overlay {d}/merged",
                 f"chmod {self.root_mode:04o} {r}"]
        if enter not in ENTER:
            raise ValueError(f"enter must be one of {ENTER}")
        if enter != "plain":
            lines.append(f"mount --bind {r} {r}")                     # a mount point, as a container's root
        lines += [f"mount -t proc -o nosuid,nodev,noexec proc {r}/proc",
                  f"mount -t sysfs -o ro,nosuid,nodev,noexec sysfs {r}/sys",
                  f"mount -t tmpfs -o nosuid,mode=0755,size=1m gsim-dev {r}/dev"]
        for n in DEV_NODES:
            lines += [f": > {r}/dev/{n}", f"mount --bind /dev/{n} {r}/dev/{n}"]
        lines += [f"mkdir {r}/dev/pts {r}/dev/shm",
                  f"mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts {r}/dev/pts",
                  f"ln -s pts/ptmx {r}/dev/ptmx",
                  f"mount -t tmpfs -o nosuid,nodev,mode=1777 gsim-shm {r}/dev/shm",
                  f"ln -s /proc/self/fd {r}/dev/fd"]
        lines += [f"ln -s /proc/self/fd/{i} {r}/dev/{name}" for i, name in enumerate(("stdin", "stdout", "stderr"))]
        if enter == "pivot":
            lines += [f"cd {r}", "mkdir -p .gsim-host", f"{shutil.which('pivot_root', path=PATH)} . .gsim-host",
                      "cd /", "umount -l /.gsim-host", "rmdir /.gsim-host", 'exec /usr/bin/env -i "$@"']
        else:
            lines.append(f'exec {shutil.which("chroot", path=PATH)} {r} /usr/bin/env -i "$@"')
        return "\n".join(lines)

    def _argv(self, argv, env, cwd, enter, pids):
        if pids not in PIDS:
            raise ValueError(f"pids must be one of {PIDS}")
        full_env = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **passed_env(), **(env or {})}
        inner = [*(f"{k}={v}" for k, v in full_env.items()), "/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd, *argv]
        namespaces = ["--mount", *(["--pid"] if pids == "own" else []), "--uts", "--ipc"]
        return ["unshare", *namespaces, "--fork", "--kill-child", "--",
                "/bin/sh", "-c", self._script(enter), "gsim", *inner]

    def run(self, argv, *, env=None, cwd="/", enter="pivot", pids="own", timeout=None, stdout=None, stderr=None):
        """Run argv in the image as root (a CompletedProcess; output captured unless stdout/stderr are
        given). env: on top of PATH, HOME, LANG and the host's pip and proxy settings."""
        capture = stdout is None and stderr is None
        return subprocess.run(self._argv(argv, env, cwd, enter, pids), capture_output=capture, stdout=stdout,
                              stderr=stderr, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, argv, *, env=None, cwd="/", enter="pivot", pids="own", stdout=None, stderr=None):
        """Image.run in the background: the Popen. With pids="own", killing it kills everything it started
        in the image; with "shared", the caller must stop what it started (Image.processes)."""
        return subprocess.Popen(self._argv(argv, env, cwd, enter, pids), stdout=stdout, stderr=stderr, text=True,
                                stdin=subprocess.DEVNULL)

    def processes(self) -> list[int]:
        """The pids of every process whose root is this image (what a shared process table leaves)."""
        inside, found = str(self.dir.resolve()) + "/", []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                if (os.readlink(f"/proc/{name}/root").rstrip("/") + "/").startswith(inside):
                    found.append(int(name))
            except OSError:
                continue
        return found

    def close(self) -> None:
        for fd in self._uid_locks:
            os.close(fd)
        self._uid_locks = []
        _remove(self.dir)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
