"""When the sandbox cannot start, the error names the real cause and its fix (issue 10).

Two causes met on fresh images: isolation itself cannot start (`unshare` refuses: the root folder is
not a mount point), and a folder on the interpreter's path that the sandbox's uid cannot enter (a
root folder of mode 0700). Neither is a missing interpreter, so neither may say "install python".
The fakes are tools that print what the real ones print; the root-only cases make the real failure.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader import runtime

IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="needs root: a privilege drop and mount namespaces")
PROPAGATION = "unshare: cannot change root filesystem propagation: Invalid argument"
INSTALL_ADVICE = "apt-get install python3"


def fake_tool(folder, name, message, status=1):
    """An executable called `name` that prints `message` on stderr and fails, as the real one would."""
    path = Path(folder) / name
    path.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit {status}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def open_tmp():
    """A temp folder every user may enter (pytest's own tmp_path lies under a 0700 folder)."""
    base = Path(tempfile.mkdtemp(prefix="cs349e-diag-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------- isolation cannot start

def test_a_failing_unshare_is_named_with_its_message_and_the_fix(tmp_path):
    unshare = fake_tool(tmp_path, "unshare", PROPAGATION)
    prefix = [unshare, "--pid", "--net", "--mount", "--ipc", "--fork", "--kill-child", "--mount-proc", "--"]
    rt = runtime.Runtime(python=sys.executable, site=str(tmp_path))
    with pytest.raises(RuntimeError) as err:
        runtime.check(rt, prefix)
    text = str(err.value)
    assert PROPAGATION in text
    assert "unshare --pid --net --mount --ipc --fork --kill-child --mount-proc" in text     # the command
    assert "mount point" in text and "mount --bind" in text                                  # the fix
    assert INSTALL_ADVICE not in text and "cannot run numpy" not in text


def test_a_refused_namespace_says_so(tmp_path):
    unshare = fake_tool(tmp_path, "unshare", "unshare: unshare failed: Operation not permitted")
    rt = runtime.Runtime(python=sys.executable, site=str(tmp_path))
    with pytest.raises(RuntimeError) as err:
        runtime.check(rt, [unshare, "--mount", "--fork", "--"])
    text = str(err.value)
    assert "unshare: unshare failed: Operation not permitted" in text and "namespaces" in text
    assert INSTALL_ADVICE not in text


def test_a_failing_mount_inside_the_launch_script_is_named(tmp_path):
    script = "echo 'mount: /tmp/.cs349e-root/usr: permission denied.' >&2; exit 32"
    rt = runtime.Runtime(python=sys.executable, site=str(tmp_path))
    with pytest.raises(RuntimeError) as err:
        runtime.check(rt, ["/bin/sh", "-c", script, "sh"])
    text = str(err.value)
    assert "mount: /tmp/.cs349e-root/usr: permission denied." in text and "isolation" in text
    assert INSTALL_ADVICE not in text


def test_an_interpreter_the_sandbox_cannot_exec_is_not_a_numpy_problem(tmp_path):
    python = "/usr/bin/env"                   # exists, in folders every user may enter; never run here
    setpriv = fake_tool(tmp_path, "setpriv", f"setpriv: failed to execute {python}: No such file or directory", 127)
    rt = runtime.Runtime(python=python, site="/usr/lib")
    with pytest.raises(RuntimeError) as err:
        runtime.check(rt, [setpriv, "--reuid=64100", "--"])
    text = str(err.value)
    assert "could not start its interpreter" in text and "failed to execute" in text
    assert INSTALL_ADVICE not in text and "Provision the runtime again" not in text


@root_only
def test_a_real_unshare_in_a_plain_chroot_is_diagnosed(open_tmp):
    """The issue's case made for real: a root that is not a mount point, then the sandbox's unshare."""
    rt = runtime.provision()
    new_root = open_tmp / "plain-root"
    binds = [d for d in ("/usr", "/etc", str(runtime.STATE_DIR)) if os.path.isdir(d)]
    links = [d for d in ("/bin", "/sbin", "/lib", "/lib64") if os.path.islink(d)]
    script = "\n".join(["set -e", "mount --make-rprivate /", f"mkdir -p {new_root}/dev {new_root}/proc {new_root}/tmp"]
                       + [f"mkdir -p {new_root}{d} && mount --rbind {d} {new_root}{d}" for d in binds]
                       + [f"ln -s {os.readlink(d)} {new_root}{d}" for d in links]
                       + [f"mount --rbind /dev {new_root}/dev", f'exec {shutil.which("chroot", path="/usr/sbin:/sbin:/usr/bin")} {new_root} "$@"'])
    prefix = ["unshare", "--mount", "--fork", "--", "/bin/sh", "-c", script, "sh",
              "unshare", "--mount", "--fork", "--"]      # the sandbox's own step, inside the plain chroot
    with pytest.raises(RuntimeError) as err:
        runtime.check(rt, prefix)
    text = str(err.value)
    assert PROPAGATION in text and "mount point" in text, text
    assert INSTALL_ADVICE not in text


# ------------------------------------------------------------ a folder the sandbox uid cannot enter

def test_the_first_closed_folder_on_a_path_is_found(open_tmp):
    (open_tmp / "a" / "b" / "c").mkdir(parents=True)
    (open_tmp / "a" / "b" / "c" / "python3.11").write_bytes(b"")
    (open_tmp / "a" / "b").chmod(0o700)
    (open_tmp / "a" / "b" / "c").chmod(0o700)
    try:
        assert runtime.closed_folder(open_tmp / "a" / "b" / "c" / "python3.11") == str(open_tmp / "a" / "b")
        assert runtime.closed_folder(open_tmp / "a") is None
        assert runtime.closed_folder("/usr/bin/env") is None
    finally:
        (open_tmp / "a" / "b").chmod(0o755)


def test_an_installed_interpreter_under_a_0700_folder_is_not_called_missing(open_tmp, monkeypatch):
    closed = open_tmp / "root-0700"
    (closed / "usr" / "bin").mkdir(parents=True)
    python = closed / "usr" / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    python.write_bytes(b"#!/bin/sh\n")
    python.chmod(0o755)
    closed.chmod(0o700)
    monkeypatch.setattr(runtime, "_candidates", lambda: [str(python)])
    monkeypatch.setattr(runtime, "UNSUITABLE", ("/nonexistent/",))     # /var/tmp is one; not the point here
    with pytest.raises(RuntimeError) as err:
        runtime._shared_python()
    text = str(err.value)
    assert str(closed) in text and "0700" in text and f"chmod o+x {closed}" in text, text
    assert INSTALL_ADVICE not in text


def test_a_really_missing_interpreter_is_reported_as_missing(open_tmp, monkeypatch):
    monkeypatch.setattr(runtime, "_candidates", lambda: [str(open_tmp / "python3.11")])
    with pytest.raises(RuntimeError, match=r"apt-get install python3\.\d+"):
        runtime._shared_python()


@root_only
def test_a_real_interpreter_copy_under_a_0700_folder_is_diagnosed(monkeypatch):
    """A real copy of the system python in a 0700 folder (as an unpacked tarball or mktemp -d leaves
    it): refused, naming the folder and the fix; the same copy qualifies once the folder is opened."""
    real = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
    if not os.path.isfile(real):
        pytest.skip(f"no {real} to copy")
    base = Path(tempfile.mkdtemp(prefix="diag-", dir=runtime.state_dir()))   # not a folder the sandbox hides
    try:
        closed = base / "closed"
        (closed / "bin").mkdir(parents=True)
        copy = closed / "bin" / os.path.basename(real)
        shutil.copy2(real, copy)
        base.chmod(0o755)
        closed.chmod(0o700)
        monkeypatch.setattr(runtime, "_candidates", lambda: [str(copy)])
        with pytest.raises(RuntimeError) as err:
            runtime._shared_python()
        text = str(err.value)
        assert str(closed) in text and "0700" in text and f"chmod o+x {closed}" in text, text
        assert INSTALL_ADVICE not in text
        closed.chmod(0o755)                                     # control: the folder was the only cause
        assert runtime._shared_python() == str(copy)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@root_only
def test_a_runtime_behind_a_0700_folder_is_diagnosed_when_the_sandbox_uid_runs_it(open_tmp):
    rt = runtime.provision()
    closed = open_tmp / "closed"
    site = closed / "site"
    site.mkdir(parents=True)
    for name in os.listdir(rt.site):
        (site / name).symlink_to(Path(rt.site) / name)
    closed.chmod(0o700)
    with pytest.raises(RuntimeError) as err:
        runtime.check(runtime.Runtime(python=rt.python, site=str(site)))
    text = str(err.value)
    assert str(closed) in text and "0700" in text and f"chmod o+x {closed}" in text, text
    assert INSTALL_ADVICE not in text
    closed.chmod(0o755)                                         # control: the folder was the only cause
    runtime.check(runtime.Runtime(python=rt.python, site=str(site)))


def test_a_missing_interpreter_in_check_is_reported_as_missing(tmp_path):
    with pytest.raises(RuntimeError, match=r"apt-get install python3\.\d+"):
        runtime.check(runtime.Runtime(python="/nonexistent/python3.11", site=str(tmp_path)), prefix=[])


def test_numpy_missing_from_the_runtime_is_not_called_a_missing_interpreter(tmp_path):
    with pytest.raises(RuntimeError) as err:
        runtime.check(runtime.Runtime(python=sys.executable, site=str(tmp_path)), prefix=[])
    text = str(err.value)
    assert "numpy" in text and "python -m grader.runtime" in text
    assert INSTALL_ADVICE not in text


@root_only
def test_the_command_line_check_runs_the_whole_sandbox_chain():
    """setup.sh's check must start a real sandbox (namespaces included), not just the privilege drop,
    so an image where isolation cannot start fails at build time instead of at the first student."""
    done = subprocess.run([sys.executable, "-m", "grader.runtime", "--check"], capture_output=True, text=True,
                          cwd=Path(runtime.__file__).resolve().parents[1], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pid namespace" in done.stdout and "chroot" in done.stdout, done.stdout


# ---------------------------------------------------------------------- what the grader does with it

def test_a_sandbox_that_cannot_start_is_a_grader_error_not_a_grade(tmp_path, monkeypatch, capsys):
    """`python -m grader` exits 3 with the diagnosis and writes no results (an earlier file is
    removed): the submission is not graded, not given 0."""
    from grader import __main__ as cli, sandbox

    def refuse(*args, **kwargs):
        raise RuntimeError("isolation cannot start: `unshare ...` failed: unshare: unshare failed: Operation not permitted")
    monkeypatch.setattr(sandbox, "Sandbox", refuse)
    results = tmp_path / "results.json"
    results.write_text('{"score": 100}\n')
    code = cli.main([str(Path(__file__).resolve().parents[1] / "solution" / "paged_kv.py"), "--results", str(results),
                     "--seed", "0"])
    said = capsys.readouterr()
    assert code == 3 and not results.exists()
    assert "the grader itself failed, not the submission: the sandbox cannot start: isolation cannot start" in said.err
    assert "Operation not permitted" in said.out            # Gradescope shows staff the stdout


@root_only
def test_a_uid_that_can_run_nothing_is_named_not_taken_for_a_busy_one(tmp_path, monkeypatch):
    """claim_uid skips a uid that a process runs as; a uid that cannot run the holder at all (here a
    launch step that says Permission denied) stops it at once, saying why, instead of trying them all."""
    prlimit = fake_tool(tmp_path, "prlimit", "setpriv: failed to execute /bin/sh: Permission denied", 126)
    real_which = shutil.which
    monkeypatch.setattr(runtime.shutil, "which", lambda name, **kw: prlimit if name == "prlimit" else real_which(name, **kw))
    with pytest.raises(RuntimeError) as err:
        runtime.claim_uid(5)
    assert str(err.value).startswith("cannot run a process as sandbox uid ")       # the first free one's
    assert "Permission denied" in str(err.value) and "in use" not in str(err.value)


# ---------------------------------------------------------------- the probe proves the chain itself

REFERENCE = Path(__file__).resolve().parents[1] / "solution" / "paged_kv.py"


def test_a_probe_without_the_smoke_program_still_names_the_cause(tmp_path, monkeypatch):
    """Sandbox(check=False) (grade.py's import probe) runs no smoke program; when its worker cannot
    start, the call raises the same diagnosis the constructor would have, not a bare grader error."""
    from grader import sandbox
    monkeypatch.setattr(sandbox, "_CHECKED", set())
    monkeypatch.setattr(sandbox.runtime, "for_this_user", lambda folder: runtime.Runtime(sys.executable, str(tmp_path)))
    with pytest.raises(RuntimeError) as err:
        sandbox.Sandbox(REFERENCE, isolate=False)
    box = sandbox.Sandbox(REFERENCE, isolate=False, check=False)
    try:
        with pytest.raises(RuntimeError) as late:
            box.check_import()
    finally:
        box.close()
    assert "numpy" in str(late.value) and str(late.value) == str(err.value)


def test_a_worker_that_started_spares_the_next_sandbox_its_smoke_program(monkeypatch):
    """Once a worker has written "started" (it imported numpy through the whole chain), a sandbox
    made after it runs no smoke program: one launch fewer per grading."""
    from grader import sandbox
    monkeypatch.setattr(sandbox, "_CHECKED", set())
    smoked = []
    real = runtime.check
    monkeypatch.setattr(sandbox.runtime, "check", lambda *a, **k: smoked.append(1) or real(*a, **k))
    with sandbox.Sandbox(REFERENCE, isolate=False, check=False) as probe:
        assert probe.check_import().status == "ok"
    with sandbox.Sandbox(REFERENCE, isolate=False) as box:
        assert box.check_import().status == "ok"
    assert smoked == []
