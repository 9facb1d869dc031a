"""A bonus part not attempted, said once and alike everywhere (issue 15, items 1 and 3), for every
bonus part of tests/registry.py.

A file whose bonus part is still the starter's stubs, or is not there at all: `make test` is green with
one "bonus not attempted" line for it, `make submit` and its demo say the same, the grader gives the
other parts their points and that part that one message. A bonus part that is written, even in part, is
tested and graded as usual; the label is decided from what the file does (never its text) and never
touches another part. The files are cut from the real sources, part by part (each part's section runs
from its banner, `# ---... Part N` in the reference and `# ===... Part N` in the starter, to the next):
the reference with the part's section replaced by the starter's ("stubbed"), left out ("absent"), or
with one of its methods put back as the starter's stub ("partial"), and so on.
"""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import labtool  # noqa: E402
import registry  # noqa: E402

import demo as lab_demo  # noqa: E402
from grader.selftest.mutants import scopes  # noqa: E402

REFERENCE, STARTER = (ROOT / "solution" / "paged_kv.py").read_text(), (ROOT / "starter" / "paged_kv.py").read_text()
BONUS = [p.id for p in registry.bonus()]


def section(text, part):
    """(start, end) of a part's section: its banner line to the next top-level banner, or the end."""
    banners = [m.start() for m in re.finditer(r"(?m)^# (?:-{20,}|={20,}) Part \d", text)]
    found = [b for b in banners if re.match(rf"# [-=]+ Part {registry.number(part)}\b", text[b:])]
    assert len(found) == 1, f"Part {registry.number(part)}'s banner is not where it was: update this check"
    later = [b for b in banners if b > found[0]]
    return found[0], later[0] if later else len(text)


def swapped(text, part, replacement):
    start, end = section(text, part)
    return text[:start] + replacement + text[end:]


def piece(text, name):
    return text[slice(*scopes(text)[name])]


def entry_points(part):
    """The part's functions and methods, in the registry's order (a bonus part has two or more, so that
    one can be written while another is still the starter's stub)."""
    return [n.dotted for n in registry.BY_ID[part].names if n.kind in ("method", "function")]


def last_method(part):
    return entry_points(part)[-1]


def source(kind, part):
    n, ref, stub = registry.number(part), REFERENCE[slice(*section(REFERENCE, part))], STARTER[slice(*section(STARTER, part))]
    method = last_method(part)
    init = next((x.dotted + ".__init__" for x in registry.BY_ID[part].names if x.kind == "class"), entry_points(part)[0])
    return {
        "stubbed": swapped(REFERENCE, part, stub),
        "absent": swapped(REFERENCE, part, ""),
        "partial": REFERENCE.replace(piece(REFERENCE, method), piece(STARTER, method)),
        # written code whose text still shows a stub's TODO: the text decides nothing
        "commented": swapped(REFERENCE, part, ref.replace(piece(REFERENCE, method), piece(REFERENCE, method).replace(
            ":\n", f':\n        # raise NotImplementedError("TODO Part {n} (bonus): {method}")\n', 1))),
        "init_only": swapped(REFERENCE, part, stub.replace(piece(STARTER, init), piece(REFERENCE, init))),
        "bare_raise": swapped(REFERENCE, part, stub.replace(f'raise NotImplementedError("TODO Part {n} (bonus): ',
                                                            "raise NotImplementedError  # (")),
        "half_there": swapped(REFERENCE, part, stub.replace(piece(STARTER, method), "")),
        "starter": STARTER,
    }[kind]


def folder(tmp_path, kind, part):
    d = tmp_path / f"{kind}-{part}"
    d.mkdir(exist_ok=True)
    (d / labtool.FILE).write_text(source(kind, part))
    return d


