"""Changing the assignment, done for real on a copy of the project (README.md, "Changing the assignment").

Three changes a course makes, each on its own copy (its files' hashes taken first, so what it
touched is counted; git is not needed): one point moved between two Part 2 checks, a new Part 3 check, and a throwaway bonus
Part 6. Each is made as the README says (edit the files it lists, run `python tools/tables.py`), and
then must load: the tables are current, the grader grades the reference with the new check or part
in its score, and a stub of the new part is "bonus not attempted". The files touched are asserted
against the README's counts, so a change that starts needing one more file fails here.
"""
import fnmatch
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

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
    edit(copy, "tests/registry.py", '("paged_step", "prefill", 4,', '("paged_step", "prefill", 3,')
    edit(copy, "tests/registry.py", '("paged_step", "chunked_prefill", 3,', '("paged_step", "chunked_prefill", 4,')
    assert touched(copy) == ["assignment.md", "assignment.zh-CN.md", "tests/registry.py"]
    assert "| `paged_step` | prefill logits equal the contiguous forward | 3 |" in (copy / "assignment.md").read_text()
    r = run(copy, sys.executable, "-c", "from grader import rubric; print(rubric.CHECKS['paged_step.prefill'].points)")
    assert r.stdout.strip() == "3", r.stderr


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
    assert files == ["assignment.md", "assignment.zh-CN.md", "grader/hidden/test_blockwise_attention.py",
                     "tests/registry.py", "tests/test_blockwise_attention.py"], files
    assert "| `blockwise_attention` | 很大的分数：数值稳定的 softmax | 2 |" in (copy / "assignment.zh-CN.md").read_text()
    results = grade(copy, "solution/paged_kv.py")
    new = [t for t in results["tests"] if "numerically stable softmax" in t["name"]]
    assert results["score"] == 110 and [(t["score"], t["max_score"]) for t in new] == [(2, 2)], results["output"]
    r = run(copy, sys.executable, "tools/labtool.py", "test", "--impl", "solution", "--part", "blockwise_attention")
    assert r.returncode == 0 and "Part 3: blockwise attention (blockwise_attention): 23 of 23 passed" in r.stdout, \
        r.stdout[-2000:]


PART6 = {
    "registry": ('           ("method", "PrefixCache.evict", ("n",)), ("property", "PrefixCache.n_cached", ())], bonus=True),\n',
                 '           ("method", "PrefixCache.evict", ("n",)), ("property", "PrefixCache.n_cached", ())], bonus=True),\n'
                 '    _part("frob", 6, "doubling", "加倍", "every number doubled", "每个数都加倍",\n'
                 '          [("function", "frob", ("xs",))], bonus=True),\n'),
    "check": ('     "错误地调用 cached_prefill、insert 和 evict：ValueError，什么都不变"),\n',
              '     "错误地调用 cached_prefill、insert 和 evict：ValueError，什么都不变"),\n'
              '    ("frob", "doubles", 1, "frob doubles every number", "frob 把每个数都加倍"),\n'),
    "starter": '\n\n# ============================================ Part 6 (bonus): doubling\ndef frob(xs):\n'
               '    raise NotImplementedError("TODO Part 6 (bonus): frob")\n',
    "solution": "\n\ndef frob(xs):\n    return [2 * x for x in xs]\n",
    "scenario": ("SCENARIOS = {", "def frob(pk, xs):\n    return [int(v) for v in pk.frob(list(xs))]\n\n\nSCENARIOS = {"),
    "scenarios": ("beams, prefix_script, batch)}", "beams, prefix_script, batch, frob)}"),
    "hidden": '''from grader.hidden.inputs import Case


def plan_doubles(rng):
    return [Case("three numbers", "frob", {"xs": [int(x) for x in rng.integers(0, 9, 3)]})]


def frob_judge(case, expected, got, deps=None):
    return None if got == expected else "  frob: a number is not doubled"


PLANS = {"frob.doubles": plan_doubles}
JUDGES = {"frob.doubles": frob_judge}


def test_frob(case, judge):
    judge(case)
''',
    "public": '''import pytest

pytestmark = pytest.mark.frob


def test_frob_doubles(pk):
    assert pk.frob([1, 2, 3]) == [2, 4, 6]
''',
    "en": ("\n## How to work\n", "\n<!-- bonus -->\n## Part 6 (bonus): doubling\n\n`frob(xs)` doubles every number.\n"
                                 "<!-- /bonus -->\n\n## How to work\n"),
    "zh": ("\n<!-- en: ## How to work -->\n", "\n<!-- bonus -->\n<!-- en: ## Part 6 (bonus): doubling -->\n"
                                              "## Part 6（加分题）：加倍\n\n`frob(xs)` 把每个数都加倍。\n"
                                              "<!-- /bonus -->\n\n<!-- en: ## How to work -->\n"),
}


