"""Judge a submission's plain-data answer against the reference's, and say where they first differ.

Both sides are plain data made by the same scenario code (the student's side decoded and validated
by grader.wire), so the comparison walks the reference's structure and demands the same types,
keys, lengths and shapes. Error messages are never compared (their wording is not graded), only
their kind.
"""
import numpy as np

from explain import first_difference

LOGITS_TOL = 1e-10      # the contract: paged logits equal the contiguous forward to 1e-10
ATTENTION_TOL = 1e-12   # the contract: blockwise attention equals attention_core to 1e-12
SCORE_RTOL = 1e-9       # beam scores are sums of log-probabilities of equal logits


def _name(value):
    return "an array" if isinstance(value, np.ndarray) else type(value).__name__


def first_mismatch(expected, got, tol=LOGITS_TOL, path="answer"):
    """(path, sentence) of the first place `got` differs from `expected`, or None."""
    if isinstance(expected, np.ndarray):
        if not isinstance(got, np.ndarray):
            return path, f"expected an array of shape {expected.shape}, got {_name(got)}"
        why = first_difference(expected, got, tol)
        return (path, why) if why else None
    if _is_error(expected):
        if not _is_error(got):
            return path, f"expected {expected['kind']}, got no error"
        return None if got["kind"] == expected["kind"] else (path, f"expected {expected['kind']}, got {_show(got)}")
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return path, f"expected a record, got {_name(got)}"
        if set(got) != set(expected):
            return path, "the answer has the wrong fields (was the scenario code changed?)"
        for key in expected:
            found = first_mismatch(expected[key], got[key], tol, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        if not isinstance(got, list):
            return path, f"expected a list, got {_name(got)}"
        flat = all(isinstance(x, (int, str)) for x in expected + got)   # tables, refcounts: show them whole

        def whole():    # built only when shown: a list of arrays would otherwise be printed for nothing
            return path, f"expected {expected}, got [{', '.join(_show(x) for x in got)}]"
        if len(got) != len(expected):
            return whole() if flat else (path, f"expected {len(expected)} items, got {len(got)}")
        for i, (e, g) in enumerate(zip(expected, got)):
            found = first_mismatch(e, g, tol, f"{path}[{i}]")
            if found:
                return whole() if flat else found
        return None
    if expected is None:
        if got is None:
            return None
        return path, f"expected no error, got {_show(got)}" if path.endswith("error") else f"expected None, got {_show(got)}"
    if isinstance(expected, bool) or isinstance(got, bool):
        return None if type(got) is type(expected) and got == expected else (path, f"expected {expected}, got {_show(got)}")
    if isinstance(expected, float):
        if type(got) is not float or not np.isfinite(got) or abs(got - expected) > SCORE_RTOL * max(1.0, abs(expected)):
            return path, f"expected {expected:.10g}, got {_show(got)}"
        return None
    if type(got) is not type(expected) or got != expected:
        return path, f"expected {expected!r}, got {_show(got)}"
    return None


# Strings from the submission's side are shown only when they are words the scenarios themselves
# produce: any other string could carry hidden inputs out through the feedback.
SAFE_WORDS = {"float64", "float32", "float16", "int64", "int32", "object", "MemoryError", "ValueError",
              "IndexError", "KeyError", "TypeError", "AttributeError", "Exception"}
SAFE_WORDS |= {f"{prefix}{w}" for prefix in ("not an integer: ", "error: ") for w in
               ("float", "float64", "float32", "str", "NoneType", "bool", "bool_", "list", "tuple", "ndarray",
                "MemoryError", "ValueError", "IndexError", "KeyError", "TypeError", "AttributeError", "Exception")}


def _show(value):
    """A short rendering of a decoded plain value (never a live object of the submission)."""
    if isinstance(value, (int, float, bool)) or value is None:
        return repr(value)
    if isinstance(value, str):
        return repr(value) if value in SAFE_WORDS else "another string"
    if _is_error(value):
        return f"an error ({value['kind']})" if value["kind"] in SAFE_WORDS else "an error"
    return _name(value)


def _is_error(value):
    """An error as scenarios.attempt records it."""
    return isinstance(value, dict) and set(value) == {"kind", "message"}
