"""The trusted side of the grader, piece by piece: comparison, scoring (fail closed), reports,
finding the submission file, per-student seeds."""
import json
import math
import re

import numpy as np
import pytest

from grader import paths

paths.trusted_imports()

from grader import report, rubric  # noqa: E402
registry = rubric.registry      # tests/registry.py, the list the rubric is a view of
from grader.grade import seed_for  # noqa: E402
from grader.hidden.compare import first_mismatch  # noqa: E402
from grader.score import part_totals, score  # noqa: E402
from grader.selftest.verify_corpus import load  # noqa: E402  (a paged_kv.py text as a fresh module)
from grader.submission import SubmissionError, opened  # noqa: E402

REPO_SOLUTION = paths.SOLUTION / "paged_kv.py"
LOGITS = np.linspace(-3, 3, 12).reshape(3, 4)


@pytest.mark.parametrize("got", [
    LOGITS + 1e-9,                                   # beyond 1e-10
    LOGITS[:2],                                      # wrong shape
    np.full_like(LOGITS, np.nan),                    # NaN everywhere (passes a naive "not any(err > tol)")
    np.zeros((0, 4)),                                # empty broadcasts to "all close" in np.allclose
    LOGITS.tolist(),                                 # a list where an array is due
    None,
])
def test_arrays_must_match_in_type_shape_and_value(got):
    assert first_mismatch(LOGITS, got) is not None


def test_arrays_within_tolerance_pass():
    assert first_mismatch(LOGITS, LOGITS + 5e-11) is None
    assert first_mismatch({"a": [LOGITS, 3]}, {"a": [LOGITS.copy(), 3]}) is None


@pytest.mark.parametrize("expected, got", [
    (3, 3.0), (3, True), (True, 1), (3, "3"), ([0, 2], [0, 2, 4]), ([0, 2], (0, 2)), ({"x": 1}, {"x": 1, "y": 2}),
    (-5.25, -5.25 + 1e-6), (-5.25, math.inf), (None, 0),
])
def test_scalars_and_structure_are_exact(expected, got):
    assert first_mismatch(expected, got) is not None


def test_errors_compare_by_kind_not_message():
    err = {"kind": "ValueError", "message": "bad id"}
    assert first_mismatch(err, {"kind": "ValueError", "message": "something else"}) is None
    assert first_mismatch(err, {"kind": "MemoryError", "message": ""})[1] == "expected ValueError, got MemoryError"
    assert first_mismatch(err, {"kind": "MemoryError", "message": "pool full\nmore"})[1] == \
        "expected ValueError, got MemoryError: pool full"          # the first line of what raised
    assert first_mismatch(err, None)[1] == "expected ValueError, got no error"
    assert first_mismatch({"error": None}, {"error": err})[1] == "expected no error, got ValueError: bad id"


def test_what_raised_comes_first():
    """A record whose call raised is said by its error, not by the result it could not return."""
    expected = {"result": [1, 2], "error": None}
    assert first_mismatch(expected, {"result": None, "error": {"kind": "IndexError", "message": "out of range"}}) == \
        ("answer.error", "expected no error, got IndexError: out of range")
    expected = {"out": np.zeros((2, 3)), "error": {"kind": "ValueError", "message": "x"}}
    assert first_mismatch(expected, {"out": np.zeros((2, 3)), "error": None}) == \
        ("answer.error", "expected ValueError, got no error")


def test_strings_from_the_submission_are_never_echoed():
    """Any string could carry hidden inputs out through the feedback: only scenario words are shown."""
    leak = "tokens 17 42 99"
    assert leak not in first_mismatch(3, leak)[1] and "another string" in first_mismatch(3, leak)[1]
    assert leak not in first_mismatch({"kind": "ValueError", "message": "m"}, {"kind": leak, "message": ""})[1]
    assert "'float32'" in first_mismatch("float64", "float32")[1]
    assert leak not in first_mismatch([1, 0, 2], [1, leak, 2])[1]                  # not inside a list either
    assert "expected [0, 2], got [0, 2, 4]" in first_mismatch([0, 2], [0, 2, 4])[1]


def _rows(passed_per_check):
    return score({cid: outcomes for cid, outcomes in passed_per_check.items()})


def test_score_fails_closed_and_shares_points_among_cases():
    first = next(iter(rubric.CHECKS))
    rows = _rows({first: [(True, ""), (False, "wrong"), (True, ""), (True, "")]})
    by_id = {r["check"].id: r for r in rows}
    assert by_id[first]["points"] == round(rubric.CHECKS[first].points * 3 / 4, 2)
    assert all(r["points"] == 0 and r["failures"] == ["did not run"] for cid, r in by_id.items() if cid != first)
    everything = _rows({cid: [(True, "")] for cid in rubric.CHECKS})
    assert sum(r["points"] for r in everything) == rubric.TOTAL + rubric.BONUS_TOTAL
    assert part_totals(everything) == {p: (rubric.part_points(p), rubric.part_points(p)) for p in rubric.ALL_PARTS}


