"""Read the one Python file out of a submitted zip (what `make submit` writes), without extracting.

Nothing is ever written under a name taken from the archive: the chosen member's bytes are read into
memory, so a member called `../../x` or `/etc/x` could do no harm. Such a zip is still refused, with
the rest of what a careful unzip refuses (links, encrypted members, too many members, sizes over the
caps), because a student who sends one should hear about it. Sizes are checked from the central
directory before anything is decompressed, and every read is capped too: zipfile stops at the
declared size and fails on a CRC mismatch, so a member that lies about its size (a zip bomb) never
produces more than the cap.
"""
import os
import stat
import zipfile
from pathlib import PurePosixPath

MAX_ZIP_BYTES = 16 << 20         # the archive itself
MAX_MEMBERS = 200
MAX_TOTAL_BYTES = 32 << 20       # uncompressed, all members together


class ZipRefused(Exception):
    """The zip cannot be graded; str() is one line for the student, after "This is a zip: "."""


class Archive:
    """A checked zip, open for reading: `files` lists its regular members, `read` returns one.
    Use as a context manager."""

    def __init__(self, path):
        try:
            if os.path.getsize(path) > MAX_ZIP_BYTES:
                raise ZipRefused(f"it is larger than {MAX_ZIP_BYTES >> 20} MiB")
            self._zip = zipfile.ZipFile(path)
        except ZipRefused:
            raise
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as e:
            raise ZipRefused(f"it cannot be read as a zip ({type(e).__name__})") from None
        try:
            _check(self._zip.infolist())
        except ZipRefused:
            self._zip.close()
            raise
        self.files = [i.filename for i in self._zip.infolist() if not i.is_dir()]

    def read(self, name, cap):
        """The member's bytes; ZipRefused when it is larger than `cap` or does not decompress."""
        info = self._zip.getinfo(name)
        if info.file_size > cap:
            raise ZipRefused(f"{_shown(name)} is {info.file_size:,} bytes; the limit is {cap:,}")
        try:
            with self._zip.open(info) as member:
                data = member.read(cap + 1)
        except (zipfile.BadZipFile, NotImplementedError, EOFError, OSError, ValueError) as e:
            kind = "it fails its checksum" if "CRC" in str(e) else f"{type(e).__name__}"
            raise ZipRefused(f"{_shown(name)} cannot be unpacked ({kind})") from None
        if len(data) > cap:
            raise ZipRefused(f"{_shown(name)} is larger than {cap:,} bytes")
        return data

    def close(self):
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check(infos):
    if len(infos) > MAX_MEMBERS:
        raise ZipRefused(f"it holds {len(infos)} entries; the limit is {MAX_MEMBERS}")
    total = sum(i.file_size for i in infos)
    if total > MAX_TOTAL_BYTES:
        raise ZipRefused(f"it unpacks to {total:,} bytes; the limit is {MAX_TOTAL_BYTES:,}")
    names = [i.filename for i in infos]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ZipRefused(f"it holds two entries named {_shown(twice)}")
    for info in infos:
        name = info.filename
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise ZipRefused(f"an entry's path leaves the archive ({_shown(name)})")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise ZipRefused(f"it holds a link ({_shown(name)}); links are not accepted")
        if info.flag_bits & 0x1:
            raise ZipRefused(f"{_shown(name)} is password-protected")


def _shown(name, cap=80):
    """A member name as safe, short, printable text."""
    return "".join(c if c.isprintable() else "?" for c in name[:cap])
