"""Grade a folder of submissions, N at a time, into a CSV gradebook, feedback files and a class report.

    python -m grader batch DIR [--jobs N] [--csv PATH] [--roster CSV] [--secret-file PATH] [--seed N]
                               [--isolate auto|yes|no] [--regrade NAME]

A submission is each subfolder, loose .py file and .zip file of DIR (names starting with "." are
skipped). Each is graded by its own `python -m grader` process (a crash or a hostile submission
cannot touch the others' grading), with its own job number so concurrent sandboxes never share a
uid or a folder, and killed with the batch (PR_SET_PDEATHSIG). Who each submission is comes from
staff only (grader/roster.py: --roster, else Gradescope's export metadata at the top of DIR, else
the entries' names), never from a file inside a submission. Seeds: --seed for all, else each
student's (or group's) keyed with the course secret (grader/coursesecret.py: --secret-file or
$CS349E_COURSE_SECRET; without either the batch stops), which the gradings never see.

Resumable: each result is written atomically, then stamped (in RESULTS/.stamps/) with the hashes of
the submission, of the grader (fingerprint.grader_hash), the seed, whether it was isolated, and of
the results file itself. A run reuses every result whose stamp still matches and grades the rest
(and what --regrade names, again), so a batch killed at any moment (even SIGKILL) loses at most the
gradings in flight. Ctrl-C and SIGTERM stop it the same way: the gradings in flight are stopped,
every finished result is kept, and a partial gradebook of what is done is written beside the CSV.
The CSV itself (written atomically, at the end) always holds every submission.

Progress goes to stdout as one line per graded submission, flushed, so a redirected log shows it as
it happens: done / total, elapsed, an estimate of the time left. At the end: the gradebook
(gradebook.py), each student's feedback (handback.py), the class report page (classpage.py) and
the class summary with its integrity flags (classview.py, integrity.py).
"""
import argparse
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grader import classpage, classview, coursesecret, gradebook, handback, integrity, paths, report, roster
from grader.fingerprint import bytes_hash, entry_hash, grader_hash
from grader.submission import SubmissionError, opened

KINDS = (".py", ".zip")
STOP_WAIT = 15.0            # s a grading in flight gets to stop after SIGINT, before SIGKILL


def submissions(folder):
    """name -> path: every subfolder, loose .py file and .zip file. A name is the entry's name without
    its suffix, unless two entries would share it (alice.py and alice.zip), then the whole name."""
    entries = [e for e in sorted(Path(folder).iterdir()) if not e.name.startswith(".")
               and (e.is_dir() or (e.is_file() and e.suffix.lower() in KINDS))]
    stems = [e.name if e.is_dir() else e.stem for e in entries]
    return {(stem if stems.count(stem) == 1 else e.name): e for stem, e in zip(stems, entries)}


def seeds(identity, names, fixed=None, secret=None):
    """name -> the seed its submission is graded with: `fixed` (--seed) for all, else the course
    secret's seed of the entry's students (roster.Identity.key: their emails, else their ids)."""
    return {name: fixed if fixed is not None else coursesecret.seed(secret, identity.key(name)) for name in names}


def graded_file(path):
    """(the bytes of the file a grading of `path` grades, whether it came out of a zip); (None,
    False) when there is none (the grading says why)."""
    try:
        with opened(path) as found:
            return found.path.read_bytes(), found.from_zip
    except (SubmissionError, OSError):
        return None, False


def isolated(mode):
    return mode == "yes" or (mode == "auto" and os.geteuid() == 0)


def die_with_parent(parent_pid):
    """In a grading child: be SIGKILLed when the batch that started it dies (PR_SET_PDEATHSIG = 1),
    and exit at once if it is already gone."""
    import ctypes
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


