"""Changing the assignment, done for real on a copy of the project (README.md, "Changing the assignment").

Three changes a course makes, each on its own copy (its files' hashes taken first, so what it
touched is counted; git is not needed): one point moved between two Part 2 checks, a new Part 3
check, and a throwaway bonus Part 7 that uses the pool, the sequences and the step. Each is made as
the README says (edit the files it lists, run `python tools/tables.py`), and then must load: the
tables are current, the grader grades the reference with the new check or part in its score, a stub
of the new part is "bonus not attempted", and the checks that hold every part to the same rules pass
on the copy. The files touched are asserted
against the README's counts, so a change that starts needing one more file fails here.
"""
import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(cwd, *args, timeout=900):
    return subprocess.run([*args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def project_files(root=ROOT):
    """The project's files as git sees them (tracked and new, not ignored), relative to root: asked of
    git when it is there, else walked with .gitignore's patterns (a machine without git: make check
    needs only make and python3)."""
    if shutil.which("git") and (root / ".git").exists():
        return sorted(filter(None, run(root, "git", "ls-files", "-co", "--exclude-standard").stdout.split("\n")))
    return _walk(root)


def _walk(root):
    """Every file under root that .gitignore's patterns (the subset this project's uses: a name, a
    glob, `dir/`, `/anchored`) do not leave out, and not .git."""
    patterns = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]

    def ignored(rel, is_dir):
        for pattern in patterns:
            if pattern.endswith("/") and not is_dir:
                continue
            bare = pattern.strip("/")
            if (rel == bare if pattern.startswith("/") else fnmatch.fnmatch(Path(rel).name, bare)):
                return True
        return rel == ".git"
    out, todo = [], [root]
    while todo:
        folder = todo.pop()
        for p in sorted(folder.iterdir()):
            rel = p.relative_to(root).as_posix()
            if p.is_symlink() or ignored(rel, p.is_dir()):
                continue
            if p.is_dir():
                todo.append(p)
            elif p.is_file():
                out.append(rel)
    return sorted(out)


def _hashes(root):
    return {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in _walk(root)}


@pytest.fixture
def copy(tmp_path):
    """The project's files (tracked and new, as git sees them) in a fresh folder, their hashes kept
    (touched() compares with them)."""
    dest = tmp_path / "main"
    for name in project_files():
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (tmp_path / "shared").symlink_to(ROOT.parent / "shared" if (ROOT.parent / "shared").exists() else tmp_path)
    BEFORE[dest] = _hashes(dest)
    return dest


BEFORE = {}     # a copy -> its files' hashes when it was made


def test_the_walk_without_git_lists_what_git_lists():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("no git here to compare the walk with")
    assert _walk(ROOT) == project_files()


def edit(root, name, old, new):
    path = root / name
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not once in {name}: update this check"
    path.write_text(text.replace(old, new), encoding="utf-8")


def append(root, name, text):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text(encoding="utf-8") if path.exists() else "") + text, encoding="utf-8")


def touched(root):
    """The files a change touched (changed, new or gone, git's view of what counts), after the tables
    were regenerated."""
    r = run(root, sys.executable, "tools/tables.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert run(root, sys.executable, "tools/tables.py", "--check").returncode == 0
    before, now = BEFORE[root], _hashes(root)
    return sorted(rel for rel in before.keys() | now.keys() if before.get(rel) != now.get(rel))


def grade(root, submission):
    out = root / "build" / f"{Path(submission).parent.name}.json"
    r = run(root, sys.executable, "-m", "grader", submission, "--results", str(out), "--isolate", "no")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text())


