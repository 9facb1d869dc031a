"""Two graders on one machine (staff only): the reference graded here while a second grader grades it
in a chroot that shares this machine's process table (issue 14, item 5).

    python -m grader.gradescope.neighbour [--gradings 20] [--suite bookworm] [--zip build/gradescope-sim/autograder.zip]

The neighbour is a fresh Debian root (image.py) with the autograder set up in it as Gradescope does
(sim.py: the zip in /autograder/source, setup.sh), entered with chroot and no pid namespace of its
own: each side sees the other's processes, and each has its own /var/lib/cs349e-grader, so neither
sees the other's uid locks (and the image holds none of the host's: image.reserve_uids is off).
Graders of an older version running on this machine meanwhile (another checkout) still kill what
runs as the uids they take: for a clean figure, run it where no other grader runs. The neighbour runs run_autograder on the reference in a loop while this
machine grades the reference --gradings times with `python -m grader` (what `make grade` runs).
Every score of both sides is printed; the exit status is 0 only when every grading on either side
finished with full marks.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader import coursesecret, rubric
from grader.gradescope import build, image, sim
from grader.paths import REPO

FULL = float(rubric.TOTAL + rubric.BONUS_TOTAL)
STOP = "/dev/shm/neighbour-stop"      # a tmpfs of the image's own: the host writes it through /proc/PID/root
LOOP = """n=0
while [ ! -e %s ]; do
  n=$((n + 1))
  rm -f /autograder/results/results.json
  /autograder/run_autograder > /autograder/neighbour-$n.log 2>&1
  code=$?
  score=$(%s -c 'import json; print(json.load(open("/autograder/results/results.json"))["score"])' 2>/dev/null)
  echo "$n $code ${score:-none}" >> /autograder/neighbour-scores.txt
done
""" % (STOP, sim.VENV_PYTHON)


def log(*parts):
    print("[neighbour]", *parts, flush=True)


def _host_grading(n: int, folder: Path) -> tuple[int, float | None, float]:
    """(exit status, score or None, seconds) of one `python -m grader` on the reference here."""
    out = folder / f"host-{n}.json"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "grader", str(REPO / "solution" / "paged_kv.py"), "--results",
                           str(out), "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=sim.GRADE_TIMEOUT)
    seconds = time.monotonic() - start
    score = json.loads(out.read_text()).get("score") if out.is_file() else None
    if done.returncode != 0 or score != FULL:
        log(f"  host grading {n}: stderr: {done.stderr.strip()[-400:]}")
    return done.returncode, score, seconds


def _neighbour_scores(im: image.Image) -> list[tuple[int, int, float | None]]:
    path = im.path("/autograder/neighbour-scores.txt")
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        n, code, score = line.split()
        rows.append((int(n), int(code), None if score == "none" else float(score)))
    return rows


def _stop(im: image.Image, loop: subprocess.Popen, wait: float) -> None:
    """Let the neighbour finish the grading in flight, then kill whatever is left of it. The stop file
    is written through a process of the image: the overlay it runs on is mounted (files written
    under Image.path() while it is are not seen inside)."""
    for pid in im.processes():
        try:
            Path(f"/proc/{pid}/root{STOP}").write_text("")
            break
        except OSError:
            continue
    try:
        loop.wait(wait)
    except subprocess.TimeoutExpired:
        log(f"the neighbour did not stop within {wait:.0f} s: killing it")
    for _ in range(50):
        left = im.processes()
        if not left and loop.poll() is not None:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        loop.kill()
        time.sleep(0.1)
    loop.wait()


def run(gradings: int, suite: str, zip_path: Path) -> int:
    build.build(zip_path, secret=coursesecret.throwaway())         # never the course's secret, nor its zip
    with image.Image(suite, log=log, hold_host_uids=False) as im, \
            tempfile.TemporaryDirectory(prefix="cs349e-neighbour-") as tmp:          # no help: the uid rule alone
        sim._unpack(im, zip_path)
        shared = {"enter": "chroot", "pids": "shared"}
        t = time.monotonic()
        setup = im.run(["bash", "./setup.sh"], cwd="/autograder/source", timeout=sim.SETUP_TIMEOUT, **shared)
        if setup.returncode != 0:
            log(f"setup.sh failed in the neighbour (exit {setup.returncode}):\n{(setup.stdout + setup.stderr)[-3000:]}")
            return 2
        log(f"neighbour ({suite}, chroot, this machine's process table): setup.sh ok in {time.monotonic() - t:.1f} s")
        for d in ("/autograder/submission", "/autograder/results"):
            im.path(d).mkdir(parents=True, exist_ok=True)
        im.path("/autograder/submission/paged_kv.py").write_text((REPO / "solution" / "paged_kv.py").read_text())
        im.path("/autograder/submission_metadata.json").write_text(json.dumps(sim.METADATA))
        im.path("/autograder/neighbour.sh").write_text(LOOP)
        loop = im.start(["sh", "/autograder/neighbour.sh"], cwd="/autograder", stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, **shared)
        host = []
        try:
            time.sleep(2.0)                             # the neighbour's first grading is under way
            for n in range(1, gradings + 1):
                code, score, seconds = _host_grading(n, Path(tmp))
                host.append((code, score))
                log(f"host grading {n:>2}/{gradings}: exit {code}, score {score} in {seconds:.1f} s; neighbour "
                    f"gradings finished so far: {len(_neighbour_scores(im))}")
        finally:
            _stop(im, loop, sim.GRADE_TIMEOUT)
        theirs = _neighbour_scores(im)
        for n, code, score in theirs:
            if code != 0 or score != FULL:
                said = im.path(f"/autograder/neighbour-{n}.log").read_text()[-1500:]
                log(f"neighbour grading {n}: exit {code}, score {score}:\n{said}")
    ok_host = sum(1 for code, score in host if code == 0 and score == FULL)
    ok_theirs = sum(1 for _n, code, score in theirs if code == 0 and score == FULL)
    log(f"host: {ok_host} of {len(host)} gradings scored {FULL:g}: {[s for _c, s in host]}")
    log(f"neighbour: {ok_theirs} of {len(theirs)} gradings scored {FULL:g}: {[s for _n, _c, s in theirs]}")
    return 0 if host and theirs and ok_host == len(host) and ok_theirs == len(theirs) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m grader.gradescope.neighbour", description=__doc__.splitlines()[0])
    ap.add_argument("--gradings", type=int, default=20, help="gradings of the reference on this machine")
    ap.add_argument("--suite", default="bookworm", help="the neighbour's Debian release (needs Python 3.11)")
    ap.add_argument("--zip", default=str(REPO / "build" / "gradescope-sim" / "autograder.zip"),
                    help="built from this checkout, with a throwaway secret")
    args = ap.parse_args(argv)
    reason = sim.why_not([args.suite])
    if reason:
        log(f"cannot run here: {reason}")
        return 2
    return run(args.gradings, args.suite, Path(args.zip))


if __name__ == "__main__":
    sys.exit(main())
