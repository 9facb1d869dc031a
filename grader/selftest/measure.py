"""Grade mutants on several seeds and run their public tests once: the records proofs.py judges.

    records = measure.run(entries, source_text, seeds, jobs, mode)     # entries: [Entry]

Two modes give the same record:
  graded     the proofs' mode: the grader's own command line, `python -m grader FILE --seed N --results
             R`, through the selftest's warm start (warm.py) with forked sandbox calls (forked.py), as
             run.py grades its corpus (run.grade, kind "generated"); the messages are results.json's.
  inprocess  a quick look: the hidden plans and judges in a forked child per mutant and seed
             (inprocess.judge_check: the ledger and the wire's round trip as a grading has them), under a
             CPU limit (a mutant may loop forever), scored as score.py scores; the messages are the
             judges', before feedback.py. `--mode both` measures how far it agrees with `graded`.
A mutant's loss at a seed is counted against its source's own grading at that seed (a variant
without the bonus loses nothing for it), per rubric check and per part. Gradings go seed by seed:
the reference's answers of one seed are computed (or read back: refcache) once, not once per mutant.

A record (JSON-able): name, corpus, part, parts (its own first), kind, bug; public: {part: [failing
public tests]}; seeds: {"N": {"lost": {part: points}, "checks": {check id: points}, "messages": {check
id: feedback of a check that lost points}, "problems": [...]}} ("lost" None: no grading).
"""
import concurrent.futures
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.selftest import cascade
from grader.selftest import mutants as mutants_mod

EPS = 1e-6
CHILD_CPU = 120           # s of CPU for one in-process judging of a mutant at a seed
CHILD_WALL = 600          # s of wall time for it (a machine shared with others)


@dataclass(frozen=True)
class Entry:
    corpus: str               # generated | mutants | unseen
    mutant: object            # a mutants.Mutant (an unseen.Bug becomes one: corpus.py)
    kind: str
    text: str

    @property
    def name(self):
        return self.mutant.name


def _parts():
    from grader.selftest import run
    return run.PARTS


def _by_check(data):
    """{check id: (points lost, feedback)} of a results.json."""
    from grader import report, rubric
    ids = {report.test_name(c): c.id for c in rubric.CHECKS.values()}
    out = {}
    for t in (data or {}).get("tests", []):
        out[ids.get(t.get("name"), t.get("name"))] = (float(t.get("max_score", 0)) - float(t.get("score", 0)),
                                                      t.get("output") or "")
    return out


def _relative(checks, base):
    """One grading's losses against its source's: {"lost": {part}, "checks", "messages"}."""
    from grader import rubric
    lost = {c: round(v - base.get(c, (0.0, ""))[0], 3) for c, (v, _) in checks.items()}
    lost = {c: v for c, v in lost.items() if abs(v) > EPS}
    parts = {p: round(sum(v for c, v in lost.items() if c in rubric.CHECKS and rubric.CHECKS[c].part == p), 3)
             for p in _parts()}
    return {"lost": parts, "checks": lost, "messages": {c: checks[c][1] for c in lost if lost[c] > 0},
            "problems": []}


def record(entry, seeds, public):
    m = entry.mutant
    return {"name": m.name, "corpus": entry.corpus, "part": m.part, "parts": list(m.parts), "kind": entry.kind,
            "bug": m.bug, "public": public, "seeds": seeds}


# ------------------------------------------------------------------------------------ graded
def _graded(entries, source, seeds, jobs, progress):
    """{name: {seed: seed record}} by the grader's command line through the warm start."""
    from grader.selftest import run, warm
    root = Path(tempfile.mkdtemp(prefix="cs349e-generate-"))
    run.WARM[:] = [warm.Warm(mutants_mod.REPO)]
    out = {e.name: {} for e in entries}
    try:
        (root / "logs").mkdir()
        texts = [("(source)", source)] + [(e.name, e.text) for e in entries]
        dirs = []
        for i, (_, text) in enumerate(texts):
            d = root / "subs" / str(i)
            d.mkdir(parents=True)
            (d / "paged_kv.py").write_text(text)
            dirs.append(d)
        for seed in seeds:
            subs = []
            for i, (name, text) in enumerate(texts):
                s = run.Sub("generated", name, text, key=f"g{i}-s{seed}", args=("--seed", str(seed)))
                s.path, s.results = dirs[i] / "paged_kv.py", dirs[i] / f"results-{seed}.json"
                subs.append(s)
            run.grade(subs[0], root)
            if subs[0].data is None:
                raise RuntimeError(f"the source itself could not be graded at seed {seed}: {subs[0].problems}")
            base = _by_check(subs[0].data)
            started = time.monotonic()

            def one(s):
                run.grade(s, root)
                progress(f"seed {seed}")
                return s
            with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
                for s in pool.map(one, subs[1:]):
                    rec = _relative(_by_check(s.data), base) if s.data is not None else \
                        {"lost": None, "checks": {}, "messages": {}, "problems": []}
                    rec["problems"] = list(s.problems)
                    out[s.name][str(seed)] = rec
            progress(f"seed {seed} done in {time.monotonic() - started:.0f} s", force=True)
        return out
    finally:
        for server in run.WARM:
            server.close()
        run.WARM.clear()
        shutil.rmtree(root, ignore_errors=True)


