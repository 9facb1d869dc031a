"""The results.json format check (grader/gradescope/spec.py) against Gradescope's documented examples
and against one violation of each kind."""
import copy

import pytest

from grader.gradescope import spec

# The "Output format" example of Gradescope's autograder specifications, comments removed.
DOCUMENTED = {
    "score": 44.0, "execution_time": 136, "output": "Text relevant to the entire submission",
    "output_format": "simple_format", "test_output_format": "text", "test_name_format": "text",
    "visibility": "after_due_date", "stdout_visibility": "visible", "extra_data": {},
    "tests": [{"score": 2.0, "max_score": 2.0, "status": "passed", "name": "Your name here", "name_format": "text",
               "number": "1.1", "output": "Giant multiline string that will be placed in a <pre> tag and collapsed by default",
               "output_format": "text", "tags": ["tag1", "tag2", "tag3"], "visibility": "visible", "extra_data": {}}],
    "leaderboard": [{"name": "Accuracy", "value": .926}, {"name": "Time", "value": 15.1, "order": "asc"},
                    {"name": "Stars", "value": "*****"}],
}
# The "Test case status" example: informational tests without scores, no top-level score.
STATUS_ONLY = {"tests": [{"name": "Compilation check", "status": "passed"}, {"name": "Style check", "status": "failed"},
                         {"name": "Test 3", "score": 5, "max_score": 10, "status": "passed"}]}


def test_the_documented_examples_are_valid():
    assert spec.problems(DOCUMENTED) == []
    assert spec.undocumented(DOCUMENTED) == []
    assert spec.problems({"score": 0}) == []


def test_tests_without_scores_need_a_top_level_score():
    assert spec.problems(STATUS_ONLY) == ["no score: required at the top level unless every test has one"]
    assert spec.problems({**STATUS_ONLY, "score": 5}) == []
    assert spec.problems({}) == ["no score: required at the top level unless every test has one"]


@pytest.mark.parametrize("path, value, says", [
    (("visibility",), "students", "visibility: 'students' is not one of"),
    (("stdout_visibility",), True, "stdout_visibility: True is not one of"),
    (("output_format",), "markdown", "output_format: 'markdown' is not one of"),
    (("score",), "44", "score: str '44' is not a number"),
    (("score",), True, "score: bool True is not a number"),
    (("score",), float("nan"), "score: float nan is not a number"),
    (("execution_time",), None, "execution_time: NoneType None is not a number"),
    (("output",), ["a"], "output: list ['a'] is not a str"),
    (("extra_data",), [], "extra_data: list [] is not a dict"),
    (("tests", 0, "status"), "ok", "tests[0].status: 'ok' is not one of passed, failed"),
    (("tests", 0, "number"), 1.1, "tests[0].number: float 1.1 is not a str"),
    (("tests", 0, "max_score"), "2", "tests[0].max_score: str '2' is not a number"),
    (("tests", 0, "tags"), ["a", 3], "tests[0].tags: every tag must be a string"),
    (("tests", 0, "visibility"), "never", "tests[0].visibility: 'never' is not one of"),
    (("leaderboard", 1, "order"), "up", "leaderboard[1].order: 'up' is not one of asc, desc"),
])
def test_each_violation_is_named(path, value, says):
    bad = copy.deepcopy(DOCUMENTED)
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    found = spec.problems(bad)
    assert len(found) == 1 and found[0].startswith(says), found


def test_shapes_that_are_not_objects():
    assert spec.problems([]) == ["the top level is a list, not an object"]
    assert "tests[0] is not an object" in spec.problems({"score": 1, "tests": [3]})
    assert spec.problems({"score": 1, "leaderboard": [{"name": "x"}]}) == ["leaderboard[0] needs a name and a value"]


def test_undocumented_keys_are_listed():
    extra = {**DOCUMENTED, "max_score": 100, "tests": [{**DOCUMENTED["tests"][0], "hint": "x"}]}
    assert spec.problems(extra) == []
    assert spec.undocumented(extra) == ["max_score", "tests[0].hint"]


def test_load_refuses_what_strict_json_refuses():
    assert spec.load('{"score": 1.5}') == {"score": 1.5}
    for text in ('{"score": NaN}', '{"score": Infinity}', '{"score": -Infinity}'):
        with pytest.raises(ValueError):
            spec.load(text)
