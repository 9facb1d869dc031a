"""The sandbox, end to end, against hostile submissions.

Each test writes a tiny paged_kv.py and runs it through a fake scenarios module (`run` calls the
submission's run(**inputs)), so it does not depend on tests/scenarios.py. The `isolated` cases and
@root_only tests need root (namespaces, a separate uid); `plain` (isolate=False) runs everywhere.
Where a protection is asserted, a control shows the same probe succeeding without it (plain mode, or
a marker the worker itself writes), so the assertion can fail.
"""
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
import types
from pathlib import Path

import numpy as np
import pytest
from outside import Killer, Watcher

from grader import runtime, sandbox, wire
from grader.sandbox import LIMITS, Sandbox

ROOT = Path(__file__).resolve().parents[1]
IS_ROOT = os.geteuid() == 0
pytestmark = pytest.mark.lane       # a process of its own beside the selftest (conftest.py); the quiet one stays
ROOT_ONLY = [pytest.mark.needs_root,
             pytest.mark.skipif(not IS_ROOT, reason="needs root: namespaces and a separate uid (CI runs as root)")]
MODES = [pytest.param(True, id="isolated", marks=ROOT_ONLY), pytest.param(False, id="plain")]


def root_only(test):
    for mark in ROOT_ONLY:
        test = mark(test)
    return test


SCENARIOS = '''
def echo(pk, **inputs):
    return inputs
def run(pk, **inputs):
    return pk.run(**inputs)
SCENARIOS = {"echo": echo, "run": run}
'''

ARRAYS = '''
import numpy as np
def run(seed):
    rng = np.random.default_rng(seed)
    return {"f": rng.standard_normal((4, 3, 2)), "special": np.array([0.0, -0.0, 5e-324, np.nan, np.inf, -np.inf]),
            "i": rng.integers(-2**63, 2**63 - 1, size=17, dtype=np.int64, endpoint=True), "b": rng.random(9) > 0.5,
            "nested": [{"deep": [rng.standard_normal(0), np.array(7.0)]}, "s \\u2713", None, True, 3, 2.5],
            "f32": rng.standard_normal(3).astype(np.float32), "t": np.arange(12).reshape(3, 4).T}
'''

PROBE = '''
import os
def run(paths=(), write=()):
    out = {}
    for p in paths:
        try:
            if os.path.isdir(p):
                out[p] = sorted(os.listdir(p))
            else:
                with open(p, "rb") as f:
                    out[p] = "read " + repr(f.read(40))
        except OSError as e:
            out[p] = type(e).__name__
    for p in write:
        try:
            with open(p, "w") as f:
                f.write("pwned")
            out[p] = "written"
        except OSError as e:
            out[p] = type(e).__name__
    return out
'''


@pytest.fixture(scope="module")
def scenarios_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("scenarios") / "scenarios.py"
    path.write_text(SCENARIOS)
    return path


@pytest.fixture
def make_box(tmp_path, scenarios_file):
    """make_box(source, isolate, **kw) -> an open Sandbox on that source; all closed at the end."""
    boxes = []

    def make(source, isolate, **kw):
        path = tmp_path / f"submission{len(boxes)}" / "paged_kv.py"
        path.parent.mkdir()
        path.write_text(textwrap.dedent(source))
        box = Sandbox(path, isolate=isolate, scenarios_file=scenarios_file, **kw)
        boxes.append(box)
        return box
    yield make
    for box in boxes:
        box.close()


@pytest.fixture
def shared_dir(tmp_path):
    """A folder the sandbox uid may write and the test can read: outside every masked path."""
    if not IS_ROOT:
        yield tmp_path
        return
    path = runtime.state_dir() / f"selftest-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(mode=0o777)
    os.chmod(path, 0o777)
    yield path
    sandbox._rmtree(path)


def uid_processes(uid):
    return [p.pid for p in sandbox._procs() if p.state != "Z" and sandbox._uid_of(p.pid) == uid]


# ------------------------------------------------------------------------------------ data

@pytest.mark.parametrize("isolate", MODES)
def test_nested_data_and_arrays_round_trip_bit_exact(make_box, isolate):
    box = make_box(ARRAYS, isolate)
    reply = box.call("run", {"seed": 3})
    assert reply.status == "ok", reply
    namespace = {}
    exec(ARRAYS, namespace)
    expected = namespace["run"](3)
    got = reply.data
    for key in ("f", "special", "i", "b", "t"):
        assert type(got[key]) is np.ndarray and got[key].dtype == expected[key].dtype
        assert got[key].tobytes() == np.ascontiguousarray(expected[key]).tobytes() and got[key].shape == expected[key].shape
        assert got[key].flags.c_contiguous and got[key].flags.owndata
    assert got["f32"].dtype == np.float64 and got["f32"].tolist() == expected["f32"].astype(np.float64).tolist()
    deep = got["nested"][0]["deep"]
    assert deep[0].shape == (0,) and deep[1].shape == () and float(deep[1]) == 7.0
    assert got["nested"][1:] == ["s \u2713", None, True, 3, 2.5]
    assert 0 < reply.seconds < sandbox.DEFAULT_DEADLINE


@pytest.mark.parametrize("isolate", MODES)
def test_inputs_reach_the_scenario_unchanged(make_box, isolate):
    box = make_box("def run(): pass\n", isolate)
    inputs = {"tokens": [1, 2, 3], "cfg": {"vocab": 256, "$weird": None}, "x": np.linspace(0, 1, 5), "s": "hé"}
    reply = box.call("echo", inputs)
    assert reply.status == "ok"
    assert reply.data["x"].tobytes() == inputs["x"].tobytes()
    assert {k: v for k, v in reply.data.items() if k != "x"} == {k: v for k, v in inputs.items() if k != "x"}


# ------------------------------------------------------------------------------------ importing

def test_syntax_error_reports_its_line(make_box):
    box = make_box("x = 1\n\ndef broken(:\n    pass\n", False)
    for reply in (box.check_import(), box.call("run", {})):
        assert reply.status == "import_error"
        assert reply.error.startswith("SyntaxError at line 3") and reply.data["line"] == 3


