"""make gradescope-sim: the autograder built and run as Gradescope does, in fresh Debian roots (staff only).

    python -m grader.gradescope.sim [--suite bookworm --suite bullseye] [--zip build/autograder.zip]
    python -m grader.gradescope.sim --why-not      why it cannot run here (nothing when it can)
    python -m grader.gradescope.sim checks [--enter pivot|chroot] [CMD]
                                                   the project's own checks (default: make check's
                                                   non-slow part) in a bare bookworm root with only
                                                   make, python3, python3-venv and git

Per suite, in a fresh root (image.py: debootstrap minbase, cached under /var/cache/cs349e-gsim/; the
root a mount point, as a container's): the zip unpacked into /autograder/source and run_autograder
copied to /autograder/run_autograder, `bash setup.sh` run there as root (timed), then run_autograder
once per submission (timed): the reference (full marks), the starter (0), a syntax error (0, and the
line is named), and a hostile one that forges results.json and reads /autograder/source (graded as its
honest base, 0; results.json, the sources and the image outside its sandbox untouched). Every
results.json is checked against Gradescope's documented format (spec.py). Then the two images the issue
met, for their diagnosis: the same root entered with a plain chroot (not a mount point), and with its
root folder 0700.

A suite's setup.sh either makes grading work or stops with one message naming the base image to
choose; a setup that fails otherwise, or grading that fails after a setup that passed, fails the run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grader import rubric
from grader.gradescope import image, spec
from grader.paths import REPO
from grader.selftest import hostile

VENV_PYTHON = "/opt/cs349e-venv/bin/python"          # what setup.sh makes
GRADE_TIMEOUT = 900.0
SETUP_TIMEOUT = 1800.0
STOP_MESSAGE = ("setup.sh:", "base image")             # the one line a refused image must print
METADATA = {"id": 1, "created_at": "2025-01-01T00:00:00Z", "users": [{"id": 4242, "email": "student@example.edu",
            "name": "Sim Student"}], "assignment": {"id": 7, "title": "PagedAttention", "total_points": 100.0}}


def log(*parts):
    print("[gsim]", *parts, flush=True)


# ----------------------------------------------------------------------------- the submissions

@dataclass
class Submission:
    name: str
    text: str
    score: float              # the score it must get
    says: tuple = ()          # strings its student-visible text must contain
    hostile: bool = False


def _pip_index() -> str:
    """The index pip uses here: PIP_INDEX_URL, pip's configured index-url, else pip's own default."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".index-url"):
            return value.strip().strip("'\"")
    from pip._internal.models.index import PyPI    # pip's default, named by pip itself
    return PyPI.simple_url


def submissions() -> list[Submission]:
    reference = (REPO / "solution" / "paged_kv.py").read_text()
    broken_line = reference.count("\n") + 1
    forge, steal = hostile.BY_NAME["forge_results_files"], hostile.BY_NAME["steal_reference"]
    attack = hostile.Hostile("gsim_forge_and_steal", "forge results.json and read /autograder/source, import "
                             "the reference found there", "stubs", forge.code + "\n" + steal.code)
    return [Submission("reference", reference, float(rubric.TOTAL + rubric.BONUS_TOTAL)),
            Submission("starter", (REPO / "starter" / "paged_kv.py").read_text(), 0.0),
            Submission("syntax_error", reference + "def broken(:\n", 0.0, ("SyntaxError", f"line {broken_line}")),
            Submission("hostile", hostile.build(attack), 0.0, hostile=True)]


# ----------------------------------------------------------------------------- one suite

@dataclass
class Outcome:
    suite: str
    ok: bool = True
    notes: list = field(default_factory=list)
    times: dict = field(default_factory=dict)

    def fail(self, what):
        self.ok = False
        self.notes.append("FAIL " + what)
        log(f"{self.suite}: FAIL {what}")

    def note(self, what):
        self.notes.append(what)
        log(f"{self.suite}: {what}")


def _unpack(im: image.Image, zip_path: Path) -> None:
    """As Gradescope builds the image: the zip's contents in /autograder/source (modes kept),
    run_autograder copied to /autograder/run_autograder."""
    source = im.path("/autograder/source")
    source.mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        for info in z.infolist():
            target = source / info.filename
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode or 0o644)
    shutil.copy2(source / "run_autograder", im.path("/autograder/run_autograder"))