def test_results_json_is_gradescope_shaped(tmp_path):
    rows = _rows({cid: [(True, "")] for cid in list(rubric.CHECKS)[:3]})
    data = report.results_json(rows, "summary", 1.234)
    assert set(data) >= {"score", "execution_time", "output", "tests"} and data["max_score"] == 100
    assert len(data["tests"]) == len(rubric.CHECKS)
    for t, check in zip(data["tests"], rubric.CHECKS.values()):
        assert set(t) == {"name", "number", "score", "max_score", "status", "output", "tags", "visibility"}
        assert t["tags"] == [check.part] and t["max_score"] == check.points
        assert t["status"] == ("passed" if t["score"] == t["max_score"] else "failed")
    assert data["score"] == sum(c.points for c in list(rubric.CHECKS.values())[:3])
    out = tmp_path / "r" / "results.json"
    report.write_atomically(out, data)
    assert json.loads(out.read_text()) == data and oct(out.stat().st_mode)[-3:] == "644"


def locate(path):
    with opened(path) as found:
        return found.path


def test_locate(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(SubmissionError, match="No file named paged_kv.py"):
        locate(tmp_path / "a")
    nested = tmp_path / "a" / "folder" / "paged_kv.py"
    nested.parent.mkdir()
    nested.write_text("x = 1\n")
    assert locate(tmp_path / "a") == nested
    (tmp_path / "a" / "other").mkdir()
    (tmp_path / "a" / "other" / "paged_kv.py").write_text("")
    with pytest.raises(SubmissionError, match="Found 2 files"):
        locate(tmp_path / "a")
    (tmp_path / "a" / "paged_kv.py").write_text("x = 3\n")
    assert locate(tmp_path / "a") == tmp_path / "a" / "paged_kv.py"         # the top one wins
    (tmp_path / "a" / "paged_kv.py").write_text(" \n\n")
    with pytest.raises(SubmissionError, match=r"^paged_kv.py is empty \(3 bytes\): there is no code to grade"):
        locate(tmp_path / "a")                                               # said empty, not 16 names missing
    big = tmp_path / "big.py"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(SubmissionError, match="limit"):
        locate(big)
    with pytest.raises(FileNotFoundError):
        locate(tmp_path / "missing")
    link = tmp_path / "link" / "paged_kv.py"
    link.parent.mkdir()
    link.symlink_to(REPO_SOLUTION)
    with pytest.raises(SubmissionError, match="regular file"):
        locate(link.parent)


def test_seed_per_student(tmp_path):
    """The seed is keyed with the course secret: the same student gets the same seed, another student
    or another secret another one, and metadata naming students without a secret is refused."""
    from grader import coursesecret
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"users": [{"id": 7, "email": "A@B.edu"}], "id": 123}))
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"users": [{"id": 8}], "id": 123}))
    secret, another = coursesecret.throwaway(), coursesecret.throwaway()
    assert seed_for(meta, secret=secret) == seed_for(meta, secret=secret) != seed_for(other, secret=secret)
    assert seed_for(meta, secret=secret) != seed_for(meta, secret=another)
    assert seed_for(meta, secret=secret) == coursesecret.seed(secret, "a@b.edu")        # the email, lowercased
    assert seed_for(tmp_path / "absent.json", secret=secret) == 0 and seed_for(meta, override=5) == 5
    with pytest.raises(coursesecret.SecretError, match="no course secret"):
        seed_for(meta)


# ------------------------------------------------------------------ the report students read first

def _failing(check_id, message):
    """Every check passes except `check_id`, which passes 1 case of 4 and fails with `message`."""
    return _rows({cid: ([(True, ""), (False, message), (False, message), (False, message)] if cid == check_id
                        else [(True, "")]) for cid in rubric.CHECKS})


def test_the_output_starts_with_the_score_then_each_part_and_what_to_fix_first(bonus_off):
    check = rubric.CHECKS["paged_step.prefill"]
    message = ("prefill logits equal the contiguous forward (Config 1):\n  after action 3 of 9, step(...):\n"
               "    logits[0, 2]: expected 0.5, got 0.25\n  first differing logit ...\n"
               "Read assignment.md, section \"Part 2\".")
    rows = _failing(check.id, message)
    out = report.student_output(rows).splitlines()
    lost = round(check.points * 3 / 4, 2)
    assert out[0] == f"Score: {100 - lost:.2f} / 100"
    part_lines = [i for i, line in enumerate(out) if line.startswith("Part ")]
    assert len(part_lines) == len(rubric.PARTS) and out[1] == ""
    i = part_lines[1]
    assert out[i].startswith("Part 2: paged KV and the paged step") and out[i].endswith(f"{30 - lost:.2f} / 30")
    assert out[i + 1] == f"  First to fix: {check.title} (1 of 4 cases passed)"
    # the difference without the header (the line above names the check), its case label first
    assert [line.strip() for line in out[i + 2:i + 5]] == \
        ["(Config 1) after action 3 of 9, step(...):", "logits[0, 2]: expected 0.5, got 0.25", "first differing logit ..."]
    assert out[i + 5].startswith("Part 3")                  # three lines of the difference, no more
    assert all("First to fix" not in out[j + 1] for j in part_lines if j != i)


