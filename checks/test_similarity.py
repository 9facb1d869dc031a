"""`make similarity` on the selftest's class folder: copydetect reports exactly the copies (two
students with the same file, the reference and its near-copies and mutants) and no pair of honest
files, though two of them follow the starter's layout, docstrings and all. copydetect is staff
tooling in build/staff-venv (`make similarity` installs it); without it this is skipped, saying so."""
import subprocess
from pathlib import Path

import pytest

from grader import paths
from grader.selftest import classfolder

STAFF_PYTHON = paths.REPO / "build" / "staff-venv" / "bin" / "python"


def _has_copydetect():
    return STAFF_PYTHON.exists() and subprocess.run([str(STAFF_PYTHON), "-c", "import copydetect"],
                                                    capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not _has_copydetect(), reason="copydetect is not installed in build/staff-venv "
                                                              "(`make similarity DIR=...` installs it)")


def test_only_copies_are_similar_and_following_the_starter_is_not(tmp_path):
    folder = classfolder.write(tmp_path / "class")
    done = subprocess.run([str(STAFF_PYTHON), "-m", "grader.similarity", str(folder), "--out",
                           str(tmp_path / "similarity.html")], cwd=paths.REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    pairs = {frozenset(n.strip() for n in line.split("%", 1)[1].split("   (")[0].split(" ~ "))
             for line in done.stdout.splitlines() if " ~ " in line}          # "  100%  erin ~ frank   (...)"
    copies = {n for n, said in classfolder.EXPECTED.items() if any(s.startswith("near-copy") for s in said)}
    assert pairs == classfolder.SIMILAR | {frozenset((n, "(solution)")) for n in copies}
    assert Path(tmp_path / "similarity.html").is_file()
