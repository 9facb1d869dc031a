"""Hashes that say what was graded and by which grader, so a result can be trusted again later.

The grader is every file the autograder archive ships (gradescope/build.py's list: the grader, its
hidden suites, the rubric, the reference, the lab and the scenarios): change any of them and every
earlier result is stale. A submission is its bytes; a folder is its tree (names, kinds, contents,
link targets), walked without following links.
"""
import hashlib
import os
from pathlib import Path


def grader_hash():
    from grader.gradescope.build import files
    h = hashlib.sha256()
    for path, rel in files():
        h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def bytes_hash(data):
    return hashlib.sha256(data).hexdigest()


def entry_hash(path):
    """A file's bytes, or a folder's whole tree."""
    path = Path(path)
    if not path.is_dir() or path.is_symlink():
        return _one(path).hex()
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = Path(root, name)
            h.update(full.relative_to(path).as_posix().encode(errors="surrogateescape") + b"\0" + _one(full))
    return h.hexdigest()


def _one(path):
    """sha256 of one entry: its kind, then its content (a file) or its target (a link)."""
    h = hashlib.sha256()
    if path.is_symlink():
        h.update(b"link\0" + os.readlink(path).encode(errors="surrogateescape"))
    elif path.is_file():
        h.update(b"file\0")
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    else:
        h.update(b"other\0")
    return h.digest()
