"""wire: what may cross the sandbox boundary. Round trips are bit-exact; every malformed frame a
hostile worker could write is refused with WireError (never a crash, never a live object)."""
import json
import math
import pickle
import struct

import numpy as np
import pytest

from grader import wire


def frame(header, payload=b"", *, raw_header=None):
    """A frame from a header object (or raw header bytes), the way a hostile worker could build one."""
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return wire.MAGIC + struct.pack("<Q", len(text)) + text + payload


def nested(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def same_bits(a, b):
    return type(a) is type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape \
        and a.tobytes() == b.tobytes()


SPECIAL = np.array([0.0, -0.0, 5e-324, -1.7976931348623157e308, np.nan, np.inf, -np.inf, 1 / 3])


def test_round_trip_is_bit_exact_and_plain():
    rng = np.random.default_rng(7)
    value = {
        "floats": rng.standard_normal((3, 4, 5)), "special": SPECIAL,
        "ints": np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max]),
        "mask": np.array([[True, False], [False, True]]), "scalar0d": np.array(2.5), "empty": np.zeros((0, 7)),
        "nested": [1, -2**63, 2**63 - 1, 0.1, True, None, "παged ✓", [[], {}], (1, 2)],
        "nan": math.nan, "inf": -math.inf, "$dollar": {"$$two": 1}, "nd": {"$nd": 0},
    }
    out = wire.decode(wire.encode(value))
    for key in ("floats", "special", "ints", "mask", "scalar0d", "empty"):
        assert same_bits(out[key], value[key]), key
        assert out[key].flags.c_contiguous and out[key].flags.owndata and out[key].flags.writeable
    assert out["nested"] == [1, -2**63, 2**63 - 1, 0.1, True, None, "παged ✓", [[], {}], [1, 2]]
    assert math.isnan(out["nan"]) and out["inf"] == -math.inf
    assert out["$dollar"] == {"$$two": 1} and out["nd"] == {"$nd": 0}     # user keys, not placeholders


def test_a_list_of_plain_ints_crosses_as_ints_and_a_bool_or_numpy_int_among_them_keeps_its_own_way():
    """Lists of plain ints (a pool's refcounts) take a path without a call per element: the same ints
    come out, and a list holding a bool, a numpy integer or an int beyond int64 does not take it."""
    ints = list(range(-5, 300)) + [2**63 - 1, -2**63]
    out = wire.decode(wire.encode({"ints": ints, "tuple": (3, 4), "bools": [1, True, 0, False],
                                   "np": [1, np.int64(2)], "floats": [1, 2.0]}))
    assert out["ints"] == ints and all(type(v) is int for v in out["ints"])
    assert out["tuple"] == [3, 4] and [type(v) for v in out["bools"]] == [int, bool, int, bool]
    assert [type(v) for v in out["np"]] == [int, int] and [type(v) for v in out["floats"]] == [int, float]
    with pytest.raises(TypeError):
        wire.encode([0, 2**63])


def test_lossless_conversions_and_base_class_only():
    class Sub(np.ndarray):
        pass
    out = wire.decode(wire.encode({"f32": np.arange(3, dtype=np.float32), "i32": np.arange(3, dtype=np.int32),
                                   "sub": np.arange(4.0).view(Sub), "np": [np.float64(1.5), np.int64(3), np.bool_(True)],
                                   "strided": np.arange(10.0)[::3]}))
    assert out["f32"].dtype == np.float64 and out["i32"].dtype == np.int64
    assert type(out["sub"]) is np.ndarray and out["strided"].tolist() == [0.0, 3.0, 6.0, 9.0]
    assert [type(x) for x in out["np"]] == [float, int, bool]


def test_decoded_arrays_do_not_alias_the_message():
    buf = bytearray(wire.encode({"a": np.ones(4)}))
    out = wire.decode(buf)
    buf[-8:] = b"\xff" * 8
    assert out["a"].tolist() == [1.0] * 4


@pytest.mark.parametrize("value", [
    {1: "non-str key"}, {"s": {1, 2}}, object(), np.array([object()]), np.array([1 + 2j]),
    np.array(["text"]), 2**63, np.uint64(2**64 - 1), np.arange(3, dtype=np.uint64), "lone \ud800 surrogate",
    nested(wire.MAX_DEPTH + 2),
])
def test_encode_refuses_what_is_not_plain_data(value):
    with pytest.raises(TypeError):
        wire.encode(value)


GOOD_HEADER = {"arrays": [["<f8", [2]]], "body": {"x": {"$nd": 0}}}
GOOD_PAYLOAD = np.array([1.0, 2.0]).tobytes()


def test_the_hostile_frames_below_differ_from_a_good_one_only_in_their_flaw():
    assert wire.decode(frame(GOOD_HEADER, GOOD_PAYLOAD))["x"].tolist() == [1.0, 2.0]


