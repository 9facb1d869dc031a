"""Find the one file a submission consists of, and say clearly what is wrong when it is not there."""
from pathlib import Path

MAX_BYTES = 1 << 20
NAME = "paged_kv.py"


class SubmissionError(Exception):
    """A problem the student can fix; the message says how."""


def locate(path):
    """The paged_kv.py to grade: the file itself, or the only paged_kv.py inside a folder (Gradescope
    unpacks zips with or without a top folder)."""
    path = Path(path)
    if path.is_file():
        found = path
    elif path.is_dir():
        top = path / NAME
        matches = [top] if top.is_file() else sorted(p for p in path.rglob(NAME) if p.is_file())
        if not matches:
            raise SubmissionError(f"No file named {NAME} was found in the submission. Submit exactly one "
                                  f"file, {NAME} (make submit builds it).")
        if len(matches) > 1:
            raise SubmissionError(f"Found {len(matches)} files named {NAME}; submit exactly one.")
        found = matches[0]
    else:
        raise FileNotFoundError(f"no such file or folder: {path}")
    if found.is_symlink() or not found.resolve().is_file():
        raise SubmissionError(f"{NAME} must be a regular file, not a link.")
    size = found.stat().st_size
    if size > MAX_BYTES:
        raise SubmissionError(f"{NAME} is {size} bytes; the limit is {MAX_BYTES}. Submit only your source code.")
    return found