def test_moving_a_point_is_one_line_per_check(copy):
    edit(copy, "tests/registry.py", '("paged_step", "prefill", 3,', '("paged_step", "prefill", 2,')
    edit(copy, "tests/registry.py", '("paged_step", "chunked_prefill", 3,', '("paged_step", "chunked_prefill", 4,')
    assert touched(copy) == ["assignment.md", "assignment.zh-CN.md", "tests/registry.py"]
    assert "| `paged_step` | prefill logits equal the contiguous forward | 2 |" in (copy / "assignment.md").read_text()
    r = run(copy, sys.executable, "-c", "from grader import rubric; print(rubric.CHECKS['paged_step.prefill'].points)")
    assert r.stdout.strip() == "2", r.stderr


NEW_CHECK = '''
def test_a_numerically_stable_softmax(pk):
    """One head's largest score is 1000 (exp overflows above 709) unless its maximum is subtracted first."""
    attends_like_attention_core(pk, [2, 0, 5], 9, layer=1, q_seed=11, n_blocks=6, q_scale=1000.0)
'''


@pytest.mark.lane          # a process of its own beside the selftest (conftest.py)
@pytest.mark.slow
def test_a_new_part_3_check(copy):
    """A 2-point check of Part 3 (its points taken from two others: Part 3 stays 15): its registry
    line, its hidden plan, its public test; the tables are generated. Graded, the reference gets it."""
    edit(copy, "tests/registry.py", '("blockwise_attention", "boundaries", 5,', '("blockwise_attention", "boundaries", 4,')
    edit(copy, "tests/registry.py", '("blockwise_attention", "tables_layers", 5,',
         '("blockwise_attention", "tables_layers", 4,')
    edit(copy, "tests/registry.py", '    ("blockwise_attention", "empty", 1, "length 0: ValueError", "长度 0：ValueError"),\n',
         '    ("blockwise_attention", "empty", 1, "length 0: ValueError", "长度 0：ValueError"),\n'
         '    ("blockwise_attention", "stable_softmax", 2, "large scores: a numerically stable softmax", '
         '"很大的分数：数值稳定的 softmax"),\n')
    edit(copy, "grader/hidden/test_blockwise_attention.py", '    "blockwise_attention.empty": plan_empty,\n',
         '    "blockwise_attention.empty": plan_empty,\n'
         '    "blockwise_attention.stable_softmax": lambda rng: plan_tables_layers(rng)[-1:],\n')
    append(copy, "tests/test_blockwise_attention.py", NEW_CHECK)
    files = touched(copy)
    assert files == ["README.md", "assignment.md", "assignment.zh-CN.md", "grader/hidden/test_blockwise_attention.py",
                     "tests/registry.py", "tests/test_blockwise_attention.py"], files     # README's bound: generated
    assert "| `blockwise_attention` | 很大的分数：数值稳定的 softmax | 2 |" in (copy / "assignment.zh-CN.md").read_text()
    results = grade(copy, "solution/paged_kv.py")
    new = [t for t in results["tests"] if "numerically stable softmax" in t["name"]]
    full = 100 + sum(p.points for p in _bonus(copy))
    assert results["score"] == full and [(t["score"], t["max_score"]) for t in new] == [(2, 2)], results["output"]
    r = run(copy, sys.executable, "tools/labtool.py", "test", "--impl", "solution", "--part", "blockwise_attention")
    assert r.returncode == 0 and "Part 3: blockwise attention (blockwise_attention): 23 of 23 passed" in r.stdout, \
        r.stdout[-2000:]


