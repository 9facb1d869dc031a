"""The bonus not attempted, said once and alike everywhere (issue 15, items 1 and 3).

A file whose Part 5 is still the starter's stubs, or is not there at all: `make test` is green with
one "bonus not attempted" line, `make submit` and demo 5 say the same, the grader gives Parts 1-4 their
points and Part 5 that one message. A Part 5 that is written, even in part, is tested and graded as
usual; the label is decided from what the file does (never its text) and never touches Parts 1-4.
The files are cut from the real sources: the reference's Parts 1-4, then the starter's Part 5
("stubbed"), nothing ("absent"), or the reference's Part 5 with one stub put back ("partial").
"""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import labtool  # noqa: E402

import demo as lab_demo  # noqa: E402

REFERENCE, STARTER = (ROOT / "solution" / "paged_kv.py").read_text(), (ROOT / "starter" / "paged_kv.py").read_text()
REF_PART5 = "# ---------------------------------------------------------------- Part 5 (bonus)"
STARTER_PART5 = "# ============================================ Part 5 (bonus)"
EVICT = REFERENCE[REFERENCE.index("    def evict(self, n):"):REFERENCE.index("\n\ndef cached_prefill")]


def cut(text, marker):
    assert text.count(marker) == 1, f"{marker!r} is not where it was: update this check"
    return text.index(marker)


def source(kind):
    parts_1_to_4 = REFERENCE[:cut(REFERENCE, REF_PART5)]
    return {
        "stubbed": parts_1_to_4 + STARTER[cut(STARTER, STARTER_PART5):],
        "absent": parts_1_to_4.rstrip() + "\n",
        "partial": REFERENCE.replace(EVICT, '    def evict(self, n):\n'
                                            '        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.evict")'),
        # written code whose text still shows a stub's TODO: the text decides nothing
        "commented": REFERENCE.replace("    def lookup(self, tokens):\n", "    def lookup(self, tokens):\n"
                                       '        # raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.lookup")\n'),
        "init_only": parts_1_to_4 + STARTER[cut(STARTER, STARTER_PART5):].replace(
            '        raise NotImplementedError("TODO Part 5 (bonus): PrefixCache.__init__")',
            "        self.pool, self.n_hit_tokens = pool, 0"),
        "bare_raise": parts_1_to_4 + STARTER[cut(STARTER, STARTER_PART5):].replace(
            'raise NotImplementedError("TODO Part 5 (bonus): ', "raise NotImplementedError  # ("),
        "half_there": parts_1_to_4 + STARTER[cut(STARTER, STARTER_PART5):cut(STARTER, "def cached_prefill(")],
        "starter": STARTER,
    }[kind]


def folder(tmp_path, kind):
    d = tmp_path / kind
    d.mkdir(exist_ok=True)
    (d / labtool.FILE).write_text(source(kind))
    return d


def module(tmp_path, kind):
    """The file imported under a name of its own (never `paged_kv`: that is the reference here)."""
    spec = importlib.util.spec_from_file_location(f"bonus_{kind}", folder(tmp_path, kind) / labtool.FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


NOT_ATTEMPTED = {kind: labtool.not_attempted(kind, "prefix_cache") for kind in ("stubbed", "absent")}


# ------------------------------------------------------------------------------- the decision
@pytest.mark.parametrize("kind, state", [
    ("starter", "stubbed"), ("stubbed", "stubbed"), ("absent", "absent"), ("half_there", "incomplete"),
    ("partial", "attempted"), ("init_only", "attempted"), ("bare_raise", "attempted"), ("commented", "attempted")])
def test_what_a_files_part_5_is_comes_from_what_it_does(tmp_path, kind, state):
    """Stubbed: every entry point raises the starter's TODO; one function written (even __init__ alone)
    is an attempt, and so is a stub without the starter's words; a TODO left in a comment changes nothing."""
    assert labtool.bonus_state(module(tmp_path, kind)) == state


# -------------------------------------------------------------------------- the public tests
def public_tests(impl):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "labtool.py"), "test", "--impl", str(impl)],
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stubbed", "absent"])
def test_make_test_is_green_with_one_line(tmp_path, kind):
    code, out = public_tests(folder(tmp_path, kind))
    said = [line for line in out.splitlines() if "bonus not attempted" in line]
    assert code == 0, out[-3000:]
    assert len(said) == 1 and NOT_ATTEMPTED[kind] in said[0], said
    assert said[0].startswith("Part 5 (bonus): shared prefix across requests (prefix_cache): ")
    last = out.strip().splitlines()[-1]
    assert " passed" in last and " skipped" in last and "failed" not in last and "error" not in last, last
    assert "not implemented yet" not in out


@pytest.mark.slow
def test_a_part_5_written_in_part_is_tested_as_usual(tmp_path):
    code, out = public_tests(folder(tmp_path, "partial"))
    assert code == 1 and "bonus not attempted" not in out, out[-3000:]
    assert "  not implemented yet: TODO Part 5 (bonus): PrefixCache.evict (" in out, out[-3000:]


