"""The trusted side of the grader, piece by piece: comparison, scoring (fail closed), reports,
finding the submission file, per-student seeds."""
import json
import math

import numpy as np
import pytest

from grader import paths

paths.trusted_imports()

from grader import report, rubric  # noqa: E402
from grader.grade import seed_for  # noqa: E402
from grader.hidden.compare import first_mismatch  # noqa: E402
from grader.score import part_totals, score  # noqa: E402
from grader.submission import SubmissionError, locate  # noqa: E402

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
    assert "expected ValueError, got an error (MemoryError)" in first_mismatch(err, {"kind": "MemoryError", "message": ""})[1]
    assert "got no error" in first_mismatch(err, None)[1]
    assert "expected no error" in first_mismatch({"error": None}, {"error": err})[1]


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
    assert sum(r["points"] for r in everything) == 100
    assert part_totals(everything) == {p: (rubric.part_points(p), rubric.part_points(p)) for p in rubric.PARTS}


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
    (tmp_path / "a" / "paged_kv.py").write_text("")
    assert locate(tmp_path / "a") == tmp_path / "a" / "paged_kv.py"         # the top one wins
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
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps({"users": [{"id": 7, "email": "a@b"}], "id": 123}))
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"users": [{"id": 8}], "id": 123}))
    assert seed_for(meta) == seed_for(meta) != seed_for(other)
    assert seed_for(tmp_path / "absent.json") == 0 and seed_for(meta, override=5) == 5
