"""Hidden feedback is not a channel (issue 14, item 4), and Part 3's rule is enforced by the storage
the tests hand over (item 3).

- The rendering layer (tests/explain.py): inside hidden_feedback every value of the submission is
  checked against its field's range (an id outside the pool is named, not printed), floats get 4
  significant digits, strings are never shown; drawings and lists show a few items and count the rest.
- grader/feedback.py: the marks resolved at the staff's level (full / brief / points), the
  submission's values bounded per message and per part; the bound documented in the README.
- The leak submissions of the selftest (hostile.py, leak_*), graded: what each reads back of the
  hidden tokens (grader/selftest/leaks.py) stays within the bound; the gathering Part 3 loses Part 3's
  points and nothing else.
"""
import copy
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from grader import paths

paths.trusted_imports()

import explain  # noqa: E402
import scenarios  # noqa: E402

from grader import feedback, rubric  # noqa: E402
from grader.hidden.compare import first_mismatch, ranges_for  # noqa: E402
from grader.hidden.inputs import Case  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RANGES = explain.Ranges(n_blocks=16, max_len=64, refs=40, most=300)
TOKENS = [113, 77, 61, 200, 9, 145, 31, 250, 18, 99, 187, 42]


def shown(text, level="full", part="paged_step", left=None):
    """What a student reads of one marked message."""
    return feedback.resolve(text, level, left if left is not None else {part: feedback.PART_BITS}, part)


def hidden(fn, *args, ranges=RANGES, **kwargs):
    with explain.hidden_feedback(ranges):
        return fn(*args, **kwargs)


def runs_of(tokens, text, run=3):
    """How many of `tokens` appear in `text` as part of a run of `run` consecutive ones."""
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    hit = set()
    for j in range(len(numbers) - run + 1):
        for i in range(len(tokens) - run + 1):
            if numbers[j:j + run] == tokens[i:i + run]:
                hit.update(range(i, i + run))
    return len(hit)


# ------------------------------------------------------------------------------- the rendering layer
@pytest.mark.parametrize("value, field, said", [
    (7, "id", "7"), (16, "id", "an id outside the pool"), (-1, "id", "an id outside the pool"),
    (64, "length", "64"), (65, "length", "a length outside [0, max_len]"),
    (40, "count", "40"), (4577378705285645323, "count", "a count far outside its range"),
    (300, "number", "300"), (301, "number", "a number far outside its range"),
    (0.123456789, "float", "0.1235"), (float("nan"), "float", "nan"), (3.5e12, "float", "a huge number"),
    ("ValueError", "kind", "ValueError"), ("tokens 113 77 61", "kind", "another string"),
    ("id 12", "id", "id 12"), ("id 4577378705285645323", "id", "id an id outside the pool"),
    ("id 12", "word", "another string"), (2.5, "count", "not an integer"), ([1, 2], "count", "another value"),
    ([1, 2, 3], "index", "[1, 2, 3]"), ((3, 256), "shape", "(3, 256)"), ((3,) * 7, "shape", "another value"),
])
def test_a_value_of_the_submission_is_shown_only_inside_its_fields_range(value, field, said):
    assert shown(hidden(explain.their, value, field)) == said


def test_the_public_tests_show_the_students_own_values_in_full():
    assert explain.their(4577378705285645323, "count") == "4577378705285645323"
    assert explain.their(0.123456789, "float", ".10g") == "0.123456789"
    assert explain.draw_tables("got", [TOKENS], [24], 2, theirs=True).count("][") == len(TOKENS) - 1


def test_a_drawn_table_of_the_submission_shows_a_few_blocks_and_sequences():
    """The issue's Part 2 drawing printed 72 hidden prompt tokens as block ids."""
    text = shown(hidden(explain.draw_tables, "got", [TOKENS * 6] * 9, [1] * 9, 2, theirs=True))
    assert text.count("seq ") == explain.SEQS and "(+3 more sequences)" in text
    assert text.count("[ ") == explain.SEQS * explain.CELLS and "(+68 more)" in text
    assert "113" not in text and "an id outside the pool" in text         # no token of the table is a valid id
    assert runs_of(TOKENS, shown(hidden(explain.their_list, TOKENS, "number"))) <= explain.LISTED