def _public(entries, jobs, warm_start, progress):
    """{name: {part: [failing public tests]}}, each mutant's public tests run once."""
    from grader.selftest import run, warm
    root = Path(tempfile.mkdtemp(prefix="cs349e-generate-public-"))
    if warm_start:
        run.WARM[:] = [warm.Warm(mutants_mod.REPO)]
    launch = run._warm_pytest if warm_start else cascade._launch
    try:
        def one(ie):
            i, e = ie
            d = root / str(i)
            d.mkdir()
            (d / "paged_kv.py").write_text(e.text)
            got = cascade.public_failures(d, launch=launch)
            progress("public tests")
            return e.name, got
        with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
            return dict(pool.map(one, enumerate(entries)))
    finally:
        for server in run.WARM:
            server.close()
        run.WARM.clear()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------ in process
def _judge_all(text, seed, tag, ref, bound):
    """{check id: (points lost, messages)} of one text at one seed, judged in this process (scored as
    score.score does: a check's points times the share of its cases passed, rounded to 0.01)."""
    import contextlib
    import io

    from grader import rubric, score
    from grader.selftest import inprocess
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            pk = inprocess.load_text(text, tag)
            why = None
        except BaseException as e:  # noqa: BLE001  (a mutant that does not import fails every case)
            pk, why = None, f"import failed: {type(e).__name__}: {e}"
        by_check = {}
        for c in bound:
            if c not in rubric.CHECKS:
                continue
            msgs = [why] * 1 if pk is None else inprocess.judge_check(pk, ref, c, seed, bound)
            by_check[c] = [(m is None, m) for m in msgs]
            if pk is not None:          # scored as a grading scores (score.counted)
                by_check[c] = score.counted(by_check[c], inprocess.drawn(c, seed, bound))
    return {r["check"].id: (round(r["check"].points - r["points"], 3),
                            "\n".join(str(m) for m in r["failures"][:3])) for r in score.score(by_check)}


def _in_child(fn, cpu):
    """Start fn() in a forked child under a CPU limit; (pid, path of its JSON answer)."""
    fd, path = tempfile.mkstemp(prefix="cs349e-generate-child-", suffix=".json")
    os.close(fd)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setsid()
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            answer = fn()
            with open(path, "w") as f:
                json.dump(answer, f)
            code = 0
        finally:
            os._exit(code)
    return pid, path


def _forked_map(tasks, jobs, cpu=CHILD_CPU, wall=CHILD_WALL, progress=lambda *a, **k: None):
    """[fn() or {"problem": why}] of each (key, fn) in tasks, each in a forked child, `jobs` at a time
    (forks from this one thread only)."""
    results, running, todo = {}, {}, list(tasks)
    while todo or running:
        while todo and len(running) < max(1, jobs):
            key, fn = todo.pop(0)
            pid, path = _in_child(fn, cpu)
            running[pid] = (key, path, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.02)
            for p, (key, path, t0) in list(running.items()):
                if time.monotonic() - t0 > wall:
                    os.killpg(p, signal.SIGKILL)
            continue
        if pid not in running:
            continue
        key, path, _ = running.pop(pid)
        try:
            with open(path) as f:
                results[key] = json.load(f) if os.waitstatus_to_exitcode(status) == 0 else None
        except (OSError, ValueError):
            results[key] = None
        if results[key] is None:
            results[key] = {"problem": f"the child died (exit {os.waitstatus_to_exitcode(status)}: a CPU limit "
                                       f"of {cpu} s, a hang past {wall} s, or a crash)"}
        os.unlink(path)
        progress("in process")
    return [results[key] for key, _ in tasks]


