"""Similarity that survives cheap disguise (grader/resemblance.py), and `make similarity`.

The corpus: the reference and the selftest's nine correct variants, written independently. Every
disguise of grader/selftest/disguise.py (no-op calls after every 2nd or 3rd statement, dead stores,
reversed definitions, renamed identifiers, UTF-7 under a coding line, and all of them at once) of
every one of those files must be flagged (FLAG or more); no two independent files may come near it
(under half of FLAG).

`make similarity` on the selftest's class (grader/selftest/classfolder.py) must report exactly the
copies (two students with the same file, the reference and its near-copies and mutants) and no pair
of honest files, though two of them follow the starter's layout, docstrings and all.

copydetect is staff tooling in build/staff-venv, never the grader's runtime. This builds that venv
when it is missing, with the Makefile's own target (copydetect 0.5.0 from the package registry, as
`make similarity` does on first use), so a fresh CI proves the command for real. It is skipped only
when pip cannot install copydetect, with pip's reason; any other failure fails."""
import subprocess
from pathlib import Path

import pytest

from grader import integrity, paths, resemblance
from grader.selftest import classfolder, disguise

STAFF_VENV = paths.REPO / "build" / "staff-venv"
PIP_FAILED = "could not install copydetect"        # what the Makefile's target says when pip fails
CORPUS = {"(solution)": classfolder.REFERENCE,
          **{p.stem: p.read_text(encoding="utf-8") for p in sorted(classfolder.VARIANTS.glob("*.py"))}}


@pytest.fixture(scope="module")
def profiles():
    boiler = resemblance.boilerplate(integrity.starter_editions())
    return boiler, {name: resemblance.Profile.of(text).minus(boiler) for name, text in CORPUS.items()}


def test_independent_correct_files_stay_well_below_the_flag(profiles):
    _, found = profiles
    pairs = resemblance.pairs(found)
    assert len(pairs) == len(CORPUS) * (len(CORPUS) - 1) // 2          # every file has enough code to judge
    worst = max(pairs, key=lambda p: p.score)
    assert worst.score < resemblance.FLAG / 2, worst


@pytest.mark.parametrize("kind", list(disguise.KINDS))
def test_every_disguise_of_every_file_is_flagged(profiles, kind):
    boiler, found = profiles
    for name, text in CORPUS.items():
        copy = resemblance.Profile.of(disguise.KINDS[kind](text)).minus(boiler)
        pair = resemblance.compare(name, "copy", found[name], copy)
        assert pair is not None and pair.norm >= 0.95 and pair.score >= resemblance.FLAG, (name, pair)


def test_the_disguises_keep_the_program(profiles):
    """Each disguise is still Python that defines the same top-level names (the class batch grades
    three of them to the scores of their originals)."""
    import ast
    for kind, make in disguise.KINDS.items():
        data = make(classfolder.REFERENCE)
        tree = ast.parse(resemblance.source_of(data))
        names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert {"BlockPool", "PagedSequence", "paged_step", "blockwise_attention"} <= names, kind
    seven = disguise.utf7(classfolder.REFERENCE)
    assert seven.startswith(disguise.CODING_LINE) and seven != disguise.CODING_LINE + classfolder.REFERENCE.encode()
    assert resemblance.source_of(seven) == disguise.CODING_LINE.decode() + classfolder.REFERENCE      # as Python reads it


def test_normalization_drops_what_cannot_change_a_result():
    text = ('"""doc"""\nimport numpy as np\n\ndef _nop(*a):\n    """nothing"""\n    return None\n\n'
            'def f(x, y):\n    "doc"\n    _nop(x)\n    unused = 3\n    x = x\n    if False:\n        y = 2\n'
            '    pass\n    return np.sum(x) + y\n')
    assert resemblance.normalized(text) == "import numpy\n\ndef F(v0, v1):\n    return numpy.sum(v0) + v1"
    kept = 'def f(x):\n    g(x.pop())\n    return x\n\ndef g(*a):\n    pass\n'
    assert "A()" in resemblance.normalized(kept)         # a call whose argument has an effect stays


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
