"""The grader's selftest (grader/selftest/): the corpus is sound, and the grader passes it.

- the corpus, in-process and without the grader: every mutant differs from the reference on a graded,
  contract-specified behaviour of its own part, every correct variant agrees with the reference
  everywhere, every hostile submission builds (verify_corpus.py);
- the grader on the corpus (run.py): every mutant loses points in its own part, every correct
  variant scores 100, grading is deterministic, the strategic corpus (strategic.py) holds but for
  its KNOWN_OPEN entries (losses of a bug and a sacrifice add up, tricks earn nothing); and, as root
  only (the grader isolates only then),
  no hostile submission scores above its honest base, touches the grader's files or the results,
  or leaves anything behind.
Each prints run.py's report, so CI's log shows the mutation score and the containment summary.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0


@pytest.mark.slow
def test_a_correct_variant_whose_public_tests_skip_wrongly_fails_the_cascade(tmp_path):
    """A probe that wrongly decides a correct file must wait for Part 2 (planted in a copy of the
    public tests) skips Part 4's driver tests: for a correct variant that is a failure of those tests,
    while its Part 5 tests skipped as "bonus not attempted" are not; a mutant's skips stay allowed."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import cascade
    for d in ("tests", "tools", "lab"):
        shutil.copytree(REPO / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    support = tmp_path / "tests" / "support.py"
    text = support.read_text()
    assert text.count("def part2_works(pk):\n") == 1
    support.write_text(text.replace("def part2_works(pk):\n", "def part2_works(pk):\n    return False    # planted\n"))
    impl = tmp_path / "impl"
    impl.mkdir()
    shutil.copy(REPO / "grader" / "selftest" / "variants" / "plain_loops.py", impl / "paged_kv.py")
    assert "class PrefixCache" not in (impl / "paged_kv.py").read_text()     # its bonus skips are excused
    assert cascade.public_failures(impl, correct=True) == {}
    planted = cascade.public_failures(impl, correct=True, tests=tmp_path / "tests")
    assert set(planted) == {"copy_on_write"} and planted["copy_on_write"], planted
    assert all(" (skipped: " in n and "waits for paged_step (Part 2)" in n for n in planted["copy_on_write"]), planted
    assert cascade.public_failures(impl, tests=tmp_path / "tests") == {}       # not a correct one: skips allowed


def test_mutant_edits_are_exact_and_parts_known():
    """Fast: every edit of every mutant applies exactly once to the current reference."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import hostile, mutants
    counts = {}
    for m in mutants.MUTANTS:
        assert mutants.apply(m) != mutants.reference_text()
        counts[m.part] = counts.get(m.part, 0) + 1
    assert len(mutants.MUTANTS) >= 45 and set(counts) == set(mutants.PARTS), counts
    assert len(hostile.HOSTILES) >= 28
    for h in hostile.HOSTILES:
        compile(hostile.build(h), h.name, "exec")


def test_new_code_elsewhere_breaks_no_edit():
    """Every edit is made inside the function or class it names: a copy of the whole reference appended under
    other names (every line the corpus edits, twice in the file) breaks no mutant, unseen bug or strategic
    entry, and the copy is left as it was."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import mutants, strategic, unseen
    text = mutants.reference_text()
    tops = [name for name in mutants.scopes(text) if "." not in name and name != mutants.HEAD]
    copy = "".join(text[slice(*mutants.scopes(text)[n])] for n in tops)
    for name in tops:
        copy = copy.replace(f"class {name}", f"class {name}Again").replace(f"def {name}(", f"def {name}_again(")
    doubled = text + "\n\n" + copy
    for bug in [*mutants.MUTANTS, *unseen.BUGS, *(b for b in strategic.BUGS.values() if not callable(b.edits))]:
        out = mutants.edited(doubled, bug.edits, bug.name)
        assert out.endswith(copy) and out[:-len(copy)] == mutants.edited(text, bug.edits, bug.name) + "\n\n", bug.name


def test_hostile_attacks_are_grouped_by_family():
    """Every attack stands under a family heading, and the report counts what was contained per family."""
    sys.path.insert(0, str(REPO))
    from types import SimpleNamespace
    from grader.selftest import hostile, run
    assert all(h.family for h in hostile.HOSTILES) and len(hostile.FAMILIES) >= 5
    with pytest.raises(AssertionError):
        hostile.grouped([hostile.HOSTILES[0]])          # an attack before any heading
    first, second = hostile.FAMILIES[:2]
    hs = [SimpleNamespace(name=h.name) for h in hostile.HOSTILES if h.family in (first, second)]
    breached = hs[0]
    lines = run.by_family(hs, [s for s in hs if s is not breached])
    n1 = sum(h.family == first for h in hostile.HOSTILES)
    n2 = sum(h.family == second for h in hostile.HOSTILES)
    assert lines == [f"{first} {n1 - 1}/{n1}", f"{second} {n2}/{n2}"]


def test_strategic_corpus_is_sound():
    """Fast: the strategic corpus builds (every edit exactly once), its pairs cover Parts 1-5 with the
    sacrifice in another part, the issue's own cases are there, KNOWN_OPEN names entries that exist."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import strategic
    subs = strategic.submissions(0)
    for key, text in subs.items():
        compile(text, key, "exec")
    assert len(strategic.PAIRS) >= 12
    assert {strategic.BUGS[p.x].part for p in strategic.PAIRS} == set(strategic.PARTS)
    for p in strategic.PAIRS:
        assert all(strategic.BUGS[s].part != strategic.BUGS[p.x].part for s in p.s), p.name
        assert all(k in subs for k in strategic.keys(p)), p.name
    xs = {(p.x, p.s) for p in strategic.PAIRS}
    assert {("fork_raises", ("prefill_45",)), ("fork_raises", ("prefill_target",)),
            ("stale_table_write", ("tables_target", "prefill_target")),
            ("count_ignores_copies", ("copy_block_target",))} <= xs
    assert {t.trick for t in strategic.TRICKS} >= {"memo_twin", "twins_patched", "bw_gathers"}
    assert strategic.KNOWN_OPEN <= set(strategic.ENTRIES)
    # graded with forked calls (run.py): every pair's three and every trick's base; never a trick
    tricks = {strategic.keys(t)[1] for t in strategic.TRICKS}
    assert {k for k in subs if not strategic.honest(k)} == tricks
    assert all(strategic.honest(k) for p in strategic.PAIRS for k in strategic.keys(p))


def test_strategic_verdicts():
    """Fast: how an entry is judged, on made-up losses: a pair holds only when its losses add up (in
    total and per part, capped at the part's points), a free sacrifice proves nothing, a trick may not
    beat its base, and KNOWN_OPEN is enforced both ways."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import strategic
    pair = strategic.Pair("p", "fork_raises", ("prefill_45",), "")
    full = {"copy_on_write": 30.0, "paged_step": 30.0}

    def lost(cow, step):
        return {"copy_on_write": cow, "paged_step": step, "total": cow + step}
    kx, ks, kxs = strategic.keys(pair)
    base = {kx: lost(30, 0), ks: lost(0, 3.67)}
    assert strategic.verdict(pair, {**base, kxs: lost(30, 3.67)}, full)[0] == ""
    assert "copy_on_write 23.00 < 30.00" in strategic.verdict(pair, {**base, kxs: lost(23, 3.67)}, full)[0]
    assert strategic.verdict(pair, {kx: lost(30, 3), ks: lost(0, 29), kxs: lost(30, 30)}, full)[0] == ""  # capped
    assert "costs nothing" in strategic.verdict(pair, {kx: lost(30, 0), ks: lost(0, 0), kxs: lost(30, 0)}, full)[0]
    trick = strategic.Trick("t", ("p5_zero_logits",), "twins_patched", "")
    kb, kt = strategic.keys(trick)
    assert "earns 2.00" in strategic.verdict(trick, {kb: lost(2, 0), kt: lost(0, 0)}, full)[0]
    assert strategic.verdict(trick, {kb: lost(2, 0), kt: lost(2, 0)}, full)[0] == ""
    bw = next(t for t in strategic.TRICKS if t.loses)
    part, points = bw.loses[0]
    assert strategic.verdict(bw, {strategic.keys(bw)[1]: {**lost(0, 0), part: points - 1}}, full)[0]
    good = {**base, kxs: lost(30, 3.67)}
    original = strategic.ENTRIES
    try:
        strategic.ENTRIES = {"p": pair}
        assert strategic.judge(good, full, known=set())[0] == []
        assert "holds now" in strategic.judge(good, full, known={"p"})[0][0]
        assert strategic.judge({**base, kxs: lost(23, 3.67)}, full, known={"p"})[0] == []
        assert strategic.judge({**base, kxs: lost(23, 3.67)}, full, known=set())[0]
    finally:
        strategic.ENTRIES = original


def test_unseen_bugs_are_new_and_apply():
    """Fast: at least 40 realistic bugs, each edit exactly once, none a copy of a mutant. (A new part needs
    none of its own: the generated corpus has every part's bugs nobody wrote, checks/test_generate.py.)"""
    sys.path.insert(0, str(REPO))
    from grader.selftest import mutants, unseen
    seen = {mutants.apply(m) for m in mutants.MUTANTS}
    texts = [mutants.apply(b) for b in unseen.BUGS]
    assert len(unseen.BUGS) >= 40 and {b.part for b in unseen.BUGS} <= set(unseen.PARTS)
    assert not [b.name for b, t in zip(unseen.BUGS, texts) if t in seen]
    assert len(set(texts)) == len(texts)
    assert len(unseen.systematic()) >= 40


GENERATED = ["--sample", "12", "--seeds", "1,3", "--corpus", "generated"]     # make check's share of the corpus
BACKGROUND = {"test_grader_passes_its_selftest": lambda: [sys.executable, "-m", "grader.selftest.run"],
              "test_corpus_verified_in_process": lambda: [sys.executable, "-m", "grader.selftest.verify_corpus"],
              "test_generated_mutants_hold_every_proof":
                  lambda: [sys.executable, "-m", "grader.selftest.generate", *GENERATED, "--enforce"]}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_generated_mutants_hold_every_proof(background):
    """Bugs nobody here wrote: a stratified sample of the generated corpus (grader/selftest/generate.py,
    one mutant per part and kind of edit first), graded on two seeds other than the hand-written
    corpus's, holds every proof (proofs.violations): killed on both seeds unless equivalent.py says why
    not, a failing public test loses hidden points in its part, a loss outside the mutant's parts names
    one of them to fix first, its total moves by 2 points at most, no "got NoneType". The whole corpus
    on 5 seeds is `python -m grader.selftest.generate` (README)."""
    code, said = background.wait(880)
    print(said[-12000:])
    assert code == 0, "a proof failed on the generated sample: see PROOF FAILED lines above"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_corpus_verified_in_process(background):
    code, said = background.wait(880)       # started when collection ended (conftest.py), run meanwhile
    print(said[-12000:])
    assert code == 0, "the corpus is not sound: see PROBLEM lines above"


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_grader_passes_its_selftest(background):
    """Mutants, variants, the strategic corpus and (as root) the hostile submissions, graded in one run,
    so that the long ones (hangs, bombs) overlap with the rest and a strategic text equal to a mutant is
    graded once: every mutant costs points in its own parts only, every variant scores full marks,
    every strategic pair adds up and no trick earns anything (but strategic.KNOWN_OPEN, which must
    be exactly the entries that fail), every attack is contained, grading is deterministic."""
    code, said = background.wait(2300)      # started when collection ended (conftest.py), run meanwhile
    print(said[-16000:])
    assert code == 0, "selftest failed: see the report above"


if not IS_ROOT:       # as root they run in test_grader_passes_its_selftest
    def test_hostile_submissions_need_root():
        pytest.skip("the hostile submissions were not run: the grader isolates submissions only as root (CI is root)")


def test_the_warm_start_answers_as_the_command_line_does(tmp_path):
    """warm.py, the selftest's warm start for our own corpus: a run's exit code and output are the
    command line's (a missing submission: exit 2, said why), and a run past its time is killed."""
    sys.path.insert(0, str(REPO))
    from grader.selftest import warm
    missing = [str(tmp_path / "missing.py"), "--results", str(tmp_path / "r.json")]
    cold = subprocess.run([sys.executable, "-m", "grader", *missing], cwd=REPO, capture_output=True, text=True)
    (tmp_path / "test_sleeps.py").write_text("import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
    server = warm.Warm(REPO)
    try:
        assert server.run("grader", missing, REPO, tmp_path / "log", os.environ, 60) == cold.returncode == 2
        assert (tmp_path / "log").read_text() == cold.stdout + cold.stderr
        with pytest.raises(subprocess.TimeoutExpired):
            server.run("pytest", [str(tmp_path / "test_sleeps.py"), "-q", "-p", "no:cacheprovider"], tmp_path,
                       tmp_path / "log2", os.environ, 3)
        assert server.run("pytest", ["--version"], tmp_path, tmp_path / "log3", os.environ, 60) == 0
    finally:
        server.close()
    assert server.proc.returncode == 0
