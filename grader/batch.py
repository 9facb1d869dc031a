"""Grade a folder of submissions, N at a time, into a CSV gradebook, and summarise the class.

    python -m grader batch DIR [--jobs N] [--csv PATH] [--isolate auto|yes|no]

A submission is each subfolder, loose .py file and .zip file of DIR (names starting with "." are
skipped). Each is graded by its own `python -m grader` process (a crash or a hostile submission
cannot touch the others' grading), with its own job number so concurrent sandboxes never share a
uid or a folder, and killed with the batch (PR_SET_PDEATHSIG). Seeds: the submission's
submission_metadata.json if it has one, else its name.

Resumable: each result is written atomically, then stamped (in RESULTS/.stamps/) with the hashes of
the submission, of the grader (fingerprint.grader_hash), the seed, whether it was isolated, and of
the results file itself. A run reuses every result whose stamp still matches and grades the rest,
so a batch killed at any moment (even SIGKILL) loses at most the gradings in flight, and the CSV
(written atomically, at the end) always holds every submission.

Progress goes to stdout as one line per graded submission, flushed, so a redirected log shows it as
it happens: done / total, elapsed, an estimate of the time left. At the end: the class summary
(classview.py).
"""
import argparse
import csv
import ctypes
import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grader import classview, paths, report, rubric
from grader.fingerprint import bytes_hash, entry_hash, grader_hash

KINDS = (".py", ".zip")


def submissions(folder):
    """name -> path: every subfolder, loose .py file and .zip file. A name is the entry's name without
    its suffix, unless two entries would share it (alice.py and alice.zip), then the whole name."""
    entries = [e for e in sorted(Path(folder).iterdir()) if not e.name.startswith(".")
               and (e.is_dir() or (e.is_file() and e.suffix.lower() in KINDS))]
    stems = [e.name if e.is_dir() else e.stem for e in entries]
    return {(stem if stems.count(stem) == 1 else e.name): e for stem, e in zip(stems, entries)}


def seed_of(name, path):
    meta = path / "submission_metadata.json" if path.is_dir() else None
    if meta and meta.is_file():
        from grader.grade import seed_for
        return seed_for(meta)
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def isolated(mode):
    return mode == "yes" or (mode == "auto" and os.geteuid() == 0)


def die_with_parent(parent_pid):
    """In a grading child: be SIGKILLed when the batch that started it dies (PR_SET_PDEATHSIG = 1),
    and exit at once if it is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


class Store:
    """The results folder: NAME.json (results.json of a submission) and .stamps/NAME.json."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.stamps = self.folder / ".stamps"
        self.stamps.mkdir(parents=True, exist_ok=True)

    def results_path(self, name):
        return self.folder / f"{name}.json"

    def valid(self, name, stamp):
        """The stored results when they were made from the same submission by the same grader, else None."""
        try:
            saved = json.loads((self.stamps / f"{name}.json").read_text())
            raw = self.results_path(name).read_bytes()
            if type(saved) is not dict or saved.pop("results", None) != bytes_hash(raw) or saved != stamp:
                return None
            results = json.loads(raw)
        except (OSError, ValueError):
            return None
        ok = isinstance(results, dict) and isinstance(results.get("score"), (int, float)) \
            and isinstance(results.get("tests"), list)
        return results if ok else None

    def forget(self, name):
        (self.stamps / f"{name}.json").unlink(missing_ok=True)

    def stamp(self, name, stamp):
        raw = self.results_path(name).read_bytes()
        report.write_atomically(self.stamps / f"{name}.json", {**stamp, "results": bytes_hash(raw)})


def grade_one(name, path, store, job, isolate, seed):
    """(results dict or None, seconds, error text)."""
    store.forget(name)
    results = store.results_path(name)
    cmd = [sys.executable, "-m", "grader", str(path), "--results", str(results), "--quiet", "--seed", str(seed),
           "--job", str(job), "--isolate", isolate, "--parent-pid", str(os.getpid())]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=paths.REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    try:
        data = json.loads(results.read_text()) if proc.returncode == 0 else None
    except (OSError, ValueError):
        data = None
    if data is None:
        return None, seconds, f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"
    return data, seconds, ""


