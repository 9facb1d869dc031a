"""One bug, one charge: where each mutant costs points, in the hidden grader and in the public tests.

A mutant labelled with its parts (mutants.Mutant.parts) may cost points in those parts only: in the
hidden grader (the points its results.json loses per tag) and in the public tests (the tests of
each part's file that fail); one that names its checks (Mutant.checks, .tests) only in those. run.py measures both for every mutant and fails on a cascade; this
module also runs on its own for the public tests alone:

    python -m grader.selftest.cascade [--jobs 2] [--json PATH]     the public tests of every mutant

Public tests run in a subprocess per implementation (pytest with --impl and a junit report), only
on our own corpus: hostile submissions never run outside the sandbox. For a correct implementation
(the reference, a variant) a skipped public test counts as failed, but a bonus part's test skipped
as "bonus not attempted": a probe that wrongly decides a correct file must wait for another part
would otherwise hide the tests it skips.
"""
import argparse
import atexit
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
TESTS = REPO / "tests"
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(REPO / "tools"))
import labtool  # noqa: E402    tools/labtool.py: the reason a bonus part not attempted gives
import registry  # noqa: E402    tests/registry.py: each part's public test file

PUBLIC_FILES = {p.test_file[:-len(".py")]: p.id for p in registry.PARTS}      # module -> part
PUBLIC_TIMEOUT = 900.0
NOT_ATTEMPTED = {part: {labtool.not_attempted(state, part) for state in labtool.NOT_ATTEMPTED}
                 for part in labtool.BONUS_PARTS}      # the only skips a correct implementation may have


_PYCACHES = {}


def pycache_env(name):
    """This environment with the modules compiled into a folder of the selftest's own for `name`
    (PYTHONPYCACHEPREFIX: made once, root's alone, gone at exit), never next to the sources the
    hostile submissions' gradings watch: the runs that share a name share it, and no other's."""
    if name not in _PYCACHES:
        _PYCACHES[name] = tempfile.mkdtemp(prefix=f"cs349e-{name}-pycache-")
        atexit.register(shutil.rmtree, _PYCACHES[name], True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": _PYCACHES[name]}


def own_corpus_env():
    """The environment of the runs of our own corpus (warm.py's server, its public tests, its warm
    gradings: run.py): their modules compiled once per selftest (pycache_env), not once per run;
    one BLAS thread (the products are small, the cores shared). Never a hostile submission's
    grading: its trusted process reads no pyc a run could have written."""
    return {**pycache_env("public"), "OPENBLAS_NUM_THREADS": "1"}


def _launch(args, cwd, log, env, timeout):
    """`python -m pytest ARGS` as a subprocess: its exit code, its output in `log`."""
    with open(log, "wb") as out:
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, timeout=timeout).returncode


def public_failures(impl_dir, timeout=PUBLIC_TIMEOUT, correct=False, tests=TESTS, launch=_launch):
    """{part: [names of failing public tests]} for the paged_kv.py in impl_dir; {"(run)": [why]} when
    the public tests could not run at all. correct: impl_dir is a correct implementation, so a test
    skipped for any reason but its bonus part's "bonus not attempted" is listed too, as "NAME
    (skipped: REASON)". tests: the public tests' folder (a copy, for the selftest's own checks).
    launch(args, cwd, log, env, timeout): runs `python -m pytest ARGS` (run.py's warm start can)."""
    tests = Path(tests)
    with tempfile.TemporaryDirectory() as tmp:
        junit, log = Path(tmp) / "junit.xml", Path(tmp) / "pytest.log"
        args = [str(tests), "-c", str(tests / "pytest.ini"), f"--rootdir={tests}", f"--impl={impl_dir}", "-q", "-p",
                "no:cacheprovider", f"--junitxml={junit}"]
        try:
            code = launch(args, tmp, log, own_corpus_env(), timeout)
        except subprocess.TimeoutExpired:
            return {"(run)": [f"the public tests took more than {timeout:g} s"]}
        if not junit.is_file():
            said = log.read_text(errors="replace").strip()[-300:] if log.is_file() else ""
            return {"(run)": [said or f"pytest exit {code}"]}
        failed = {}
        for case in ET.parse(junit).getroot().iter("testcase"):
            module = case.get("classname", "").split(".")[-1]
            part = PUBLIC_FILES.get(module, module)
            if case.find("failure") is not None or case.find("error") is not None:
                failed.setdefault(part, []).append(case.get("name"))
            elif correct and case.find("skipped") is not None:
                reason = case.find("skipped").get("message", "")
                if reason not in NOT_ATTEMPTED.get(part, ()):
                    failed.setdefault(part, []).append(f"{case.get('name')} (skipped: {reason})")
        return failed