class Evil:
    def __reduce__(self):
        return (eval, ("__import__('os').system('touch /tmp/cs349e-wire-pwned')",))


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty"),
    pytest.param(b"CS349EW1", id="truncated-prefix"),
    pytest.param(pickle.dumps(Evil()), id="pickle"),
    pytest.param(pickle.dumps({"x": np.array([1.0])}), id="pickle-of-plain-data"),
    pytest.param(b"\x93NUMPY" + b"\0" * 200, id="npy"),
    pytest.param(b"XXXXXXXX" + frame(GOOD_HEADER, GOOD_PAYLOAD)[8:], id="bad-magic"),
    pytest.param(wire.MAGIC + struct.pack("<Q", 10**6) + b"{}", id="header-length-beyond-end"),
    pytest.param(frame(GOOD_HEADER, GOOD_PAYLOAD[:-1]), id="payload-short"),
    pytest.param(frame(GOOD_HEADER, GOOD_PAYLOAD + b"\0"), id="payload-trailing-bytes"),
    pytest.param(frame(GOOD_HEADER, GOOD_PAYLOAD) + frame(GOOD_HEADER, GOOD_PAYLOAD), id="two-frames"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": NaN}'), id="json-NaN"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": -Infinity}'), id="json-Infinity"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": 1e999}'), id="json-float-overflow"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": ' + b"9" * 5000 + b"}"), id="json-huge-int"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": 9223372036854775808}'), id="int-beyond-int64"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": [0, 1, -9223372036854775809]}'),
                 id="int-beyond-int64-in-a-list-of-ints"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": [true, 9223372036854775808]}'),
                 id="int-beyond-int64-in-a-mixed-list"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": {"a": 1, "a": 2}}'), id="duplicate-key"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": "\\ud800"}'), id="lone-surrogate"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": "\xff"}'), id="bad-utf8"),
    pytest.param(frame(None, raw_header=b'{"arrays": [], "body": [1,]}'), id="json-syntax"),
    pytest.param(frame(None, raw_header=b"[" * 100000 + b"]" * 100000), id="json-100000-deep"),
    pytest.param(frame({"arrays": [], "body": nested(wire.MAX_DEPTH + 2)}), id="nested-beyond-MAX_DEPTH"),
    pytest.param(frame({"arrays": [], "body": 1, "extra": 2}), id="extra-top-level-key"),
    pytest.param(frame({"body": 1}), id="missing-arrays"),
    pytest.param(frame([1, 2]), id="header-not-an-object"),
    pytest.param(frame({"arrays": [["|O", [1]]], "body": {"$nd": 0}}, pickle.dumps(Evil())[:8]), id="object-dtype"),
    pytest.param(frame({"arrays": [["<f4", [2]]], "body": {"$nd": 0}}, b"\0" * 8), id="float32-dtype"),
    pytest.param(frame({"arrays": [[">f8", [2]]], "body": {"$nd": 0}}, GOOD_PAYLOAD), id="big-endian"),
    pytest.param(frame({"arrays": [["<f8", [-2]]], "body": {"$nd": 0}}, GOOD_PAYLOAD), id="negative-dim"),
    pytest.param(frame({"arrays": [["<f8", [2.0]]], "body": {"$nd": 0}}, GOOD_PAYLOAD), id="float-dim"),
    pytest.param(frame({"arrays": [["<f8", [True, True]]], "body": {"$nd": 0}}, GOOD_PAYLOAD[:8]), id="bool-dim"),
    pytest.param(frame({"arrays": [["<f8", [10**12]]], "body": {"$nd": 0}}, GOOD_PAYLOAD), id="huge-claimed-shape"),
    pytest.param(frame({"arrays": [["<f8", [2**62, 2**62, 0]]], "body": {"$nd": 0}}), id="overflowing-shape"),
    pytest.param(frame({"arrays": [["<f8", [1] * 40]], "body": {"$nd": 0}}, GOOD_PAYLOAD[:8]), id="too-many-dims"),
    pytest.param(frame({"arrays": [["<f8", [2]]], "body": 1}, GOOD_PAYLOAD), id="unreferenced-array"),
    pytest.param(frame({"arrays": [["<f8", [2]]], "body": [{"$nd": 0}, {"$nd": 0}]}, GOOD_PAYLOAD),
                 id="array-used-twice"),
    pytest.param(frame({"arrays": [["<f8", [2]]], "body": {"$nd": 1}}, GOOD_PAYLOAD), id="index-out-of-range"),
    pytest.param(frame({"arrays": [["<f8", [2]]], "body": {"$nd": True}}, GOOD_PAYLOAD), id="bool-index"),
    pytest.param(frame({"arrays": [["|b1", [2]]], "body": {"$nd": 0}}, b"\x01\x02"), id="bool-byte-2"),
    pytest.param(frame({"arrays": [], "body": {"$f": "NaN!"}}), id="bad-special-float"),
    pytest.param(frame({"arrays": [], "body": {"$pickle": "x", "y": 1}}), id="reserved-key"),
])
def test_decode_refuses_malformed_frames(data):
    with pytest.raises(wire.WireError):
        wire.decode(data)


def test_size_caps():
    big = wire.encode(np.zeros(1000))
    assert wire.decode(big, max_bytes=len(big)).shape == (1000,)      # the cap is inclusive
    with pytest.raises(wire.WireError):
        wire.decode(big, max_bytes=len(big) - 1)
    many = wire.encode([[]] * 1000)
    with pytest.raises(wire.WireError):
        wire.decode(many, max_header=1000)
    with pytest.raises(wire.WireError):
        wire.decode("a str, not bytes")
