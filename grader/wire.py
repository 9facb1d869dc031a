"""The only format that crosses the sandbox boundary, in either direction.

A message is plain data: dicts with str keys, lists (tuples encode as lists), str, int (int64 range),
float, bool, None, and numpy arrays of dtype float64, int64 or bool. No pickle, no class names, no
callables: `decode` can only ever build those types, so nothing the sandbox sends can run code or
pretend to be something else (an ndarray subclass, an object array, a float with an `__eq__`).

Frame layout:

    MAGIC (8 bytes) | header length (8 bytes, little endian) | header (UTF-8 JSON) | array payloads

The header is `{"arrays": [[dtype, shape], ...], "body": value}`. In `body` an array is the
placeholder `{"$nd": i}` (array i, used exactly once) and a non-finite float is `{"$f": "nan"}`
(or "inf", "-inf"), because strict JSON has neither; a user key that starts with "$" is escaped to
"$$...". Payloads follow the header in order, each exactly `prod(shape) * itemsize` bytes, raw and
little endian. `decode` is strict: any deviation raises WireError, and its messages are fixed text
built here, never text taken from the message.
"""
import json
import math
import struct

import numpy as np

MAGIC = b"CS349EW1"
STARTED = b"CS349EGO"  # what a worker writes first on its reply pipe, before it loads the submission: a
                       # worker that dies without it died before any student code ran (sandbox.py)
MAX_BYTES = 64 << 20     # a whole message, header and payloads
MAX_HEADER = 2 << 20     # the JSON part: bulk numbers belong in arrays; this bounds the objects
                         # json.loads can be made to build (an empty list is 3 bytes, 56 in memory)
MAX_DEPTH = 32           # nesting of lists and dicts
MAX_NDIM = 32
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_DTYPES = {"<f8": np.dtype("<f8"), "<i8": np.dtype("<i8"), "|b1": np.dtype("|b1")}
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_PREFIX = struct.Struct("<8sQ")


class WireError(ValueError):
    """A message that is not a well-formed frame of plain data."""


# ---------------------------------------------------------------------------------------- encode

def encode(value) -> bytes:
    """Plain data -> bytes. Lossless conversions only (numpy scalars, float32/int32 arrays,
    tuples); anything else is a TypeError, so a scenario that leaks a live object fails loudly."""
    arrays = []
    body = _encode_value(value, arrays, 0)
    header = json.dumps({"arrays": [[a.dtype.str, list(a.shape)] for a in arrays], "body": body},
                        ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    parts = [_PREFIX.pack(MAGIC, len(header)), header]
    parts.extend(a.tobytes(order="C") for a in arrays)
    return b"".join(parts)


def _encode_value(x, arrays, depth):
    if depth > MAX_DEPTH:
        raise TypeError("nested deeper than wire.MAX_DEPTH")
    t = type(x)
    if x is None or t is bool or t is str:
        if t is str:
            _check_text(x, TypeError)
        return x
    if t is int or isinstance(x, np.integer):
        x = int(x)
        if not _INT_MIN <= x <= _INT_MAX:
            raise TypeError("int outside the int64 range")
        return x
    if t is float or isinstance(x, np.floating):
        x = float(x)
        if math.isfinite(x):
            return x
        return {"$f": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.ndarray):
        arrays.append(_plain_array(x))
        return {"$nd": len(arrays) - 1}
    if t is list or t is tuple:
        if _plain_ints(x):          # most of a grading's values: a pool's refcounts, after every action
            return x                # json.dumps writes a tuple as a list
        return [_encode_value(v, arrays, depth + 1) for v in x]
    if t is dict:
        out = {}
        for k, v in x.items():
            if type(k) is not str:
                raise TypeError("dict keys must be str")
            _check_text(k, TypeError)
            out["$" + k if k.startswith("$") else k] = _encode_value(v, arrays, depth + 1)
        return out
    raise TypeError(f"cannot send a {t.__name__} across the sandbox boundary")


def _plain_ints(x):
    """Whether a list holds only plain ints (no bool, no subclass) in the int64 range: then it
    crosses as it is, without a call per element, in either direction."""
    return bool(x) and set(map(type, x)) == _INT_ONLY and _INT_MIN <= min(x) and max(x) <= _INT_MAX


_INT_ONLY = {int}


def _plain_array(a):
    """A C-contiguous base-class copy in one of the three wire dtypes, converted losslessly."""
    kind = a.dtype.kind
    if kind == "b":
        target = np.dtype("|b1")
    elif kind == "f" and a.dtype.itemsize <= 8:
        target = np.dtype("<f8")
    elif kind in "iu" and np.can_cast(a.dtype, np.int64, casting="safe"):
        target = np.dtype("<i8")
    else:
        raise TypeError(f"arrays of dtype {a.dtype} cannot cross the sandbox boundary")
    if a.ndim > MAX_NDIM:
        raise TypeError("array has too many dimensions")
    return np.array(a, dtype=target, order="C", copy=True, subok=False)


# ---------------------------------------------------------------------------------------- decode

def decode(data, *, max_bytes: int = MAX_BYTES, max_header: int = MAX_HEADER,
           max_depth: int = MAX_DEPTH):
    """bytes -> plain data (fresh, owned, C-contiguous base ndarrays), or WireError."""
    if type(data) not in (bytes, bytearray, memoryview):
        raise WireError("message is not bytes")
    data = memoryview(data).cast("B")
    if len(data) > max_bytes:
        raise WireError("message larger than the size cap")
    if len(data) < _PREFIX.size:
        raise WireError("message truncated")
    magic, header_len = _PREFIX.unpack(data[:_PREFIX.size])
    if magic != MAGIC:
        raise WireError("not a wire frame (bad magic)")
    if header_len > len(data) - _PREFIX.size:
        raise WireError("header length beyond the end of the message")
    if header_len > max_header:
        raise WireError("header larger than its size cap")
    header = _parse_header(bytes(data[_PREFIX.size:_PREFIX.size + header_len]))
    specs = _array_specs(header["arrays"])
    payload = data[_PREFIX.size + header_len:]
    if sum(nbytes for _, _, nbytes in specs) != len(payload):
        raise WireError("array payload size does not match the header")
    arrays = _Arrays(specs, payload)
    body = _decode_value(header["body"], arrays, 0, max_depth)
    if arrays.unused():
        raise WireError("an array in the payload is not referenced")
    return body


def _parse_header(raw):
    try:
        text = raw.decode("utf-8")
        header = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                            object_pairs_hook=_unique_keys)     # ints: bounded where they are read
    except WireError:
        raise
    except (ValueError, RecursionError, MemoryError):   # JSON syntax, bad UTF-8, deep nesting
        raise WireError("header is not strict JSON") from None
    if type(header) is not dict or set(header) != {"arrays", "body"}:
        raise WireError("header must be {arrays, body}")
    return header