def hidden_losses(results, parts):
    """Points lost per part (tag) in a results.json."""
    return {p: sum(float(t.get("max_score", 0)) - float(t.get("score", 0))
                   for t in (results or {}).get("tests", []) if p in (t.get("tags") or [])) for p in parts}


def check_losses(results):
    """Points lost per rubric check (its id) in a results.json, whose tests are named by report.test_name."""
    from grader import report, rubric
    ids = {report.test_name(c): c.id for c in rubric.CHECKS.values()}
    lost = {}
    for t in (results or {}).get("tests", []):
        check = ids.get(t.get("name"), t.get("name"))
        lost[check] = lost.get(check, 0.0) + float(t.get("max_score", 0)) - float(t.get("score", 0))
    return lost


def beyond_checks(mutant, results, failures, eps=1e-6):
    """What a mutant that names its checks (mutants.Mutant.checks, .tests) costs beyond them:
    ({check id: points lost}, [failing public tests it does not name])."""
    hidden = {c: round(v, 2) for c, v in check_losses(results).items()
              if v > eps and c not in mutant.checks} if mutant.checks else {}
    public = sorted(n for names in failures.values() for n in names
                    if n.split("[")[0] not in mutant.tests) if mutant.tests else []
    return hidden, public


def named(results, owners, part):
    """Whether every failing test of `part` in a results.json says to fix one of the `owners` parts first
    ("fix Part N first"): an inherent dependency the case names (the observation needs the other part),
    which the proofs count as such, not as a silent cascade."""
    said = tuple(f"fix Part {registry.number(p)} first" for p in owners)
    failing = [t for t in (results or {}).get("tests", []) if part in (t.get("tags") or [])
               and float(t.get("score", 0)) < float(t.get("max_score", 0)) - 1e-9]
    return bool(failing) and all(any(x in (t.get("output") or "") for x in said) for t in failing)


def outside(parts, losses, failures, eps=1e-6):
    """What a mutant labelled `parts` costs elsewhere: ({part: points}, {part: [public tests]})."""
    return ({p: round(v, 2) for p, v in losses.items() if v > eps and p not in parts},
            {p: names for p, names in failures.items() if p not in parts})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every mutant's public failures here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from grader.selftest import mutants
    with tempfile.TemporaryDirectory() as root:
        dirs = {}
        for m in mutants.MUTANTS:
            d = Path(root) / m.name
            d.mkdir()
            (d / "paged_kv.py").write_text(mutants.apply(m))
            dirs[m.name] = d
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            found = dict(zip(dirs, pool.map(public_failures, dirs.values())))
    spread = 0
    for m in mutants.MUTANTS:
        _, elsewhere = outside(m.parts, {}, found[m.name])
        _, unnamed = beyond_checks(m, None, found[m.name])
        spread += bool(elsewhere or unnamed)
        own = sum(len(found[m.name].get(p, [])) for p in m.parts)
        print(f"{'+'.join(m.parts):40s} {m.name:28s} public tests failing: own {own:3d}"
              + (f"; ELSEWHERE {elsewhere}" if elsewhere else "") + (f"; NOT ITS OWN {unnamed}" if unnamed else ""))
    print(f"\n{spread} of {len(mutants.MUTANTS)} mutants fail public tests outside their parts or named tests")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))
    return 1 if spread else 0


if __name__ == "__main__":
    sys.exit(main())