@pytest.mark.parametrize("source, error", [
    ("x = 1\0\n", ("ValueError", "SyntaxError")),      # which one depends on the 3.11 patch release
    ("x = " + "(" * 5000 + "\n", "SyntaxError at line 1"), ("# -*- coding: no-such-codec -*-\n", "SyntaxError"),
])
def test_unparsable_sources_are_import_errors(make_box, source, error):
    reply = make_box(source, False).check_import()
    assert reply.status == "import_error" and reply.error.startswith(error)


def test_error_text_is_plain_ascii(make_box):
    box = make_box("x = 1 \u20ac \u202e\n", False)
    reply = box.check_import()
    assert reply.status == "import_error" and reply.error.startswith("SyntaxError at line 1")
    assert reply.error.isascii() and reply.error.isprintable()


def test_import_failure_reports_exception_line_and_module(make_box):
    box = make_box("import numpy\nimport torch_is_not_installed\n", False)
    reply = box.check_import()
    assert (reply.status, reply.error) == \
        ("import_error", "ModuleNotFoundError at line 2 (module 'torch_is_not_installed')")
    during_call = box.call("run", {})
    assert (during_call.status, during_call.error) == ("import_error", "ModuleNotFoundError at line 2")


def test_check_import_lists_missing_names(make_box):
    box = make_box("class BlockPool:\n    def alloc(self): pass\ndef paged_step(): pass\n", False)
    reply = box.check_import()
    assert reply.status == "ok"                  # parts are graded on their own: not fatal
    missing = reply.data["missing"]
    assert "BlockPool" not in missing and "BlockPool.alloc" not in missing and "paged_step" not in missing
    assert {"BlockPool.incref", "PagedSequence", "PagedSequence.fork", "blockwise_attention"} <= set(missing)
    assert "BlockPool.incref" in reply.error
    complete = box.check_import(names=("BlockPool.alloc", "paged_step"))
    assert (complete.status, complete.data) == ("ok", {"missing": []})


@pytest.mark.parametrize("isolate", MODES)
def test_the_submission_cannot_import_pytest_or_see_a_site_dir(make_box, isolate):
    box = make_box('''
        import sys
        def run():
            try:
                import pytest
                return "pytest imported"
            except ImportError:
                return [p for p in sys.path if "site-packages" in p or "dist-packages" in p]
    ''', isolate)
    assert box.call("run", {}).data == []


# ------------------------------------------------------------------------------------ hostile control flow

LOOP = '''
import signal
def forever():
    for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    signal.alarm(0)
    while True:
        try:
            pass
        except BaseException:
            continue
def run():
    forever()
'''


@pytest.mark.parametrize("isolate", MODES)
def test_infinite_loop_ignoring_signals_times_out(make_box, isolate):
    box = make_box(LOOP, isolate)
    reply = box.call("run", {}, deadline=1.0)
    assert reply.status == "timeout" and "1 s" in reply.error
    assert reply.seconds < 1.0 + 4                 # the deadline runs from "started": the start-up is extra
    assert len(reply.staff) == 1 and reply.staff[0].startswith("worker 1 of 1: timed out (")   # it burned its CPU


def test_infinite_loop_at_import_times_out(make_box):
    box = make_box(LOOP + "forever()\n", False)
    reply = box.check_import(deadline=1.0)
    assert reply.status == "timeout" and reply.seconds < 3


@pytest.mark.parametrize("isolate", MODES)
def test_exiting_before_the_reply_is_a_crash(make_box, isolate):
    box = make_box("import os\ndef run():\n    os._exit(0)\n", isolate)
    reply = box.call("run", {})
    assert reply.status == "crashed" and "without replying" in reply.error
    at_import = make_box("import os\nos._exit(0)\n", isolate).check_import()
    assert at_import.status == "crashed"


@pytest.mark.parametrize("isolate", MODES)
def test_a_segfault_is_a_crash_with_its_signal(make_box, isolate):
    box = make_box("import ctypes\ndef run():\n    ctypes.memset(16, 0, 1)\n", isolate)
    reply = box.call("run", {})
    assert (reply.status, reply.error) == ("crashed", "worker killed by signal 11 (SIGSEGV)")
    assert [line.split(":")[0] for line in reply.staff] == ["worker 1 of 2", "worker 2 of 2"]   # it died again
    once = box.call("run", {}, retry=False)            # for a caller that calls again itself: one worker
    assert (once.status, once.error, len(once.staff)) == ("crashed", "worker killed by signal 11 (SIGSEGV)", 1)


# ------------------------------------------------------------------------------------ failures not the submission's

SLEEPY = '''
import time
def run(seconds=0.5):
    time.sleep(seconds)
    return "done"
'''


@pytest.mark.parametrize("isolate", MODES)
def test_a_worker_killed_from_outside_after_it_started_is_called_again(make_box, isolate):
    box = make_box(SLEEPY, isolate)
    with Killer(lambda n, pid, started: n == 1 and started) as killer:
        reply = box.call("run", {})
    assert killer.killed == [1] and killer.seen == 2
    assert (reply.status, reply.data) == ("ok", "done")
    assert reply.staff[0] == "worker 1 of 2: worker killed by signal 9 (SIGKILL), after it started"


@pytest.mark.parametrize("isolate", MODES)
def test_a_worker_killed_before_it_started_is_called_again_and_twice_is_a_grader_error(make_box, isolate):
    box = make_box(SLEEPY, isolate)
    with Killer(lambda n, pid, started: n == 1 and not started) as killer:
        once = box.call("run", {})
    assert killer.killed == [1] and (once.status, once.data) == ("ok", "done")
    assert once.staff[0].startswith("worker 1 of 2: died before it started (worker killed by signal 9")
    with Killer(lambda n, pid, started: not started) as killer:
        twice = box.call("run", {})
    assert killer.killed == [1, 2] and twice.status == "grader_error"
    assert twice.error.startswith("the machine failed this call, not the submission: the worker died before it started")