def _reject_constant(_name):
    raise WireError("NaN and Infinity are not JSON")


def _finite_float(text):
    x = float(text)
    if not math.isfinite(x):
        raise WireError("float literal out of range")
    return x


def _unique_keys(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):
        raise WireError("duplicate key in a JSON object")
    return out


def _array_specs(raw):
    if type(raw) is not list:
        raise WireError("arrays must be a list")
    specs = []
    for item in raw:
        if type(item) is not list or len(item) != 2:
            raise WireError("array spec must be [dtype, shape]")
        dtype, shape = item
        if type(dtype) is not str or dtype not in _DTYPES:
            raise WireError("array dtype not allowed (float64, int64, bool only)")
        if type(shape) is not list or len(shape) > MAX_NDIM or \
                any(type(n) is not int or not 0 <= n <= MAX_BYTES for n in shape):
            raise WireError("array shape must be a short list of ints in [0, MAX_BYTES]")
        nbytes = math.prod(shape) * _DTYPES[dtype].itemsize   # exact Python ints, no overflow
        if nbytes > MAX_BYTES:
            raise WireError("array larger than the size cap")
        specs.append((_DTYPES[dtype], tuple(shape), nbytes))
    return specs


class _Arrays:
    """Payload arrays handed out by index, each exactly once, as owned copies."""

    def __init__(self, specs, payload):
        self._specs, self._payload, self._taken = specs, payload, [False] * len(specs)
        self._offsets = [0]
        for _, _, nbytes in specs:
            self._offsets.append(self._offsets[-1] + nbytes)

    def take(self, i):
        if type(i) is not int or not 0 <= i < len(self._specs):
            raise WireError("array placeholder index out of range")
        if self._taken[i]:
            raise WireError("array placeholder used twice")
        self._taken[i] = True
        dtype, shape, nbytes = self._specs[i]
        raw = self._payload[self._offsets[i]:self._offsets[i] + nbytes]
        if dtype.kind == "b":
            as_bytes = np.frombuffer(raw, dtype=np.uint8)
            if as_bytes.size and as_bytes.max() > 1:
                raise WireError("bool array holds a byte other than 0 or 1")
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape).copy(order="C")
        return arr.astype(dtype.newbyteorder("="), copy=False)

    def unused(self):
        return not all(self._taken)


def _decode_value(x, arrays, depth, max_depth):
    if depth > max_depth:
        raise WireError("nested deeper than the depth cap")
    t = type(x)
    if t is int:
        if not _INT_MIN <= x <= _INT_MAX:
            raise WireError("int outside the int64 range")
        return x
    if x is None or t in (bool, float):
        return x
    if t is str:
        return _check_text(x, WireError)
    if t is list:
        if _plain_ints(x):          # a fresh list json.loads made: ours to return
            return x
        return [_decode_value(v, arrays, depth + 1, max_depth) for v in x]
    if t is not dict:
        raise WireError("unexpected JSON value")
    if len(x) == 1:
        (key, value), = x.items()
        if key == "$nd":
            return arrays.take(value)
        if key == "$f":
            if type(value) is not str or value not in _SPECIAL_FLOATS:
                raise WireError("bad special float")
            return _SPECIAL_FLOATS[value]
    out = {}
    for key, value in x.items():
        _check_text(key, WireError)
        if key.startswith("$"):
            if not key.startswith("$$"):
                raise WireError("reserved key in a dict")
            key = key[1:]
        out[key] = _decode_value(value, arrays, depth + 1, max_depth)
    return out


def _check_text(s, error):
    """Strings must be valid Unicode (no lone surrogates), or a report writer could choke later."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise error("string with a lone surrogate") from None
    return s