def test_a_message_shows_at_most_its_share_of_the_submissions_values_and_says_so():
    """Numbers in [-300, 300]: 602 renderings, 10 bits, 11 with the one that says "a new value"."""
    many = " ".join(hidden(explain.their, t, "number") for t in range(300))
    text = shown(many)
    values = [w for w in text.split() if w.isdigit()]
    assert values == [str(t) for t in range(feedback.MESSAGE_BITS // 11)] and explain.range_note() in text
    left = {"paged_step": 30}
    assert [w for w in shown(many, left=left).split() if w.isdigit()] == ["0", "1"] and left["paged_step"] == 8
    assert shown(many, left={"paged_step": 0}).split()[0] == "…"      # a part's budget is shared by its messages


def test_repeated_values_cost_little_so_before_and_after_drawings_fit():
    tables = [[0, 1, 2], [0, 1, 3], [4, 5], [4, 5]]
    before = hidden(explain.draw_tables, "before", tables, [9, 9, 6, 6], 3, [2, 2, 1, 1, 2, 2], theirs=True)
    after = hidden(explain.draw_tables, "after", tables, [9, 9, 6, 6], 3, [2, 2, 1, 1, 2, 2], theirs=True)
    text = shown(before + "\n" + after)
    assert "…" not in text and text.count("rc2") == 16 and text.count("rc1") == 4


def test_levels_brief_leaves_out_every_value_and_drawing_and_points_every_message():
    msg = ("  after action 3 of 9, step(...):\n    tables[0]: expected " + hidden(explain.ours, [0, 1]) + ", got "
           + hidden(explain.their_list, [5, 6], "id") + "\n" + hidden(explain.draw_tables, "got", [[5, 6]], [5], 4,
                                                                     theirs=True)
           + "\nRead assignment.md, section \"Part 2\".")
    full, brief = shown(msg), shown(msg, "brief")
    assert "expected [0, 1], got [5, 6]" in full and "[ 5 ####" in full
    assert "after action 3 of 9" in brief and "tables[0]: expected …, got …\n" in brief
    assert "[ " not in brief and "5" not in brief.replace("assignment", "") and feedback.BRIEF_NOTE in brief
    assert brief.splitlines()[-1].startswith("Read assignment.md")          # the notes come before it
    assert shown(msg, "points") == ""
    check = rubric.CHECKS["paged_step.tables"]
    rows = [{"check": check, "points": 0.0, "passed": 0, "cases": 2, "failures": [msg, msg]}]
    assert feedback.finish(rows, "points")[0]["failures"] == [feedback.POINTS_NOTE]
    assert feedback.finish(rows, "full")[0]["failures"] == [full, full]
    with pytest.raises(ValueError):
        feedback.finish(rows, "everything")


def test_a_message_cut_short_never_shows_a_value_unmarked():
    msg = "x" * 10 + hidden(explain.their, 4577378705, "number") + " tail " + hidden(explain.their, 3, "number")
    for cut in range(len(msg)):
        text = shown(msg[cut:])
        assert "4577378705" not in text and not set(text) & {explain.VALUE, explain.END, explain.TRUSTED}


def test_hidden_values_cannot_pose_as_words_or_as_the_reference():
    leak = "tokens 113 77 61"
    assert leak not in shown(hidden(first_mismatch, "float64", leak)[1])
    said = shown(hidden(first_mismatch, [leak], ["x"], twin=True)[1])          # a twin is the submission's own
    assert leak not in said and "another string" in said
    said = shown(hidden(first_mismatch, {"n_hit_tokens": 8}, {"n_hit_tokens": 4577378705285645323})[1])
    assert said == "expected 8, got a number far outside its range"
    said = shown(hidden(first_mismatch, np.zeros((2, 3)), np.zeros((0, 4577, 65536)))[1])     # an empty array's shape
    assert said == "shape: expected (2, 3), got another value"


def _hidden_case(plan, check_id):
    import paged_kv as reference
    from grader.hidden.conftest import rng_for
    case = plan(rng_for(0, check_id))[0]
    return case, scenarios.SCENARIOS[case.scenario](reference, **case.inputs)


class _AllOk:
    ok = staticmethod(lambda check: True)


def test_the_issues_part2_drawing_of_hidden_tokens_as_block_ids_is_bounded():
    """Issue 14: a Part 2 table drawing printed all 72 hidden prompt tokens of a case as block ids."""
    from grader.hidden.judges import PART2_FIELDS, part2_judge
    from grader.hidden.test_paged_step import plan_tables
    case, expected = _hidden_case(plan_tables, "paged_step.tables")
    tokens = [t for a in case.inputs["actions"] if a[0] == "step" for chunk in a[2] for t in chunk]
    got = copy.deepcopy(expected)
    for rec in got["records"]:
        if rec["tables"]:
            rec["tables"][0] = list(tokens)
    judge = part2_judge(PART2_FIELDS["tables"])
    assert runs_of(tokens, judge(case, expected, got, _AllOk())) == len(tokens)     # unbounded: every token
    with explain.hidden_feedback(ranges_for(case)):
        text = shown(judge(case, expected, got, _AllOk()))
    assert runs_of(tokens, text) == 0 and "an id outside the pool" in text, text


def test_the_issues_n_hit_tokens_carrying_seven_request_tokens_is_named():
    from grader.hidden.judges import PART5_FIELDS, prefix_judge
    from grader.hidden.test_prefix_cache import plan_hits
    case, expected = _hidden_case(plan_hits, "prefix_cache.hits")
    tokens = next(a[1] for a in case.inputs["actions"] if a[0] == "request")
    packed = sum(t << (8 * i) for i, t in enumerate(tokens[:7]))
    got = copy.deepcopy(expected)
    for rec in got["records"]:
        rec["n_hit_tokens"] = packed
    judge = prefix_judge(PART5_FIELDS["hits"])
    assert str(packed) in judge(case, expected, got)                                 # unbounded: the 7 tokens
    with explain.hidden_feedback(ranges_for(case)):
        text = shown(judge(case, expected, got), part="prefix_cache")
    assert str(packed) not in text and "n_hit_tokens: expected 0, got a number far outside its range" in text, text


# ------------------------------------------------------------------------------- the bound, documented
def test_the_readme_states_the_bound_the_code_computes():
    readme = (REPO / "README.md").read_text()
    for level in feedback.LEVELS:
        assert f"`{level}`" in readme and f"{round(feedback.bound_bits(level)):,} bits" in readme, level
    assert f"{feedback.PART_BITS} bits" in readme and f"{feedback.MESSAGE_BITS} bits" in readme


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_place_of_a_difference_fits_its_bits(seed):
    """PLACE_BITS assumes at most MOST_CASES cases per check and 256 actions per script."""
    import importlib
    from grader.hidden.conftest import rng_for
    for name in ("test_allocator", "test_paged_step", "test_blockwise_attention", "test_copy_on_write",
                 "test_prefix_cache"):
        for check_id, plan in importlib.import_module(f"grader.hidden.{name}").PLANS.items():
            cases = plan(rng_for(seed, check_id))
            assert len(cases) <= feedback.MOST_CASES, check_id
            for case in cases:
                assert len(case.inputs.get("actions") or case.inputs.get("ops") or ()) <= 256, check_id


def test_the_autograder_zip_carries_the_level_and_run_autograder_passes_it(tmp_path):
    from grader.gradescope import build
    for level in feedback.LEVELS:
        with zipfile.ZipFile(build.build(tmp_path / f"{level}.zip", level)) as z:
            assert json.loads(z.read(build.CONFIG)) == {"feedback": level}
            assert '--config "$ROOT/source/config.json"' in z.read("run_autograder").decode()
        (tmp_path / "config.json").write_text(json.dumps({"feedback": level}))
        assert feedback.level_from(tmp_path / "config.json") == level
    (tmp_path / "config.json").write_text(json.dumps({"feedback": "everything"}))
    with pytest.raises(ValueError, match="not one of full, brief, points"):
        feedback.level_from(tmp_path / "config.json")
    with pytest.raises(ValueError):
        build.build(tmp_path / "x.zip", "everything")


# ------------------------------------------------------------------------------- Part 3's rule
@pytest.mark.parametrize("index", ["[layer, b]", "[layer, b, :n]", "[layer][b]", "[layer][b][:n]", "[layer][b, :n]",
                                   "[layer, b, i]", "[layer, b, i, 0]", "[layer, b:b + 1]", "[:, b]"])
def test_every_per_block_index_is_served(index):
    """The storage the tests hand over serves any one-block index a solution may write (b a Python
    or numpy integer), as a copy of that block only."""
    data = np.random.default_rng(0).standard_normal((2, 5, 4, 3, 2))
    refused = []
    k = scenarios.OneBlockAtATime(data, refused)
    for b in (3, np.int64(3)):
        got = eval("k" + index, {}, {"k": k, "layer": 1, "b": b, "n": 2, "i": 1})
        want = eval("data" + index, {}, {"data": data, "layer": 1, "b": 3, "n": 2, "i": 1})
        assert np.array_equal(got, want) and not np.shares_memory(got, data), index
    assert refused == [] and k.shape == data.shape and k.ndim == 5 and k.dtype == np.float64 and len(k[1]) == 5


@pytest.mark.parametrize("gather, reason", [
    (lambda k, blocks: k[1, blocks], "many_blocks"), (lambda k, blocks: k[1, np.array(blocks)], "many_blocks"),
    (lambda k, blocks: k[1, :3], "many_blocks"), (lambda k, blocks: k[1, ...], "many_blocks"),
    (lambda k, blocks: k[..., 0], "many_blocks"), (lambda k, blocks: k[1][blocks], "many_blocks"),
    (lambda k, blocks: k[1][1:], "many_blocks"), (lambda k, blocks: np.asarray(k), "whole"),
    (lambda k, blocks: np.asarray(k[1]), "whole"), (lambda k, blocks: list(k[1]), "iterate"),
    (lambda k, blocks: np.stack([k[1]]), "whole")])
def test_many_blocks_at_once_are_refused_and_the_rule_named(gather, reason):
    refused = []
    k = scenarios.OneBlockAtATime(np.zeros((2, 5, 4, 3, 2)), refused)
    with pytest.raises(scenarios.NotOneBlock, match=r"one block at a time \(assignment.md, Part 3\)"):
        gather(k, [2, 0])
    assert refused == [reason]


def test_a_refused_access_is_named_by_the_trusted_side_whatever_the_submission_records():
    from grader.hidden.judges import attention_judge
    case = Case("one", "blockwise", {"block_size": 4, "cases": [{"table": [1], "length": 3, "layer": 0}]})
    expected = [{"out": np.zeros((4, 16)), "error": None, "refused": None}]
    said = attention_judge(case, expected, [{"out": np.zeros((4, 16)), "error": None, "refused": "many_blocks"}])
    assert "blockwise_attention read many blocks in one index: read seq.pool.k[layer, b] one block at a time " \
           "(assignment.md, Part 3)" in said
    assert "wrong form" in attention_judge(case, expected, [{"out": None, "error": None, "refused": "tokens 1 2 3"}])
    assert attention_judge(case, expected, copy.deepcopy(expected)) is None


def test_the_gathering_part3_is_refused_and_every_correct_variant_served():
    import paged_kv as reference
    from grader.selftest import mutants
    from grader.selftest.verify_corpus import load, variant_paths
    cases = [{"table": [3, 0, 2], "length": 10, "layer": 1, "q_seed": 5}]
    gather = load(mutants.apply(mutants.BY_NAME["bw_gathers_all_blocks"]), "gathers")
    assert scenarios.blockwise(gather, None, 4, 4, cases)[0]["refused"] == "many_blocks"
    for pk in [reference] + [load(Path(p).read_text(), Path(p).stem) for p in variant_paths()]:
        assert scenarios.blockwise(pk, None, 4, 4, cases)[0]["refused"] is None, pk


# ------------------------------------------------------------------------------- graded end to end
def grade(path, tmp_path, *extra):
    out = tmp_path / f"{Path(path).parent.name}-results.json"
    proc = subprocess.run([sys.executable, "-m", "grader", str(path), "--results", str(out), "--quiet", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def built(name, tmp_path):
    from grader.selftest import hostile
    path = tmp_path / name / "paged_kv.py"
    path.parent.mkdir(parents=True)
    path.write_text(hostile.build(hostile.BY_NAME[name]))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["leak_tokens_as_ids", "leak_tokens_as_counts", "leak_tokens_as_lengths",
                                  "leak_tokens_in_floats", "leak_tokens_in_digits", "leak_tokens_as_exits"])
def test_a_sacrificial_submission_reads_back_no_more_than_the_bound(name, tmp_path):
    """At most the bound at the default feedback, nothing at brief. As root, the selftest grades these
    very submissions at the default and judges the same bound (run.read_back): only brief here."""
    from grader.selftest import leaks
    if os.geteuid() != 0:
        got = leaks.leaked(grade(built(name, tmp_path), tmp_path), seed=0)
        print(name, got)
        assert (got["tokens"] + got["statuses"]) * 8 <= len(rubric.ALL_PARTS) * feedback.PART_BITS, got
    brief = leaks.leaked(grade(built(name, tmp_path / "b"), tmp_path, "--feedback", "brief"), 0)
    assert brief["tokens"] == 0 and brief["statuses"] == 0, brief


def test_the_selftest_fails_a_leak_submission_that_reads_back_more_than_the_bound():
    """The runner's check on the leak_* submissions, on results like the unbounded feedback gave."""
    from grader.selftest import leaks, run
    tokens = leaks.hidden_tokens(0)
    longest = sorted(tokens, key=len, reverse=True)      # twelve whole lists: far more than the bound
    unbounded = {"output": "", "tests": [{"output": str(t)} for t in longest[:12]]}
    bounded = {"output": "", "tests": [{"output": str(tokens[0][:5])}]}
    notes = []
    failed = run.read_back([run.Sub("hostile", "leak_x", "", data=unbounded),
                            run.Sub("hostile", "leak_y", "", data=bounded),
                            run.Sub("hostile", "forge_z", "", data=unbounded)], notes)
    assert len(failed) == 1 and failed[0].startswith("hostile leak_x reads back") and len(notes) == 2
    assert notes[1] == "leak_y reads back 5 hidden tokens (longest run 5)"


@pytest.mark.slow
def test_the_gathering_part3_loses_part3s_points_only(tmp_path):
    from grader.selftest import mutants
    path = tmp_path / "gathers" / "paged_kv.py"
    path.parent.mkdir()
    path.write_text(mutants.apply(mutants.BY_NAME["bw_gathers_all_blocks"]))
    results = grade(path, tmp_path)
    lost = {p: sum(t["max_score"] - t["score"] for t in results["tests"] if p in t["tags"]) for p in rubric.ALL_PARTS}
    assert lost.pop("blockwise_attention") >= 14 and not any(lost.values()), lost
    assert "read seq.pool.k[layer, b] one block at a time" in results["output"]
