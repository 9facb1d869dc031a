"""The reference's answers to one seed's hidden cases, kept between gradings on this machine.

Every grading at a seed asks the reference the same questions: the plans are seeded per check and
the reference is part of the grader. The selftest, the class batch and the checks grade hundreds of
files at a few seeds, so recomputing them was a large share of a grading's CPU. A grading at a seed
seen before with the same grader (fingerprint.grader_hash: the reference, the scenarios, the hidden
suites, the lab) and the same numpy reads them back instead, with the time the reference took
(which sizes the calls' deadlines).

Only what the trusted process computed is stored, only for isolated gradings (root), in a root-only
folder of runtime.STATE_DIR that no sandbox can see (its new root holds neither /var/lib nor any
writable folder of root's), and in the wire format: plain data, no pickle. A value is stored only if
wire.decode gives it back exactly (the same types, dtypes, shapes and bits: tuples and numpy scalars
do not round-trip, so a check whose answers hold them is simply computed every time). Anything
unreadable is recomputed, never trusted. A seed's answers are stored the second time it is graded
(the first leaves a mark): a class batch grades each student at a seed of their own, and storing
20 MB that no grading reads again would cost more than it saves. At most KEEP seeds per grader are
kept, the oldest dropped.
"""
import hashlib
import math
import os
import sys
import tempfile

import numpy as np

from grader import runtime, wire
from grader.fingerprint import grader_hash

KEEP = 4                   # seeds kept per grader (about 20 MB each)
MARKS = 256                # seeds graded once, remembered per grader (empty files)
GRADERS = 4                # graders (checkouts, versions) kept side by side on one machine
_LIMIT = 1 << 30           # a cache file is ours: the wire's caps against a hostile sender do not apply


def folder(grader):
    """The root-only folder of this grader's cached answers (None if it cannot be made); the least
    recently made of other graders' beyond GRADERS are removed."""
    try:
        top = runtime.secure_dir(runtime.state_dir() / "reference", 0o700)
        key = hashlib.sha256(f"{grader}:{np.__version__}:{sys.version}".encode()).hexdigest()[:24]
        if not (top / key).is_dir():
            others = sorted(top.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in others[GRADERS - 1:]:
                _remove(stale)
        return runtime.secure_dir(top / key, 0o700)
    except (OSError, RuntimeError):
        return None


_PRELOADED = {}     # a seed's file -> (which file it was, its answers): read before a warm start forks (preload)


def load(where, seed):
    """{check id: (answers, seconds)} cached for `seed`, or {} (none yet, or unreadable)."""
    return _read(where / f"seed-{seed}.wire")[1]


def _read(path):
    """(which file it was: None when none could be read, its answers): from memory when preload read
    this very file (a file is replaced whole, never written in place: store), else from the file."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            which, known = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), _PRELOADED.get(path)
            if known and known[0] == which:
                return which, dict(known[1])
            data = wire.decode(f.read(), max_bytes=_LIMIT, max_header=_LIMIT)
    except (OSError, wire.WireError):
        return None, {}
    if type(data) is not dict:
        return which, {}
    return which, {c: (v["answers"], v["seconds"]) for c, v in data.items()
                   if type(v) is dict and set(v) == {"answers", "seconds"} and type(v["seconds"]) is float}


def preload(where, seed):
    """Read a seed's answers in a process that forks gradings (the selftest's warm start, before each
    fork), so that a child's `load` takes them from memory while the file is still the one read."""
    path = where / f"seed-{seed}.wire"
    which, answers = _read(path)
    if which is None:
        _PRELOADED.pop(path, None)
    else:
        _PRELOADED[path] = (which, answers)


def store(where, seed, entries):
    """Add {check id: (answers, seconds)} to the seed's file (written whole, then renamed into place),
    keeping only the answers that round-trip exactly; then drop the oldest seeds beyond KEEP."""
    kept = {**load(where, seed)}
    for check_id, (answers, seconds) in entries.items():
        try:
            back = wire.decode(wire.encode(answers), max_bytes=_LIMIT, max_header=_LIMIT)
        except (TypeError, ValueError):
            continue
        if identical(answers, back):
            kept[check_id] = (back, float(seconds))
    body = {c: {"answers": a, "seconds": s} for c, (a, s) in kept.items()}
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".seed-", dir=where)
        with os.fdopen(fd, "wb") as f:
            f.write(wire.encode(body))
        os.replace(tmp, where / f"seed-{seed}.wire")
        files = sorted(where.glob("seed-*.wire"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:         # a full disk, a folder removed meanwhile: the next grading computes them
        if tmp:
            _remove(tmp)
        return
    for old in files[KEEP:]:
        _remove(old)


def identical(a, b):
    """The same value of the same types all the way down: what a judge could tell apart is equal."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b) or (math.isnan(a) and math.isnan(b))
    return a == b and (a is None or isinstance(a, (bool, int, str)))


def _remove(path):
    try:
        if os.path.isdir(path):
            for p in os.listdir(path):
                os.unlink(os.path.join(path, p))
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


def answers(seed, check_ids, compute):
    """{check id: (answers, seconds)}: compute(check id) -> (answers, seconds) for each check not
    cached for `seed`; seed None: no cache (a grading that is not isolated), every one computed."""
    where = folder(grader_hash()) if seed is not None else None
    cached = load(where, seed) if where else {}
    out, computed = {}, {}
    for check_id in check_ids:
        out[check_id] = cached.get(check_id) or computed.setdefault(check_id, compute(check_id))
    if where and computed:
        mark = where / f"seed-{seed}.seen"
        if cached or mark.exists():
            store(where, seed, computed)
        else:
            _mark(where, mark)
    return out


def _mark(where, mark):
    try:
        mark.touch()
        marks = sorted(where.glob("seed-*.seen"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in marks[MARKS:]:
        _remove(old)