@pytest.mark.lane          # a process of its own beside the selftest (conftest.py)
@pytest.mark.slow
def test_a_throwaway_bonus_part_6(copy):
    """A bonus Part 6 (one function, one check): the registry's part and check, its stub and its
    solution, its scenario, its hidden suite and public tests, its section in both editions (the
    tables are generated). Graded, the reference gets 111; the starter's stub is not attempted."""
    edit(copy, "tests/registry.py", *PART6["registry"])
    edit(copy, "tests/registry.py", *PART6["check"])
    append(copy, "starter/paged_kv.py", PART6["starter"])
    append(copy, "solution/paged_kv.py", PART6["solution"])
    edit(copy, "tests/scenarios.py", *PART6["scenario"])
    edit(copy, "tests/scenarios.py", *PART6["scenarios"])
    append(copy, "grader/hidden/test_frob.py", PART6["hidden"])
    append(copy, "tests/test_frob.py", PART6["public"])
    edit(copy, "assignment.md", *PART6["en"])
    edit(copy, "assignment.zh-CN.md", *PART6["zh"])
    files = touched(copy)
    assert files == ["assignment.md", "assignment.zh-CN.md", "grader/hidden/test_frob.py", "solution/paged_kv.py",
                     "starter/paged_kv.py", "tests/registry.py", "tests/scenarios.py", "tests/test_frob.py"], files
    assert "| `frob` | **合计，Part 6（加分题）** | **1** |" in (copy / "assignment.zh-CN.md").read_text()
    results = grade(copy, "solution/paged_kv.py")
    frob = [t for t in results["tests"] if t["tags"] == ["frob"]]
    assert results["score"] == 111 and [(t["number"], t["score"]) for t in frob] == [("6.1", 1)], results["output"]
    starter = grade(copy, "starter/paged_kv.py")
    assert starter["score"] == 0 and "Part 6 (bonus): doubling (extra credit)" in starter["output"]
    assert starter["extra_data"]["bonus"]["frob"].startswith(
        'bonus not attempted: every Part 6 check stopped at a stub that still raises NotImplementedError("TODO Part 6'), \
        starter["extra_data"]
    r = run(copy, sys.executable, "tools/labtool.py", "test", "--impl", "solution", "--part", "frob")
    assert r.returncode == 0 and "Part 6 (bonus): doubling (frob, extra credit): 1 of 1 passed" in r.stdout, \
        r.stdout[-2000:]
    r = run(copy, sys.executable, "tools/labtool.py", "test", "--impl", "starter", "--part", "frob")
    assert r.returncode == 0 and ('Part 6 (bonus): doubling (frob): bonus not attempted: its stubs still raise '
                                  'NotImplementedError("TODO Part 6 ...")') in r.stdout, r.stdout[-2000:]
    said = {impl: run(copy, sys.executable, "tools/labtool.py", "check", "--impl", impl).stdout.splitlines()[1:]
            for impl in ("starter", "solution")}
    assert said["starter"] == [
        'Part 5: bonus not attempted: its stubs still raise NotImplementedError("TODO Part 5 ...") '
        '(extra credit only: Parts 1-4 are graded as usual).',
        'Part 6: bonus not attempted: its stubs still raise NotImplementedError("TODO Part 6 ...") '
        '(extra credit only: Parts 1-4 are graded as usual).'], said
    assert said["solution"] == ["Part 5 (bonus): PrefixCache and cached_prefill are defined.",
                                "Part 6 (bonus): frob is defined."], said
    edit(copy, "solution/paged_kv.py", PART6["solution"], "")       # a file written before Part 6: no frob
    r = run(copy, sys.executable, "tools/labtool.py", "submit", "--impl", "solution", "--out", "build/s.zip")
    assert r.returncode == 0 and "Part 6: bonus not attempted: paged_kv.py defines no frob (extra credit only: " \
        "Parts 1-4 are graded as usual)." in r.stdout and "TODO" not in r.stdout, r.stdout
    r = run(copy, sys.executable, "-m", "pytest", "-q", "checks/test_tables.py", "checks/test_handout_sync.py",
            "checks/test_handout.py", "-m", "not slow")
    assert r.returncode == 0, r.stdout[-2000:]
    off = run(copy, sys.executable, "-c", "import sys; sys.path.insert(0, 'tools'); import build_handout as b; "
              "print(b.without_bonus_python(open('starter/paged_kv.py').read()))")
    assert "frob" not in off.stdout and "PrefixCache" not in off.stdout and "class PagedSequence" in off.stdout


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
