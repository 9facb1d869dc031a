"""Grade a folder of submissions, N at a time, into a CSV gradebook.

Each submission is graded by its own `python -m grader` process (a crash or a hostile submission
cannot touch the others' grading), with its own job number so concurrent sandboxes never share a
uid or a folder. Seeds: the submission's submission_metadata.json if it has one, else its name.
"""
import argparse
import csv
import hashlib
import json
import os
import queue
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader import paths, report, rubric


def submissions(folder):
    """name -> path: every subfolder, and every loose .py file."""
    found = {}
    for entry in sorted(Path(folder).iterdir()):
        if entry.is_dir() or entry.suffix == ".py":
            found[entry.stem if entry.is_file() else entry.name] = entry
    return found


def seed_of(name, path):
    meta = path / "submission_metadata.json" if path.is_dir() else None
    if meta and meta.is_file():
        from grader.grade import seed_for
        return seed_for(meta)
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def grade_one(name, path, out_dir, job, isolate):
    results = out_dir / f"{name}.json"
    cmd = [sys.executable, "-m", "grader", str(path), "--results", str(results), "--quiet",
           "--seed", str(seed_of(name, path)), "--job", str(job), "--isolate", isolate]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=paths.REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or not results.is_file():
        return {"submission": name, "score": "", "status": f"grader failed: {proc.stderr.strip()[-300:]}",
                **dict.fromkeys(rubric.PARTS, "")}, seconds
    data = json.loads(results.read_text())
    row = {"submission": name, "score": data["score"], "status": "graded"}
    for part in rubric.PARTS:
        row[part] = round(sum(t["score"] for t in data["tests"] if part in t["tags"]), 2)
    return row, seconds


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
    out_dir = Path(args.csv).resolve().parent / (Path(args.csv).stem + "-results")
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    jobs = max(1, args.jobs)
    free_jobs = queue.Queue()              # job numbers 1..N: two gradings never run with the same one
    for j in range(1, jobs + 1):
        free_jobs.put(j)

    def run(name, path):
        job = free_jobs.get()
        try:
            return grade_one(name, path, out_dir, job, args.isolate)
        finally:
            free_jobs.put(job)

    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(lambda item: run(*item), subs.items()))
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=report.CSV_FIELDS)
        w.writeheader()
        for row, _ in rows:
            w.writerow(row)
    for row, seconds in rows:
        print(f"{row['submission']:<30} {str(row['score']):>7}  {seconds:6.1f}s  {row['status']}")
    print(f"\n{len(rows)} submissions in {time.perf_counter() - start:.1f}s with {jobs} jobs -> {args.csv}"
          f" (results in {out_dir})")
    return 0
