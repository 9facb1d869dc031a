"""Find the one file a submission consists of, and say clearly what is wrong when it is not there.

A submission is a .py file (graded whatever its name: staff chose it), a folder (Gradescope's
/autograder/submission, a batch entry) or a zip (what `make submit` writes), and a folder may hold
that zip. In a folder or a zip the file is `paged_kv.py`, found at any depth.

Renamed copies are graded, not refused: browsers and file managers save a second download of
paged_kv.py as `paged_kv (1).py` or `paged_kv-1.py`, some systems change its case (`Paged_KV.py`),
and Finder / Explorer copies are `paged_kv copy.py` / `paged_kv - Copy.py`. Refusing such a file
would give 0 for a name the student never chose, and they would learn it only from the report,
because `make submit` never sees the uploaded name. So exactly one such file is graded (the sandbox
always imports it as paged_kv.py) and the report's first lines say it was renamed. Names that are
not recognisably paged_kv.py (`main.py`, `hw7.py`) are not guessed at: the message lists them.
"""
import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.unzip import Archive, ZipRefused

MAX_BYTES = 1 << 20
NAME = "paged_kv.py"
MAX_FILES = 10_000              # a folder is walked at most this far
_ZIP_MAGIC = b"PK\x03\x04"
_RENAMED = re.compile(r"paged[_ -]?kv(\s*[(\[]\s*\d+\s*[)\]]|\s*\(copy( \d+)?\)|\s*-\s*copy( \(\d+\))?"
                      r"|\s+copy( \d+)?|[-_ ]\d+)?\.py", re.IGNORECASE)
_SUBMIT = f"Submit exactly one file, {NAME} (or the zip that `make submit` writes)."


class SubmissionError(Exception):
    """A problem the student can fix; the message says how."""


@dataclass(frozen=True)
class Found:
    path: Path               # the file to grade (for a zip, a private copy of its member)
    shown: str               # what the student submitted, e.g. "paged_kv (1).py" or "submission.zip: paged_kv.py"
    notes: tuple = ()        # lines for the top of the student's report (a renamed file, copies not graded)
    from_zip: bool = False   # the file is a zip's member


@contextlib.contextmanager
def opened(path):
    """The file to grade, as a Found, for the duration of the block (a zip's member is removed after).
    Raises SubmissionError (the student's message) or FileNotFoundError (no such path: staff's)."""
    path = Path(path)
    if path.is_dir():
        names = _files_in(path)
        chosen, notes = _choose(names, where="in the submission")
        if chosen is None:
            zips = [n for n in names if n.lower().endswith(".zip")]
            if len(zips) != 1:
                raise SubmissionError(_sentence(_nothing(names, "in the submission")) + " " + _SUBMIT)
            with _from_zip(path / zips[0]) as found:
                yield found
            return
        yield Found(_checked_file(path / chosen, chosen), chosen, notes)
    elif path.is_file() and _is_zip(path):
        with _from_zip(path) as found:
            yield found
    elif path.is_file():
        yield Found(_checked_file(path, path.name), path.name)
    else:
        raise FileNotFoundError(f"no such file or folder: {path}")


def _files_in(folder):
    """Relative POSIX paths of the regular files and links under `folder`, without following links."""
    names = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for f in sorted(files):
            names.append(Path(root, f).relative_to(folder).as_posix())
            if len(names) > MAX_FILES:
                raise SubmissionError(f"The submission holds more than {MAX_FILES} files. {_SUBMIT}")
    return names


def _choose(names, where):
    """(the name to grade, notes) among relative names, or (None, ()) when there is none.
    paged_kv.py itself wins (the top one if several); otherwise exactly one renamed copy."""
    names = [n for n in names if not _junk(n)]
    try:
        return _pick(names, where)
    except SubmissionError as e:
        raise SubmissionError(f"{_sentence(str(e))}. {_SUBMIT}") from None


def _pick(names, where):
    exact = [n for n in names if PurePosixPath(n).name == NAME]
    renamed = [n for n in names if PurePosixPath(n).name != NAME and _RENAMED.fullmatch(PurePosixPath(n).name)]
    if exact:
        top = [n for n in exact if "/" not in n]
        if not top and len(exact) > 1:
            raise SubmissionError(f"found {len(exact)} files named {NAME} {where}")
        chosen = (top or exact)[0]
        notes = (f"Also found {_list(renamed)}: not graded, only {chosen} is.",) if renamed else ()
        return chosen, notes
    if len(renamed) > 1:
        raise SubmissionError(f"found {len(renamed)} copies of {NAME} {where} ({_list(renamed)}) and no "
                              f"{NAME}; keep the one you mean, named {NAME}")
    if renamed:
        return renamed[0], (f"Graded {_printable(renamed[0])} as {NAME}: the file was renamed (a browser or your system "
                            f"does that to a second download). Name it {NAME} when you submit.",)
    return None, ()


def _nothing(names, where):
    pys = [n for n in names if n.endswith(".py") and not _junk(n)]
    return f"no file named {NAME} was found {where}" + (f" (it holds {_list(pys)})." if pys else ".")


def _sentence(text):
    return text[:1].upper() + text[1:]


def _junk(name):
    """What archivers add beside the real files (macOS resource forks)."""
    parts = PurePosixPath(name).parts
    return "__MACOSX" in parts or parts[-1].startswith("._")


def _list(names, cap=4):
    shown = ", ".join(_printable(n) for n in names[:cap])
    return shown + (f" and {len(names) - cap} more" if len(names) > cap else "")


def _printable(text, cap=80):
    return "".join(c if c.isprintable() else "?" for c in text[:cap])


def _checked_file(found, shown):
    if found.is_symlink() or not found.resolve().is_file():
        raise SubmissionError(f"{_printable(shown)} must be a regular file, not a link.")
    size = found.stat().st_size
    if size > MAX_BYTES:
        raise SubmissionError(f"{_printable(shown)} is {size} bytes; the limit is {MAX_BYTES}. "
                              f"Submit only your source code.")
    _not_empty(found.read_bytes(), shown)
    return found


def _not_empty(data, shown):
    """An empty file (nothing but white space) is said to be empty, not to lack every name."""
    if not data.strip():
        raise SubmissionError(f"{_printable(shown)} is empty ({len(data)} bytes): there is no code to grade. "
                              f"Submit the {NAME} you wrote (start from the starter's, which defines every name).")


def _is_zip(path):
    with open(path, "rb") as f:
        return path.suffix.lower() == ".zip" or f.read(4) == _ZIP_MAGIC


@contextlib.contextmanager
def _from_zip(zip_path):
    label = _printable(zip_path.name)
    try:
        with Archive(zip_path) as archive:
            names = [n for n in archive.files if not _junk(n)]
            chosen, notes = _pick(names, where="in it")
            if chosen is None:
                raise ZipRefused(_nothing(names, "in it").rstrip("."))
            data = archive.read(chosen, MAX_BYTES)
            _not_empty(data, chosen)
    except (ZipRefused, SubmissionError) as e:
        raise SubmissionError(f"This is a zip: {str(e).rstrip('.')}. {_SUBMIT}") from None
    private = Path(tempfile.mkdtemp(prefix="cs349e-zip-"))
    try:
        (private / NAME).write_bytes(data)
        yield Found(private / NAME, f"{label}: {_printable(chosen)}", notes, from_zip=True)
    finally:
        shutil.rmtree(private, ignore_errors=True)
