"""Feedback to hand back after an offline batch: one text file per submission, exactly what the
student would have seen of their results.json on Gradescope (report.visible_text), nothing that
is for staff (the seed, hashes, the sandbox's protections, integrity flags).

    FOLDER/ID.txt        ID: the student's LMS id (grader/roster.py; without a roster or export
                         metadata, the submission's name), made safe for a file name; a group's
                         submission gets one file per member; an id two submissions claim (a flag)
                         gets ID--SUBMISSION.txt for each

A submission the grader failed on gets no file (it has no result to show); files of submissions no
longer in the class are removed, so the folder is always the class as graded.
"""
import re
from pathlib import Path

from grader import report

SUFFIX = ".txt"


def path_of(folder, name):
    return Path(folder) / f"{name}{SUFFIX}"


def safe(text):
    """A name any file system takes: letters, digits and . _ @ + - kept, the rest "_", no leading dot."""
    return (re.sub(r"[^\w.@+-]", "_", text, flags=re.ASCII).lstrip(".")[:120]) or "_"


def file_names(owners):
    """{(submission, student id): the stem of its feedback file} for [(submission, student id)]: the
    id, unless two owners would share it (then the submission's name after it)."""
    owners = list(dict.fromkeys(owners))
    stems = [safe(sid) for _, sid in owners]
    return {(entry, sid): stem if stems.count(stem) == 1 else safe(f"{sid}--{entry}")
            for (entry, sid), stem in zip(owners, stems)}


def write(folder, results):
    """Write every feedback file; `results`: file stem -> results dict or None. Returns the folder."""
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