@pytest.mark.parametrize("isolate", MODES)
def test_a_runtime_that_cannot_start_is_a_grader_error_with_its_stderr_for_staff(make_box, shared_dir, isolate):
    box = make_box(SLEEPY, isolate)
    empty = shared_dir / "no-numpy-here"
    empty.mkdir(mode=0o755)
    box._runtime = runtime.Runtime(python=box._runtime.python, site=str(empty))   # numpy cannot be imported
    reply = box.call("run", {})
    assert reply.status == "grader_error" and "died before it started" in reply.error and "numpy" not in reply.error
    assert len(reply.staff) == 2 and all("No module named 'numpy'" in line for line in reply.staff), reply.staff


def test_a_sleeping_hang_is_the_submissions_timeout(make_box):
    """Waiting for no CPU is not a busy machine: blocked or asleep, the submission did not finish."""
    reply = make_box(SLEEPY, False).call("run", {"seconds": 30}, deadline=1.0)
    assert reply.status == "timeout" and len(reply.staff) == 1 and "timed out" in reply.staff[0]


HOG = """
import os, sys, time
cpu, worker, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, {cpu})
os.nice(-19)
group = f"/proc/{worker}/autogroup"        # the worker's session: a group of its own in the CPU's shares
def share(nice):
    try:
        open(group, "w").write(str(nice))
    except OSError:
        pass
share(19)
end = time.monotonic() + seconds
while time.monotonic() < end and os.path.exists(f"/proc/{worker}"):
    sum(range(10000))
share(0)
"""
BUSY = '''
import time
def run(cpu):
    start = time.process_time()
    while time.process_time() - start < cpu:
        pass
    return "done"
'''


@root_only                     # os.nice(-19) for the hog, the worker's autogroup niced
@pytest.mark.slow
@pytest.mark.quiet
def test_a_worker_the_machine_starves_gets_more_time_then_is_the_machines(make_box):
    """The worker pinned to one CPU, where a hog of the highest priority starts as soon as the worker
    says "started" (a few hundredths of that CPU are left to it); the call needs 0.25 s of CPU within
    1 s. With the hog there for 1.5 s, it answers after its deadline, given more time; with the hog
    there as long as each worker lives, it is called once more, then is a grader error. (Small figures:
    it runs last, alone, and every second of it is a second of make check.)"""
    box = make_box(BUSY, False)
    cpu, hogs = max(os.sched_getaffinity(0)), []

    def hog(seconds):
        def act(n, pid, started):
            os.sched_setaffinity(pid, {cpu})         # the worker only: its parent, the grader, is not starved
            if started:
                hogs.append(subprocess.Popen([sys.executable, "-c", HOG, str(cpu), str(pid), str(seconds)]))
            return started
        return act
    try:
        with Watcher(hog(1.5)) as watch:
            answered = box.call("run", {"cpu": 0.25}, deadline=1.0)
        assert (answered.status, answered.data) == ("ok", "done") and watch.seen == 1, answered
        assert answered.staff[0].startswith("worker 1 of 1: answered, given "), answered.staff
        with Watcher(hog(60.0)) as watch:
            starved = box.call("run", {"cpu": 0.25}, deadline=1.0)
        assert starved.status == "grader_error" and watch.seen == 2, starved
        assert all("no reply within 4 s while the machine was busy" in line for line in starved.staff), starved.staff
    finally:
        for h in hogs:
            h.kill()
            h.wait()


RAISERS = '''
import sys
class Escape(BaseException):
    pass
class SECRET_hidden_input_42(MemoryError):
    pass
def run(kind):
    if kind == "sys.exit":
        sys.exit(0)
    if kind == "KeyboardInterrupt":
        raise KeyboardInterrupt
    if kind == "BaseException subclass":
        raise Escape()
    if kind == "GeneratorExit":
        raise GeneratorExit
    if kind == "pytest.exit":
        import pytest
        pytest.exit("bye", returncode=0)
    if kind == "class name carrying data":
        raise SECRET_hidden_input_42()
'''


@pytest.mark.parametrize("kind, error", [
    ("sys.exit", "SystemExit"), ("KeyboardInterrupt", "KeyboardInterrupt"),
    ("BaseException subclass", "BaseException"), ("GeneratorExit", "GeneratorExit"),
    ("pytest.exit", "ModuleNotFoundError"),             # pytest is not importable in the worker at all
    ("class name carrying data", "MemoryError"),         # only the built-in base's name crosses
])
def test_base_exceptions_are_reported_never_ok(make_box, kind, error):
    reply = make_box(RAISERS, False).call("run", {"kind": kind})
    assert (reply.status, reply.error) == ("raised", error)


EACH = '''
import sys
def run(what, x=0):
    if what == "exit":
        sys.exit(0)
    if what == "todo":
        raise NotImplementedError("TODO Part 3: write it")
    if what == "hidden":
        class SECRET_42(MemoryError):
            pass
        raise SECRET_42()
    return [x, x]
'''


@pytest.mark.parametrize("isolate", MODES)
def test_each_answers_every_call_as_a_call_of_its_own_would(make_box, isolate):
    """A call that raises (SystemExit, a stub's NotImplementedError) ends none of the others, and each
    Reply is the one its own call gives."""
    box = make_box(EACH, isolate)
    calls = [["run", {"what": "fine", "x": 2}], ["run", {"what": "exit"}], ["run", {"what": "todo"}],
             ["echo", {"a": 1}], ["run", {"what": "hidden"}]]
    together = box.each(calls)
    assert together.status == "ok" and len(together.data) == len(calls)
    for (name, inputs), got in zip(calls, together.data):
        alone = box.call(name, inputs)
        assert (got.status, got.data, got.error) == (alone.status, alone.data, alone.error)
    assert [(r.status, r.data) for r in together.data] == [
        ("ok", [2, 2]), ("raised", None), ("raised", {"todo_part": 3}), ("ok", {"a": 1}), ("raised", None)]