# ------------------------------------------------------------------------------- make submit
@pytest.mark.parametrize("kind", ["stubbed", "absent"])
def test_make_submit_says_not_attempted(tmp_path, kind):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "labtool.py"), "submit", "--impl",
                        str(folder(tmp_path, kind)), "--out", str(tmp_path / "s.zip")],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Part 5: {NOT_ATTEMPTED[kind]} (extra credit only" in r.stdout, r.stdout
    assert "TODO" not in r.stdout.replace(NOT_ATTEMPTED["stubbed"], ""), r.stdout     # no note of TODOs left


# ------------------------------------------------------------------------------------ demo 5
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("kind", ["stubbed", "absent"])
def test_demo_5_says_the_bonus_is_not_attempted(tmp_path, capsys, kind, lang):
    lab = lab_demo._Lab(lang)
    lab_demo.demo5_prefix_cache(module(tmp_path, kind), lab)
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [lab.t("demo5.not_attempted", why=lab.t(f"demo5.{kind}")).strip()], out
    assert ("bonus not attempted" if lang == "en" else "加分题未做") in out[0]


def test_demo_5_of_a_half_written_part_5_runs_and_names_the_stub(tmp_path, capsys):
    with pytest.raises(NotImplementedError, match="TODO Part 5 \\(bonus\\): PrefixCache.evict"):
        lab_demo.demo5_prefix_cache(module(tmp_path, "partial"), lab_demo._Lab("en"))
    assert "Demo 5:" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ grading
def grade(path, tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(path), "--results", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    per_part = {}
    for t in results["tests"]:
        per_part[t["tags"][0]] = per_part.get(t["tags"][0], 0) + t["score"]
    return results, per_part


def planted(tmp_path, kind, find, replace):
    text = source(kind)
    assert text.count(find) == 1, find
    d = tmp_path / f"{kind}-planted"
    d.mkdir()
    (d / labtool.FILE).write_text(text.replace(find, replace))
    return d / labtool.FILE


@pytest.mark.slow
def test_the_grader_gives_100_and_one_message_to_the_stubs(tmp_path):
    from grader import rubric
    if not rubric.BONUS_PARTS:
        pytest.skip("the course switched the bonus off")
    results, per_part = grade(folder(tmp_path, "stubbed") / labtool.FILE, tmp_path)
    assert results["score"] == 100 and per_part["prefix_cache"] == 0, per_part
    assert "First to fix" not in results["output"], results["output"]
    assert results["output"].count("bonus not attempted") == 1
    bonus = [t for t in results["tests"] if t["tags"] == ["prefix_cache"]]
    assert bonus and all(t["output"].startswith("bonus not attempted: every Part 5 check stopped at a stub")
                         for t in bonus), [t["output"] for t in bonus]
    assert list(results["extra_data"]["bonus"]) == ["prefix_cache"]


@pytest.mark.slow
def test_the_label_hides_no_failure_of_parts_1_to_4(tmp_path):
    """Part 5 stubbed and a Part 2 bug (a token id equal to vocab accepted): Part 2 loses its points with
    its own "First to fix"; the label is Part 5's alone."""
    path = planted(tmp_path, "stubbed", "arr.max() >= cfg.vocab", "arr.max() > cfg.vocab")
    results, per_part = grade(path, tmp_path)
    assert per_part["paged_step"] < 30 and per_part["allocator"] == 25 and per_part["copy_on_write"] == 30, per_part
    lines = results["output"].splitlines()
    part2 = next(i for i, line in enumerate(lines) if line.startswith("Part 2:"))
    assert lines[part2 + 1].startswith("  First to fix: bad input"), lines
    assert results["output"].count("bonus not attempted") == 1 and results["output"].count("First to fix") == 1


@pytest.mark.slow
def test_a_part_5_written_in_part_is_graded_as_usual(tmp_path):
    results, per_part = grade(folder(tmp_path, "partial") / labtool.FILE, tmp_path)
    assert 0 < per_part["prefix_cache"] < 10 and results["score"] > 100, per_part
    assert "bonus not attempted" not in results["output"] and "First to fix" in results["output"]
    assert "bonus" not in results["extra_data"]


@pytest.mark.slow
def test_the_bare_starter_says_not_attempted_for_part_5(tmp_path):
    """Issue 15 item 1 on the starter itself: Part 1 unfinished too, yet Part 5's line says "bonus not
    attempted" (its stubs untouched), not "fix Part 1 first"."""
    results, per_part = grade(folder(tmp_path, "starter") / labtool.FILE, tmp_path)
    part5 = results["output"][results["output"].index("Part 5"):]
    assert results["score"] == 0 and "bonus not attempted" in part5 and "fix Part 1 first" not in part5, part5
    assert all(t["output"].startswith("bonus not attempted") for t in results["tests"] if t["tags"] == ["prefix_cache"])


@pytest.mark.slow
def test_a_pool_that_cannot_be_built_is_named_by_the_grader(tmp_path):
    """Issue 15 item 8: BlockPool(...) raises. Part 5's checks (and Parts 2 and 4's) name it and the
    part to fix first, not "the answer has the wrong form" or an exception the contract does not allow."""
    path = planted(tmp_path, "partial", '        n_blocks = _as_int(n_blocks, "n_blocks")\n',
                   '        n_blocks = _as_int(n_blocks, "n_blocks")\n        raise RuntimeError("no pool")\n')
    results, per_part = grade(path, tmp_path)
    for part in ("paged_step", "copy_on_write", "prefix_cache"):
        outs = [t["output"] for t in results["tests"] if t["tags"] == [part]]
        assert outs and all("fix Part 1 (BlockPool) first" in o for o in outs), (part, outs[:2])
    assert "wrong form" not in json.dumps(results) and "does not allow" not in json.dumps(results)
    assert per_part["blockwise_attention"] == 15