def test_staff_details_are_not_in_the_students_output_but_in_extra_data_and_stdout():
    rows = _rows({cid: [(True, "")] for cid in rubric.CHECKS})
    staff = {"seed": 1234567, "isolation": ["pid namespace (whole tree killed)"], "grader": "ab" * 32}
    data = report.results_json(rows, report.student_output(rows), 1.0, extra_data=staff)
    assert "seed" not in data["output"] and "namespace" not in data["output"] and "1234567" not in data["output"]
    assert data["extra_data"] == staff and data["stdout_visibility"] == "hidden"
    assert all(t["visibility"] == "visible" for t in data["tests"])    # a hidden test would hide the total
    assert "pid namespace" in report.table(rows, "Graded x. Isolation: pid namespace (whole tree killed).")


def test_not_graded_puts_the_students_message_first_and_notes_come_in_the_first_lines():
    problem = "paged_kv.py cannot be graded: SyntaxError at line 3: invalid syntax. Fix this first."
    out = report.student_output(score({}, problem), problem=problem).splitlines()
    assert out[0] == f"Not graded: {problem}" and out[1] == "Score: 0.00 / 100"
    rows = _rows({cid: [(True, "")] for cid in rubric.CHECKS})
    out = report.student_output(rows, notes=("Graded paged_kv (1).py as paged_kv.py: the file was renamed",))
    assert out.splitlines()[1].startswith("Graded paged_kv (1).py as paged_kv.py")


# ------------------------------------------------------------------ bonus parts are extra credit

def test_the_bonus_parts_add_above_the_maximum_and_are_shown_as_extra_credit(bonus_on):
    everything = _rows({cid: [(True, "")] for cid in rubric.CHECKS})
    data = report.results_json(everything, report.student_output(everything), 1.0)
    full, table = 100 + rubric.BONUS_TOTAL, report.table(everything, "h")
    assert rubric.BONUS_PARTS and rubric.BONUS_TOTAL == sum(rubric.part_points(p) for p in rubric.BONUS_PARTS)
    assert data["score"] == full and data["max_score"] == 100                        # each bonus part adds its own
    for part in rubric.BONUS_PARTS:
        bonus, points = [t for t in data["tests"] if t["tags"] == [part]], rubric.part_points(part)
        assert [(t["number"], t["max_score"], t["score"]) for t in bonus] == \
            [(f"{rubric.registry.number(part)}.{i}", c.points, c.points) for i, c in enumerate(
                (c for c in rubric.CHECKS.values() if c.part == part), 1)]
        assert sum(t["max_score"] for t in bonus) == points and all("extra credit" in t["name"] for t in bonus)
        assert f"{rubric.registry.section(part)} (extra credit)" in data["output"]
        assert re.search(rf"\n{part} \(extra credit\) +{points:.2f} / {points}\n", table)
    assert not any("extra credit" in t["name"] for t in data["tests"] if t["tags"][0] in rubric.PARTS)
    assert data["output"].splitlines()[0] == f"Score: {full:.2f} / 100 ({rubric.BONUS_TOTAL:.2f} of it extra credit)"
    assert f"{full:.2f} / 100 (+ up to {rubric.BONUS_TOTAL} extra credit)" in table
    from grader import gradebook
    assert {"base", "extra_credit", "total", *rubric.BONUS_PARTS, *(f"{p}_attempted" for p in rubric.BONUS_PARTS)} \
        <= set(gradebook.fields())


@pytest.mark.parametrize("part", [p.id for p in rubric.registry.bonus()])
def test_a_bonus_bug_costs_bonus_points_only_and_says_what_to_fix(bonus_on, part):
    from grader import gradebook
    check = next(c for c in rubric.CHECKS.values() if c.part == part)
    rows = _failing(check.id, "evicted block 3, expected block 7")
    data = report.results_json(rows, report.student_output(rows), 1.0)
    lost = check.points * 3 / 4                               # 1 of the 4 cases passed
    assert data["score"] == 100 + rubric.BONUS_TOTAL - lost
    row = gradebook.row("s", data)
    assert {k: row[k] for k in ("base", "extra_credit", "total", *rubric.ALL_PARTS, "status")} == \
        {"base": 100, "extra_credit": rubric.BONUS_TOTAL - lost, "total": 100 + rubric.BONUS_TOTAL - lost,
         **{p: rubric.part_points(p) - lost * (p == part) for p in rubric.ALL_PARTS}, "status": "graded"}
    assert f"First to fix: {check.title} (1 of 4 cases passed)" in data["output"]
    from grader import classview
    text = "\n".join(classview.summary({"s": data}))
    assert f"{part} ({rubric.part_points(part)} points, extra credit; attempted by 1, not by 0)" in text and check.id in text


