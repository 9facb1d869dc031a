"""What staff and Gradescope hand the grader, file by file: a renamed paged_kv.py, the zip
`make submit` writes, and zips that must be refused in one line (links, paths leaving the archive,
bombs, too many entries, encryption, not a zip at all). Expected outcomes are stated here from the
rules in grader/submission.py's docstring, never read back from the code."""
import stat
import zipfile

import pytest

from grader import paths
from grader.submission import SubmissionError, opened
from grader.unzip import MAX_MEMBERS, MAX_TOTAL_BYTES

REFERENCE = paths.SOLUTION / "paged_kv.py"
SOURCE = REFERENCE.read_bytes()


def folder_with(tmp_path, name, data=SOURCE):
    folder = tmp_path / "sub"
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)
    return folder


def make_zip(path, members):
    """members: [(name or ZipInfo, bytes)]."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            z.writestr(name, data)
    return path


@pytest.mark.parametrize("name", ["paged_kv (1).py", "Paged_KV.py", "paged_kv(2).py", "paged_kv-1.py",
                                  "paged_kv copy.py", "paged_kv - Copy.py", "PAGED_KV (3).py"])
def test_a_renamed_copy_is_graded_and_the_student_is_told(tmp_path, name):
    with opened(folder_with(tmp_path, name)) as found:
        assert found.path.read_bytes() == SOURCE and found.shown == name
        assert len(found.notes) == 1 and name in found.notes[0] and "renamed" in found.notes[0]


def test_paged_kv_py_itself_wins_over_copies_and_the_copies_are_named(tmp_path):
    folder = folder_with(tmp_path, "paged_kv.py")
    (folder / "paged_kv (1).py").write_text("old = 1\n")
    with opened(folder) as found:
        assert found.path == folder / "paged_kv.py"
        assert found.notes and "paged_kv (1).py" in found.notes[0] and "not graded" in found.notes[0]


def test_two_copies_or_an_unrelated_name_are_refused_with_the_names(tmp_path):
    folder = folder_with(tmp_path, "paged_kv (1).py")
    (folder / "paged_kv (2).py").write_bytes(SOURCE)
    with pytest.raises(SubmissionError, match=r"Found 2 copies .*paged_kv \(1\)\.py, paged_kv \(2\)\.py"):
        with opened(folder):
            pass
    with pytest.raises(SubmissionError, match=r"No file named paged_kv\.py .*it holds main\.py"):
        with opened(folder_with(tmp_path / "x", "main.py")):
            pass


def test_the_zip_make_submit_writes_is_graded_from_a_private_copy(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(paths.REPO / "tools"))
    import labtool
    out = tmp_path / "submission.zip"
    assert labtool.main(["submit", "--impl", str(paths.SOLUTION), "--out", str(out)]) == 0
    with opened(out) as found:
        private = found.path
        assert found.path.name == "paged_kv.py" and found.path.read_bytes() == SOURCE
        assert found.shown == "submission.zip: paged_kv.py" and found.notes == ()
        assert tmp_path not in found.path.parents
    assert not private.exists() and not private.parent.exists()        # removed after grading


def test_a_zip_inside_a_submission_folder_and_macos_extras(tmp_path):
    folder = tmp_path / "alice"
    folder.mkdir()
    make_zip(folder / "submission.zip", [("__MACOSX/._paged_kv.py", b"\x00\x05junk"), ("hw/Paged_KV.py", SOURCE)])
    with opened(folder) as found:
        assert found.path.read_bytes() == SOURCE and "renamed" in found.notes[0]


def patched(path, flags=None, size=None):
    """Rewrite the (only) member's general-purpose flags or uncompressed size, in both its local
    header and the central directory: what zipfile itself will not write."""
    raw = bytearray(path.read_bytes())
    local, central = raw.index(b"PK\x03\x04"), raw.index(b"PK\x01\x02")
    if flags is not None:
        for at in (local + 6, central + 8):
            raw[at:at + 2] = (int.from_bytes(raw[at:at + 2], "little") | flags).to_bytes(2, "little")
    if size is not None:
        for at in (local + 22, central + 24):
            raw[at:at + 4] = size.to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    return path


def _refusal(path):
    with pytest.raises(SubmissionError) as info:
        with opened(path):
            pass
    message = str(info.value)
    assert message.startswith("This is a zip: ") and "\n" not in message, message
    return message


def test_zips_that_cannot_be_graded_say_so_in_one_line(tmp_path):
    assert "no file named paged_kv.py" in _refusal(make_zip(tmp_path / "a.zip", [("notes.txt", b"hi")]))
    assert "found 2 files" in _refusal(make_zip(tmp_path / "b.zip", [("a/paged_kv.py", SOURCE),
                                                                      ("b/paged_kv.py", SOURCE)]))
    (tmp_path / "c.zip").write_bytes(b"hello")
    assert "cannot be read" in _refusal(tmp_path / "c.zip")
    assert "leaves the archive" in _refusal(make_zip(tmp_path / "d.zip", [("../paged_kv.py", SOURCE)]))
    assert "leaves the archive" in _refusal(make_zip(tmp_path / "e.zip", [("/abs/paged_kv.py", SOURCE)]))
    link = zipfile.ZipInfo("paged_kv.py")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    assert "link" in _refusal(make_zip(tmp_path / "f.zip", [(link, b"../../solution/paged_kv.py")]))
    assert "password" in _refusal(patched(make_zip(tmp_path / "g.zip", [("paged_kv.py", SOURCE)]),
                                          flags=0x1))
    with pytest.warns(UserWarning, match="Duplicate name"):
        twice = make_zip(tmp_path / "j.zip", [("paged_kv.py", b"x = 1\n"), ("paged_kv.py", SOURCE)])
    assert "two entries named paged_kv.py" in _refusal(twice)
    many = [(f"f{i}.txt", b"") for i in range(MAX_MEMBERS)] + [("paged_kv.py", SOURCE)]
    assert "entries" in _refusal(make_zip(tmp_path / "h.zip", many))
    assert "is 2,097,152 bytes" in _refusal(make_zip(tmp_path / "i.zip", [("paged_kv.py", b"#" * (2 << 20))]))


def test_a_zip_bomb_is_refused_from_its_declared_sizes(tmp_path):
    bomb = make_zip(tmp_path / "bomb.zip", [("paged_kv.py", SOURCE), ("zeros.bin", bytes(MAX_TOTAL_BYTES + 1))])
    assert bomb.stat().st_size < 1 << 20                     # small on disk, too large unpacked
    assert "unpacks to" in _refusal(bomb)


def test_a_member_that_lies_about_its_size_is_never_unpacked_beyond_it(tmp_path):
    """Central directory and local header say 100 bytes; the data inflates to 2 MiB of zeros. Reading
    stops at the declared size and the CRC check fails: refused, and nothing large was produced."""
    path = patched(make_zip(tmp_path / "liar.zip", [("paged_kv.py", bytes(2 << 20))]), size=100)
    assert "cannot be unpacked" in _refusal(path)


@pytest.mark.parametrize("data", [b"", b"\n\n  \t\n"])
def test_an_empty_file_is_told_it_is_empty_by_the_grader_and_by_make_submit(tmp_path, data):
    """Not "it does not define BlockPool, ..." (16 names): there is nothing in it (issue 34, item 6)."""
    folder = folder_with(tmp_path, "paged_kv.py", data)
    with pytest.raises(SubmissionError, match=rf"^paged_kv.py is empty \({len(data)} bytes\): there is no code"):
        with opened(folder):
            pass
    with pytest.raises(SubmissionError, match=r"^This is a zip: paged_kv.py is empty"):
        with opened(make_zip(tmp_path / "s.zip", [("paged_kv.py", data)])):
            pass
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(paths.REPO / "tools" / "labtool.py"), "submit", "--impl", str(folder),
                           "--out", str(tmp_path / "out.zip")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and not (tmp_path / "out.zip").exists()
    assert done.stdout.splitlines()[:2] == ["Not submittable yet:", f"{folder / 'paged_kv.py'} is empty: there is "
                                            "nothing to test or submit. Start from the starter's paged_kv.py (it "
                                            "defines every name of the contract) and write your code in it."]
