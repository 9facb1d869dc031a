"""Open the class report (grader/classpage.py) in a real headless browser, Debian's chromium, and say
what it shows: the page must load, and the DOM the browser built must hold the histograms with
their bars and the links to the students' feedback. Staff only (`make browser-check`); chromium is
installed with apt-get on first use when we are root, never into the grader's runtime.

    python tools/browser_check.py build/gradebook.html [--screenshot build/gradebook.png]

Outline is also what make check reads the page with (the standard library's html.parser).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Outline(HTMLParser):
    """What a page is made of: its title, histograms (svg with bar rects and a caption), links,
    section ids, and every problem of structure (an end tag that closes nothing open)."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.title, self.svgs, self.bars, self.captions, self.links, self.ids = "", 0, [], [], [], []
        self.problems, self._open, self._text = [], [], None
        self.feed(text)
        self.close()
        self.problems += [f"<{tag}> never closed" for tag in self._open]

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in VOID:
            self._open.append(tag)
        if tag == "svg":
            self.svgs += 1
        if tag == "rect" and "bar" in (a.get("class") or "").split():
            self.bars.append(float(a.get("height", "nan")))
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if a.get("id"):
            self.ids.append(a["id"])
        if tag == "figcaption" or (tag == "title" and "svg" not in self._open):     # an svg's title is its tooltip
            self._text = []

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self._open or self._open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self._open[-1] if self._open else 'nothing'}")
            if tag in self._open:
                del self._open[len(self._open) - 1 - self._open[::-1].index(tag):]
            return
        self._open.pop()
        if tag in ("title", "figcaption") and self._text is not None:
            text = "".join(self._text).strip()
            if tag == "title":
                self.title = text
            else:
                self.captions.append(text)
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def chromium():
    """The chromium executable, installed with apt-get when missing and we are root."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    print("browser-check: installing Debian's chromium (apt-get install -y chromium) ...", flush=True)
    subprocess.run(["apt-get", "install", "-y", "chromium"], check=False, stdout=subprocess.DEVNULL)
    return shutil.which("chromium")


def render(exe, page, screenshot=None):
    """(the DOM chromium built, as HTML text; its version)."""
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="cs349e-chromium-") as profile:
        base = [exe, *FLAGS, f"--user-data-dir={profile}"]
        dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
        if screenshot:
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([*base, f"--screenshot={Path(screenshot).resolve()}", "--window-size=1280,2600",
                            "--hide-scrollbars", url], capture_output=True, timeout=120)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    if dom.returncode != 0 or "<html" not in dom.stdout:
        raise RuntimeError(f"chromium could not render {url} (exit {dom.returncode}): {dom.stderr.strip()[-500:]}")
    return dom.stdout, version


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path, help="the class report, e.g. build/gradebook.html (make batch writes it)")
    ap.add_argument("--screenshot", type=Path, help="also save what chromium shows as a PNG")
    args = ap.parse_args(argv)
    if not args.page.is_file():
        print(f"browser-check: no such page: {args.page} (make batch DIR=... writes build/gradebook.html)",
              file=sys.stderr)
        return 2
    exe = chromium()
    if not exe:
        print("browser-check: no chromium (as root this installs Debian's: apt-get install -y chromium)",
              file=sys.stderr)
        return 2
    dom, version = render(exe, args.page, args.screenshot)
    seen = Outline(dom)
    drawn = sum(1 for h in seen.bars if h > 0)
    print(f"{version}: {args.page} loaded, title {seen.title!r}; {seen.svgs} histograms, {len(seen.bars)} bars "
          f"({drawn} drawn taller than 0), {len(seen.links)} links; sections {', '.join(seen.ids)}"
          + (f"; screenshot {args.screenshot}" if args.screenshot else ""))
    ok = seen.svgs > 0 and drawn > 0 and not seen.problems
    for problem in seen.problems:
        print(f"  problem: {problem}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
