"""Pairwise similarity of a class's files, for staff: copydetect (PyPI; MOSS-style winnowing over
tokens with names and strings abstracted), the starter as boilerplate, the reference compared too.

    make similarity DIR=d        # installs copydetect into build/staff-venv first (staff tooling only)
    build/staff-venv/bin/python -m grader.similarity DIR [--out build/similarity.html] [--threshold 0.5]

Each submission is the file a grading of it grades (a zip's member, a folder's paged_kv.py).
Files that are the starter unchanged are left out: they hold nothing but boilerplate. What every
file shares by following the starter's layout (its docstrings, signatures and imports) is
boilerplate, so it makes no pair similar. A pair is reported when the larger of its two shares (how
much of one file is found in the other) reaches the threshold. Calibrated on the selftest's
correct variants, written independently: with NOISE tokens as copydetect's noise and guarantee
thresholds they share at most about 0.3, near-copies about 1.0.

Not part of grading: copydetect is never installed into the students' or the grader's runtime
(requirements.txt stays numpy, pytest, pytest-timeout). The grader's own near-copy flag
(integrity.py) needs nothing but the standard library.
"""
import argparse
import sys
import tempfile
from pathlib import Path

from grader import integrity, paths
from grader.batch import graded_file, submissions

NOISE = 60                  # characters of filtered code (copydetect's noise_t and guarantee_t)
THRESHOLD = 0.5
SOLUTION = "(solution)"


def collect(folder, into):
    """Copy every submission's graded file to into/NAME/paged_kv.py (and the reference to
    into/(solution)/); returns the names written."""
    editions = integrity.starter_editions()
    names = []
    for name, path in submissions(folder).items():
        data, _ = graded_file(path)
        if data is None or integrity.is_starter(data, editions):
            continue
        (into / name).mkdir(parents=True)
        (into / name / "paged_kv.py").write_bytes(data)
        names.append(name)
    (into / SOLUTION).mkdir()
    (into / SOLUTION / "paged_kv.py").write_bytes((paths.SOLUTION / "paged_kv.py").read_bytes())
    return names


def pairs(folder, out=None, threshold=THRESHOLD):
    """[(share, a, b, share of a in b, share of b in a)] of the pairs at or above the threshold, most
    similar first; writes copydetect's HTML report to `out` when given."""
    try:
        from copydetect import CopyDetector
    except ImportError:
        sys.exit("grader.similarity needs copydetect, a staff tool: `make similarity DIR=...` installs it into "
                 "build/staff-venv and runs this with that venv's Python")
    with tempfile.TemporaryDirectory(prefix="cs349e-similarity-") as tmp:
        root, boiler = Path(tmp, "class"), Path(tmp, "starter")
        collect(folder, root)
        boiler.mkdir()
        for i, edition in enumerate(sorted(integrity.starter_editions())):
            (boiler / f"starter{i}.py").write_bytes(edition)
        detector = CopyDetector(test_dirs=[str(root)], boilerplate_dirs=[str(boiler)], extensions=["py"],
                                noise_t=NOISE, guarantee_t=NOISE, display_t=threshold, silent=True,
                                autoopen=False, out_file=str(out) if out else "report.html")
        detector.run()
        names = [Path(f).parent.name for f in detector.test_files]
        found = {}
        for i, a in enumerate(names):
            for j, b in enumerate(names):
                if (a, b) != _ordered(a, b) or a == b:      # each pair once, the solution second
                    continue
                s_a, s_b = (float(x) for x in detector.similarity_matrix[i, j])
                if max(s_a, s_b) >= threshold:
                    found[(a, b)] = (max(s_a, s_b), a, b, s_a, s_b)
        if out:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            detector.generate_html_report()
    return sorted(found.values(), key=lambda p: (-p[0], p[1], p[2]))


def _ordered(a, b):
    return tuple(sorted((a, b), key=lambda n: (n == SOLUTION, n)))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m grader.similarity", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="the class folder (as for batch)")
    ap.add_argument("--out", default="build/similarity.html", help="copydetect's HTML report (default: %(default)s)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD, help="report pairs from this share on "
                                                                       "(default: %(default)s)")
    args = ap.parse_args(argv)
    if not Path(args.folder).is_dir():
        print(f"grader.similarity: no such folder: {args.folder}", file=sys.stderr)
        return 2
    found = pairs(args.folder, args.out, args.threshold)
    print(f"{len(found)} pair{'s' * (len(found) != 1)} at or above {args.threshold:.0%} similar "
          f"(starter code not counted; {SOLUTION} is solution/paged_kv.py):")
    for share, a, b, s_a, s_b in found:
        print(f"  {share:5.0%}  {a} ~ {b}   ({s_a:.0%} of {a} is in {b}, {s_b:.0%} of {b} is in {a})")
    print(f"Side by side: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
