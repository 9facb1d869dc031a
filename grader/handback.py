"""Feedback to hand back after an offline batch: one text file per submission, exactly what the
student would have seen of their results.json on Gradescope (report.visible_text), nothing that
is for staff (the seed, hashes, the sandbox's protections, integrity flags).

    FOLDER/NAME.txt      NAME: the submission's name in the class folder

A submission the grader failed on gets no file (it has no result to show); files of submissions no
longer in the class are removed, so the folder is always the class as graded.
"""
from pathlib import Path

from grader import report

SUFFIX = ".txt"


def path_of(folder, name):
    return Path(folder) / f"{name}{SUFFIX}"


def write(folder, results):
    """Write every feedback file; `results`: name -> results dict or None. Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    keep = set()
    for name, data in results.items():
        if data is None:
            continue
        path = path_of(folder, name)
        tmp = path.with_name(f".{path.name}.writing")
        tmp.write_text(report.visible_text(data), encoding="utf-8")
        tmp.replace(path)
        keep.add(path.name)
    for stale in folder.glob(f"*{SUFFIX}"):
        if stale.name not in keep:
            stale.unlink()
    return folder