def test_each_is_one_reply_when_the_worker_dies_or_answers_out_of_form(make_box, monkeypatch):
    """A death in one call is the whole call's (the caller calls each again alone); answers of the
    wrong number, or one no worker sends for a call, are a bad reply, never a partial answer."""
    box = make_box("import os\ndef run(what, x=0):\n    if what == 'die':\n        os._exit(3)\n    return what\n", False)
    assert box.each([["run", {"what": "a"}], ["run", {"what": "die"}]]).status == "crashed"
    for forged in ([{"status": "ok", "result": 1}], [{"status": "ok", "result": 1}, {"status": "ok", "missing": []}],
                   [{"status": "ok", "result": 1}, {"status": "unencodable", "error": "TypeError"}], {"0": 1}):
        monkeypatch.setattr(box, "_call", lambda *a, forged=forged, **k: sandbox.Reply("ok", data=forged))
        reply = box.each([["echo", {}], ["echo", {}]])
        assert (reply.status, reply.data) == ("bad_reply", None), forged
    with pytest.raises(ValueError):
        box.each([["__import__", {}]])


def test_sys_exit_at_import_is_an_import_error(make_box):
    reply = make_box("import sys\nsys.exit(0)\n", False).check_import()
    assert (reply.status, reply.error) == ("import_error", "SystemExit at line 2")


MEMORY = '''
import numpy as np
def run(kind):
    if kind == "numpy":
        return float(np.ones(10**10).sum())
    if kind == "bytes":
        return len(bytearray(3 << 30))
    hoard = []
    while True:
        hoard.append(np.empty(1 << 24))
'''


@pytest.mark.parametrize("isolate", MODES)
@pytest.mark.parametrize("kind", ["numpy", "bytes", "hoard"])
def test_memory_bombs_fail_fast(make_box, isolate, kind):
    reply = make_box(MEMORY, isolate).call("run", {"kind": kind})
    assert (reply.status, reply.error) == ("raised", "MemoryError") and reply.seconds < 3


@root_only
def test_fork_bomb_is_contained(make_box):
    box = make_box('''
        import os, time
        def run():
            made = 0
            for _ in range(300):
                try:
                    pid = os.fork()
                except OSError:
                    continue
                if pid == 0:
                    while True:
                        try:
                            os.fork()
                        except OSError:
                            time.sleep(0.01)
                made += 1
            return made
    ''', True)
    reply = box.call("run", {})
    assert reply.status == "ok" and 0 < reply.data < LIMITS["nproc"]
    assert uid_processes(box.uid) == [box._holder]             # the uid's holder (runtime.claim_uid) alone
    again = box.call("echo", {"fine": True})
    assert again.status == "ok" and again.data == {"fine": True} and again.seconds < 2


FLOOD = '''
import os, sys, __main__
def run(where, n):
    chunk = b"A" * (1 << 20)
    for _ in range(n >> 20):
        if where == "stdout":
            sys.stdout.buffer.write(chunk)
            os.write(2, chunk)
        else:
            os.write(__main__.REPLY_FD, chunk)
    sys.stdout.flush()
    return "flooded"
'''


@pytest.mark.parametrize("isolate", MODES)
def test_output_floods_neither_hang_nor_fill_the_parent(make_box, isolate):
    box = make_box(FLOOD, isolate)
    tracemalloc.start()
    try:
        printed = box.call("run", {"where": "stdout", "n": 10**8})
        printed_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        flooded = box.call("run", {"where": "reply", "n": 10**8})
        flooded_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert printed.status == "ok" and printed.data == "flooded" and printed_peak < 4 << 20
    assert flooded.status == "bad_reply" and "larger than" in flooded.error
    assert flooded_peak < sandbox.REPLY_CAP * 1.3 < 10**8


@pytest.mark.parametrize("isolate", MODES)
def test_a_reply_forged_on_stdout_is_ignored(make_box, isolate):
    box = make_box('''
        import os, sys, wire
        def run():
            forged = wire.encode({"status": "ok", "result": "forged"})
            sys.stdout.buffer.write(forged)
            sys.stdout.flush()
            os.write(2, forged)
            return "real"
    ''', isolate)
    assert box.call("run", {}).data == "real"


HOSTILE_FRAMES = '''
import json, os, pickle, struct, __main__
import numpy as np
import wire

class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + PWNED,))

def raw(header, payload=b""):
    return wire.MAGIC + struct.pack("<Q", len(header)) + header + payload

def ok_header(result, arrays=()):
    return json.dumps({"arrays": list(arrays), "body": {"status": "ok", "result": result}}).encode()

FRAMES = {
    "object dtype": lambda: raw(ok_header({"$nd": 0}, [["|O", [1]]]), pickle.dumps(np.array([Evil()], dtype=object))),
    "pickle": lambda: pickle.dumps({"status": "ok", "result": Evil()}),
    "NaN in JSON": lambda: raw(b'{"arrays": [], "body": {"status": "ok", "result": NaN}}'),
    "huge claimed shape": lambda: raw(ok_header({"$nd": 0}, [["<f8", [10**12]]]), bytes(8)),
    "deep nesting": lambda: raw(b'{"arrays": [], "body": {"status": "ok", "result": ' + b"[" * 200000 + b"]" * 200000 + b"}}"),
    "made-up exception name": lambda: wire.encode({"status": "raised", "error": "SECRET_hidden_input_42"}),
    "extra key": lambda: wire.encode({"status": "ok", "result": 1, "verdict": "pass"}),
    "todo part out of range": lambda: wire.encode({"status": "raised", "error": "NotImplementedError", "todo_part": 9}),
    "todo part as text": lambda: wire.encode({"status": "raised", "error": "NotImplementedError", "todo_part": "SECRET"}),
    "todo part of another error": lambda: wire.encode({"status": "raised", "error": "ValueError", "todo_part": 2}),
    "trailing bytes": lambda: wire.encode({"status": "ok", "result": 1}) + b"x",
}

def run(kind):
    data = FRAMES[kind]()
    while data:
        data = data[os.write(__main__.REPLY_FD, data):]
    os._exit(0)
'''


@pytest.mark.parametrize("kind", ["object dtype", "pickle", "NaN in JSON", "huge claimed shape", "deep nesting",
                                  "made-up exception name", "extra key", "trailing bytes", "todo part out of range",
                                  "todo part as text", "todo part of another error"])