@pytest.mark.parametrize("part", [p.id for p in rubric.registry.bonus()])
def test_a_bonus_not_attempted_is_one_message_and_costs_nothing_else(bonus_on, part):
    from grader.grade import bonus_left_out
    from grader.sandbox import BONUS_NAMES
    left = bonus_left_out(list(BONUS_NAMES[part]))
    assert list(left) == [part] and left[part].startswith("bonus not attempted")
    rows = score({cid: [(True, "")] for cid in rubric.CHECKS if rubric.CHECKS[cid].part != part}, left_out=left)
    data = report.results_json(rows, report.student_output(rows), 1.0)
    full = 100 + rubric.BONUS_TOTAL - rubric.part_points(part)
    assert data["score"] == full and data["output"].splitlines()[0].startswith(f"Score: {full:.2f} / 100")
    assert data["output"].count("bonus not attempted") == 1 and "First to fix" not in data["output"]
    assert all(t["output"] == left[part] for t in data["tests"] if t["tags"] == [part])
    assert report.table(rows, "h").count("bonus not attempted") == 1
    last = BONUS_NAMES[part][-1]                 # one name missing, the others there
    half = bonus_left_out([last])
    assert half[part].startswith("bonus not graded") and last in half[part]
    assert bonus_left_out([]) == {} and bonus_left_out(["BlockPool.alloc"]) == {}


def test_stubs_left_in_the_bonus_are_one_message_and_change_no_score(bonus_on):
    """grade.bonus_stubbed: every Part 5 check got no answer because the sandbox reported a stub of
    Part 5 (todo_parts, check -> N of "TODO Part N"), and none of its cases passed: "bonus not
    attempted". Any other reply, or one case passed, is an attempt; Parts 1-4 are never relabelled,
    even when their checks stopped at a TODO Part 5 too, and their rows are the same either way."""
    from grader.grade import bonus_stubbed
    bonus = [cid for cid in rubric.CHECKS if rubric.CHECKS[cid].part == "prefix_cache"]
    fails = [(False, "not implemented yet (your code raised NotImplementedError)")]
    by_check = {cid: fails if cid in bonus or cid.startswith("paged_step.") else [(True, "")] for cid in rubric.CHECKS}
    todo = {cid: 5 for cid in bonus + [c for c in rubric.CHECKS if c.startswith("paged_step.")]}
    left = bonus_stubbed(by_check, todo)
    assert list(left) == ["prefix_cache"] and left["prefix_cache"].startswith("bonus not attempted: every Part 5 check")
    rows, plain = score(by_check, left_out=left), score(by_check)
    assert [r["points"] for r in rows] == [r["points"] for r in plain]
    assert [r for r in rows if r["check"].part != "prefix_cache"] == [r for r in plain if r["check"].part != "prefix_cache"]
    output = report.student_output(rows)
    assert output.count("bonus not attempted") == 1 and output.count("First to fix") == 1      # Part 2's alone
    assert bonus_stubbed(by_check, {**todo, bonus[0]: 2}) == {}       # one check reached Part 2's TODO first
    assert bonus_stubbed(by_check, {**todo, bonus[0]: None}) == {}    # another failure (a crash, a timeout)
    assert bonus_stubbed(by_check, {c: n for c, n in todo.items() if c != bonus[-1]}) == {}     # answered
    assert bonus_stubbed({**by_check, bonus[0]: fails + [(True, "")]}, todo) == {}      # a case passed


def test_a_bonus_switched_off_leaves_exactly_parts_1_to_4(bonus_off):
    from grader.grade import bonus_left_out
    assert rubric.ALL_PARTS == rubric.PARTS and rubric.BONUS_PARTS == () and rubric.BONUS_TOTAL == 0
    assert [c.part for c in rubric.CHECKS.values()] == [c.part for c in registry.CHECKS.values() if c.part in
                                                       ("allocator", "paged_step", "blockwise_attention", "copy_on_write")]
    assert rubric.SWITCHED_OFF == {c.id for c in registry.CHECKS.values() if registry.BY_ID[c.part].bonus} > \
        {"prefix_cache.hits", "prefix_cache.errors"}
    rows = _rows({cid: [(True, "")] for cid in rubric.CHECKS})
    data = report.results_json(rows, report.student_output(rows), 1.0)
    assert data["score"] == 100 and len(data["tests"]) == len(rubric.CHECKS)
    assert "extra credit" not in report.student_output(rows) + report.table(rows, "h")
    assert "Part 5" not in report.student_output(rows) and "prefix_cache" not in report.table(rows, "h")
    from grader import gradebook
    assert [f for f in gradebook.fields() if f in rubric.PARTS or f in ("extra_credit", "prefix_cache")] == \
        list(rubric.PARTS)
    assert bonus_left_out(["PrefixCache", "cached_prefill"]) == {}
    from grader.grade import bonus_stubbed
    assert bonus_stubbed({}, {cid: 5 for cid in rubric._checks(True)}) == {}


# ------------------------------------------------------------------ the class summary

def _results(failing=(), not_graded=""):
    rows = (score({}, not_graded) if not_graded else
            _rows({cid: [(cid not in failing, "wrong")] for cid in rubric.CHECKS}))
    return report.results_json(rows, "o", 1.0, extra_data={"not_graded": not_graded} if not_graded else {})


