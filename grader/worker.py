"""Runs INSIDE the sandbox: import the submission, run one scenario, reply with plain data, exit.

    PY -I -S -B worker.py RUNTIME_SITE REPLY_FD      (cwd: a private, empty, writable folder)

Everything here happens in a process the submission controls once its code runs, so nothing in it is
trusted by the grader: the reply is only data, checked by the trusted side (sandbox.py + wire.py).
The order matters only for what the submission could see or take:

1. read the whole request (wire frame on stdin), import registry.py (the part numbers) and numpy:
   what goes wrong until here (a broken runtime) is said on fd 2, which the sandbox keeps for
   staff, never for a student;
2. point fds 0, 1 and 2 at /dev/null before any submission code runs: its prints go nowhere and
   cannot be mistaken for a reply (the reply goes to its own pipe, REPLY_FD);
3. write wire.STARTED on REPLY_FD: from then on a death may be the submission's doing; until then it
   cannot be, as no student code has run (the sandbox retries such a worker, and never charges it);
4. compile paged_kv.py (the parser only: a SyntaxError here is about the file, not about inputs);
5. import the scenarios (trusted code), then run the submission's module body;
6. run `scenarios.SCENARIOS[name](paged_kv, **inputs)`, encode the result, write it, `os._exit(0)`;
   "__each__" ({"calls": [[name, inputs], ...]}) runs several, each caught on its own.

On REPLY_FD: wire.STARTED (8 bytes), then the reply, a wire frame of one dict:
    {"status": "ok", "result": DATA}
    {"status": "raised", "error": BUILTIN[, "todo_part": N]}   any BaseException, SystemExit included; N (1-5)
                                                       when a stub's NotImplementedError("TODO Part N: ...")
    {"status": "ok", "missing": [names]}               "__import__": it imports; names not found
    {"status": "ok", "result": [REPLY, ...]}           "__each__": per call, the "ok" or "raised" dict
                                                       a call of its own would have replied
    {"status": "import_error", "error": BUILTIN, "line": int|None, "message": str|None,
     "module": str|None}                               "message" only for SyntaxError (parser text),
                                                       "module" only for "__import__"
    {"status": "unencodable", "error": BUILTIN}        the result is not plain data
    {"status": "no_scenario"}                          unknown name, or the scenarios failed to load
BUILTIN is the name of the nearest built-in class in the exception's MRO: a subclass of MemoryError
reports "MemoryError". The class's own name never leaves the sandbox: during a call it could carry
the hidden inputs out (`raise type(str(inputs), (Exception,), {})()`).
"""
import builtins
import os
import sys

IMPORT_CHECK = "__import__"
EACH = "__each__"       # several scenarios in one call, each answered as a call of its own would be (sandbox.each)
REQUEST_CAP = 64 << 20
_BUILTIN_EXCEPTIONS = {id(cls): name for name, cls in vars(builtins).items()
                       if isinstance(cls, type) and issubclass(cls, BaseException)}
REPLY_FD = -1     # set in main(); a hostile submission can find it anyway, it only carries data
_PART_NUMBERS = frozenset()     # set in main(), from registry.py, before any submission code: "1" .. "5"


def builtin_name(exc) -> str:
    for cls in type(exc).__mro__:                # by identity: a metaclass cannot fake equality
        name = _BUILTIN_EXCEPTIONS.get(id(cls))
        if name:
            return name
    return "BaseException"


def _read_all(fd, cap):
    chunks, size = [], 0
    while size <= cap:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise SystemExit(2)