def test_hostile_reply_frames_are_bad_replies(make_box, tmp_path, kind):
    pwned = tmp_path / "unpickled-in-the-grader"
    box = make_box(f"PWNED = {str(pwned)!r}\n" + HOSTILE_FRAMES, False)
    reply = box.call("run", {"kind": kind})
    assert reply.status == "bad_reply" and reply.error.startswith("malformed reply")
    assert "SECRET" not in reply.error
    assert not pwned.exists()


def test_only_the_part_number_of_a_todo_crosses(make_box):
    """A stub's NotImplementedError("TODO Part N: ...") tells the grader N (so feedback can say which
    part to fix first), and nothing else of its message."""
    box = make_box("def run(kind):\n    raise NotImplementedError('TODO Part ' + kind + ': SECRET_hidden_input_42')\n", False)
    reply = box.call("run", {"kind": "1"})
    assert (reply.status, reply.error, reply.data) == ("raised", "NotImplementedError", {"todo_part": 1})
    assert "SECRET" not in repr(reply)
    assert box.call("run", {"kind": "7"}).data is None          # not a part: nothing crosses


def test_a_result_that_is_not_plain_data_is_a_bad_reply(make_box):
    reply = make_box("def run():\n    return {'x': object()}\n", False).call("run", {})
    assert reply.status == "bad_reply" and "cannot cross" in reply.error


def test_an_unknown_scenario_is_reported_as_a_grader_problem(make_box):
    reply = make_box("def run(): pass\n", False).call("no_such_scenario", {})
    assert reply.status == "crashed" and "grader bug" in reply.error


# ------------------------------------------------------------------------------------ the process tree

DETACH = '''
import os, time
def run(marker_dir, hang):
    open(os.path.join(marker_dir, "worker-ran"), "w").close()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(2.0)
            open(os.path.join(marker_dir, "grandchild-survived"), "w").close()
            os._exit(0)
        os._exit(0)
    time.sleep(0.1)
    while hang:
        time.sleep(1)
    return "parent done"
'''


@pytest.mark.parametrize("isolate", MODES)
@pytest.mark.parametrize("hang", [False, True], ids=["returns", "hangs"])
def test_a_detached_grandchild_is_dead_when_call_returns(make_box, shared_dir, monkeypatch, isolate, hang):
    # the uid sweep is a second line of defence: switched off, so this proves the first one
    monkeypatch.setattr(sandbox, "_sweep", lambda *a, **k: None)
    box = make_box(DETACH, isolate, share=[shared_dir])
    reply = box.call("run", {"marker_dir": str(shared_dir), "hang": hang}, deadline=1.0 if hang else 6.0)
    assert reply.status == ("timeout" if hang else "ok")
    assert (shared_dir / "worker-ran").exists()          # the folder is writable from inside
    time.sleep(2.3)
    assert not (shared_dir / "grandchild-survived").exists()


# ------------------------------------------------------------------------------------ isolation (root)