class Children:
    """The gradings running now, so that an interrupt stops them the way Ctrl-C does (SIGINT: each
    grading kills its sandboxes and exits), and none starts after it."""

    def __init__(self):
        self.lock, self.running, self.closed = threading.Lock(), set(), False

    def run(self, cmd):
        """(exit status, stdout, stderr) of one grading; None when the batch is stopping."""
        env = {k: v for k, v in os.environ.items() if k != coursesecret.ENV}      # a grading needs its seed only
        with self.lock:
            if self.closed:
                return None
            proc = subprocess.Popen(cmd, cwd=paths.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True, env=env)
            self.running.add(proc)
        try:
            out, err = proc.communicate()
        finally:
            with self.lock:
                self.running.discard(proc)
        return proc.returncode, out, err

    def stop(self, told):
        """Stop every grading in flight. `told`: they got the signal already (Ctrl-C at a terminal
        reaches the whole foreground group), so they get a moment to stop on their own first."""
        with self.lock:
            self.closed = True
        end = time.monotonic() + (3.0 if told else 0.0)
        while self._alive() and time.monotonic() < end:
            time.sleep(0.05)
        for proc in self._alive():
            proc.send_signal(signal.SIGINT)
        end = time.monotonic() + STOP_WAIT
        while self._alive() and time.monotonic() < end:
            time.sleep(0.05)
        for proc in self._alive():
            proc.kill()

    def _alive(self):
        with self.lock:
            return [p for p in self.running if p.poll() is None]


def grade_one(name, path, store, stamp, job, isolate, children, table=False):
    """Grade one submission in its own process and stamp the result.
    (results dict or None, seconds, error text, the staff's table when `table`)."""
    store.forget(name)
    results = store.results_path(name)
    cmd = [sys.executable, "-m", "grader", str(path), "--results", str(results), "--seed", str(stamp["seed"]),
           "--job", str(job), "--isolate", isolate, "--parent-pid", str(os.getpid()), *([] if table else ["--quiet"])]
    start = time.perf_counter()
    ran = children.run(cmd)
    seconds = time.perf_counter() - start
    if ran is None:
        return None, seconds, "not graded: the batch was stopped", ""
    code, out, err = ran
    try:
        data = json.loads(results.read_text()) if code == 0 else None
    except (OSError, ValueError):
        data = None
    if data is None:
        return None, seconds, f"exit {code}: {err.strip()[-300:]}", out
    store.stamp(name, stamp)
    return data, seconds, "", out


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


class Outputs:
    """Where a batch writes, all beside the CSV: NAME.csv, NAME.partial.csv (after an interrupt),
    NAME-results/ (results.json per submission), NAME-feedback/ (what each student sees), NAME.html."""

    def __init__(self, csv_path):
        self.csv = Path(csv_path)
        base = self.csv.resolve().parent / self.csv.stem
        self.partial = self.csv.with_name(f"{self.csv.stem}.partial.csv")
        self.results = Path(f"{base}-results")
        self.feedback = Path(f"{base}-feedback")
        self.page = Path(f"{base}.html")