def test_the_class_summary_counts_failed_checks_and_sets_aside_the_ungraded():
    from grader import classview
    results = {"a": _results(), "b": _results(["allocator.refcounts", "paged_step.tables"]),
               "c": _results(["allocator.refcounts"]), "d": _results(not_graded="SyntaxError"), "e": None}
    lines = classview.summary(results)
    assert lines[0].startswith("Class summary: 5 submissions, 3 graded (0 of them not started), 1 not graded") \
        and "1 the grader failed" in lines[0]
    ranked = lines[lines.index("Checks failed most often (by the 3 graded submissions that were started):") + 1:]
    ranked = ranked[:ranked.index("")]
    assert [line.split()[:4] for line in ranked] == [["2", "of", "3", "allocator.refcounts"],
                                                    ["1", "of", "3", "paged_step.tables"]]
    points = rubric.part_points("allocator")
    block = lines[lines.index(next(line for line in lines if line.startswith("allocator ("))):][:7]
    counts = {line.split("|")[0].strip(): int(line.split()[-1]) for line in block[1:]}
    assert counts == {"0": 1, "1-24%": 0, "25-49%": 0, "50-74%": 0, "75-99%": 2, "100%": 1}, (points, block)


# ------------------------------------------------------------------ batch: what a resumed run may reuse

def test_a_stored_result_is_reused_only_for_the_same_file_grader_seed_and_isolation(tmp_path):
    from grader.batch import Store
    store = Store(tmp_path / "results")
    stamp = {"submission": "1" * 64, "grader": "2" * 64, "seed": 5, "isolated": True}
    data = report.results_json(_rows({}), "o", 1.0)
    report.write_atomically(store.results_path("x"), data)
    assert store.valid("x", stamp) is None                  # written, not yet stamped: a kill in between
    store.stamp("x", stamp)
    assert store.valid("x", stamp) == data
    for key, other in (("submission", "3" * 64), ("grader", "4" * 64), ("seed", 6), ("isolated", False)):
        assert store.valid("x", {**stamp, key: other}) is None, key
    path = store.results_path("x")
    path.write_bytes(path.read_bytes() + b" ")               # results changed after they were stamped
    assert store.valid("x", stamp) is None


def test_fingerprints_see_every_change_that_matters(tmp_path):
    from grader.fingerprint import entry_hash
    from grader.gradescope.build import files
    folder = tmp_path / "sub"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "paged_kv.py").write_text("x = 1\n")
    seen = {entry_hash(folder)}
    (folder / "a" / "paged_kv.py").write_text("x = 2\n")
    seen.add(entry_hash(folder))
    (folder / "a" / "paged_kv.py").rename(folder / "a" / "paged_kv (1).py")
    seen.add(entry_hash(folder))
    (folder / "link").symlink_to("a")
    seen.add(entry_hash(folder))
    assert len(seen) == 4
    graded_by = {rel for _, rel in files()}                  # what grader_hash covers
    assert {"grader/rubric.py", "grader/hidden/judges.py", "solution/paged_kv.py", "tests/scenarios.py",
            "lab/transformer_lab.py", "grader/report.py"} <= graded_by


def test_a_progress_line_estimates_the_time_left_from_the_average_so_far():
    from grader.batch import progress
    line = progress(3, 12, 90.0, "alice", {"score": 87.5}, 31.0)
    assert line.startswith("[ 3/12] 1:30 elapsed, about 4:30 left  alice ")     # 9 more at 30 s each
    assert line.endswith("  87.50  (31.0 s)")
    assert "error" in progress(1, 1, 5.0, "bob", None, 5.0)


# ------------------------------------------------------------------ Part 5's judge (rules.part5_view)

def _prefix_case():
    from grader.hidden.test_prefix_cache import prefix_case
    A = list(range(3, 16))
    actions = [["request", A], ["request", A[:8] + [1, 2, 3]], ["release", 0], ["lookup", A], ["evict", 1],
               ["overwrite", 0, 1, 5], ["request", A[:8] + [4]]]
    return prefix_case("unit", actions, 4, n_blocks=12, twin=True)


def _ctx(pk, case, expected, got):
    """The judge's context with the case's second run (the twins) computed here on `pk`, in-process:
    what the grader gets from a worker of its own."""
    import types
    import scenarios
    calls = case.second(expected, got) if case.second else []
    return types.SimpleNamespace(second=[scenarios.SCENARIOS[name](pk, **inputs) for name, inputs in calls])


def test_part5_names_blocks_by_what_they_were_made_for_whatever_the_allocator():
    """Another allocation order (a Part 1 bug) gives other ids but the same Part 5 view; the judge
    passes it."""
    import paged_kv as reference
    import rules
    import scenarios
    from grader.hidden.judges import PART5_FIELDS, prefix_judge
    from grader.selftest import mutants
    case = _prefix_case()
    expected = scenarios.prefix_script(reference, **case.inputs)
    other = load(mutants.apply(mutants.BY_NAME["alloc_highest_first"]), "highest")
    got = scenarios.prefix_script(other, **case.inputs)
    assert expected["records"][0]["tables"] != got["records"][0]["tables"]
    assert rules.part5_view(expected, 4) == rules.part5_view(got, 4)
    assert rules.part5_view(expected, 4)[1]["result"] == {"hits": ["0.0", "0.1"], "computed": 3}
    for field in PART5_FIELDS:
        assert prefix_judge(PART5_FIELDS[field], twin=field == "logits")(case, expected, got,
                                                                         _ctx(other, case, expected, got)) is None


