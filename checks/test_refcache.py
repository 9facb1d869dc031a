"""The reference's answers kept between gradings (grader/refcache.py): only what comes back exactly
is kept, a cached seed is not recomputed, another seed or an ungraded-in-isolation one is."""
import os

import numpy as np
import pytest

from grader import refcache, runtime

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the cache lives in root's STATE_DIR")


@pytest.mark.parametrize("a, b", [
    ([1, 2], (1, 2)), (1, 1.0), (True, 1), (0.0, -0.0),
    (np.zeros(2), np.zeros(2, dtype=np.float32)), (np.zeros(2), np.zeros((2, 1))),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}), (np.float64(1.5), 1.5), ([np.nan], [0.0]),
])
def test_what_a_judge_could_tell_apart_is_not_identical(a, b):
    assert not refcache.identical(a, b) and not refcache.identical(b, a)


def test_identical_values_are():
    value = {"x": [1, 2.5, None, "s", True, np.arange(3), {"nan": float("nan")}], "y": []}
    same = {"x": [1, 2.5, None, "s", True, np.arange(3), {"nan": float("nan")}], "y": []}
    assert refcache.identical(value, same)


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(refcache, "grader_hash", lambda: "grader-x")
    return tmp_path / "state"


@root_only
def test_a_cached_seed_is_read_back_not_recomputed(state):
    asked = []

    def compute(check_id):
        asked.append(check_id)
        return [{"blocks": [check_id, 1], "kv": np.arange(4.0)}], 0.25

    first = refcache.answers(3, ["a", "b"], compute)
    again = refcache.answers(3, ["a", "b"], compute)
    assert asked == ["a", "b"]
    assert all(refcache.identical(first[c][0], again[c][0]) and again[c][1] == 0.25 for c in "ab")
    refcache.answers(4, ["a"], compute)         # another seed
    refcache.answers(None, ["a"], compute)      # not isolated: never cached
    assert asked == ["a", "b", "a", "a"]
    assert oct(os.stat(next((state / "reference").iterdir())).st_mode & 0o777) == "0o700"


@root_only
def test_answers_that_do_not_round_trip_are_computed_every_time(state):
    asked = []

    def compute(check_id):
        asked.append(check_id)
        return ([(1, 2)] if check_id == "tuple" else [[1, 2]]), 0.5

    for _ in range(2):
        got = refcache.answers(0, ["tuple", "list"], compute)
        assert got["tuple"][0] == [(1, 2)] and type(got["tuple"][0][0]) is tuple
    assert asked == ["tuple", "list", "tuple"]


@root_only
def test_an_unreadable_file_is_recomputed(state):
    where = refcache.folder("grader-x")
    (where / "seed-0.wire").write_bytes(b"not a frame")
    assert refcache.load(where, 0) == {}
    assert refcache.answers(0, ["a"], lambda c: ([1], 0.1))["a"] == ([1], 0.1)