# A throwaway bonus Part 7 that uses the pool, the sequences and the step, with two entry points (one can
# be written while the other is a stub), made as README.md's "Changing the assignment" says: each edit is
# a (file, find, replace) on a copy of the project, found by what surrounds the place a next part goes,
# not by today's last part, so the rehearsal holds whatever parts come before it.
PART7 = [
    ("tests/registry.py", "\n)\n\n# Every check: (part, check, points",
     '\n    _part("rollback", 7, "rolling back", "回退", "a sequence\'s last tokens dropped, its blocks given back",\n'
     '          "丢掉序列最后的 token，归还它的块",\n'
     '          [("function", "rollback", ("seq", "n")), ("function", "rollback_to", ("seq", "length"))], bonus=True),\n'
     ')\n\n# Every check: (part, check, points'),
    ("tests/registry.py", "\n]\n\nCHECKS = {",
     '\n    ("rollback", "drops", 1, "rollback: the blocks given back, the length, then a step on what is left",\n'
     '     "rollback：归还的块、长度，然后在剩下的部分上走一步"),\n'
     '    ("rollback", "to", 1, "rollback_to: the same, to a length", "rollback_to：同样，回退到一个长度"),\n]\n\nCHECKS = {'),
    ("starter/paged_kv.py", "\n\nassignment.md is the specification",
     "\nPart 7  rollback,            (bonus, extra credit) a sequence's last tokens dropped, its blocks\n"
     "        rollback_to          given back\n\nassignment.md is the specification"),
    ("tests/scenarios.py", "def batch(pk, calls=()):", '''def rollback_script(pk, cfg=None, param_seed=0, n_blocks=16, block_size=4, prompt=(), to=None, n=0, more=(),
                    ledger=None):
    """Part 7's script: the prompt stepped, then rollback(seq, n) (or rollback_to(seq, to)), then a step."""
    stub = bonus_stub(pk, "rollback")
    if stub is not None:
        raise stub
    cfg = config(cfg)
    prm, pool = params(cfg, param_seed), working_pool(pk, cfg, n_blocks, block_size, ledger)
    seq = build("PagedSequence", pk.PagedSequence, pool)
    pk.paged_step(prm, cfg, [seq], [list(prompt)])
    dropped, error = attempt(pk.rollback_to, seq, to) if to is not None else attempt(pk.rollback, seq, n)
    state = {"dropped": as_int(dropped) if error is None else None, "error": error, "length": as_int(seq.length),
             "blocks": len(seq.blocks), "refcounts": refcounts(pool)}
    logits, step_error = attempt(lambda: as_array(pk.paged_step(prm, cfg, [seq], [list(more)])[0]))
    return {**state, "logits": logits, "step_error": step_error}


def batch(pk, calls=()):'''),
    ("tests/scenarios.py", "batch)}", "rollback_script, batch)}"),
    ("assignment.md", "<!-- /bonus -->\n\n---\n\n## How to work",
     "<!-- /bonus -->\n<!-- bonus -->\n\n## Part 7 (bonus): rolling back\n\n`rollback(seq, n)` drops the last `n` "
     "tokens of `seq` and gives back the blocks it no longer needs; `rollback_to(seq, length)` rolls back to "
     "`length` tokens.\n<!-- /bonus -->\n\n---\n\n## How to work"),
    ("assignment.zh-CN.md", "<!-- /bonus -->\n\n---\n\n<!-- en: ## How to work -->",
     "<!-- /bonus -->\n<!-- bonus -->\n\n<!-- en: ## Part 7 (bonus): rolling back -->\n## Part 7（加分题）：回退\n\n"
     "`rollback(seq, n)` 丢掉 `seq` 最后 `n` 个 token，归还不再需要的块；`rollback_to(seq, length)` 回退到 `length` "
     "个 token。\n<!-- /bonus -->\n\n---\n\n<!-- en: ## How to work -->"),
    ("lab/demo.py", "\n\nclass _Lab:", '''DEMOS.append(demo7_rollback)  # bonus


class _Lab:'''),
    ("lab/demo.py", "DEMOS = [demo1_block_table", '''def demo7_rollback(pk, lab):
    if not bonus_ready(pk, lab, "rollback", demo7_rollback):
        return
    lab.print_header(lab.t("demo7.title"))
    pool = pk.BlockPool(lab.TINY, n_blocks=8, block_size=4)
    seq = pk.PagedSequence(pool)
    pk.paged_step(lab.PARAMS, lab.TINY, [seq], [np.arange(10)])
    print(lab.t("demo7.dropped", n=pk.rollback(seq, 3) + pk.rollback_to(seq, 2), free=pool.n_free))
    lab.print_observations(lab.t("demo7.observations"), lab.t("observations"))


DEMOS = [demo1_block_table'''),
    ("lab/demo_text.py", "\n}\n\nZH = {", '''
    "demo7.parts": "Parts 1-2, and the bonus Part 7 (rollback)",
    "demo7.title": "Demo 7: rolling back",
    "demo7.dropped": "{n} blocks given back, {free} free",
    "demo7.observations": ["A rolled back sequence gives back the blocks it no longer needs."],
}

ZH = {'''),
    ("lab/demo_text.py", "\n}\n\nTEXTS = ", '''
    "demo7.parts": "Part 1–2，以及加分题 Part 7（rollback）",
    "demo7.title": "演示 7：回退",
    "demo7.dropped": "归还了 {n} 个块，{free} 个空闲",
    "demo7.observations": ["回退的序列归还它不再需要的块。"],
}

TEXTS = '''),
    ("grader/selftest/mutants.py", "\nBY_NAME = {m.name: m for m in MUTANTS}", '''
MUTANTS += [M("rollback_keeps_blocks", "rollback", "rollback never gives a block back. Verified: 10 tokens rolled "
              "back by 3 with block size 4 keep 3 blocks (contract: 2).",
              (("rollback", "    for b in seq.blocks[keep:]:\\n        seq.pool.decref(b)\\n", ""),), "rollback.drops")]

BY_NAME = {m.name: m for m in MUTANTS}'''),
    ("grader/selftest/coverage.py", "\nPART_WIDE = {", '''
STATES["rollback"] = {"a sequence rolled back to nothing": lambda c, a: c.scenario == "rollback_script" and (
    c.inputs.get("n") == len(c.inputs["prompt"]) or c.inputs.get("to") == 0)}
PART_WIDE = {'''),
]
PART7_NEW = {
    "solution/paged_kv.py": '''

# ---------------------------------------------------------------- Part 7 (bonus): rolling back
def rollback(seq, n):
    """Drop the last n tokens of seq, giving back the blocks it no longer needs; how many it gave back."""
    if not 0 <= n <= seq.length:
        raise ValueError(f"cannot roll back {n} of {seq.length} tokens")
    seq.length -= n
    keep = -(-seq.length // seq.pool.block_size)
    for b in seq.blocks[keep:]:
        seq.pool.decref(b)
    dropped, seq.blocks = len(seq.blocks) - keep, seq.blocks[:keep]
    return dropped


def rollback_to(seq, length):
    """rollback to `length` tokens."""
    return rollback(seq, seq.length - length)
''',
    "starter/paged_kv.py": '''

# ============================================================= Part 7 (bonus): rolling back
def rollback(seq, n):
    """Drop the last n tokens of seq (0 <= n <= seq.length, else ValueError): length -= n, pool.decref
    every block past ceil(length / B), and return how many blocks that gave back."""
    raise NotImplementedError("TODO Part 7 (bonus): rollback")


def rollback_to(seq, length):
    """rollback(seq, seq.length - length)."""
    raise NotImplementedError("TODO Part 7 (bonus): rollback_to")
''',
    "grader/hidden/test_rollback.py": '''"""Part 7 (bonus), rolling back, on hidden inputs: a prompt stepped, rolled back, stepped again."""
from grader.hidden.inputs import Case, tokens
from grader.hidden.judges import generic_judge


def plan(to):
    def cases(rng):
        out = []
        for B, L, n in ((4, 10, 3), (4, 10, 10), (2, 7, 2), (1, 5, 1)):
            inputs = {"cfg": None, "param_seed": 0, "n_blocks": 16, "block_size": B, "prompt": tokens(rng, L),
                      "more": tokens(rng, 2), **({"to": L - n} if to else {"n": n})}
            out.append(Case(f"{L} tokens, {n} rolled back, block size {B}", "rollback_script", inputs))
        return out
    return cases


PLANS = {"rollback.drops": plan(False), "rollback.to": plan(True)}
JUDGES = dict.fromkeys(PLANS, generic_judge)


def test_rollback(case, judge):
    judge(case)
''',
    "tests/test_rollback.py": '''"""Part 7 (bonus): rolling back."""
import pytest

import scenarios as sc
import support

pytestmark = pytest.mark.rollback


@pytest.fixture(autouse=True)
def _bonus(pk):
    support.bonus_attempted(pk, "rollback")


def test_rolling_back_gives_the_last_block_back(pk):
    out = sc.rollback_script(pk, block_size=4, prompt=support.tokens(10, 1), n=3, more=[5])
    assert (out["dropped"], out["length"], out["blocks"]) == (1, 7, 2)


def test_rolling_back_to_a_length(pk):
    out = sc.rollback_script(pk, block_size=4, prompt=support.tokens(10, 1), to=4, more=[5])
    assert (out["dropped"], out["length"], out["blocks"]) == (2, 4, 1)
''',
}
# The files a new bonus part touches by hand (PART7, PART7_NEW), and those regenerated (python tools/tables.py:
# both editions' grading tables, README's feedback bound). A change that starts needing one more file fails here.
BY_HAND = sorted({name for name, _, _ in PART7} | set(PART7_NEW))
GENERATED = ["README.md"]        # (assignment.md and its Chinese edition are by hand too: their sections)


