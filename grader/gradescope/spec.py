"""Gradescope's documented results.json format, as a check: what Gradescope would reject or misread.

From the autograder specifications ("Output format", "Controlling Test Case Visibility", "Test case
status", "Output String Formatting", leaderboards). Every field is optional, but a score is required
either at the top level or on every test. `problems` lists violations; `undocumented` lists keys the
documentation does not name (Gradescope ignores them, so they are worth knowing, not fatal).
"""
import json
import math

VISIBILITY = ("hidden", "after_due_date", "after_published", "visible")
FORMATS = ("text", "simple_format", "html", "md", "ansi")
STATUS = ("passed", "failed")
TOP = {"score": "number", "execution_time": "number", "output": "str", "output_format": FORMATS,
       "test_output_format": FORMATS, "test_name_format": FORMATS, "visibility": VISIBILITY,
       "stdout_visibility": VISIBILITY, "extra_data": "dict", "tests": "list", "leaderboard": "list"}
TEST = {"score": "number", "max_score": "number", "status": STATUS, "name": "str", "name_format": FORMATS,
        "number": "str", "output": "str", "output_format": FORMATS, "tags": "list", "visibility": VISIBILITY,
        "extra_data": "dict"}
LEADER = {"name": "str", "value": "any", "order": ("asc", "desc")}


def _number(x):
    return type(x) in (int, float) and math.isfinite(x)


def _field(where, key, value, kind):
    if isinstance(kind, tuple):
        return [] if value in kind else [f"{where}{key}: {value!r} is not one of {', '.join(kind)}"]
    ok = {"number": _number(value), "str": type(value) is str, "dict": type(value) is dict,
          "list": type(value) is list, "any": True}[kind]
    return [] if ok else [f"{where}{key}: {type(value).__name__} {value!r:.60} is not a {kind}"]


def _fields(where, obj, spec):
    out = []
    for key, value in obj.items():
        if key in spec:
            out += _field(where, key, value, spec[key])
    return out


def problems(results):
    """Violations of the documented format in a parsed results.json (a dict), or [] when valid."""
    if type(results) is not dict:
        return [f"the top level is a {type(results).__name__}, not an object"]
    out = _fields("", results, TOP)
    tests = results.get("tests", [])
    tests = tests if type(tests) is list else []
    for i, test in enumerate(tests):
        where = f"tests[{i}]."
        if type(test) is not dict:
            out.append(f"tests[{i}] is not an object")
            continue
        out += _fields(where, test, TEST)
        tags = test.get("tags", [])
        if type(tags) is list and not all(type(t) is str for t in tags):
            out.append(f"{where}tags: every tag must be a string")
    if "score" not in results and (not tests or any(type(t) is dict and "score" not in t for t in tests)):
        out.append("no score: required at the top level unless every test has one")
    for i, entry in enumerate(results.get("leaderboard", []) if type(results.get("leaderboard")) is list else []):
        if type(entry) is not dict or "name" not in entry or "value" not in entry:
            out.append(f"leaderboard[{i}] needs a name and a value")
        else:
            out += _fields(f"leaderboard[{i}].", entry, LEADER)
    return out


def undocumented(results):
    """Keys the documentation does not name (top level and tests)."""
    if type(results) is not dict:
        return []
    out = [k for k in results if k not in TOP]
    for i, test in enumerate(results.get("tests", []) if type(results.get("tests")) is list else []):
        if type(test) is dict:
            out += [f"tests[{i}].{k}" for k in test if k not in TEST]
    return out


def load(text):
    """Parse results.json as Gradescope would: strict JSON (no NaN or Infinity tokens)."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    return json.loads(text, parse_constant=refuse)