@pytest.mark.parametrize("isolate", MODES)
def test_minimal_environment_and_identity(make_box, isolate):
    box = make_box('''
        import os, resource, sys
        def run():
            status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
            names = ("AS", "NPROC", "FSIZE", "NOFILE", "CORE", "CPU")
            return {"env": sorted(os.environ), "flags": [sys.flags.isolated, sys.flags.no_site],
                    "ids": [os.getuid(), os.getgid(), os.getgroups()], "cap_eff": status["CapEff"].strip(),
                    "nnp": status["NoNewPrivs"].strip(), "cwd": os.getcwd(), "home": os.environ["HOME"],
                    "limits": {n: list(resource.getrlimit(getattr(resource, "RLIMIT_" + n))) for n in names}}
    ''', isolate)
    got = box.call("run", {}).data
    allowed = {"PATH", "HOME", "LANG", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"}
    assert set(got["env"]) - allowed <= ({"CS349E_SANDBOX"} if not isolate else set())
    assert got["flags"] == [1, 1] and got["home"] == got["cwd"]
    limits = got["limits"]
    assert limits["AS"] == [LIMITS["as"]] * 2 and limits["FSIZE"] == [LIMITS["fsize"]] * 2
    assert limits["NOFILE"] == [LIMITS["nofile"]] * 2 and limits["CORE"] == [0, 0] and limits["CPU"] == [7, 8]
    if isolate:
        assert got["ids"] == [box.uid, box.uid, []] and box.uid >= sandbox.UID_BASE
        assert got["cap_eff"] == "0000000000000000" and got["nnp"] == "1"
        assert limits["NPROC"] == [LIMITS["nproc"]] * 2


NET = '''
import socket
import subprocess
def run(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
'''


@pytest.mark.parametrize("isolate", MODES)
def test_no_network(make_box, isolate):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        reply = make_box(NET, isolate).call("run", {"port": server.getsockname()[1]})
        if not isolate:
            assert reply.data == "connected"        # control: the probe does reach the listener
            return
        assert reply.status == "ok" and reply.data != "connected"
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.fixture
def results_dir(shared_dir):
    """A results folder readable by everyone, so only the mount namespace can keep it away."""
    path = shared_dir / "results"
    path.mkdir(mode=0o755)
    (path / "results.json").write_text('{"score": 100}')
    os.chmod(path / "results.json", 0o644)
    return path


@pytest.mark.parametrize("isolate", MODES)
def test_secrets_are_unreadable(make_box, results_dir, isolate):
    box = make_box(PROBE, isolate, hide=[results_dir])
    files = [ROOT / "solution" / "paged_kv.py", ROOT / "grader" / "sandbox.py", results_dir / "results.json",
             Path(f"/proc/{os.getpid()}/environ")]
    folders = [ROOT, ROOT / "grader", results_dir, runtime.STATE_DIR / "scratch"]
    got = box.call("run", {"paths": [str(p) for p in files + folders]}).data
    if not isolate:                       # control: as this user, every probe succeeds
        assert all(got[str(p)].startswith("read") for p in files)
        assert all(got[str(p)] for p in folders[:3])
        return
    assert not any(got[str(p)].startswith("read") for p in files), got
    # a masked folder is an empty tmpfs; a repository under /tmp is not there at all (a fresh /tmp)
    assert got[str(ROOT)] in ([], "FileNotFoundError") and got[str(ROOT / "grader")] == "FileNotFoundError"
    assert got[str(results_dir)] in ([], "FileNotFoundError")
    assert got[str(runtime.STATE_DIR / "scratch")] == "PermissionError"


def user_namespaces_refused():
    """Why this machine cannot make a user namespace (a chroot, many containers, a sysctl), or ""."""
    try:
        done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`unshare --user --map-root-user --mount true`: {e}"
    last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return "" if done.returncode == 0 else f"`unshare --user --map-root-user --mount true` fails here: {last}"


@pytest.mark.parametrize("isolate", MODES)
def test_a_user_namespace_does_not_unmask_the_project(make_box, isolate):
    """The attack needs user namespaces: where the machine refuses them, the control cannot read the
    reference and the isolated case would pass whatever the sandbox does, so both skip and say why."""
    refused = user_namespaces_refused()
    if refused:
        pytest.skip(f"premise missing: {refused} (the kernel refuses user namespaces, e.g. in a chroot); "
                    f"the attack cannot be tried here")
    box = make_box('''
        import subprocess
        def run(path):
            script = f"umount -l {path}; umount -l /work 2>/dev/null; head -c 40 {path}/solution/paged_kv.py"
            done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                                  capture_output=True)
            return [done.returncode, len(done.stdout)]
    ''', isolate)
    _code, read = box.call("run", {"path": str(ROOT)}).data
    if isolate:                           # mounts inherited from a more privileged namespace are locked
        assert read == 0
    else:
        assert read == 40                 # control: the same script reads the reference


@root_only
def test_writes_stay_in_the_sandbox(make_box, results_dir):
    box = make_box(PROBE, True, hide=[results_dir])
    stray_tmp = Path(f"/tmp/cs349e-sandbox-stray-{os.getpid()}")
    targets = [ROOT / "pwned.txt", ROOT / "grader" / "pwned.py", results_dir / "results.json",
               runtime.STATE_DIR / "pwned", Path(box._runtime.site) / "numpy" / "pwned.py", Path("/etc/pwned"), stray_tmp]
    own_code = ["../worker.py", "../paged_kv.py", "../scenarios.py"]       # the call's read-only copies
    got = box.call("run", {"write": [str(p) for p in targets] + own_code + ["in-cwd.txt"]}).data
    assert all(got[p] == "PermissionError" for p in own_code), got
    assert got["in-cwd.txt"] == "written" and got[str(stray_tmp)] == "written"    # its own tmpfs folders
    assert not any(got[str(p)] == "written" for p in targets[:-1]), got
    assert (results_dir / "results.json").read_text() == '{"score": 100}'
    assert not any(p.exists() for p in targets if p.name != "results.json")       # stray_tmp included


@pytest.mark.parametrize("isolate", MODES)
def test_nothing_persists_between_calls(make_box, isolate):
    box = make_box('''
        import os
        CALLS = [0]
        def run(tmp):
            CALLS[0] += 1
            seen = {"calls": CALLS[0], "cwd": os.path.exists("state.txt"), "tmp": bool(tmp) and os.path.exists(tmp)}
            open("state.txt", "w").close()
            if tmp:
                open(tmp, "w").close()
            return seen
    ''', isolate)
    tmp = f"/tmp/cs349e-sandbox-state-{os.getpid()}" if isolate else ""
    first, second = (box.call("run", {"tmp": tmp}).data for _ in range(2))
    assert first == second == {"calls": 1, "cwd": False, "tmp": False}


@root_only
def test_concurrent_jobs_cannot_see_each_other(make_box):
    victim = make_box("# the victim's own source\n" + PROBE + '''
import time
def run_victim(secs):
    for path in ("secret.txt", "/tmp/secret.txt", "/dev/shm/secret.txt"):
        open(path, "w").write("victim's secret")
    time.sleep(secs)
    return "done"
run_plain = run
def run(secs=None, **kw):
    return run_victim(secs) if secs is not None else run_plain(**kw)
''', True, job=0)
    spy = make_box(PROBE, True, job=1)
    assert victim.uid != spy.uid
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("reply", victim.call("run", {"secs": 2.0})))
    thread.start()
    scratch = runtime.STATE_DIR / "scratch"
    for _ in range(200):
        call_dirs = list(scratch.glob(f"call-{victim.uid}-*"))
        if call_dirs:
            break
        time.sleep(0.01)
    time.sleep(0.5)                                   # let the victim write its files
    call_dir = call_dirs[0]
    paths = [call_dir, call_dir / "paged_kv.py", call_dir / "work", call_dir / "work" / "secret.txt",
             "/tmp/secret.txt", "/dev/shm/secret.txt", scratch]
    got = spy.call("run", {"paths": [str(p) for p in paths]}).data
    thread.join()
    assert result["reply"].data == "done"
    assert not any(isinstance(v, str) and v.startswith("read") for v in got.values()), got
    assert not any(isinstance(v, list) and v for v in got.values()), got


@root_only
def test_one_uid_per_live_sandbox(make_box):
    first, second = make_box(PROBE, True, job=7), make_box(PROBE, True, job=7)   # same job number
    assert first.uid != second.uid
    assert all(sandbox.UID_BASE <= box.uid < sandbox.UID_BASE + sandbox.UID_SLOTS for box in (first, second))


def foreign_process(uid):
    """(its Popen, the pid running as `uid`): a process of `uid` that another grader started, in its own
    pid namespace, under a lock folder this one cannot see (a grader in a chroot or a container)."""
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "--",
                             *runtime.drop_privileges_argv(uid), "sleep", "120"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        running = [p.pid for p in sandbox._procs() if p.ppid == proc.pid and sandbox._uid_of(p.pid) == uid]
        if running:
            return proc, running[0]
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"the foreign process of uid {uid} did not start")


