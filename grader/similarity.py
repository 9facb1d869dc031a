"""Similar files of a class, for staff: the batch's triage (grader/triage.py over the raw and
normalized similarity of grader/resemblance.py, the starter subtracted, the reference compared too),
each pair with copydetect's figure, and copydetect's side-by-side report of those pairs only.

    make similarity DIR=d [OUT=build/similarity.html] [THRESHOLD=0.6] [TOP=10]
    build/staff-venv/bin/python -m grader.similarity DIR [--out PATH] [--threshold 0.6] [--top 10]

Each submission is the file a grading of it grades (a zip's member, a folder's paged_kv.py), read as
Python reads it (its declared encoding). Files that are the starter unchanged are left out. A
cluster is one line however many files it holds, then each member's strongest pair in it, then the TOP
closest pairs outside the clusters. copydetect (PyPI; MOSS-style winnowing) compares the decoded
text of the files those pairs name, with the starter as boilerplate; its report shows those pairs
side by side, nothing else, so it stays small whatever the class's size. The batch's class page
links it when it sits beside the page (build/similarity.html, the default).

Not part of grading: copydetect is never installed into the students' or the grader's runtime
(`make similarity` installs it into build/staff-venv). Without it the triage is printed all the
same, with no side-by-side report.
"""
import argparse
import sys
import tempfile
from pathlib import Path

from grader import integrity, paths, resemblance, triage
from grader.batch import graded_file, submissions

NOISE = 60                  # characters of filtered code (copydetect's noise_t and guarantee_t)


def collect(folder):
    """name -> the bytes of each submission's graded file (the starter unchanged left out), and the
    reference's as triage.SOLUTION."""
    editions = integrity.starter_editions()
    out = {}
    for name, path in submissions(folder).items():
        data, _ = graded_file(path)
        if data is not None and not integrity.is_starter(data, editions):
            out[name] = data
    return {**out, triage.SOLUTION: (paths.SOLUTION / "paged_kv.py").read_bytes()}


def side_by_side(files, shown, out):
    """{(a, b): copydetect's similarity} of the pairs `shown`, and its report of them at `out`;
    None when copydetect is not installed."""
    try:
        from copydetect import CopyDetector
    except ImportError:
        return None
    names = sorted({n for p in shown for n in (p.a, p.b)})
    with tempfile.TemporaryDirectory(prefix="cs349e-similarity-") as tmp:
        root, boiler = Path(tmp, "class"), Path(tmp, "starter")
        for name in names:
            (root / name).mkdir(parents=True)
            (root / name / "paged_kv.py").write_text(resemblance.source_of(files[name]), encoding="utf-8")
        boiler.mkdir()
        for i, edition in enumerate(sorted(integrity.starter_editions())):
            (boiler / f"starter{i}.py").write_bytes(edition)
        detector = CopyDetector(test_dirs=[str(root)], boilerplate_dirs=[str(boiler)], extensions=["py"],
                                noise_t=NOISE, guarantee_t=NOISE, display_t=0.0, silent=True, autoopen=False,
                                out_file=str(out))
        if len(names) < 2:
            return {}
        detector.run()
        where = [Path(f).parent.name for f in detector.test_files]
        figure = {}
        for p in shown:
            i, j = where.index(p.a), where.index(p.b)
            figure[(p.a, p.b)] = float(max(detector.similarity_matrix[i, j]))
        wanted = {frozenset((p.a, p.b)) for p in shown}
        everything = detector.get_copied_code_list

        def only_shown():
            return [c for c in everything() if frozenset(Path(f).parent.name for f in c[2:4]) in wanted]
        detector.get_copied_code_list = only_shown
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        detector.generate_html_report()
    return figure


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m grader.similarity", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="the class folder (as for batch)")
    ap.add_argument("--out", default="build/similarity.html", help="copydetect's side-by-side report of the pairs "
                                                                   "shown (default: %(default)s)")
    ap.add_argument("--threshold", type=float, default=resemblance.FLAG,
                    help="files linked by a pair at or above this similarity form a cluster (default: %(default)s)")
    ap.add_argument("--top", type=int, default=triage.TOP,
                    help="the closest pairs outside the clusters to show (default: %(default)s)")
    args = ap.parse_args(argv)
    if not Path(args.folder).is_dir():
        print(f"grader.similarity: no such folder: {args.folder}", file=sys.stderr)
        return 2
    files = collect(args.folder)
    pairs = resemblance.pairs(integrity.profiles(files))
    found = triage.clusters(pairs, args.threshold)
    shown = [p for c in found for p in c.links()] + triage.closest_others(pairs, found, args.top)
    figure = side_by_side(files, shown, args.out)

    print("\n".join(triage.lines(pairs, args.threshold, args.top,
                                 detail=lambda p: f", copydetect {figure[(p.a, p.b)]:.0%}" if figure else "")))
    print(f"Side by side (copydetect, the pairs above only): {args.out}" if figure is not None else
          "No side-by-side report: copydetect is not installed here (make similarity installs it into "
          "build/staff-venv).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
