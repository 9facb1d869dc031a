"""Prove the grader: grade every mutant, correct variant and hostile submission, and check the verdicts.

    python -m grader.selftest.run [--jobs 2] [--only mutants|variants|hostile|strategic] [--seed N] [--json PATH]

Each submission is built into a temp folder and graded by the grader's own command line,
`python -m grader SUBMISSION --results PATH` (N at a time), exactly as a student's would be; our own
corpus (mutants, variants, the strategic corpus) through warm.py, which forks that command from one
process with the imports done (--cold: not). Checks:

  * the reference scores 100 (plus every bonus part's points with the bonus on: rubric.BONUS) and the stubs 0;
  * every mutant loses points, and loses points in its own part (the `tags` of results.json);
  * one bug, one charge (cascade.py): no mutant loses points, or fails a public test, in a part it is
    not labelled with, nor, when it names its checks, in another check or public test; the reference
    and every correct variant pass every public test, none skipped but a bonus not attempted;
  * every check earns its place (earns.py): a mutant it alone of its part's checks catches, or a line
    in mutants.JOINT or SWEEPS saying why not (judged when every mutant was graded);
  * every correct variant scores exactly 100, plus the points of each bonus part it writes (mutants.writes_part);
  * every hostile submission scores no more than its honest base (stubs: the stubs' score, solution:
    the reference's, a mutant: that mutant's), changes no file of the project's grader/, solution/,
    lab/, tests/ (hashed before and after; nothing new may appear, the canaries must survive), leaves
    every results.json untouched (compared 12 s after the last grading, when every detached process
    could have acted), leaks no line of the reference or the hidden suites into results.json (and the
    leak_* ones read back no more hidden tokens than feedback.PART_BITS per part allows), leaves
    no process (named sth-*), no marker or dropped file (carrying the hostile token) anywhere, and
    never reaches the canary port;
  * grading the reference, a mutant of every part and two variants twice gives identical results apart
    from execution_time (the second time by the command line: the warm start's gradings, whose sandbox
    calls are forked (forked.py), agree with it);
  * the strategic corpus (strategic.py): for every pair (bug X, sacrifice S in another part) the losses
    add up, loss(X + S) >= loss(X) + loss(S), in total and per part; no trick scores above its honest
    base, Part 3's gathering loses Part 3's points; an entry fails unless strategic.KNOWN_OPEN lists it,
    and a listed entry that holds fails too (a grading it shares with a mutant is graded once);
  * every grading finishes (exit 0, a results.json with a score).

The corpus itself is checked without the grader by verify_corpus.py; teeth.sh shows the hostile
submissions breaching a grader whose isolation is turned off (so "contained" means something).

Prints a short report; exits non-zero on any failure, listing which. Hostile submissions are only run
as root (the grader isolates only then); --allow-unisolated runs them anyway (they are self-limiting,
and what they leave behind is found and removed, but they may write into this checkout meanwhile).
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO)) if str(REPO) not in sys.path else None

from grader import feedback, rubric  # noqa: E402
from grader.selftest import cascade, earns, leaks, strategic  # noqa: E402
from grader.selftest import hostile as hostile_mod  # noqa: E402
from grader.selftest import mutants as mutants_mod  # noqa: E402
from grader.selftest import warm as warm_mod  # noqa: E402

PARTS = tuple(p for p in mutants_mod.PARTS if p in rubric.ALL_PARTS)     # a bonus switched off is not graded
FULL = rubric.TOTAL + rubric.BONUS_TOTAL       # the reference's score: 100, plus the bonus when it is on
WATCHED = ("grader", "solution", "lab", "tests")           # hashed before and after the hostile ones
DETACHED_WAIT = 12.0                                       # s after the last grading
GRADING_TIMEOUT = 1200.0                                   # s for one `python -m grader` (a hang is a failure)
# Graded twice: the twins by the command line, the originals (a mutant of every part, two variants) by the
# warm start with forked sandbox calls (forked.py): the two must give the same results.
DETERMINISM = ("alloc_fifo_reuse", "slots_swapped", "bw_softmax_per_block", "cow_always_n_copies",
               "evict_most_recent_first", "trie_ordereddict", "custom_errors_debug")
SCAN_ROOTS = ("/", "/tmp", "/var/tmp", "/dev/shm", "/run")
SCAN_NAMES = ("sth-*", "zz_sth_*", "sth_dropped_*", "sitecustomize.py", "usercustomize.py", "conftest.py",
              "pytest.ini", "results.json")
EPS = 1e-6
CANARY_TEXT = "the hostile submissions must not be able to delete this\n"
# Slowest first, so that the long ones overlap with the rest.
SLOW_FIRST = ("hang_in_call", "memory_bomb", "fork_bomb", "output_flood", "detached_rewriter",
              "slow_per_token", "hang_import", "network", "steal_reference", "drop_files", "tamper_grader")


@dataclass
class Sub:
    kind: str                 # reference | stubs | mutant | variant | hostile | again | strategic
    name: str
    text: str
    part: str = ""            # mutants: the part it must cost
    parts: tuple = ()         # mutants: every part it may cost (its own first)
    base: str = ""            # hostile: stubs | solution | mutant name; again: the graded twin's key
    key: str = ""
    path: Path = None
    results: Path = None
    exit: int = None
    wall: float = 0.0
    data: dict = None
    raw: bytes = b""
    stderr: str = ""
    public: dict = None       # our own corpus: {part: [failing public tests]}
    args: tuple = ()          # more arguments of its grading (the generated corpus's: --seed N)
    problems: list = field(default_factory=list)

    @property
    def score(self):
        return None if self.data is None else self.data.get("score")

    def lost(self, part):
        """Points lost in the tests tagged with `part`."""
        return sum(float(t.get("max_score", 0)) - float(t.get("score", 0))
                   for t in (self.data or {}).get("tests", []) if part in (t.get("tags") or []))


# ------------------------------------------------------------------------------- the corpus
def corpus(only, port, seed=0):
    subs = [Sub("reference", "reference", mutants_mod.reference_text())]
    if only == "strategic":
        return strategic_subs(subs, seed)
    want_mutants = only in (None, "mutants")
    want_hostile = only in (None, "hostile")
    needed = {h.base for h in hostile_mod.HOSTILES} if want_hostile else set()
    for m in mutants_mod.MUTANTS:
        if m.part not in PARTS:
            continue                    # a mutant of a bonus part the rubric switched off
        if want_mutants or m.name in needed:
            subs.append(Sub("mutant", m.name, mutants_mod.apply(m), part=m.part, parts=m.parts))
    if only in (None, "variants"):
        for p in sorted((HERE / "variants").glob("*.py")):
            if not p.name.startswith("_"):
                subs.append(Sub("variant", p.stem, p.read_text()))
    if want_hostile:
        subs.append(Sub("stubs", "stubs", hostile_mod.STUBS))
        for h in hostile_mod.HOSTILES:
            if any(part not in PARTS for part, _ in h.caps):
                continue                # aimed at a bonus part the rubric switched off
            subs.append(Sub("hostile", h.name, hostile_mod.build(h, port), base=h.base))
    if want_mutants:
        for twin in ("reference", *DETERMINISM):
            orig = next((s for s in subs if s.name == twin), None)
            if orig is None:
                continue                # a variant, with --only mutants
            subs.append(Sub("again", twin, orig.text, base=f"{orig.kind}:{twin}"))
    for s in subs:
        s.key = f"{s.kind}:{s.name}"
    if only is None:
        subs = strategic_subs(subs, seed)
    return subs


STRATEGIC = {}        # strategic key -> the key of the grading that answers it (shared with an equal text)
NAMED = {}            # mutant -> {part: points} it loses elsewhere in cases that name its part to fix first


def strategic_subs(subs, seed):
    """The strategic corpus's gradings, each text graded once: one equal to a mutant's (or the
    reference's) reuses that grading."""
    for s in subs:
        s.key = s.key or f"{s.kind}:{s.name}"
    by_text = {s.text: s.key for s in subs if s.kind in ("reference", "mutant")}
    STRATEGIC.clear()
    for name, text in strategic.submissions(seed).items():
        if text in by_text:
            STRATEGIC[name] = by_text[text]
            continue
        s = Sub("strategic", name, text, key=f"strategic:{name}")
        subs.append(s)
        by_text[text] = STRATEGIC[name] = s.key
    return subs


def build(subs, root):
    for s in subs:
        d = root / "subs" / s.key.replace(":", "-")
        d.mkdir(parents=True)
        s.path = d / "paged_kv.py"
        s.path.write_text(s.text)
        s.results = root / "results" / (s.key.replace(":", "-") + ".json")
    (root / "results").mkdir()
    (root / "logs").mkdir()


def order(subs):
    rank = {n: i for i, n in enumerate(SLOW_FIRST)}
    return sorted(subs, key=lambda s: (rank.get(s.name, len(rank)), s.kind == "again"))


# ------------------------------------------------------------------------------- grading
GRADER_ARGS = []      # extra arguments for every `python -m grader` (--grader-args)


WARM_KINDS = ("mutant", "variant", "strategic", "generated")   # graded through warm.py's warm start (our own corpus)
FORKED_KINDS = ("mutant", "variant", "generated")   # of those, their sandbox calls forked (forked.py: the honest
#                                          corpus), and the strategic corpus's plain bugs (strategic.honest), not its
#                                          tricks. "generated": generate.py's gradings (their public tests run apart)
WARM = []             # [the warm.Warm server] while main runs, unless --cold


def _warm_pytest(args, cwd, log, env, timeout):
    return WARM[0].run("pytest", args, cwd, log, env, timeout)


def _launch(argv, log):
    """`python -m grader ARGV` by its command line: its exit code, its output in `log`; raises
    subprocess.TimeoutExpired (its session killed) after GRADING_TIMEOUT. These gradings (the hostile
    corpus, the twins) compile the grader once into a pycache folder of their own (the sandbox hides
    it as it hides the checkout) and read no pyc the honest corpus's runs or make check wrote."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "grader", *argv], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=cascade.pycache_env("cold"))
        try:
            return proc.wait(GRADING_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise


def grade(s, root):
    """Run the grader's command line on one submission (through the warm start for WARM_KINDS); fills
    exit, wall, data, raw."""
    log = root / "logs" / (s.key.replace(":", "-") + ".log")
    argv = [str(s.path), "--results", str(s.results), *GRADER_ARGS, *s.args]
    warm = bool(WARM) and s.kind in WARM_KINDS
    forked = s.kind in FORKED_KINDS or s.kind == "strategic" and strategic.honest(s.name)
    start = time.monotonic()
    try:
        s.exit = WARM[0].run("grader", argv, REPO, log, cascade.own_corpus_env(), GRADING_TIMEOUT,
                             forked=forked) if warm \
            else _launch(argv, log)
        if s.exit is None:
            s.problems.append("the warm start's server died (warm.py)")
    except subprocess.TimeoutExpired:
        s.exit = None
        s.problems.append(f"the grader did not finish within {GRADING_TIMEOUT:g} s")
    s.wall = time.monotonic() - start
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - 4000))
        s.stderr = f.read().decode("utf-8", "replace")
    if s.kind in ("reference", "mutant", "variant"):      # our own corpus: safe to run outside the sandbox
        s.public = cascade.public_failures(s.path.parent, correct=s.kind in ("reference", "variant"),
                                           launch=_warm_pytest if WARM else cascade._launch)
    if s.exit not in (0, None):
        s.problems.append(f"the grader exited {s.exit}: {s.stderr.strip()[-600:]}")
    try:
        s.raw = s.results.read_bytes()
        s.data = json.loads(s.raw)
        if not isinstance(s.data.get("score"), (int, float)) or not isinstance(s.data.get("tests"), list):
            s.problems.append("results.json has no numeric score or no tests list")
            s.data = None
    except (OSError, ValueError) as e:
        s.problems.append(f"no readable results.json ({type(e).__name__}: {e})")
        s.data = None
    return s


# ------------------------------------------------------------------------------- evidence
def tree_hashes():
    """sha256 of every file (and symlink target) under the watched folders of the checkout."""
    out = {}
    for top in WATCHED:
        for dirpath, dirnames, filenames in os.walk(REPO / top):
            for f in filenames:
                p = Path(dirpath) / f
                try:
                    out[str(p.relative_to(REPO))] = ("link:" + os.readlink(p)) if p.is_symlink() else \
                        hashlib.sha256(p.read_bytes()).hexdigest()
                except OSError as e:
                    out[str(p.relative_to(REPO))] = f"unreadable: {e}"
    return out


def scan_dropped(since, exclude=None):
    """Files anywhere (names an attack would use) modified after `since` that carry the token, outside
    `exclude` (the selftest's own folder) and the checkout's build/ (where make check's Gradescope
    simulation, run meanwhile, grades a hostile submission of its own in its Debian roots)."""
    expr = []
    for n in SCAN_NAMES:
        expr += ["-o", "-name", n]
    found = set()
    for root in SCAN_ROOTS:
        if not os.path.isdir(root):
            continue
        cmd = ["find", root, "-xdev", "(", "-path", "/proc", "-o", "-path", "/sys", ")", "-prune", "-o",
               "-newermt", f"@{since:.0f}", "(", *expr[1:], ")", "-type", "f", "-print"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
        except subprocess.TimeoutExpired:
            continue
        for line in out.splitlines():
            if any(x and (line + "/").startswith(str(x).rstrip("/") + "/") for x in (exclude, REPO / "build")):
                continue
            try:
                with open(line, "rb") as f:
                    if hostile_mod.TOKEN.encode() in f.read(1 << 20):
                        found.add(line)
            except OSError:
                pass
    return sorted(found)


def hostile_processes():
    """(pid, comm) of live processes named sth-*."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if comm.startswith(hostile_mod.PROC_PREFIX) and state != "Z":
                found.append((int(pid), comm))
    return found


def leak_lines():
    """Lines of the reference and of the hidden suites that must never show up in a student's results."""
    lines = set()
    files = [REPO / "solution" / "paged_kv.py", *sorted((REPO / "grader" / "hidden").glob("*.py"))]
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if len(line) >= 45 and not line.startswith(("#", '"""', "def ", "class ", "import ", "from ")):
                lines.add(line)
    return lines


class Canary:
    """Listens on 127.0.0.1 and ::1 (CANARY_PORT, else any free port) and counts connections."""

    def __init__(self):
        self.hits, self.socks = [], []
        port = hostile_mod.CANARY_PORT
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            try:
                s = socket.socket(family, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((host, port))
                except OSError:
                    s.bind((host, 0))
                port = s.getsockname()[1]
                s.listen(64)
                s.settimeout(0.5)
                self.socks.append(s)
            except OSError:
                continue
        self.port = port
        self.stop = False
        self.threads = [threading.Thread(target=self._accept, args=(s,), daemon=True) for s in self.socks]
        for t in self.threads:
            t.start()

    def _accept(self, s):
        while not self.stop:
            try:
                conn, addr = s.accept()
            except OSError:
                continue
            self.hits.append(str(addr))
            conn.close()

    def close(self):
        self.stop = True
        for s in self.socks:
            s.close()


def strip_times(x):
    if isinstance(x, dict):
        return {k: strip_times(v) for k, v in x.items() if k != "execution_time"}
    if isinstance(x, list):
        return [strip_times(v) for v in x]
    return x


def first_difference(a, b, path="results"):
    """Where two results first differ, with both values (short), for the determinism failure."""
    if type(a) is not type(b):
        return f"{path}: {str(a)[:160]!r} vs {str(b)[:160]!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {str(a)[:160]!r} vs {str(b)[:160]!r}"


def repair(before, after):
    """Undo what hostile submissions did to the checkout, and nothing else: remove the exact lines the
    attacks append ("# <TOKEN> tamper ...", "# <TOKEN> late tamper ...") and the new files they drop
    (carrying the token). Never touches grader/selftest/ (the corpus itself names the token). A file
    changed in any other way (a concurrent edit?) is only reported. Returns what was not repaired."""
    left = []
    token = hostile_mod.TOKEN
    appended = (f"# {token} tamper ", f"# {token} late tamper ")
    droppable = ("sth_dropped_", "sth-marker-", "conftest.py", "pytest.ini", "sitecustomize.py", "usercustomize.py")
    for rel in sorted(set(after) - set(before)):
        p = REPO / rel
        try:
            if not rel.startswith("grader/selftest/") and p.name.startswith(droppable) \
                    and token.encode() in p.read_bytes():
                p.unlink()
                continue
        except OSError:
            pass
        left.append(f"new file {rel}")
    for rel in sorted(k for k in before if k in after and before[k] != after[k]):
        p = REPO / rel
        try:
            text = p.read_text()
        except (OSError, UnicodeDecodeError):
            left.append(f"changed file {rel}")
            continue
        lines = text.split("\n")
        kept = [ln for ln in lines if not ln.startswith(appended)]
        if rel.startswith("grader/selftest/") or len(kept) == len(lines):
            left.append(f"changed file {rel}")
            continue
        while len(kept) > 1 and kept[-1] == "" and kept[-2] == "":    # the blank line each append adds
            kept.pop()
        p.write_text("\n".join(kept))
        if hashlib.sha256(p.read_bytes()).hexdigest() != before[rel]:
            left.append(f"changed file {rel} (hostile lines removed, but it still differs)")
    return left


# ------------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", choices=("mutants", "variants", "hostile", "strategic"))
    ap.add_argument("--seed", type=int, default=0, help="seed of the hidden inputs (the strategic corpus's "
                    "targeted sacrifices aim at this seed's cases; KNOWN_OPEN is seed 0's)")
    ap.add_argument("--json", help="write every verdict and timing here")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (submissions, results, logs)")
    ap.add_argument("--cold", action="store_true", help="every grading and public-test run by its own command line "
                    "(no warm start: warm.py)")
    ap.add_argument("--allow-unisolated", action="store_true",
                    help="run the hostile submissions even when not root (no isolation)")
    ap.add_argument("--grader-args", default="", help="extra arguments for every `python -m grader` call "
                    "(e.g. \"--isolate no\" to see what the corpus does to an unisolated grader)")
    args = ap.parse_args(argv)
    GRADER_ARGS[:] = args.grader_args.split() + (["--seed", str(args.seed)] if args.seed else [])
    if not (REPO / "grader" / "__main__.py").is_file():
        print("selftest: `python -m grader` does not exist yet (grader/__main__.py missing)")
        return 2
    notes, failures = [], []
    only = args.only
    if only in (None, "hostile") and os.geteuid() != 0 and not args.allow_unisolated:
        notes.append("hostile submissions skipped: not root, so the grader cannot isolate them "
                     "(--allow-unisolated runs them anyway)")
        if only == "hostile":
            print("\n".join(notes))
            return 0
        only = "nonhostile"
    canary = Canary()
    WARM[:] = [] if args.cold else [warm_mod.Warm(REPO)]
    subs = corpus(None if only == "nonhostile" else only, canary.port, args.seed)
    if only == "nonhostile":
        subs = [s for s in subs if s.kind not in ("hostile", "stubs")]
    KNOWN[:] = [] if args.seed else [None]
    root = Path(tempfile.mkdtemp(prefix="cs349e-selftest-"))
    build(subs, root)
    t0 = time.monotonic()
    since = time.time() - 2
    dropped_before = set(scan_dropped(since - 3600 * 24 * 365, root)) if any(s.kind == "hostile" for s in subs) else set()
    canaries = [REPO / "grader" / "selftest" / ".canary" / "sth-canary-delete-me.txt"]
    try:
        ordered = order(subs)
        first = [s for s in ordered if s.key == "reference:reference"]
        grade(first[0], root)             # warm-up (pyc files, the sandbox runtime), then the snapshot
        for c in canaries:                # a tracked file; recreated if a broken run lost it
            if not c.exists():
                c.parent.mkdir(exist_ok=True)
                c.write_text(CANARY_TEXT)
        before = tree_hashes()
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            list(pool.map(lambda s: grade(s, root), [s for s in ordered if s not in first]))
        last_grading = time.monotonic()
        kept = {s.key: s.raw for s in subs}
        if any(s.kind == "hostile" for s in subs):
            time.sleep(max(0.0, DETACHED_WAIT - (time.monotonic() - last_grading)))
        wall = time.monotonic() - t0
        after = tree_hashes()
        evaluate(subs, before, after, kept, canaries, canary, dropped_before, since, root, failures, notes)
    finally:
        canary.close()
        for server in WARM:
            server.close()
        WARM.clear()
        for c in canaries:
            if not c.exists():
                c.parent.mkdir(exist_ok=True)
                c.write_text(CANARY_TEXT)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report = summarize(subs, wall, failures, notes, root if args.keep else None)
    print(report["text"])
    if args.json:
        Path(args.json).write_text(json.dumps(report["json"], indent=1))
    return 1 if failures else 0


KNOWN = [None]        # [None]: strategic.KNOWN_OPEN applies (seed 0); []: another seed, only measured


def evaluate_strategic(by, failures, notes):
    """The strategic corpus's verdicts (strategic.judge) from the gradings it maps to."""
    if not STRATEGIC:
        return
    ref = by.get("reference:reference")
    if ref is None or ref.data is None:
        return
    full = {p: sum(float(t.get("max_score", 0)) for t in ref.data["tests"] if p in (t.get("tags") or []))
            for p in PARTS}
    lost = {}
    for name, key in STRATEGIC.items():
        s = by.get(key)
        if s is None or s.data is None:
            failures.append(f"strategic {name}: no grading")
            return
        lost[name] = {**{p: s.lost(p) for p in PARTS}, "total": FULL - s.score}
    found, lines = strategic.judge(lost, full)
    if KNOWN:
        failures += found
    notes += [f"strategic: {ln}" for ln in lines]


def evaluate_earns(subs, failures, notes):
    """Every check earns its place (earns.py), from the mutants' gradings: only when every mutant of
    the graded parts was graded (a slice for the hostile corpus proves nothing about it). Enforced at
    seed 0, whose inputs the mutants were checked on; at another seed only noted."""
    ms = [s for s in subs if s.kind == "mutant"]
    if {s.name for s in ms} != {m.name for m in mutants_mod.MUTANTS if m.part in PARTS} \
            or any(s.data is None for s in ms):
        return
    losses = {s.name: cascade.check_losses(s.data) for s in ms}
    found = earns.unearned(losses, {c.id: c.part for c in rubric.CHECKS.values()}, mutants_mod.JOINT,
                           mutants_mod.SWEEPS)
    if KNOWN:
        failures += found
    else:
        notes += [f"earns (not enforced at this seed): {f}" for f in found]


def evaluate(subs, before, after, kept, canaries, canary, dropped_before, since, root, failures, notes):
    by = {s.key: s for s in subs}
    for s in subs:
        for p in s.problems:
            failures.append(f"{s.key}: {p}")
    evaluate_strategic(by, failures, notes)
    evaluate_earns(subs, failures, notes)
    ref = by["reference:reference"]
    if ref.data is not None and abs(ref.score - FULL) > EPS:
        failures.append(f"reference scores {ref.score}, not {FULL}")
    if "stubs:stubs" in by and by["stubs:stubs"].data is not None and by["stubs:stubs"].score > EPS:
        failures.append(f"stubs score {by['stubs:stubs'].score}, not 0")
    for s in subs:
        if s.data is None:
            continue
        if s.kind in ("reference", "variant") and s.public:
            failures.append(f"{s.kind} {s.name} fails public tests: {s.public}")
        if s.kind == "mutant":
            losses = cascade.hidden_losses(s.data, PARTS)
            hidden, public = cascade.outside(s.parts, losses, s.public or {})
            if s.score >= FULL - EPS:
                failures.append(f"mutant {s.name} ({s.part}) survives: scores {s.score}")
            elif s.lost(s.part) <= EPS:
                lost = {p: round(v, 2) for p, v in losses.items() if v > EPS}
                failures.append(f"mutant {s.name} loses points only outside its part {s.part}: {lost}")
            said = {p: v for p, v in hidden.items() if cascade.named(s.data, s.parts, p)}
            if said:
                NAMED[s.name] = said
            hidden = {p: v for p, v in hidden.items() if p not in said}
            if hidden:
                failures.append(f"mutant {s.name} ({'+'.join(s.parts)}) loses points in other parts: {hidden}")
            if public:
                failures.append(f"mutant {s.name} ({'+'.join(s.parts)}) fails public tests of other parts: {public}")
            hidden, public = cascade.beyond_checks(mutants_mod.BY_NAME[s.name], s.data, s.public or {})
            if hidden:
                failures.append(f"mutant {s.name} (only {', '.join(mutants_mod.BY_NAME[s.name].checks)}) loses points "
                                f"in other checks: {hidden}")
            if public:
                failures.append(f"mutant {s.name} fails public tests it does not name: {public[:8]}")
        elif s.kind == "variant" and abs(s.score - variant_full(s)) > EPS:
            bad = [f"{t.get('name')}: {t.get('score')}/{t.get('max_score')}" for t in s.data["tests"]
                   if float(t.get("score", 0)) < float(t.get("max_score", 0)) - EPS]
            failures.append(f"correct variant {s.name} scores {s.score}, not {variant_full(s)}: "
                            + "; ".join(bad)[:800])
        elif s.kind == "again":
            twin = by.get(s.base)
            if twin is not None and twin.data is not None and strip_times(twin.data) != strip_times(s.data):
                failures.append(f"{s.name} graded twice gives different results (apart from execution_time): "
                                f"{first_difference(strip_times(twin.data), strip_times(s.data))}")
    hostile = [s for s in subs if s.kind == "hostile"]
    if not hostile:
        return
    honest = {"stubs": by.get("stubs:stubs"), "solution": ref}
    for s in hostile:
        base = honest.get(s.base) or by.get(f"mutant:{s.base}")
        if s.data is None or base is None or base.data is None:
            continue
        if s.score > base.score + EPS:
            failures.append(f"hostile {s.name} scores {s.score}, more than its honest base {s.base} ({base.score})")
        for part, cap in hostile_mod.BY_NAME[s.name].caps:
            earned = sum(float(t.get("score", 0)) for t in s.data["tests"] if part in (t.get("tags") or []))
            if earned > cap + EPS:
                failures.append(f"hostile {s.name} earns {earned:.2f} points in {part}, more than {cap}")
    # the checkout
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    new = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    if changed or new or gone:
        evidence = []
        for rel in changed + new:
            try:
                evidence += [ln.strip() for ln in (REPO / rel).read_text().splitlines() if hostile_mod.TOKEN in ln]
            except (OSError, UnicodeDecodeError):
                pass
        failures.append(f"project files changed during grading: changed {changed[:10]}, new {new[:10]}, "
                        f"deleted {gone[:10]}; hostile lines: {sorted(set(evidence))[:5]}")
        left = repair(before, after)
        notes.append("repaired the checkout (hostile lines and files removed)" +
                     (f"; could not repair: {left}" if left else ""))
    for c in canaries:
        if not c.exists():
            failures.append(f"canary {c.relative_to(REPO)} was deleted")
    # results after grading
    for s in subs:
        try:
            now = s.results.read_bytes()
        except OSError:
            now = None
        if kept.get(s.key) and now != kept[s.key]:
            failures.append(f"results of {s.key} changed after grading: now {(now or b'(gone)')[:160]!r}")
    failures += read_back(hostile, notes)
    # leaks into feedback
    lines = leak_lines()
    for s in hostile:
        text = s.raw.decode("utf-8", "replace")
        leaked = [ln for ln in lines if ln in text]
        if leaked:
            failures.append(f"hostile {s.name}: results.json contains staff code: {leaked[0][:80]!r}")
    # processes, files, network
    procs = hostile_processes()
    if procs:
        failures.append(f"hostile processes still alive after grading: {procs[:10]}")
        for pid, _ in procs:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    dropped = [p for p in scan_dropped(since, root) if p not in dropped_before]
    if dropped:
        failures.append(f"files left by hostile submissions outside their sandbox: {dropped[:12]}")
        for p in dropped:
            try:
                os.remove(p)
            except OSError:
                pass
    if canary.hits:
        failures.append(f"hostile submissions reached the canary port {canary.port}: {canary.hits[:5]}")


def read_back(hostile, notes):
    """Hidden inputs read back through the feedback by the leak_* submissions (leaks.py): failures when
    one reads back more than the values a student may see (feedback.PART_BITS per part); the counts
    go to the notes."""
    failures = []
    for s in hostile:
        if s.name.startswith("leak_") and s.data is not None:
            got = leaks.leaked(s.data, seed=0)
            read = got["tokens"] + got["statuses"]
            notes.append(f"{s.name} reads back {read} hidden tokens (longest run {got['longest']}"
                         + (f", {got['statuses']} as exit statuses" if got["statuses"] else "") + ")")
            if read * 8 > len(PARTS) * feedback.PART_BITS:
                failures.append(f"hostile {s.name} reads back {read} hidden tokens through the feedback, "
                                f"more than its bound ({len(PARTS)} parts x {feedback.PART_BITS} bits)")
    return failures


def variant_full(s):
    """A correct variant's score: TOTAL, plus the points of each bonus part it writes (a variant
    written before the bonus existed is graded as then: 100)."""
    return rubric.TOTAL + sum(rubric.part_points(p) for p in rubric.BONUS_PARTS if mutants_mod.writes_part(s.text, p))


def by_family(hs, contained):
    """'family n/m' for each attack family of hostile.py with a grading here: what the report groups by."""
    fam = {h.name: h.family for h in hostile_mod.HOSTILES}
    out = []
    for f in hostile_mod.FAMILIES:
        mine = [s for s in hs if fam.get(s.name) == f]
        if mine:
            out.append(f"{f} {sum(s in contained for s in mine)}/{len(mine)}")
    return out


def summarize(subs, wall, failures, notes, kept_root):
    ms = [s for s in subs if s.kind == "mutant"]
    killed = [s for s in ms if s.data is not None and s.score < FULL - EPS]
    own = [s for s in killed if s.lost(s.part) > EPS]
    vs = [s for s in subs if s.kind == "variant"]
    full = [s for s in vs if s.data is not None and abs(s.score - variant_full(s)) < EPS]
    hs = [s for s in subs if s.kind == "hostile"]
    breached = {s.name for s in hs if s.problems or any(s.name in f for f in failures)}
    global_h = [f for f in failures if not f.startswith(("hostile ", "mutant ", "correct variant ", "reference",
                                                          "stubs", "again:", "mutant:", "variant:", "hostile:"))
                and not any(s.name in f for s in hs)]
    contained = [s for s in hs if s.name not in breached]
    lines = ["", "selftest of the grader", "=" * 60]
    if ms:
        per = []
        for p in PARTS:
            pm = [s for s in ms if s.part == p]
            per.append(f"{p} {sum(s in own for s in pm)}/{len(pm)}")
        lines.append(f"mutation score: {len(killed)}/{len(ms)} killed, {len(own)}/{len(ms)} in their own part "
                     f"({', '.join(per)})")
    if ms:
        alone = [s for s in ms if s.data is not None and not any(cascade.outside(s.parts, cascade.hidden_losses(
            s.data, PARTS), s.public or {}))]
        labelled = [s for s in ms if len(s.parts) > 1]
        lines.append(f"one bug, one charge: {len(alone)}/{len(ms)} mutants cost points and fail public tests only in "
                     f"their parts ({len(labelled)} labelled with more than one part: "
                     + ", ".join(f"{s.name} {'+'.join(s.parts)}" for s in labelled) + ")")
        if NAMED:
            lines.append(f"named dependencies: {len(NAMED)} mutants lose points in another part only in cases that "
                         "name their part to fix first: " + ", ".join(f"{m} {d}" for m, d in NAMED.items()))
    if vs:
        lines.append(f"correct variants: {len(full)}/{len(vs)} score full marks ({rubric.TOTAL}, {FULL} with the "
                     "bonus) "
                     + "(" + ", ".join(f"{s.name} {s.score}" for s in vs) + ")")
    if hs:
        lines.append(f"attacks contained: {len(contained)}/{len(hs)}"
                     + (f" (and {len(global_h)} failure(s) no single attack can be blamed for)" if global_h else ""))
        lines.append("  by family: " + "; ".join(by_family(hs, contained)))
    times = sorted(subs, key=lambda s: -s.wall)
    lines.append(f"grading wall time: {wall:.0f} s for {len(subs)} gradings; slowest: "
                 + ", ".join(f"{s.key} {s.wall:.0f} s" for s in times[:4]))
    for n in notes:
        lines.append(f"note: {n}")
    if kept_root:
        lines.append(f"kept: {kept_root}")
    lines.append(f"{'FAILED' if failures else 'PASSED'}: {len(failures)} failure(s)")
    lines += [f"  - {f}" for f in failures]
    js = {"passed": not failures, "failures": failures, "notes": notes, "wall_seconds": round(wall, 1),
          "submissions": [{"key": s.key, "kind": s.kind, "part": s.part, "parts": list(s.parts), "base": s.base,
                           "score": s.score, "public": s.public,
                           "lost": {p: round(s.lost(p), 3) for p in PARTS} if s.data else None,
                           "checks": {c: round(v, 3) for c, v in cascade.check_losses(s.data).items() if v > EPS}
                           if s.data else None,
                           "exit": s.exit, "wall": round(s.wall, 2), "problems": s.problems} for s in subs]}
    return {"text": "\n".join(lines), "json": js}


if __name__ == "__main__":
    sys.exit(main())