def alive(pid):
    return pid in uid_processes(sandbox._uid_of(pid)) if sandbox._uid_of(pid) is not None else False


@root_only
def test_a_uid_another_graders_process_runs_as_is_not_claimed(make_box):
    job = 321
    foreign, pid = foreign_process(sandbox.UID_BASE + job)
    try:
        box = make_box(PROBE, True, job=job)
        assert box.uid != sandbox.UID_BASE + job
        assert box.call("echo", {"x": 1}).data == {"x": 1}
        assert alive(pid)                                         # never killed to make room
    finally:
        foreign.kill()
        foreign.wait()


@root_only
def test_the_clean_up_never_kills_another_graders_process_of_the_same_uid(make_box):
    """Should another grader ever run as our uid (a bug of its own), our clean-up still kills only what
    runs in our workers' pid namespaces: after a call that had to be killed, and after close."""
    box = make_box(LOOP, True, job=322)
    foreign, pid = foreign_process(box.uid)
    try:
        reply = box.call("run", {}, deadline=1.0)
        assert reply.status == "timeout"
        assert alive(pid)
        box.close()
        assert alive(pid)
    finally:
        foreign.kill()
        foreign.wait()


CLAIM = """
import sys
from pathlib import Path
from grader import runtime
runtime.STATE_DIR = Path(sys.argv[1])          # a root of its own: lock files the other cannot see
claim = runtime.claim_uid(int(sys.argv[2]))
print(claim.uid, flush=True)
sys.stdin.read()
claim.release()
"""


