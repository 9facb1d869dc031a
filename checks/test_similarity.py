"""Similarity that survives cheap disguise (grader/resemblance.py), and `make similarity` as triage.

The corpus: the reference and the selftest's nine correct variants, written independently. Every
disguise of grader/selftest/disguise.py (no-op calls after every 2nd or 3rd statement, dead stores,
reversed definitions, renamed identifiers, UTF-7 under a coding line, and all of them at once) of
every one of those files must be flagged (FLAG or more), and the reference's also as a near-copy of
the solution; no two independent files may come near it (under half of FLAG).

Then `make similarity` on the selftest's class (grader/selftest/classfolder.py): its clusters are
exactly the copies (the reference with its near-copies, mutants and a disguised copy; two students
with the same file; two disguised copies of classmates), one line each, and no honest file, though
two of them follow the starter's layout, docstrings and all. copydetect is staff tooling in
build/staff-venv, never the grader's runtime. This builds that venv when it is missing, with the
Makefile's own target (copydetect 0.5.0 from the package registry, as `make similarity` does on
first use), so a fresh CI proves the command for real. It is skipped only when pip cannot install
copydetect, with pip's reason; any other failure fails."""
import itertools
import re
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


def test_a_disguised_copy_of_the_reference_is_a_near_copy_of_the_solution():
    files = {kind: make(classfolder.REFERENCE) for kind, make in disguise.KINDS.items()}
    flags = integrity.flags(files, {})
    assert set(flags.near_copies) == set(files)
    assert min(p.norm_a for p in flags.near_copies.values()) >= 0.95
    assert flags.near_copies["all, in utf-7"].raw_a < integrity.NEAR_COPY     # the raw tokens alone miss it


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
def test_make_similarity_prints_one_line_per_cluster_of_copies_and_shows_them_side_by_side(tmp_path, staff_venv):
    folder = classfolder.write(tmp_path / "class")
    report = tmp_path / "similarity.html"
    done = _make("similarity", f"DIR={folder}", f"OUT={report}", "TOP=3", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    clusters = [set(re.match(r"  cluster \d+: (.*) \(\d+ files\)", line).group(1).split(", "))
                for line in lines if line.startswith("  cluster ")]
    assert sorted(clusters, key=sorted) == sorted(classfolder.CLUSTERS, key=sorted)
    pairs = [line for line in lines if " ~ " in line]
    assert all(re.search(r"normalized \d+% .*, raw \d+%, copydetect \d+%$", line) for line in pairs), pairs
    assert len(pairs) <= sum(len(c) for c in classfolder.CLUSTERS) + 3       # at most a line per file, then TOP
    below = lines[lines.index(next(line for line in lines if line.startswith("The 3 closest pairs"))) + 1:]
    assert all(int(re.search(r"normalized (\d+)%", line).group(1)) < 100 * resemblance.FLAG / 2
               for line in below if " ~ " in line)
    named = set(itertools.chain.from_iterable(re.match(r"\s+(\S+) ~ (\S+):", line).groups() for line in pairs))
    text = Path(report).read_text(errors="replace")
    in_report = set(re.findall(r"/([^/\s\"'<>]+)/paged_kv\.py", text))
    assert "<html" in text.lower() and {"wes", "yara", "zoe"} <= in_report <= named    # those pairs' files only