def test_part5_judge_sees_a_recomputed_hit_and_echoes_no_string_of_the_submission():
    import copy
    import paged_kv as reference
    import scenarios
    from grader.hidden.judges import PART5_FIELDS, prefix_judge
    from grader.selftest import mutants
    case = _prefix_case()
    expected = scenarios.prefix_script(reference, **case.inputs)
    judge = prefix_judge(PART5_FIELDS["logits"], twin=True)
    fake = copy.deepcopy(expected)            # the last request's logits as if it had recomputed its prefix
    fake["records"][6]["result"]["logits"] = scenarios.prefix_script(
        reference, **{**case.inputs, "actions": case.inputs["actions"][:1] + [["request", list(range(3, 11)) + [4]]]}
    )["records"][1]["result"]["logits"]
    assert "differ from your own prefill" in judge(case, expected, fake, _ctx(reference, case, expected, fake))
    wrong = load(mutants.apply(mutants.BY_NAME["hits_not_in_table"]), "hits_not_in_table")
    got = scenarios.prefix_script(wrong, **case.inputs)
    assert "differ from your own prefill" in judge(case, expected, got, _ctx(wrong, case, expected, got))
    assert "wrong form" in judge(case, expected, got, None)          # no second run: never a pass
    leak = copy.deepcopy(expected)
    leak["records"][3]["result"] = ["tokens 3 4 5"]
    leak["records"][4]["result"] = "not an integer: Tokens_3_4_5"
    for field in ("keys", "eviction"):
        said = prefix_judge(PART5_FIELDS[field])(case, expected, leak)
        assert said and "3 4 5" not in said and "Tokens" not in said, said
    leak["records"][0]["tables"][0] = ["x"]
    assert "wrong form" in prefix_judge(PART5_FIELDS["hits"])(case, expected, leak)


def _chain_case():
    """Requests whose hit blocks were made by a request that itself hit (a chain), then an overwrite
    of seq 1's block 2 (a hit it shares; a copy of it, where a step copies at a block boundary), on
    block size 4."""
    from grader.hidden.test_prefix_cache import prefix_case
    A, q = list(range(3, 16)), [20, 21, 22, 23]
    actions = [["request", A], ["request", A + q], ["request", A + q + [24]], ["request", A[:8] + [1, 2]],
               ["overwrite", 1, 2, 5], ["request", A + q + [25]]]
    return prefix_case("chain", actions, 4, n_blocks=16, twin=True)


@pytest.mark.parametrize("bug", ["positions_mod_block", "no_causal_mask", "last_row_only", "cow_boundary_off"])
def test_part5_judges_pass_a_bug_of_part_2_or_4_that_depends_on_chunks_or_rows(bug):
    """Issue 14's cascade: a step that depends on how the prompt is cut into chunks, one that returns
    only the last row, a copy at a block boundary are not the cache's: every Part 5 judge passes
    them (the twin replays the requests that made the hit blocks; hits are read from the table). A
    Part 5 bug on the same script still fails."""
    import paged_kv as reference
    import scenarios
    from grader.hidden.judges import PART5_FIELDS, prefix_judge
    from grader.selftest import mutants, unseen
    case = _chain_case()
    expected = scenarios.prefix_script(reference, **case.inputs)
    other = load(mutants.apply(next(b for b in unseen.BUGS if b.name == bug)), bug)
    got = scenarios.prefix_script(other, **case.inputs)
    for field in PART5_FIELDS:
        judge = prefix_judge(PART5_FIELDS[field], twin=field == "logits")
        assert judge(case, expected, got, _ctx(other, case, expected, got)) is None, field
    wrong = load(mutants.apply(mutants.BY_NAME["recompute_last_hit_token"]), "recompute_" + bug)
    got = scenarios.prefix_script(wrong, **case.inputs)
    assert prefix_judge(PART5_FIELDS["hits"])(case, expected, got) is not None
    assert prefix_judge(PART5_FIELDS["logits"], twin=True)(case, expected, got, _ctx(wrong, case, expected, got))


# ------------------------------------------------------------------------------ Part 1: which id
def _part1_verdicts(module, seed=0):
    """{check id: [judge message or None per case]} of Part 1's hidden plans, judged in-process."""
    import paged_kv as reference
    import scenarios
    from grader.hidden import test_allocator
    from grader.hidden.conftest import rng_for
    out = {}
    for check, judge in test_allocator.JUDGES.items():
        cases = test_allocator.PLANS[check](rng_for(seed, check))
        out[check] = [judge(c, scenarios.pool_script(reference, **c.inputs), scenarios.pool_script(module, **c.inputs))
                      for c in cases]
    return out


@pytest.mark.parametrize("name", ["alloc_highest_first", "alloc_fifo_reuse", "alloc_lifo_reuse", "alloc_set_pop"])
def test_an_allocator_whose_only_bug_is_the_order_fails_lowest_free_first_alone(name):
    """Issue 16: a pop() allocator lost 21 of Part 1's 25 points over 6 checks. Every check but
    lowest_free_first names blocks by handle (rules.pool_view), so the order costs that check only."""
    from grader.selftest import mutants
    for seed in (0, 1):
        verdicts = _part1_verdicts(load(mutants.apply(mutants.BY_NAME[name]), name), seed)
        failing = {check for check, messages in verdicts.items() if any(messages)}
        assert failing == {"allocator.lowest_free_first"}, {c: next(m for m in v if m) for c, v in verdicts.items()
                                                            if any(v)}
    assert "the lowest free one" in next(m for m in verdicts["allocator.lowest_free_first"] if m)


