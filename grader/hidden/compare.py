"""Judge a submission's plain-data answer against the reference's, and say where they first differ.

Both sides are plain data made by the same scenario code (the student's side decoded and validated
by grader.wire), so the comparison walks the reference's structure and demands the same types,
keys, lengths and shapes. Error messages are never compared (their wording is not graded), only
their kind. What it says of the submission's side goes through explain.their (validated, marked,
bounded in hidden feedback); the reference's side through explain.ours.
"""
import re

import numpy as np

import scenarios
from explain import SAFE_WORDS, Ranges, first_difference, ours, raised, their, their_list

LOGITS_TOL = 1e-10      # the contract: paged logits equal the contiguous forward to 1e-10
ATTENTION_TOL = 1e-12   # the contract: blockwise attention equals attention_core to 1e-12
SCORE_RTOL = 1e-9       # beam scores are sums of log-probabilities of equal logits


def _name(value):
    return "an array" if isinstance(value, np.ndarray) else type(value).__name__


def first_mismatch(expected, got, tol=LOGITS_TOL, path="answer", twin=False):
    """(path, sentence) of the first place `got` differs from `expected`, or None. twin=True:
    `expected` is the submission's own second run, not the reference's: its values are shown as the
    submission's (validated, bounded), never as they are."""
    def want(value, public=None, field="number", chosen=False):     # the expected side, as it may be shown
        if twin:
            return _show(value, public, field) if not isinstance(value, list) else \
                their_list(value, item=lambda x: _show(x, field=field))
        return ours(repr(value) if isinstance(value, str) and field != "kind" else value, public, chosen)

    if isinstance(expected, np.ndarray):
        if not isinstance(got, np.ndarray):
            return path, f"expected an array of shape {want(expected.shape, field='shape')}, got {_name(got)}"
        why = first_difference(expected, got, tol, twin=twin)
        return (path, why) if why else None
    if _is_error(expected):
        if not _is_error(got):
            return path, f"expected {want(expected['kind'], field='kind')}, got no error"
        return None if got["kind"] == expected["kind"] else \
            (path, f"expected {want(expected['kind'], field='kind')}, got {raised(got)}")
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return path, f"expected a record, got {_name(got)}"
        if set(got) != set(expected):
            return path, "the answer has the wrong fields (was the scenario code changed?)"
        for key in sorted(expected, key=lambda k: k != "error"):    # what raised first: it explains the rest
            found = first_mismatch(expected[key], got[key], tol, f"{path}.{key}", twin)
            if found:
                return found
        return None
    if isinstance(expected, list):
        if not isinstance(got, list):
            return path, f"expected a list, got {_name(got)}"
        flat = all(isinstance(x, (int, str)) for x in expected + got)   # tables, refcounts: show them whole

        def whole():    # built only when shown: a list of arrays would otherwise be printed for nothing
            return path, (f"expected {want(expected, field=_field(path))}, "
                          f"got {their_list(got, item=lambda x: _show(x, field=_field(path)))}")
        if len(got) != len(expected):
            return whole() if flat else (path, f"expected {want(len(expected))} items, got {their(len(got))}")
        for i, (e, g) in enumerate(zip(expected, got)):
            found = first_mismatch(e, g, tol, f"{path}[{i}]", twin)
            if found:
                return whole() if flat else found
        return None
    if expected is None:
        if got is None:
            return None
        if path.endswith("error"):
            return path, f"expected no error, got {raised(got) if _is_error(got) else _show(got)}"
        return path, f"expected None, got {_show(got)}"
    if isinstance(expected, bool) or isinstance(got, bool):
        return None if type(got) is type(expected) and got == expected else \
            (path, f"expected {want(expected)}, got {_show(got)}")
    if isinstance(expected, float):
        if type(got) is not float or not np.isfinite(got) or abs(got - expected) > SCORE_RTOL * max(1.0, abs(expected)):
            return path, f"expected {want(expected, '.10g', 'float', chosen=True)}, got {_show(got, '.10g')}"
        return None
    if type(got) is not type(expected) or got != expected:
        return path, f"expected {want(expected, field=_field(path))}, got {_show(got, field=_field(path))}"
    return None


def _field(path):
    """The field a path ends in, for their(): block ids in tables, lengths, else a number."""
    names = re.findall(r"[A-Za-z_]+", path)
    return FIELDS.get(names[-1] if names else "", "number")


FIELDS = {"tables": "id", "order": "id", "lengths": "length", "rows": "length", "result": "count",
          **dict.fromkeys(("refcounts", "n_used", "n_free", "peak_used", "n_copies", "n_cached", "in_use", "n_blocks",
                           "block_size"), "count")}


def _show(value, public=None, field="number"):
    """A short rendering of a decoded plain value of the submission (never a live object of it)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return their(value, "float" if isinstance(value, float) else field, public)
    if isinstance(value, str):
        named = re.fullmatch(r"id (-?\d{1,30})", value)        # rules.canonical's name of an id outside the order
        if named:
            return "id " + their(int(named.group(1)), "id")
        return their(value, "word") if value in SAFE_WORDS else "another string"
    if isinstance(value, tuple):
        return their(value, field)
    if _is_error(value):
        return f"an error ({their(value['kind'], 'kind')})" if value["kind"] in SAFE_WORDS else "an error"
    return _name(value)


def _is_error(value):
    """An error as scenarios.attempt records it."""
    return isinstance(value, dict) and set(value) == {"kind", "message"}


def ranges_for(case):
    """explain.Ranges of one hidden case, from its inputs alone (trusted): ids below its pool's
    n_blocks, lengths up to its Config's max_len, counts of blocks or references up to its blocks
    plus its actions (each takes at most one reference more), and any other number (n_hit_tokens...)
    within the largest the case can need: how many numbers its inputs hold (tokens included)."""
    inputs = case.inputs
    n_blocks = inputs.get("n_blocks") if type(inputs.get("n_blocks")) is int else 0
    max_len = scenarios.config(inputs.get("cfg")).max_len
    actions = len(inputs.get("actions") or inputs.get("ops") or inputs.get("cases") or ())
    refs = max(n_blocks, inputs.get("block_size", 0) or 0) + actions + 8
    return Ranges(n_blocks=n_blocks, max_len=max_len, refs=refs, most=max(refs, max_len, _numbers_in(inputs)))


def _numbers_in(x):
    if isinstance(x, dict):
        return sum(_numbers_in(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(_numbers_in(v) for v in x)
    return 1