def row_of(name, results, error=""):
    if results is None:
        return {"submission": name, "score": "", "status": f"grader failed: {error}",
                **dict.fromkeys(rubric.ALL_PARTS, "")}
    problem = (results.get("extra_data") or {}).get("not_graded")
    status = f"not graded: {problem.splitlines()[0][:200]}" if problem else "graded"
    return {"submission": name, "score": results["score"], **report.part_scores(results), "status": status}


def write_csv(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=report.csv_fields())
        w.writeheader()
        for row in rows:
            w.writerow(row)
    os.replace(tmp, path)


def _clock(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


def progress(done, total, elapsed, name, results, seconds):
    """One line per finished grading; the time left assumes the rest take as long on average."""
    left = elapsed / done * (total - done)
    score = f"{results['score']:7.2f}" if results is not None else "  error"
    return (f"[{done:>{len(str(total))}}/{total}] {_clock(elapsed)} elapsed, about {_clock(left)} left"
            f"  {name:<30.30} {score}  ({seconds:.1f} s)")


def say(line=""):
    print(line, flush=True)


def main(argv):
    ap = argparse.ArgumentParser(prog="python -m grader batch", description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--csv", default="build/gradebook.csv")
    ap.add_argument("--isolate", choices=("auto", "yes", "no"), default="auto")
    args = ap.parse_args(argv)
    if not Path(args.folder).is_dir():
        print(f"grader: no such folder: {args.folder}", file=sys.stderr)
        return 2
    subs = submissions(args.folder)
    store = Store(Path(args.csv).resolve().parent / (Path(args.csv).stem + "-results"))
    grader = grader_hash()
    stamps = {name: {"submission": entry_hash(path), "grader": grader, "seed": seed_of(name, path),
                     "isolated": isolated(args.isolate)} for name, path in subs.items()}
    results = {name: store.valid(name, stamps[name]) for name in subs}
    todo = [name for name in subs if results[name] is None]
    errors = {}
    jobs = max(1, min(args.jobs, len(todo) or 1))
    plan = f"{len(todo)} to grade with {jobs} job{'s' * (jobs > 1)}" if todo else "nothing to grade"
    say(f"{len(subs)} submissions in {args.folder}: {len(subs) - len(todo)} already graded (same file, same "
        f"grader), {plan}. Results in {store.folder}")
    start = time.perf_counter()
    free_jobs = queue.Queue()              # job numbers 1..N: two gradings never run with the same one
    for j in range(1, jobs + 1):
        free_jobs.put(j)

    def run(name):
        job = free_jobs.get()
        try:
            return grade_one(name, subs[name], store, job, args.isolate, stamps[name]["seed"])
        finally:
            free_jobs.put(job)

    pool = ThreadPoolExecutor(jobs)
    try:
        futures = {pool.submit(run, name): name for name in todo}
        for done, future in enumerate(as_completed(futures), 1):
            name = futures[future]
            data, seconds, errors[name] = future.result()
            if data is not None:
                store.stamp(name, stamps[name])
            results[name] = data
            say(progress(done, len(todo), time.perf_counter() - start, name, data, seconds))
    except KeyboardInterrupt:             # Ctrl-C: the gradings in flight got it too
        pool.shutdown(wait=True, cancel_futures=True)
        say("\nInterrupted. Every finished result is kept: run the same command again to grade the rest.")
        return 130
    pool.shutdown()
    rows = [row_of(name, results[name], errors.get(name, "")) for name in subs]
    write_csv(args.csv, rows)
    failed = [r for r in rows if r["status"].startswith("grader failed")]
    say(f"\n{len(rows)} submissions -> {args.csv} ({len(todo)} graded in {_clock(time.perf_counter() - start)}, "
        f"{len(rows) - len(todo)} reused)")
    for row in failed:
        say(f"  {row['submission']}: {row['status']}")
    say()
    for line in classview.summary(results):
        say(line)
    return 3 if failed else 0