def module(tmp_path, kind, part):
    """The file imported under a name of its own (never `paged_kv`: that is the reference here)."""
    spec = importlib.util.spec_from_file_location(f"bonus_{kind}_{part}", folder(tmp_path, kind, part) / labtool.FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------- the decision
@pytest.mark.parametrize("part", BONUS)
@pytest.mark.parametrize("kind, state", [
    ("starter", "stubbed"), ("stubbed", "stubbed"), ("absent", "absent"), ("half_there", "incomplete"),
    ("partial", "attempted"), ("init_only", "attempted"), ("bare_raise", "attempted"), ("commented", "attempted")])
def test_what_a_files_bonus_part_is_comes_from_what_it_does(tmp_path, kind, state, part):
    """Stubbed: every entry point raises the starter's TODO; one function written (even __init__ alone)
    is an attempt, and so is a stub without the starter's words; a TODO left in a comment changes nothing.
    The other bonus parts are the reference's: attempted."""
    pk = module(tmp_path, kind, part)
    assert labtool.bonus_state(pk, part) == state
    others = {p: labtool.bonus_state(pk, p) for p in BONUS if p != part}
    assert kind == "starter" or set(others.values()) <= {"attempted"}, others


# -------------------------------------------------------------------------- the public tests
def public_tests(impl):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "labtool.py"), "test", "--impl", str(impl)],
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("part", BONUS)
@pytest.mark.parametrize("kind", ["stubbed", "absent"])
def test_make_test_is_green_with_one_line(tmp_path, kind, part):
    code, out = public_tests(folder(tmp_path, kind, part))
    said = [line for line in out.splitlines() if "bonus not attempted" in line]
    assert code == 0, out[-3000:]
    assert len(said) == 1 and labtool.not_attempted(kind, part) in said[0], said
    assert said[0].startswith(f"{registry.section(part)} ({part}): ")
    last = out.strip().splitlines()[-1]
    assert " passed" in last and " skipped" in last and "failed" not in last and "error" not in last, last
    assert "not implemented yet" not in out


@pytest.mark.slow
@pytest.mark.parametrize("part", BONUS)
def test_a_bonus_part_written_in_part_is_tested_as_usual(tmp_path, part):
    code, out = public_tests(folder(tmp_path, "partial", part))
    assert code == 1 and "bonus not attempted" not in out, out[-3000:]
    assert f"  not implemented yet: TODO Part {registry.number(part)} (bonus): {last_method(part)} (" in out, out[-3000:]


# ------------------------------------------------------------------------------- make submit
@pytest.mark.parametrize("part", BONUS)
@pytest.mark.parametrize("kind", ["stubbed", "absent"])
def test_make_submit_says_not_attempted(tmp_path, kind, part):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "labtool.py"), "submit", "--impl",
                        str(folder(tmp_path, kind, part)), "--out", str(tmp_path / "s.zip")],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    said = f"Part {registry.number(part)}: {labtool.not_attempted(kind, part)} (extra credit only"
    assert said in r.stdout, r.stdout
    assert "TODO" not in r.stdout.replace(labtool.not_attempted("stubbed", part), ""), r.stdout   # no note of TODOs left


# ------------------------------------------------------------------------------------ the demos
def demo_of(part):
    """A bonus part's demo in lab/demo.py: demo N for Part N."""
    return next(d for d in lab_demo.DEMOS if d.__name__.startswith(f"demo{registry.number(part)}_"))


@pytest.mark.parametrize("part", BONUS)
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("kind", ["stubbed", "absent"])
def test_a_bonus_demo_says_the_bonus_is_not_attempted(tmp_path, capsys, kind, lang, part):
    lab, demo, n = lab_demo._Lab(lang), demo_of(part), registry.number(part)
    demo(module(tmp_path, kind, part), lab)
    out = capsys.readouterr().out.strip().splitlines()
    why = lab.t(f"bonus.{kind}", n=n, names=lab.t("bonus.and_no").join(registry.top_names(part)))
    assert out == [lab.t("bonus.not_attempted", demo=demo.__name__, n=n, why=why).strip()], out
    assert ("bonus not attempted" if lang == "en" else "加分题未做") in out[0]


@pytest.mark.parametrize("part", BONUS)
def test_a_bonus_demo_of_a_half_written_part_runs_and_names_the_stub(tmp_path, capsys, part):
    n = registry.number(part)
    with pytest.raises(NotImplementedError, match=re.escape(f"TODO Part {n} (bonus): {last_method(part)}")):
        demo_of(part)(module(tmp_path, "partial", part), lab_demo._Lab("en"))
    assert f"Demo {n}:" in capsys.readouterr().out


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


def planted(tmp_path, kind, part, edit):
    """source(kind, part) with one edit (where, find, replace) in the function or class it names."""
    from grader.selftest.mutants import edited
    d = tmp_path / f"{kind}-planted"
    d.mkdir()
    (d / labtool.FILE).write_text(edited(source(kind, part), [edit], "planted"))
    return d / labtool.FILE