HELP_EPILOG = """\
outputs, beside the CSV (build/gradebook.csv by default):
  gradebook.csv            one row per student of each submission, after a "Points Possible" row
  gradebook-results/       each submission's results.json, and the stamps a rerun checks
  gradebook-feedback/      ID.txt: exactly what the student with that LMS id sees of their results.json
  gradebook.html           the class report: histograms, most failed checks, flags, similar files, links
  gradebook.partial.csv    after Ctrl-C or SIGTERM: the rows of what was done

ids: from --roster (columns id, name, submission; LMS export headers too), else Gradescope's export
(submission_metadata.yml at the top of DIR), else the entries' names. A file inside a submission
never decides who it is. Seeds: keyed with the course secret (the one make autograder used), so
Gradescope and the batch give a student the same inputs when the batch knows the student's email.

regrade one submission exactly as the batch did (same seed, isolation and row): the same
command with --regrade NAME (NAME: the entry's name or the student's id; make regrade DIR=... NAME=...).
"""


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m grader batch", description=__doc__.splitlines()[0],
                                 epilog=HELP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="the class folder: one subfolder, .py file or .zip file per submission")
    ap.add_argument("--jobs", type=int, default=2, help="gradings at a time (default: 2; each uses about one core)")
    ap.add_argument("--csv", default="build/gradebook.csv",
                    help="the gradebook to write; the other outputs go beside it (default: build/gradebook.csv)")
    ap.add_argument("--roster", help="the class's roster CSV: columns id, name and submission (the file or folder "
                                     "name in DIR); Canvas, Gradescope and Moodle export headers work too")
    ap.add_argument("--secret-file", help=f"the course secret that keys each student's seed (default: "
                                          f"${coursesecret.ENV}; required unless --seed)")
    ap.add_argument("--seed", type=int, help="grade every submission with this seed of the hidden inputs (default: "
                                             "each student's own, keyed with the course secret; the CSV's seed "
                                             "column says which)")
    ap.add_argument("--isolate", choices=("auto", "yes", "no"), default="auto",
                    help="run submissions as an unprivileged user in namespaces (auto, the default: when root)")
    ap.add_argument("--regrade", action="append", default=[], metavar="NAME",
                    help="grade NAME (an entry's name or a student's id) again even if its stored result is still "
                         "valid, and print its staff table (repeatable)")
    return ap.parse_args(argv)


def main(argv):
    args = parse(argv)
    if not Path(args.folder).is_dir():
        print(f"grader: no such folder: {args.folder}", file=sys.stderr)
        return 2
    subs = submissions(args.folder)
    try:
        identity = roster.identify(args.folder, subs, args.roster)
        secret = coursesecret.load(args.secret_file) if args.seed is None else None
    except (roster.RosterError, coursesecret.SecretError) as e:
        print(f"grader: {e}" + (" (or --seed N: one seed for every submission)"
                                if isinstance(e, coursesecret.SecretError) else ""), file=sys.stderr)
        return 2
    by_id = {s.id: name for name in subs for s in identity.students.get(name, ())}
    args.regrade = [n if n in subs else by_id.get(n, n) for n in args.regrade]
    unknown = [n for n in args.regrade if n not in subs]
    if unknown:
        print(f"grader: no submission or student id {', '.join(unknown)} in {args.folder} (its names: "
              f"{', '.join(subs) or 'none'})", file=sys.stderr)
        return 2
    out = Outputs(args.csv)
    store = Store(out.results)
    grader = grader_hash()
    seed = seeds(identity, subs, args.seed, secret)
    stamps = {name: {"submission": entry_hash(path), "grader": grader, "seed": seed[name],
                     "isolated": isolated(args.isolate)} for name, path in subs.items()}
    results = {name: None if name in args.regrade else store.valid(name, stamps[name]) for name in subs}
    todo = [name for name in subs if results[name] is None]
    jobs = max(1, min(args.jobs, len(todo) or 1))
    plan = f"{len(todo)} to grade with {jobs} job{'s' * (jobs > 1)}" if todo else "nothing to grade"
    say(f"{len(subs)} submissions in {args.folder}: {len(subs) - len(todo)} already graded (same file, same "
        f"grader), {plan}. Results in {store.folder}\n{identity.said()}")
    errors, tables = {}, {}
    stopped = _grade(todo, subs, store, stamps, jobs, args, results, errors, tables)
    files = {name: graded_file(path) for name, path in subs.items()}
    flags = integrity.flags({n: f[0] for n, f in files.items()}, results, identity)
    rows = [gradebook.row(name, results[name], error=errors.get(name, ""), student=student, flags=flags.of(name),
                          from_zip=files[name][1], seed=stamps[name]["seed"])
            for name in subs for student in identity.of(name)]
    if stopped:
        done = [r for r in rows if results[r["submission"]] is not None]
        finished = len({r["submission"] for r in done})
        gradebook.write(out.partial, done)
        say(f"\nInterrupted ({stopped}). Every finished result is kept ({finished} of {len(subs)} submissions): "
            f"run the same command again to grade the rest.\nA partial gradebook of those {finished}: "
            f"{out.partial} ({out.csv} is not written until every submission is graded).")
        return 143 if stopped == "SIGTERM" else 130
    rows += [gradebook.absent_row(student, why) for student, why in identity.absent]
    gradebook.write(out.csv, rows)
    out.partial.unlink(missing_ok=True)
    stems = handback.file_names([(r["submission"], r["student_id"]) for r in rows if r["submission"]])
    handback.write(out.feedback, {stem: results[entry] for (entry, _), stem in stems.items()})
    classpage.write(out.page, results, rows, flags, out.feedback, stems)
    failed = {r["submission"]: r for r in rows if r["status"].startswith("grader failed")}.values()
    say(f"\n{len(subs)} submissions, {len(rows)} rows -> {args.csv} ({len(todo)} graded, {len(subs) - len(todo)} "
        "reused)")
    say(f"  feedback for each student: {out.feedback}/ID.txt; the class report: {out.page}")
    for row in failed:
        say(f"  {row['submission']}: {row['status']}")
    for name, table in tables.items():
        say(f"\nRegraded {name} (seed {stamps[name]['seed']}):\n{table.rstrip()}")
    say()
    for line in classview.summary(results, flags):
        say(line)
    say(f"\nRegrade one submission exactly as this batch did: {_again(args)} --regrade NAME")
    return 3 if failed else 0