def test_naming_blocks_by_handle_pardons_no_block_handed_out_twice():
    """The renaming is a bijection onto blocks handed out while free: an alloc that returns a block
    the test still holds fails, and records that were not given the blocks their script names are
    the wrong form, not a pass."""
    import copy
    import paged_kv as reference
    import rules
    import scenarios
    from grader.hidden.inputs import Case
    from grader.hidden.judges import pool_judge
    from grader.selftest import mutants
    ops = [["alloc"], ["alloc"], ["incref", 0], ["decref", 0], ["alloc"], ["decref", 2], ["decref", "freed"], ["alloc"]]
    case = Case("unit", "pool_script", {"cfg": None, "n_blocks": 4, "block_size": 2, "ops": ops})
    expected = scenarios.pool_script(reference, **case.inputs)
    assert rules.pool_view(expected, 4)[4]["result"] == "#2, a free block"
    early = load(mutants.apply(mutants.BY_NAME["decref_frees_at_one"]), "frees_at_one")
    said = pool_judge(case, expected, scenarios.pool_script(early, **case.inputs))
    assert "after action 4 of 8" in said and "n_used: expected 2, got 1" in said, said
    twice = copy.deepcopy(expected)
    twice[7]["result"] = twice[0]["result"]                 # hands out #0's block, which the test holds
    said = pool_judge(case, expected, twice)
    assert "a block in use (the test holds a reference on it)" in said, said
    moved = copy.deepcopy(expected)
    moved[6]["block"] = 3                                   # passed another block than "freed" names
    assert "wrong form" in pool_judge(case, expected, moved)
    huge = copy.deepcopy(expected)
    huge[2]["refcounts"][0] = 4577378705285645323           # never echoed: named instead
    said = pool_judge(case, expected, huge)
    assert "4577378705285645323" not in said and "an implausibly large number" in said, said


@pytest.mark.parametrize("where, find, replace, also", [
    ("BlockPool.refcount", "return self._ref[b]", "return self._ref[b - 1]", "[1]"),   # reads its neighbour's
    ("BlockPool.alloc", "self._ref[b] = 1", "pass", None),                           # never counts the block
])
def test_a_handles_wrong_refcount_says_too_what_the_blocks_no_call_returned_read(where, find, replace, also):
    """The feedback study's miss: a refcount that reads the neighbour's count was read as alloc's bug.
    After the first alloc, #0 (block 0) reads 0 in both; only the neighbour-reader has block 1, which no
    call returned, read 1 (block 0's count), and the message now says both."""
    import paged_kv as reference
    import scenarios
    from grader.hidden.inputs import Case
    from grader.hidden.judges import pool_judge
    from grader.selftest import mutants
    case = Case("unit", "pool_script", {"cfg": None, "n_blocks": 3, "block_size": 2, "ops": [["alloc"], ["alloc"]]})
    bug = load(mutants.edited(REPO_SOLUTION.read_text(), [(where, find, replace)], "unit"), "unit_refcount")
    said = pool_judge(case, scenarios.pool_script(reference, **case.inputs), scenarios.pool_script(bug, **case.inputs))
    assert "after action 1 of 2" in said and "the refcount of #0's block: expected 1, got 0" in said, said
    if also:
        assert f"; and blocks no call has returned have refcounts {also}: a block nobody was handed is free" in said
    else:
        assert "no call has returned" not in said, said


def test_an_answer_that_says_the_pool_could_not_be_built_names_the_part_to_fix():
    """Issue 15 item 8: scenarios.batch gives {"unbuilt": "BlockPool", "kind": ...} when BlockPool(...)
    raised; the grader names it and Part 1, trusting only a name it knows and a kind from its list."""
    from grader.hidden.conftest import _unbuilt
    assert _unbuilt({"unbuilt": "BlockPool", "kind": "TypeError"}, "prefix_cache") == (
        "your BlockPool(...) raised TypeError, and this check needs one before it can test anything: "
        "fix Part 1 (BlockPool) first")
    assert _unbuilt({"unbuilt": "BlockPool", "kind": "TypeError"}, "allocator").startswith("your BlockPool(...) raised")
    assert "an exception" in _unbuilt({"unbuilt": "PagedSequence", "kind": "<b>chosen words</b>"}, "prefix_cache")
    for forged in ({"unbuilt": ["BlockPool"], "kind": "x"}, {"unbuilt": "os.system", "kind": "x"},
                   {"unbuilt": "BlockPool"}, [], None, {"records": [], "twins": []}):
        assert _unbuilt(forged, "prefix_cache") == ""


# ---------------------------------------------------------------- binding plans and judges to checks
def _hidden_module(name, plans, judges):
    """A hidden module as pytest would import it: its file name says its part."""
    import types
    module = types.ModuleType(name)
    module.__file__ = str(paths.HIDDEN / f"{name}.py")
    module.PLANS, module.JUDGES = plans, judges
    return module