def _bonus(root):
    """The bonus parts of the copy's registry (its own, not this checkout's)."""
    r = run(root, sys.executable, "-c", "import sys, json; sys.path.insert(0, 'tests'); import registry; "
            "print(json.dumps([[p.id, p.number, registry.points(p.id)] for p in registry.bonus()]))")
    return [SimpleNamespace(id=i, number=n, points=pts) for i, n, pts in json.loads(r.stdout)]


@pytest.mark.lane          # a process of its own beside the selftest (conftest.py)
@pytest.mark.slow
@pytest.mark.timeout(900)  # two gradings, the labtool and a dozen check modules on a copy: 70 s alone, more beside the selftest
def test_a_throwaway_bonus_part_7_that_uses_the_pool_the_sequences_and_the_step(copy):
    """A bonus Part 7 (two functions on a sequence stepped by paged_step, two checks) made as README.md says.
    The files it touches are counted; graded, the reference gets every bonus point and the starter's stubs
    are "not attempted"; then the checks that hold every part to the same rules run on the copy: tables,
    both editions and the bonus-off handout, the bonus not attempted and the demos, the registry, the
    rubric's figures, the selftest corpus (a mutant of every part; its strategic pair and its owners made
    from the registry and mutants.py), and the states of every part."""
    for name, find, replace in PART7:
        edit(copy, name, find, replace)
    for name, text in PART7_NEW.items():
        append(copy, name, text)
    assert touched(copy) == sorted(BY_HAND + GENERATED), touched(copy)
    bonus = _bonus(copy)
    assert [p.id for p in bonus][-1] == "rollback" and bonus[-1].number == 7
    results = grade(copy, "solution/paged_kv.py")
    part7 = [(t["number"], t["score"]) for t in results["tests"] if t["tags"] == ["rollback"]]
    assert results["score"] == 100 + sum(p.points for p in bonus) and part7 == [("7.1", 1), ("7.2", 1)], \
        results["output"]
    starter = grade(copy, "starter/paged_kv.py")
    assert starter["score"] == 0 and list(starter["extra_data"]["bonus"]) == [p.id for p in bonus], starter["extra_data"]
    assert starter["extra_data"]["bonus"]["rollback"].startswith("bonus not attempted: every Part 7 check stopped")
    r = run(copy, sys.executable, "tools/labtool.py", "test", "--impl", "solution", "--part", "rollback")
    assert r.returncode == 0 and "Part 7 (bonus): rolling back (rollback, extra credit): 2 of 2 passed" in r.stdout, \
        r.stdout[-2000:]
    said = run(copy, sys.executable, "tools/labtool.py", "check", "--impl", "starter").stdout.splitlines()[1:]
    assert said == [f'Part {p.number}: bonus not attempted: its stubs still raise NotImplementedError("TODO Part '
                    f'{p.number} ...") (extra credit only: Parts 1-4 are graded as usual).' for p in bonus], said
    r = run(copy, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
            "checks/test_tables.py", "checks/test_handout_sync.py", "checks/test_handout.py",
            "checks/test_bonus_not_attempted.py", "checks/test_lecture.py", "checks/test_grader_units.py",
            "checks/test_coverage.py::test_every_part_lists_its_states", "checks/test_selftest.py::"
            "test_mutant_edits_are_exact_and_parts_known", "checks/test_selftest.py::test_strategic_corpus_is_sound",
            "checks/test_selftest.py::test_unseen_bugs_are_new_and_apply",
            "checks/test_selftest.py::test_new_code_elsewhere_breaks_no_edit", "checks/test_generate.py")
    assert r.returncode == 0, r.stdout[-3000:]
    r = run(copy, sys.executable, "-c", "from grader.selftest import coverage, verify_corpus as v, mutants, strategic; "
            "ref = v.load_reference(); pk = v.load(mutants.apply(mutants.BY_NAME['rollback_keeps_blocks']), 'm'); "
            "print(coverage.missing(0), v.hidden_verdict(pk, ref, 'rollback.drops') is not None, "
            "[p.name for p in strategic.PAIRS if strategic.BUGS[p.x].part == 'rollback'])")
    assert r.stdout.strip().split(None, 2) == ["[]", "True", "['rollback_keeps_blocks+prefill_45']"], r.stdout + r.stderr[-2000:]


