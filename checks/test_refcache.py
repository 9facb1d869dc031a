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

    first = refcache.answers(3, ["a", "b"], compute)       # marks the seed
    refcache.answers(3, ["a", "b"], compute)                # stores its answers
    again = refcache.answers(3, ["a", "b"], compute)        # reads them back
    assert asked == ["a", "b"] * 2
    assert all(refcache.identical(first[c][0], again[c][0]) and again[c][1] == 0.25 for c in "ab")
    refcache.answers(3, ["a", "c"], compute)
    assert asked == ["a", "b"] * 2 + ["c"]      # a check not stored yet: only it
    for _ in range(3):
        refcache.answers(None, ["a"], compute)  # not isolated: never cached
    assert asked == ["a", "b"] * 2 + ["c"] + ["a"] * 3
    assert oct(os.stat(next((state / "reference").iterdir())).st_mode & 0o777) == "0o700"


@root_only
def test_answers_that_do_not_round_trip_are_computed_every_time(state):
    asked = []

    def compute(check_id):
        asked.append(check_id)
        return ([(1, 2)] if check_id == "tuple" else [[1, 2]]), 0.5

    for _ in range(3):
        got = refcache.answers(0, ["tuple", "list"], compute)
        assert got["tuple"][0] == [(1, 2)] and type(got["tuple"][0][0]) is tuple
    assert asked == ["tuple", "list"] * 2 + ["tuple"]


@root_only
def test_an_unreadable_file_is_recomputed(state):
    where = refcache.folder("grader-x")
    (where / "seed-0.wire").write_bytes(b"not a frame")
    assert refcache.load(where, 0) == {}
    (where / "seed-0.seen").touch()
    assert refcache.answers(0, ["a"], lambda c: ([1], 0.1))["a"] == ([1], 0.1)
    assert refcache.load(where, 0) == {"a": ([1], 0.1)}       # replaced by a good one


@root_only
def test_a_seed_graded_once_stores_nothing(state):
    for seed in range(5):
        refcache.answers(seed, ["a"], lambda c: ([1], 0.1))
    where = refcache.folder("grader-x")
    assert not list(where.glob("*.wire")) and len(list(where.glob("*.seen"))) == 5


@root_only
def test_preloaded_answers_are_the_files_and_only_while_it_is_the_same_file(state, monkeypatch):
    """A warm start's preload: a child's load takes the answers from memory without reading the file
    again, and reads it again once the file was replaced (store writes a new one) or removed."""
    monkeypatch.setattr(refcache, "_PRELOADED", {})
    compute = lambda c: ([{"blocks": [c, 1], "kv": np.arange(3.0)}], 0.5)     # noqa: E731
    for _ in range(2):
        refcache.answers(4, ["a"], compute)        # marked, then stored
    where = refcache.folder("grader-x")
    refcache.preload(where, 4)
    read = refcache.load(where, 4)
    with monkeypatch.context() as m:
        m.setattr(refcache.wire, "decode", lambda *a, **k: pytest.fail("the file was read again"))
        again = refcache.load(where, 4)
    assert list(read) == list(again) == ["a"] and refcache.identical(again["a"][0], read["a"][0])
    refcache.store(where, 4, {"b": compute("b")})          # a new file: read, not the memory
    assert sorted(refcache.load(where, 4)) == ["a", "b"]
    (where / "seed-4.wire").unlink()
    assert refcache.load(where, 4) == {}
    refcache.preload(where, 5)                             # no file: nothing kept, nothing raised
    assert refcache.load(where, 5) == {}