def _inprocess(entries, source, seeds, jobs, progress):
    from grader.selftest import inprocess
    ref = inprocess.load(mutants_mod.REFERENCE, "generate_ref")
    bound = inprocess.bound_checks()
    for seed in seeds:                   # the reference's answers, once, inherited by every child
        for c in bound:
            inprocess.judge_check(ref, ref, c, seed, bound)
    base = {seed: _judge_all(source, seed, f"src{seed}", ref, bound) for seed in seeds}
    tasks = [((e.name, seed), (lambda e=e, seed=seed, i=i: _judge_all(e.text, seed, f"m{i}", ref, bound)))
             for seed in seeds for i, e in enumerate(entries)]
    out = {e.name: {} for e in entries}
    for (name, seed), got in zip([k for k, _ in tasks], _forked_map(tasks, jobs, progress=progress)):
        if "problem" in got:
            out[name][str(seed)] = {"lost": None, "checks": {}, "messages": {}, "problems": [got["problem"]]}
        else:
            out[name][str(seed)] = _relative({c: tuple(v) for c, v in got.items()}, base[seed])
    return out


# ------------------------------------------------------------------------------------ the second oracle
DIFFERENTIAL_SEEDS = 12     # verify_corpus's random differential runs per mutant (and of the cache, with the bonus)


def _second(text, tag, ref):
    """verify_corpus's failures on one text: its contract checks (run_checks) and its differential runs
    against the reference and the contract model; [] when every one passes."""
    import contextlib
    import io

    from grader.selftest import verify_corpus as vc
    failed = []
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            pk = vc.load(text, tag)
        except BaseException as e:  # noqa: BLE001
            return [f"import: {type(e).__name__}: {e}"[:300]]
        failed += [f"{n}: {msg}"[:300] for n, msg in vc.run_checks(pk, ref).items() if msg]
        runs = [vc.differential] + ([vc.differential_cache] if vc.writes(pk, "prefix_cache") else [])
        for run_ in runs:
            for seed in range(DIFFERENTIAL_SEEDS):
                try:
                    run_(pk, ref, seed)
                except Exception as e:  # noqa: BLE001
                    failed.append(f"{run_.__name__} seed {seed}: {type(e).__name__}: {e}"[:300])
                    break
    return failed


def second_oracle(entries, jobs=2):
    """{name: verify_corpus's failures, or {"problem": why} when it could not run} of each entry (an
    independent in-process checker, without the grader: a mutant the grader spares but this catches is
    a blind spot, not an equivalent; one it could not check is neither)."""
    from grader.selftest import verify_corpus as vc
    ref = vc.load_reference()
    vc.run_checks(ref, ref)           # its lazily computed expectations, inherited by every child
    tasks = [(e.name, (lambda e=e, i=i: _second(e.text, f"second{i}", ref))) for i, e in enumerate(entries)]
    got = _forked_map(tasks, jobs, progress=Progress(len(tasks), "second oracle"))
    return dict(zip((e.name for e in entries), got))   # a child that died: {"problem": why}, not a failure


# ------------------------------------------------------------------------------------ both
class Progress:
    """One line on stderr now and then: how far, how fast."""

    def __init__(self, total, what):
        self.total, self.what, self.done, self.t0, self.last = total, what, 0, time.monotonic(), 0.0

    def __call__(self, label, force=False):
        if not force:
            self.done += 1
        now = time.monotonic()
        if force or now - self.last > 30:
            self.last = now
            rate = (now - self.t0) / max(1, self.done)
            print(f"[{self.what}] {label}: {self.done}/{self.total}, {rate:.2f} s each, "
                  f"{(self.total - self.done) * rate / 60:.0f} min left", file=sys.stderr, flush=True)


def _timed(runs, fn, *args):
    """(fn(*args), {"wall_s", "cpu_s" of this process and its children, "runs"})."""
    t0, c0 = time.monotonic(), _cpu()
    got = fn(*args)
    return got, {"wall_s": round(time.monotonic() - t0, 1), "cpu_s": round(_cpu() - c0, 1), "runs": runs}


def _cpu():
    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def run(entries, source, seeds, jobs=2, mode="graded"):
    """(the records of `entries`, mutants of `source`, on `seeds`: see the module's docstring; the
    timings of the gradings and of the public tests). CPU counts the children once reaped: the warm
    start's server is closed, with every grading it forked, before each timing ends."""
    grade = _graded if mode == "graded" else _inprocess
    n = len(entries) * len(seeds)
    seeds_of, t_grade = _timed(n + len(seeds), grade, entries, source, seeds, jobs, Progress(n, mode))
    public, t_public = _timed(len(entries), _public, entries, jobs, mode == "graded",
                              Progress(len(entries), "public tests"))
    return [record(e, seeds_of[e.name], public[e.name]) for e in entries], {"gradings": t_grade, "public": t_public}