def test_every_hidden_module_binds_exactly_its_parts_checks_by_id():
    """Each part's hidden module has a plan and a judge named for every registry check of its part."""
    import importlib
    from grader.hidden.conftest import bind
    for part in registry.PARTS:
        module = importlib.import_module(f"grader.hidden.{part.test_file[:-len('.py')]}")
        bound = bind(module)
        assert list(bound) == [c.id for c in registry.checks_of(part.id)]
        assert all(bound[c] == (module.PLANS[c], module.JUDGES[c]) for c in bound)


@pytest.mark.parametrize("change, said", [
    ("extra plan", "PLANS has copy_on_write.fork_again, not a check of part copy_on_write"),
    ("missing judge", "JUDGES lacks copy_on_write.beam_search"),
    ("extra judge", "JUDGES has copy_on_write.fork_again"),
    ("missing plan", "PLANS lacks copy_on_write.fork"),
    ("no judges", "JUDGES is not a dict"),
    ("judge not callable", "JUDGES['copy_on_write.free'] is not callable"),
])
def test_a_hidden_module_whose_plans_and_judges_are_not_its_checks_does_not_load(change, said):
    """Issue 17: a seventh sharing check once fell back to a generic judge (Part 1's ids compared: one bug,
    two charges). Now a plan without its judge, a judge without its check, or either without the
    other, stops collection with what is wrong."""
    from grader.hidden import test_copy_on_write as cow
    from grader.hidden.conftest import BindingError, bind
    plans, judges = dict(cow.PLANS), dict(cow.JUDGES)
    if change == "extra plan":
        plans["copy_on_write.fork_again"] = cow.plan_fork
    elif change == "missing judge":
        del judges["copy_on_write.beam_search"]
    elif change == "extra judge":
        judges["copy_on_write.fork_again"] = judges["copy_on_write.fork"]
    elif change == "missing plan":
        del plans["copy_on_write.fork"]
    elif change == "no judges":
        judges = None
    else:
        judges["copy_on_write.free"] = "sharing_judge"
    with pytest.raises(BindingError, match=re.escape(said)):
        bind(_hidden_module("test_copy_on_write", plans, judges))


def test_a_hidden_module_of_no_part_does_not_load():
    from grader.hidden.conftest import BindingError, bind
    with pytest.raises(BindingError, match="no part of tests/registry.py has this test file"):
        bind(_hidden_module("test_frobnicate", {}, {}))


def test_a_drawn_case_counts_only_once_the_core_cases_pass():
    """score.counted, worked out by hand: a drawn case is left out while a core case fails (the loss is then
    the core's, the same on every seed), and counts as any case once they all pass."""
    from grader import score
    ok, bad = (True, ""), (False, "x")
    assert score.counted([ok, ok, bad], [False, False, True]) == [ok, ok, bad]          # core clean: it counts
    assert score.counted([bad, ok, bad], [False, False, True]) == [bad, ok]             # a core case fails
    assert score.counted([bad, ok, ok], [False, False, True]) == [bad, ok]              # passed or not: left out
    assert score.counted([bad, bad], [True, True]) == [bad, bad]                        # no core: all count
    # hiding the drawn failure by failing a core case on purpose never pays: 1/2 lost instead of 1/3
    lost = lambda outs: 1 - sum(o[0] for o in outs) / len(outs)
    assert lost(score.counted([bad, ok, ok], [False, False, True])) > lost(score.counted([ok, ok, bad], [False, False, True]))


def test_the_allocator_and_copy_on_write_checks_have_core_cases_and_one_drawn():
    """Parts 1 and 4: every check's cases but its last are the same at every seed (conftest.drawn_flags), so
    whether a bug is caught by them, and what it costs, is the same for every student."""
    import importlib
    from grader.hidden.conftest import bind, drawn_flags, rng_for
    for name in ("test_allocator", "test_copy_on_write"):
        for check_id, (plan, _) in bind(importlib.import_module(f"grader.hidden.{name}")).items():
            for seed in (0, 3):
                cases = plan(rng_for(seed, check_id))
                assert drawn_flags(plan, check_id, seed, cases) == [False] * (len(cases) - 1) + [True], check_id


def test_a_message_ending_with_a_value_keeps_it_through_pytest():
    """pytest's report drops a message's trailing \\x1f (str.strip counts it as whitespace): the collector
    closes the marks again, so "...: AttributeError" shows its kind instead of nothing (issue 33)."""
    from types import SimpleNamespace

    import explain
    from grader import collect, feedback
    with explain.hidden_feedback(explain.Ranges(n_blocks=4, max_len=8, refs=4, most=255)):
        said = "your code raised: " + explain.their("AttributeError", "message")
    assert said.endswith(explain.END) and collect._OPEN == explain.VALUE + explain.TRUSTED + explain.GROUP
    report = SimpleNamespace(skipped=False, when="call", longreprtext=said.strip())     # as pytest hands it over
    got = collect._message(report)
    assert feedback.resolve(got, "full", {"allocator": 640}, "allocator") == "your code raised: AttributeError"
    assert collect._message(SimpleNamespace(skipped=False, when="call", longreprtext="plain text\n")) == "plain text"