@root_only
def test_graders_with_lock_folders_of_their_own_never_share_a_uid(tmp_path):
    """Two graders in different roots claim the same job's uid at the same moment, five times over:
    they always get different uids, and a grader killed outright leaves its uid free again."""
    roots = [tmp_path / "root-a", tmp_path / "root-b"]
    for round_ in range(5):
        graders = [subprocess.Popen([sys.executable, "-c", CLAIM, str(r), "640"], cwd=ROOT, text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE) for r in roots]
        try:
            uids = [int(g.stdout.readline()) for g in graders]
        finally:
            for g in graders:
                g.stdin.close()
                g.wait()
        assert len(set(uids)) == 2, (round_, uids)        # (both may skip a uid they raced for)
    killed = subprocess.Popen([sys.executable, "-c", CLAIM, str(roots[0]), "641"], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert int(killed.stdout.readline()) == sandbox.UID_BASE + 641
    killed.kill()
    killed.wait()
    deadline = time.monotonic() + 10
    while uid_processes(sandbox.UID_BASE + 641) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not uid_processes(sandbox.UID_BASE + 641)             # its holder ends with it
    for p in sandbox._procs():            # an orphan is its reaper's to reap: this process is a subreaper
        if p.ppid == os.getpid() and p.state == "Z" and sandbox._uid_of(p.pid) == sandbox.UID_BASE + 641:
            os.waitpid(p.pid, 0)
    again = subprocess.run([sys.executable, "-c", CLAIM, str(roots[1]), "641"], cwd=ROOT, text=True,
                           input="", capture_output=True, timeout=60)
    assert int(again.stdout) == sandbox.UID_BASE + 641


# ------------------------------------------------------------------------------------ protections

@root_only
@pytest.mark.parametrize("isolate", MODES)
def test_only_system_folders_exist_outside_the_call(make_box, shared_dir, isolate):
    """Deny by default: a world-readable copy of the project somewhere else on the machine (another
    checkout, a staff folder) must not exist for the submission, though no mask names it."""
    copy = shared_dir / "another-checkout" / "solution"
    copy.mkdir(parents=True)
    (copy / "paged_kv.py").write_text("SECRET = 1\n")
    for p in (copy / "paged_kv.py", copy, copy.parent, shared_dir):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    got = make_box(PROBE, isolate).call("run", {"paths": [str(copy / "paged_kv.py"), "/", "/usr/bin"]}).data
    if not isolate:
        assert got[str(copy / "paged_kv.py")].startswith("read")         # control: it is readable
        return
    assert got[str(copy / "paged_kv.py")] == "FileNotFoundError"
    assert set(got["/"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev",
                             "tmp", "var", "run", "opt"}, got["/"]
    assert "python3" in " ".join(got["/usr/bin"])


def test_protections_when_isolated(make_box, results_dir):
    items = make_box(PROBE, True, hide=[results_dir]).protections()
    assert not any(i.startswith("NOT ISOLATED") for i in items)
    assert "pid namespace (whole tree killed)" in items and "no network (network namespace)" in items
    assert any(i.startswith("unprivileged uid 641") for i in items)
    hidden = next(i for i in items if i.startswith("project and results hidden"))
    fresh = next(i for i in items if i.startswith("fresh tmpfs"))
    under_fresh = any(ROOT.is_relative_to(d) for d in sandbox.FRESH if f" {d}" in fresh)
    assert (str(ROOT) in hidden or under_fresh) and str(results_dir) in hidden


def test_protections_when_not_isolated(make_box):
    items = make_box(PROBE, False).protections()
    assert items[0].startswith("NOT ISOLATED") and "can read and write this user's files" in items[0]
    assert not any("namespace" in i for i in items)


def test_without_root_isolation_is_off_and_says_so(make_box, monkeypatch):
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    box = make_box(PROBE, None)
    assert not box.isolate and box.protections()[0].startswith("NOT ISOLATED: not root")
    with pytest.raises(RuntimeError, match="needs root"):
        make_box(PROBE, True)


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_symlinked_submission_is_refused(tmp_path, scenarios_file, link):
    secret = tmp_path / "reference"
    secret.mkdir()
    (secret / "paged_kv.py").write_text("REFERENCE = True\n")
    submitted = tmp_path / "submission"
    submitted.mkdir()
    if link == "file":
        (submitted / "paged_kv.py").symlink_to(secret / "paged_kv.py")
    else:
        submitted = submitted / "unzipped"
        submitted.symlink_to(secret, target_is_directory=True)
    with pytest.raises(ValueError, match="symlink"):
        Sandbox(submitted, isolate=False, scenarios_file=scenarios_file)


def test_close_removes_everything_and_refuses_more_calls(make_box):
    box = make_box(PROBE, False)
    assert box.call("echo", {}).status == "ok"
    scratch = box._scratch
    box.close()
    assert not scratch.exists()
    with pytest.raises(RuntimeError, match="closed"):
        box.call("echo", {})


def test_worker_files_are_one_list_of_existing_lab_files():
    assert set(sandbox.WORKER_FILES) == {"worker.py", "wire.py", "transformer_lab.py", "console.py",
                                         "decoding.py", "scenarios.py", "registry.py"}
    assert all(p.is_file() for name, p in sandbox.WORKER_FILES.items() if name != "scenarios.py")
    assert wire.MAX_BYTES == sandbox.REPLY_CAP


# ------------------------------------------------------------------------------------ the runtime

# What check() says when it cannot run: checks/test_runtime_diagnosis.py.


def test_only_interpreters_other_users_can_reach_qualify(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    hidden_python = private / "python3"
    hidden_python.write_bytes(Path("/bin/sh").read_bytes())
    hidden_python.chmod(0o755)
    link = tmp_path / "link-to-sh"
    link.symlink_to("/bin/sh")
    assert runtime.reachable_by_others("/bin/sh") and runtime.reachable_by_others(link)   # judged by target
    assert not runtime.reachable_by_others(hidden_python)          # executable, but in a 0700 folder
    assert not runtime.reachable_by_others(tmp_path / "missing")


@root_only
def test_provisioning_is_idempotent_race_free_and_world_readable(tmp_path, monkeypatch):
    fake = tmp_path / "site-packages"                  # a stand-in for the venv's numpy, with bad modes
    (fake / "numpy" / "_core").mkdir(parents=True)
    (fake / "numpy" / "__init__.py").write_text("__version__ = '0.0'\n")
    (fake / "numpy" / "_core" / "private.py").write_text("")
    (fake / "numpy" / "_core" / "private.py").chmod(0o600)
    (fake / "numpy.libs").mkdir(mode=0o700)
    (fake / "numpy.libs" / "libfake.so").write_bytes(b"\x7fELF")
    (fake / "numpy.libs" / "libfake.so").chmod(0o700)
    state = tmp_path / "state"
    monkeypatch.setattr(runtime, "STATE_DIR", state)
    monkeypatch.setattr(runtime, "_numpy_source", lambda: (fake / "numpy", "0.0"))
    results, errors = [], []

    def provision():
        try:
            results.append(runtime.provision())
        except Exception as e:    # noqa: BLE001  (reported below)
            errors.append(e)
    threads = [threading.Thread(target=provision) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4 and len(set(results)) == 1 and runtime.provision() == results[0]
    site = Path(results[0].site)
    assert [p.name for p in state.iterdir()] == [site.name]                       # no temp leftovers
    assert sorted(p.name for p in site.iterdir()) == ["numpy", "numpy.libs"]
    modes = {p.relative_to(site).as_posix(): p.stat().st_mode & 0o777 for p in site.rglob("*")}
    assert modes == {"numpy": 0o755, "numpy/__init__.py": 0o644, "numpy/_core": 0o755,
                     "numpy/_core/private.py": 0o644, "numpy.libs": 0o755, "numpy.libs/libfake.so": 0o755}
    assert site.stat().st_mode & 0o777 == 0o755 and all(p.stat().st_uid == 0 for p in site.rglob("*"))


# ------------------------------------------------------------------ the selftest's forked calls
FORKED_CASES = {      # what a call of the honest corpus may meet: (source, scenario or None for the import probe, inputs)
    "echo": ("def run(): pass\n", "echo", {"a": [1, 2.5, "s"], "b": {"c": None}}),
    "arrays": (ARRAYS, "run", {"seed": 3}),
    "prints": ("import sys\nprint('loaded')\ndef run():\n    print('out'); print('err', file=sys.stderr)\n"
               "    return 7\n", "run", {}),
    "raises": ("def run():\n    raise KeyError('x')\n", "run", {}),
    "todo": ("def run():\n    raise NotImplementedError('TODO Part 3: here')\n", "run", {}),
    "exits": ("import os\ndef run():\n    os._exit(0)\n", "run", {}),
    "memory": (MEMORY, "run", {"kind": "bytes"}),          # 3 GiB: fits in the machine, not in the rlimit
    "loops": (LOOP, "run", {}),
    "syntax": ("def run(:\n", None, {}),
    "import_raises": ("x = 1\nraise ValueError('at import')\n", None, {}),
    "missing": ("def run(): pass\n", None, {}),
    "unencodable": ("def run():\n    return {'x': object()}\n", "run", {}),
}


@root_only
@pytest.mark.parametrize("case", list(FORKED_CASES))
def test_a_forked_call_answers_as_the_sandbox_does(make_box, monkeypatch, case):
    """grader/selftest/forked.py forks the sandbox calls of the selftest's mutants and variants: each
    kind of answer (data, prints, exceptions, a stub's TODO, exits, memory, hangs, import failures, a
    result that is not data) comes back as the real sandbox's does, status, error and data alike."""
    from grader.selftest import forked
    source, scenario, inputs = FORKED_CASES[case]

    def answer(box):
        reply = box.call(scenario, inputs, deadline=1.0) if scenario else box.check_import(("run", "absent"), deadline=1.0)
        return reply.status, reply.error, reply.data
    real = answer(make_box(source, True))
    monkeypatch.setitem(sys.modules, "scenarios", types.ModuleType("scenarios"))   # the grading's, not the call's
    monkeypatch.setattr(Sandbox, "_spawn", forked._spawn)
    monkeypatch.setattr(Sandbox, "_kill_tree", forked._kill_tree)
    got = answer(make_box(source, True))
    if isinstance(real[2], dict) and "f" in real[2]:        # arrays: compared bit for bit
        assert wire.encode(got[2]) == wire.encode(real[2])
        real, got = real[:2], got[:2]
    assert got == real
