"""Open the class report (grader/classpage.py) in a real headless browser, Debian's chromium, and say
what it shows: the page must load, and the DOM the browser built must hold the histograms with
their bars and the links to the students' feedback. Staff only (`make browser-check`); chromium is
installed with apt-get on first use when we are root, never into the grader's runtime.

    python tools/browser_check.py build/gradebook.html [--screenshot build/gradebook.png]

The screenshot is the whole page, however long (the flags, the similar files and every student's
row included): chromium is driven over its DevTools pipe (Chrome DevTools Protocol: load the page,
measure its content, capture it all), not a fixed window that cuts the page off.

Outline is also what make check reads the page with (the standard library's html.parser).
"""
import argparse
import base64
import fcntl
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
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


WIDTH = 1280                    # CSS pixels of the screenshot's width


class DevTools:
    """One chromium over --remote-debugging-pipe: it reads commands on fd 3 and writes replies and
    events on fd 4, each a JSON message ending with a NUL byte."""

    def __init__(self, base, timeout=120):
        to_chrome, self._write = os.pipe()
        self._read, from_chrome = os.pipe()

        def fds():                      # copies above 4 first: either pipe end may be fd 3 or 4 already
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome, from_chrome)]
            for fd, target in zip(high, (3, 4)):
                os.dup2(fd, target)                         # inheritable: chromium gets it across exec
        self.proc = subprocess.Popen([*base, "--remote-debugging-pipe", "about:blank"], preexec_fn=fds,
                                     close_fds=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self.deadline, self.next_id, self.buffer = time.monotonic() + timeout, 0, b""

    def _message(self):
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise RuntimeError("chromium did not answer over its DevTools pipe in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, session=None, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"chromium: {method}: {reply['error']}")
                return reply.get("result", {})

    def wait_for(self, event, session):
        while True:
            message = self._message()
            if message.get("method") == event and message.get("sessionId") == session:
                return message

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        for fd in (self._read, self._write):
            os.close(fd)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def full_page_screenshot(base, url, out):
    """The whole page at `url` as a PNG at `out`, WIDTH wide and as tall as its content; returns its
    height in CSS pixels."""
    tools = DevTools(base)
    try:
        target = tools.call("Target.createTarget", url="about:blank")["targetId"]
        session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        tools.call("Page.enable", session)
        tools.call("Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=800, deviceScaleFactor=1,
                   mobile=False)
        tools.call("Page.navigate", session, url=url)
        tools.wait_for("Page.loadEventFired", session)
        size = tools.call("Page.getLayoutMetrics", session)["cssContentSize"]
        height = math.ceil(size["height"])
        tools.call("Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=height, deviceScaleFactor=1,
                   mobile=False)
        shot = tools.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1})
    finally:
        tools.close()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_bytes(base64.b64decode(shot["data"]))
    return height


def png_size(path):
    """(width, height) in pixels, from a PNG's header."""
    head = Path(path).read_bytes()[:24]
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def render(exe, page, screenshot=None):
    """(the DOM chromium built, as HTML text; its version; the page's height in CSS pixels when a
    screenshot of the whole page was taken, else None)."""
    url = page.resolve().as_uri()
    height = None
    with tempfile.TemporaryDirectory(prefix="cs349e-chromium-") as profile:
        base = [exe, *FLAGS, f"--user-data-dir={profile}"]
        dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
        if screenshot:
            height = full_page_screenshot([*base, "--hide-scrollbars"], url, Path(screenshot).resolve())
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    if dom.returncode != 0 or "<html" not in dom.stdout:
        raise RuntimeError(f"chromium could not render {url} (exit {dom.returncode}): {dom.stderr.strip()[-500:]}")
    return dom.stdout, version, height


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
    dom, version, height = render(exe, args.page, args.screenshot)
    seen = Outline(dom)
    drawn = sum(1 for h in seen.bars if h > 0)
    shot = ""
    if args.screenshot:
        width, tall = png_size(args.screenshot)
        shot = f"; screenshot {args.screenshot}: the whole page, {width} x {tall} pixels ({height} CSS pixels tall)"
    print(f"{version}: {args.page} loaded, title {seen.title!r}; {seen.svgs} histograms, {len(seen.bars)} bars "
          f"({drawn} drawn taller than 0), {len(seen.links)} links; sections {', '.join(seen.ids)}{shot}")
    ok = seen.svgs > 0 and drawn > 0 and not seen.problems
    for problem in seen.problems:
        print(f"  problem: {problem}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