def _again(args):
    """The command that repeats this batch's settings."""
    words = ["python", "-m", "grader", "batch", args.folder, "--csv", args.csv]
    words += ["--roster", args.roster] if args.roster else []
    words += ["--secret-file", args.secret_file] if args.secret_file else []
    words += ["--seed", str(args.seed)] if args.seed is not None else []
    words += ["--isolate", args.isolate] if args.isolate != "auto" else []
    return " ".join(shlex.quote(w) for w in words)


def _grade(todo, subs, store, stamps, jobs, args, results, errors, tables):
    """Grade `todo` into `results`; None when every grading finished, else the signal that stopped
    the batch ("Ctrl-C" or "SIGTERM"). SIGTERM stops it as Ctrl-C does."""
    start, children = time.perf_counter(), Children()
    free_jobs = queue.Queue()              # job numbers 1..N: two gradings never run with the same one
    for j in range(1, jobs + 1):
        free_jobs.put(j)
    terminated = []

    def on_term(signum, frame):
        terminated.append(signum)
        raise KeyboardInterrupt

    def run(name):
        job = free_jobs.get()
        try:
            return grade_one(name, subs[name], store, stamps[name], job, args.isolate, children,
                             table=name in args.regrade)
        finally:
            free_jobs.put(job)

    previous = signal.signal(signal.SIGTERM, on_term)
    pool = ThreadPoolExecutor(jobs)
    futures = {}
    try:
        futures = {pool.submit(run, name): name for name in todo}
        for done, future in enumerate(as_completed(futures), 1):
            name = futures[future]
            _take(name, future.result(), results, errors, tables, args)
            say(progress(done, len(todo), time.perf_counter() - start, name, results[name],
                         future.result()[1]))
    except KeyboardInterrupt:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)        # one stop is enough
        children.stop(told=not terminated)
        pool.shutdown(wait=True, cancel_futures=True)
        for future, name in futures.items():                 # finished while stopping: kept too
            if future.done() and not future.cancelled() and future.exception() is None:
                _take(name, future.result(), results, errors, tables, args)
        return "SIGTERM" if terminated else "Ctrl-C"
    finally:
        signal.signal(signal.SIGTERM, previous)
    pool.shutdown()
    return None


def _take(name, outcome, results, errors, tables, args):
    data, _, errors[name], table = outcome
    results[name] = data
    if name in args.regrade and table:
        tables[name] = table