def _line_in(tb, filename):
    """The last line of the submission's file that the traceback passes through."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _load_submission(code_dir, detailed):
    """(module, None) or (None, import_error reply)."""
    import types
    path = os.path.join(code_dir, "paged_kv.py")
    with open(path, "rb") as f:
        source = f.read()
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:   # ValueError: null bytes
        line = getattr(e, "lineno", None)
        return None, {"status": "import_error", "error": builtin_name(e),
                      "line": line if type(line) is int and line > 0 else None,
                      "message": e.msg if isinstance(e, SyntaxError) and type(e.msg) is str else None}
    try:
        import scenarios                        # trusted, and imported before any submission code
    except BaseException:
        return None, {"status": "no_scenario"}
    module = types.ModuleType("paged_kv")
    module.__file__ = path
    sys.modules["paged_kv"] = module
    try:
        exec(code, module.__dict__)
    except BaseException as e:
        reply = {"status": "import_error", "error": builtin_name(e), "line": _line_in(e.__traceback__, path)}
        if detailed and isinstance(e, ImportError) and type(e.name) is str:
            reply["module"] = e.name
        return None, reply
    return (module, scenarios), None


def _todo_part(e):
    """{"todo_part": N} when a stub's NotImplementedError("TODO Part N: ...") ended the call: the only
    thing of the message that leaves the sandbox is N, the number of a part of tests/registry.py."""
    if builtin_name(e) != "NotImplementedError":
        return {}
    try:
        text = str(e.args[0]) if e.args and type(e.args[0]) is str else ""
    except BaseException:
        return {}
    head = text[:13]
    digits = head[10:].split(" ")[0].split(":")[0].split("(")[0]
    if head.startswith("TODO Part ") and digits in _PART_NUMBERS:
        return {"todo_part": int(digits)}
    return {}


def _missing(module, names):
    missing = []
    for dotted in names:
        obj = module
        try:
            for part in dotted.split("."):
                obj = getattr(obj, part)
        except Exception:
            missing.append(dotted)
    return missing


def _run(request, code_dir):
    import wire
    name, inputs = request["scenario"], request["inputs"]
    loaded, failure = _load_submission(code_dir, detailed=name == IMPORT_CHECK)
    if failure:
        return failure
    module, scenarios = loaded
    if name == IMPORT_CHECK:
        missing = _missing(module, inputs["names"])
        return {"status": "ok", "missing": missing}
    if name == EACH:
        reply = {"status": "ok", "result": [_answer(scenarios, module, *call) for call in inputs["calls"]]}
    else:
        reply = _answer(scenarios, module, name, inputs)
    if reply["status"] != "ok":
        return reply
    try:
        return wire.encode(reply)
    except BaseException as e:
        return {"status": "unencodable", "error": builtin_name(e)}


def _answer(scenarios, module, name, inputs):
    """What a call of this one scenario replies (before encoding): its result, or what it raised."""
    scenario = getattr(scenarios, "SCENARIOS", {}).get(name)
    if scenario is None:
        return {"status": "no_scenario"}
    try:
        return {"status": "ok", "result": scenario(module, **inputs)}
    except BaseException as e:
        return {"status": "raised", "error": builtin_name(e), **_todo_part(e)}


def main():
    global REPLY_FD
    site, REPLY_FD = sys.argv[1], int(sys.argv[2])
    code_dir = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [code_dir, site]
    serve(_read_all(0, REQUEST_CAP), code_dir)
    os._exit(0)


def serve(raw, code_dir):
    """Steps 1 to 6 on a request already read, replying on REPLY_FD (also the selftest's forked calls,
    grader/selftest/forked.py, for its own corpus only)."""
    global _PART_NUMBERS
    import wire
    import registry
    _PART_NUMBERS = frozenset(str(p.number) for p in registry.PARTS)
    import numpy  # noqa: F401  (the runtime is checked here, before any submission code)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _write(wire.STARTED)
    try:
        reply = _run(wire.decode(raw), code_dir)
        frame = reply if type(reply) is bytes else wire.encode(reply)
    except BaseException as e:                   # a hostile module body can break anything above
        frame = wire.encode({"status": "raised", "error": builtin_name(e)})
    _write(frame)


def _write(data):
    view = memoryview(data)
    while view:
        view = view[os.write(REPLY_FD, view):]


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback
        traceback.print_exc()        # before step 2 on the sandbox's stderr, for staff; after it to /dev/null
    finally:
        os._exit(70)