@pytest.mark.lane          # a process of its own beside the selftest (conftest.py)
@pytest.mark.slow
def test_a_check_added_without_its_judge_is_a_grader_error(copy):
    """Issue 17's trap: a ninth Part 4 check registered and planned, its judge forgotten. It once fell
    back to a generic judge (Part 1's block ids compared) and graded in silence; now collection fails,
    and grade.py refuses the grading (exit 3, no results.json) saying which judge is missing."""
    edit(copy, "tests/registry.py", '     "束搜索：没有泄漏，共享从不多用块，束和节省量在范围内"),\n',
         '     "束搜索：没有泄漏，共享从不多用块，束和节省量在范围内"),\n'
         '    ("copy_on_write", "fork_again", 1, "fork, once more", "再 fork 一次"),\n')
    edit(copy, "tests/registry.py", '("copy_on_write", "fork", 4,', '("copy_on_write", "fork", 3,')
    edit(copy, "grader/hidden/test_copy_on_write.py", '    "copy_on_write.beam_search": plan_beam_search,\n',
         '    "copy_on_write.beam_search": plan_beam_search,\n    "copy_on_write.fork_again": plan_fork,\n')
    out = copy / "build" / "results.json"
    r = run(copy, sys.executable, "-m", "grader", "solution/paged_kv.py", "--results", str(out), "--isolate", "no")
    assert r.returncode == 3 and not out.exists(), r.stdout[-3000:] + r.stderr[-3000:]
    assert "the grader itself failed" in r.stderr, r.stderr[-3000:]
    assert "JUDGES lacks copy_on_write.fork_again" in r.stderr, r.stderr[-3000:]


def test_the_readme_counts_the_files_the_rehearsal_touches():
    """README's table and recipe say the rehearsal's count: a step added to the recipe changes both."""
    text = (ROOT / "README.md").read_text()
    n = len(BY_HAND)
    assert f"| {n + len(GENERATED)}: {n} by hand (below)" in text and f"(Part 6 took these {n}," in text
    recipe = text[text.index("(Part 6 took these"):text.index("Made for it, not written")]
    assert len(re.findall(r"(?:^|\s)(\d+)\. `", recipe)) == n