def _tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _student_text(results: dict) -> str:
    tests = results.get("tests") if type(results.get("tests")) is list else []
    return "\n".join([str(results.get("output", ""))] + [str(t.get("output", "")) + str(t.get("name", ""))
                                                         for t in tests if type(t) is dict])


def _markers(im: image.Image) -> list[str]:
    """Files a hostile submission left anywhere in the image (the upper layer holds every change)."""
    top = im.path("/")
    return [str(p.relative_to(top)) for p in top.rglob("*") if p.name.startswith(hostile.MARKER_PREFIX)
            or (p.is_file() and p.suffix in (".json", ".py", ".txt") and p.stat().st_size < 1 << 20
                and hostile.TOKEN.encode() in p.read_bytes() and "submission" not in p.parts)]


def grade_one(im: image.Image, sub: Submission, out: Outcome) -> None:
    subdir, results_dir = im.path("/autograder/submission"), im.path("/autograder/results")
    for d in (subdir, results_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    results_dir.chmod(0o700)
    (subdir / "paged_kv.py").write_text(sub.text)
    im.path("/autograder/submission_metadata.json").write_text(json.dumps(METADATA))
    source_before = _tree_hash(im.path("/autograder/source"))
    start = time.monotonic()
    done = im.run(["/autograder/run_autograder"], cwd="/autograder", timeout=GRADE_TIMEOUT)
    seconds = time.monotonic() - start
    out.times[sub.name] = seconds
    (results_dir / "stdout").write_text(done.stdout + done.stderr)      # as Gradescope's harness keeps it
    path = results_dir / "results.json"
    if done.returncode != 0 or not path.is_file():
        tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        return out.fail(f"{sub.name}: run_autograder exited {done.returncode}, results.json "
                        f"{'written' if path.is_file() else 'missing'} in {seconds:.1f} s:\n    {tail}")
    text = path.read_text()
    try:
        results = spec.load(text)
    except ValueError as e:
        return out.fail(f"{sub.name}: results.json is not strict JSON: {e}")
    bad = spec.problems(results)
    if bad:
        out.fail(f"{sub.name}: results.json breaks Gradescope's format: {'; '.join(bad)}")
    extra = spec.undocumented(results)
    score = results.get("score")
    if score != sub.score:
        out.fail(f"{sub.name}: score {score}, expected {sub.score}")
    visible = _student_text(results)
    for s in sub.says:
        if s not in visible:
            out.fail(f"{sub.name}: the student-visible text does not say {s!r}")
    if sub.hostile:
        time.sleep(2.0)                                   # anything left running had time to act
        if path.read_text() != text or hostile.TOKEN in text:
            out.fail("hostile: results.json was changed or forged")
        if _tree_hash(im.path("/autograder/source")) != source_before:
            out.fail("hostile: /autograder/source changed")
        left = _markers(im)
        if left:
            out.fail(f"hostile: it left files outside its sandbox: {', '.join(left[:5])}")
        _control(im, out)
    out.note(f"{sub.name}: {score}/{results.get('max_score', '?')} in {seconds:.1f} s, results.json "
             f"{'valid' if not bad else 'INVALID'}" + (f" (undocumented keys: {', '.join(extra)})" if extra else ""))


def _control(im: image.Image, out: Outcome) -> None:
    """The hostile submission graded with isolation off must do better than its honest 0 (it finds the
    reference in /autograder/source): the attack works, so the 0 above is the sandbox's doing."""
    done = im.run([VENV_PYTHON, "-m", "grader", "/autograder/submission", "--results", "/tmp/control.json",
                   "--secret-file", "/autograder/source/course_secret",        # as run_autograder passes it
                   "--isolate", "no", "--quiet"], cwd="/autograder/source", timeout=GRADE_TIMEOUT)
    path = im.path("/tmp/control.json")
    score = spec.load(path.read_text()).get("score") if path.is_file() else None
    if done.returncode != 0 or not isinstance(score, (int, float)) or score <= 0:
        out.fail(f"hostile control: with isolation off it scored {score} (exit {done.returncode}): the attack "
                 f"did not work, so its 0 proves nothing")
    else:
        out.note(f"hostile control: the same file graded with --isolate no scores {score} (it read the "
                 f"reference in /autograder/source), so its 0 above is containment")


def diagnoses(im: image.Image, out: Outcome) -> None:
    """The issue's two broken images, with the grader already set up: each check must name its cause."""
    check = [VENV_PYTHON, "-m", "grader.runtime", "--check"]
    cases = [("plain chroot (root not a mount point)", {"enter": "plain"}, 0o755,
              ("cannot change root filesystem propagation", "mount --bind")),
             ("root folder 0700", {}, 0o700, ("cannot enter / (mode 0700)", "chmod o+x /"))]
    for what, how, mode, says in cases:
        im.root_mode = mode
        try:
            done = im.run(check, cwd="/autograder/source", timeout=300, **how)
        finally:
            im.root_mode = 0o755
        message = (done.stderr.strip().splitlines() or [""])[-1]
        if done.returncode == 0 or not all(s in message for s in says):
            out.fail(f"diagnosis, {what}: expected {says}, got exit {done.returncode}: {message or done.stdout[-300:]}")
        else:
            out.note(f"diagnosis, {what}: {message}")


def base_trees(suites) -> dict:
    """{suite: seconds its base root took to build (0: cached)}, all built at once: debootstrap waits
    on the mirror, and the suites' gradings then run one after another (they hold the host's uids)."""
    with ThreadPoolExecutor(max(1, len(suites))) as pool:
        return dict(zip(suites, pool.map(lambda s: image.base_tree(s, (), log)[1], suites)))


def run_suite(suite: str, zip_path: Path, built: float = 0.0) -> Outcome:
    out = Outcome(suite)
    start = time.monotonic()
    with image.Image(suite, log=log) as im:
        built = built or im.build_seconds
        out.times["base build"] = built
        _unpack(im, zip_path)
        out.times["fresh root"] = time.monotonic() - start - im.build_seconds
        log(f"{suite}: base root {'built in %.1f s' % built if built else 'cached'}; "
            f"running setup.sh")
        t = time.monotonic()
        done = im.run(["bash", "./setup.sh"], cwd="/autograder/source", timeout=SETUP_TIMEOUT)
        out.times["setup.sh"] = time.monotonic() - t
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        if done.returncode != 0:
            last = errors[-1] if errors else f"exit {done.returncode}"
            if all(s in last for s in STOP_MESSAGE) and errors == [last]:
                out.note(f"setup.sh stopped at build time in {out.times['setup.sh']:.1f} s, as it must on this "
                         f"image: {last}")
            else:
                tail = "\n    ".join((done.stdout + done.stderr).strip().splitlines()[-12:])
                out.fail(f"setup.sh failed (exit {done.returncode}) without one message naming a base image:\n    {tail}")
            return out
        said = (done.stdout.strip().splitlines() or [""])[-1]
        out.note(f"setup.sh ok in {out.times['setup.sh']:.1f} s: {said[:160]}")
        for sub in submissions():
            grade_one(im, sub, out)
        diagnoses(im, out)
    return out


# ----------------------------------------------------------------------------- can it run here?

def why_not(suites) -> str:
    """'' when the simulation can run on this machine, else why not (what a skipped check prints).
    Installs debootstrap with apt when it is missing and installable."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, mounts, namespaces)"
    for tool in ("unshare", "mount", "pivot_root", "chroot", "tar"):
        if not shutil.which(tool, path=image.PATH):
            return f"`{tool}` is missing (apt-get install util-linux coreutils)"
    try:
        mirror = image.mirror()
    except (OSError, image.ImageError) as e:
        return f"cannot tell which Debian mirror this machine reaches: {e}"
    for suite in suites:
        reason = image.reachable(f"{mirror}/dists/{suite}/Release")
        if reason:
            return f"the Debian mirror is not reachable: {reason}"
    reason = image.reachable(_pip_index().rstrip("/") + "/numpy/")
    if reason:
        return f"the Python package index is not reachable: {reason}"
    if not shutil.which("debootstrap", path=image.PATH):
        log("debootstrap is missing: apt-get install debootstrap")
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)
        done = subprocess.run(["apt-get", "install", "-y", "-q", "debootstrap"], capture_output=True, text=True,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if done.returncode != 0 or not shutil.which("debootstrap", path=image.PATH):
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            return f"debootstrap is missing and apt-get could not install it: {last}"
    where = image.fs_type(image.CACHE)
    if where in image.NO_OVERLAY_ON:
        return (f"{image.CACHE} lies on {where} (this machine is itself a container or a simulated image): "
                f"a fresh root cannot be layered on it")
    if "overlay" not in Path("/proc/filesystems").read_text():
        subprocess.run(["modprobe", "overlay"], capture_output=True)
        if "overlay" not in Path("/proc/filesystems").read_text():
            return "the kernel has no overlay filesystem (a fresh root is an overlay on the cached one)"
    return ""


# ----------------------------------------------------------------------------- the project's checks

CHECKS_PACKAGES = ("make", "python3", "python3-venv", "git")
CHECKS_CMD = 'make .venv/.ready && .venv/bin/python -m pytest checks -q -m "not slow"'


def run_checks(suite: str, command: str, enter: str) -> int:
    """Clone this checkout's HEAD into a bare root with only CHECKS_PACKAGES, shared/ beside it as
    ../shared, and run `command` there as root (default: make check's non-slow part), the root
    entered as `enter` says (image.ENTER)."""
    with image.Image(suite, CHECKS_PACKAGES, log=log) as im:
        work = im.path("/work")
        work.mkdir(parents=True)
        subprocess.run(["git", "clone", "-q", str(REPO), str(work / "cs349e")], check=True)
        shared = REPO.parent / "shared"
        if shared.is_dir():
            shutil.copytree(shared, work / "shared", symlinks=True)
        head = subprocess.run(["git", "-C", str(work / "cs349e"), "log", "-1", "--format=%h %s"],
                              capture_output=True, text=True).stdout.strip()
        log(f"{suite}: bare root with {', '.join(CHECKS_PACKAGES)}, entered by {enter}; {REPO} cloned to "
            f"/work/cs349e at {head[:80]}, shared/ beside it; running: {command}")
        start = time.monotonic()
        done = im.run(["sh", "-c", command], cwd="/work/cs349e", enter=enter, stderr=subprocess.STDOUT,
                      timeout=3600)
        log(f"{suite}: exit {done.returncode} in {time.monotonic() - start:.1f} s")
        return done.returncode


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m grader.gradescope.sim", description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="gradescope", choices=("gradescope", "checks"))
    ap.add_argument("command", nargs="?", default=CHECKS_CMD, help="for `checks`: what to run in the clone")
    ap.add_argument("--suite", action="append", help="Debian release(s) (default: bookworm and bullseye; "
                                                     "`checks`: bookworm)")
    ap.add_argument("--zip", default=str(REPO / "build" / "autograder.zip"))
    ap.add_argument("--why-not", action="store_true", help="print why it cannot run here, and exit")
    ap.add_argument("--enter", choices=image.ENTER, default="pivot",
                    help="`checks`: pivot (as a container), chroot (a mount point entered with chroot)")
    args = ap.parse_intermixed_args(argv)
    suites = args.suite or (["bookworm"] if args.what == "checks" else ["bookworm", "bullseye"])
    reason = why_not(suites)
    if args.why_not:
        print(reason)
        return 0
    if reason:
        log(f"cannot run here: {reason}")
        return 2
    if args.what == "checks":
        return run_checks(suites[0], args.command, args.enter)
    zip_path = Path(args.zip)
    if not zip_path.is_file():
        log(f"{zip_path} is missing: make autograder")
        return 2
    built = base_trees(suites)
    outcomes = [run_suite(suite, zip_path, built[suite]) for suite in suites]
    log("summary (seconds):")
    for o in outcomes:
        times = ", ".join(f"{k} {v:.1f}" for k, v in o.times.items())
        log(f"  {o.suite}: {'PASS' if o.ok else 'FAIL'}: {times}")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
