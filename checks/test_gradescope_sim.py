"""`make gradescope-sim` as part of `make check`: the autograder built and run as Gradescope does, in
fresh Debian roots (grader/gradescope/sim.py). It runs when it can (root, debootstrap present or
installable, the Debian mirror and the package index reachable); otherwise the test is skipped with
the reason, never passed silently. The base roots are cached in /var/cache/cs349e-gsim/ (the
machine's, not the clone's), so reruns and fresh clones are fast.
"""
import functools
import os

import pytest

from grader.gradescope import build, image, sim

SUITES = ["bookworm", "bullseye"]


SIM = ["make", "-o", ".venv/.ready", "gradescope-sim", f"SUITES={' '.join(SUITES)}"]
WHY_NOT = functools.lru_cache(lambda: sim.why_not(SUITES))    # asked at collection, answered once
BACKGROUND = {"test_the_autograder_is_built_and_graded_in_fresh_debian_roots": lambda: None if WHY_NOT() else SIM}


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_autograder_is_built_and_graded_in_fresh_debian_roots(background):
    reason = WHY_NOT()
    if reason:
        pytest.skip(f"make gradescope-sim cannot run here: {reason}")
    code, said = background.wait(3500)      # started when collection ended (conftest.py), run meanwhile
    assert code == 0, said[-6000:]
    for suite in SUITES:
        assert f"{suite}: PASS" in said, said[-6000:]


def test_it_says_why_it_cannot_run_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sim.why_not(SUITES) == "needs root (debootstrap, mounts, namespaces)"


def test_the_base_roots_are_the_machine_s_unless_no_overlay_can_sit_there(monkeypatch):
    """A fresh clone reuses the roots an earlier checkout built (/var/cache); on a container's own
    root (overlay, tmpfs) they go to the checkout's build/gsim/; CS349E_GSIM_CACHE wins over both."""
    from grader.paths import REPO
    monkeypatch.delenv("CS349E_GSIM_CACHE", raising=False)
    seen = []
    monkeypatch.setattr(image, "fs_type", lambda path: seen.append(str(path)) or "ext4")
    assert str(image._cache()) == "/var/cache/cs349e-gsim" and seen == ["/var/cache/cs349e-gsim"]
    for kind in ("overlay", "tmpfs"):
        monkeypatch.setattr(image, "fs_type", lambda path, kind=kind: kind)
        assert image._cache() == REPO / "build" / "gsim"
    monkeypatch.setenv("CS349E_GSIM_CACHE", "/srv/roots")
    assert str(image._cache()) == "/srv/roots"


def test_the_staff_tools_are_not_in_the_autograder_zip():
    shipped = {rel for _f, rel in build.files()}
    assert "grader/gradescope/setup.sh" in shipped and "grader/gradescope/spec.py" in shipped
    assert not {"grader/gradescope/sim.py", "grader/gradescope/image.py", "grader/gradescope/neighbour.py"} & shipped


def test_the_host_mirror_is_read_from_its_apt_sources(tmp_path, monkeypatch):
    """deb822 and one-line sources; an entry for the host's release gives the mirror; a release's
    sources are rewritten for another suite; an entry whose keyring the image lacks is dropped."""
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (tmp_path / "sources.list").write_text("deb [signed-by=/nokey.gpg] http://third.example/apt stable main\n")
    (d / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n")
    (d / "old.list.disabled").write_text("deb http://ignored.example/ bookworm main\n")
    monkeypatch.setattr(image, "_source_files", lambda: [tmp_path / "sources.list", d / "debian.sources"])
    monkeypatch.setattr(image, "host_codename", lambda: "bookworm")
    assert image.mirror() == "http://mirror.example/debian"
    entries = image.apt_entries()
    assert [e["uri"] for e in entries] == ["http://third.example/apt", "http://mirror.example/debian",
                                           "http://mirror.example/debian-security"]
    keyring_root = tmp_path / "img"
    (keyring_root / "usr/share/keyrings").mkdir(parents=True)
    (keyring_root / "usr/share/keyrings/debian-archive-keyring.gpg").write_bytes(b"")
    rewritten = image._sources_for((d / "debian.sources").read_text(), "bullseye", True, keyring_root)
    assert "Suites: bullseye bullseye-updates" in rewritten and "Suites: bullseye-security" in rewritten
    assert "bookworm" not in rewritten
    one_line = image._sources_for((tmp_path / "sources.list").read_text(), "bullseye", False, keyring_root)
    assert one_line.startswith("# (no keyring in the image) deb [signed-by=/nokey.gpg]")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the sandbox uid locks live in a root-only folder")
def test_uids_held_for_an_image_are_not_taken_by_this_machines_graders():
    from grader import runtime
    fds = image.reserve_uids(2, wait=120)
    try:
        claim = runtime.claim_uid(0)
        claim.release()
        assert claim.uid not in (runtime.UID_BASE, runtime.UID_BASE + 1)
    finally:
        for fd in fds:
            os.close(fd)