@pytest.mark.slow
@pytest.mark.parametrize("part", BONUS)
def test_the_grader_gives_the_rest_and_one_message_to_a_bonus_parts_stubs(tmp_path, part):
    """Every part but this one right, this one the starter's stubs: every point but its own (100 + 15 - 5 = 110
    for Part 6), and one message."""
    from grader import rubric
    if not rubric.BONUS_PARTS:
        pytest.skip("the course switched the bonus off")
    results, per_part = grade(folder(tmp_path, "stubbed", part) / labtool.FILE, tmp_path)
    assert results["score"] == 100 + rubric.BONUS_TOTAL - rubric.part_points(part) and per_part[part] == 0, per_part
    assert "First to fix" not in results["output"], results["output"]
    assert results["output"].count("bonus not attempted") == 1
    bonus = [t for t in results["tests"] if t["tags"] == [part]]
    assert bonus and all(t["output"].startswith(f"bonus not attempted: every Part {registry.number(part)} check "
                                                "stopped at a stub") for t in bonus), [t["output"] for t in bonus]
    assert list(results["extra_data"]["bonus"]) == [part]


@pytest.mark.slow
def test_the_label_hides_no_failure_of_parts_1_to_4(tmp_path):
    """Part 5 stubbed and a Part 2 bug (a token id equal to vocab accepted): Part 2 loses its points with
    its own "First to fix"; the label is Part 5's alone."""
    path = planted(tmp_path, "stubbed", BONUS[0], ("_check_chunk", "arr.max() >= cfg.vocab", "arr.max() > cfg.vocab"))
    results, per_part = grade(path, tmp_path)
    assert per_part["paged_step"] < 30 and per_part["allocator"] == 25 and per_part["copy_on_write"] == 30, per_part
    lines = results["output"].splitlines()
    part2 = next(i for i, line in enumerate(lines) if line.startswith("Part 2:"))
    assert lines[part2 + 1].startswith("  First to fix: bad input"), lines
    assert results["output"].count("bonus not attempted") == 1 and results["output"].count("First to fix") == 1


@pytest.mark.slow
@pytest.mark.parametrize("part", BONUS)
def test_a_bonus_part_written_in_part_is_graded_as_usual(tmp_path, part):
    from grader import rubric
    results, per_part = grade(folder(tmp_path, "partial", part) / labtool.FILE, tmp_path)
    assert 0 < per_part[part] < rubric.part_points(part) and results["score"] > 100, per_part
    assert "bonus not attempted" not in results["output"] and "First to fix" in results["output"]
    assert "bonus" not in results["extra_data"]


@pytest.mark.slow
def test_the_bare_starter_says_not_attempted_for_every_bonus_part(tmp_path):
    """Issue 15 item 1 on the starter itself: Part 1 unfinished too, yet each bonus part's line says "bonus
    not attempted" (its stubs untouched), not "fix Part 1 first"."""
    results, per_part = grade(folder(tmp_path, "starter", BONUS[0]) / labtool.FILE, tmp_path)
    assert results["score"] == 0
    lines = results["output"].splitlines()
    for part in BONUS:
        at = next(i for i, line in enumerate(lines) if line.startswith(f"Part {registry.number(part)}"))
        said = "\n".join(lines[at:at + 2])
        assert "bonus not attempted" in said and "fix Part 1 first" not in said, said
        assert all(t["output"].startswith("bonus not attempted") for t in results["tests"] if t["tags"] == [part])


@pytest.mark.slow
def test_a_pool_that_cannot_be_built_is_named_by_the_grader(tmp_path):
    """Issue 15 item 8: BlockPool(...) raises. The bonus parts' checks (and Parts 2 and 4's) name it and the
    part to fix first, not "the answer has the wrong form" or an exception the contract does not allow."""
    path = planted(tmp_path, "partial", BONUS[0], ("BlockPool.__init__", '        n_blocks = _as_int(n_blocks, "n_blocks")\n',
                   '        n_blocks = _as_int(n_blocks, "n_blocks")\n        raise RuntimeError("no pool")\n'))
    results, per_part = grade(path, tmp_path)
    for part in ("paged_step", "copy_on_write", *BONUS):
        outs = [t["output"] for t in results["tests"] if t["tags"] == [part]]
        assert outs and all("fix Part 1 (BlockPool) first" in o for o in outs), (part, outs[:2])
    assert "wrong form" not in json.dumps(results) and "does not allow" not in json.dumps(results)
    assert per_part["blockwise_attention"] == 15
