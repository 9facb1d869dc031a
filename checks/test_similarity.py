"""`make similarity` on the selftest's class folder: copydetect reports exactly the copies (two
students with the same file, the reference and its near-copies and mutants) and no pair of honest
files, though two of them follow the starter's layout, docstrings and all.

copydetect is staff tooling in build/staff-venv, never the grader's runtime. This builds that venv
when it is missing, with the Makefile's own target (copydetect 0.5.0 from the package registry, as
`make similarity` does on first use), so a fresh CI proves the command for real. It is skipped only
when pip cannot install copydetect, with pip's reason; any other failure fails."""
import subprocess
from pathlib import Path

import pytest

from grader import paths
from grader.selftest import classfolder

STAFF_VENV = paths.REPO / "build" / "staff-venv"
PIP_FAILED = "could not install copydetect"        # what the Makefile's target says when pip fails


def _make(*args, timeout):
    return subprocess.run(["make", "--no-print-directory", *args], cwd=paths.REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def staff_venv():
    """build/staff-venv with copydetect in it, built on demand (a minute or two from the registry)."""
    done = _make(f"{STAFF_VENV.relative_to(paths.REPO)}/.ready", timeout=1200)
    said = (done.stdout + done.stderr).strip()
    if done.returncode != 0 and PIP_FAILED in said:
        why = [line.strip() for line in said.splitlines() if line.startswith("ERROR:")] or said.splitlines()[-3:]
        pytest.skip("pip could not install copydetect 0.5.0 into build/staff-venv: " + " | ".join(why)[:600])
    assert done.returncode == 0, f"building build/staff-venv failed before pip's install:\n{said[-1500:]}"
    return STAFF_VENV           # a venv marked ready without copydetect: the run below fails, saying so


@pytest.mark.lane          # a process of its own beside the selftest (conftest.py)
def test_only_copies_are_similar_and_following_the_starter_is_not(tmp_path, staff_venv):
    folder = classfolder.write(tmp_path / "class")
    report = tmp_path / "similarity.html"
    done = _make("similarity", f"DIR={folder}", f"OUT={report}", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    pairs = {frozenset(n.strip() for n in line.split("%", 1)[1].split("   (")[0].split(" ~ "))
             for line in done.stdout.splitlines() if " ~ " in line}          # "  100%  erin ~ frank   (...)"
    copies = {n for n, said in classfolder.EXPECTED.items() if any(s.startswith("near-copy") for s in said)}
    assert pairs == classfolder.SIMILAR | {frozenset((n, "(solution)")) for n in copies}
    assert Path(report).is_file() and "<html" in report.read_text(errors="replace").lower()
