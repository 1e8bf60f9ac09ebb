#!/usr/bin/env python3
"""Opens a `cairn report` page in headless Chromium and uses it as a person
would, through the Chrome DevTools Protocol (standard library only: a
minimal WebSocket client is below).

    check_report.py CHROMIUM REPORT.html EXPECT.json [SCREENSHOT.png]
    check_report.py --time CHROMIUM REPORT.html

The second form is the benchmark's: it opens the page once and prints
how long it took to load (the browser's own navigation timing, from the
request to the end of the load event) and how many rows were laid out.

EXPECT.json names what the page must show: the number of records, a
label of a checkpoint whose diff a click opens and a path in that diff,
and a text from a hostile prompt that must stay text. Prints one line
per check; exits 1 at the first that fails.
"""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

# How long the browser may take to start and the page to load, in
# seconds: generous, for a loaded 2-core machine; never a measurement.
START_TIMEOUT_S = 60
LOAD_TIMEOUT_S = 60


class WebSocket:
    """Just enough of RFC 6455 for the DevTools Protocol: text frames,
    masked from the client, unmasked (and possibly fragmented) from it."""

    def __init__(self, url):
        assert url.startswith("ws://"), url
        hostport, _, path = url[len("ws://"):].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=LOAD_TIMEOUT_S)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise RuntimeError("websocket handshake: connection closed")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError(f"websocket handshake refused: {head[:80]!r}")

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RuntimeError("websocket closed")
            buf += chunk
        return buf

    def send(self, text):
        data = text.encode()
        head = bytes([0x81])
        n = len(data)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._exact(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._exact(8))
            payload = self._exact(n)
            if b0 & 0x0F in (0x1, 0x0):
                message += payload
            if b0 & 0x80 and b0 & 0x0F in (0x1, 0x0):
                return message.decode()


class Page:
    """One tab, driven by DevTools Protocol calls."""

    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"script error in {expr[:60]!r}: {r['exceptionDetails']}")
        return r["result"].get("value")


def start_browser(chromium, profile):
    proc = subprocess.Popen(
        [
            chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--disable-extensions", "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", f"--user-data-dir={profile}",
            "--window-size=1280,900", "about:blank",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.time() + START_TIMEOUT_S
    while time.time() < deadline:
        if os.path.exists(port_file):
            lines = open(port_file).read().split("\n")
            if len(lines) >= 2 and lines[0]:
                return proc, int(lines[0])
        if proc.poll() is not None:
            raise RuntimeError(f"{chromium} exited with {proc.returncode}")
        time.sleep(0.1)
    raise RuntimeError(f"{chromium} did not start within {START_TIMEOUT_S} s")


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""))
    if not ok:
        sys.exit(1)


class open_page:
    """A headless Chromium with `report` loaded: `with open_page(c, r) as page`."""

    def __init__(self, chromium, report):
        self.chromium, self.report = chromium, report

    def __enter__(self):
        self.profile = tempfile.mkdtemp(prefix="cairn-chromium-")
        self.proc, port = start_browser(self.chromium, self.profile)
        try:
            targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
            page_target = next(t for t in targets if t.get("type") == "page")
            page = Page(WebSocket(page_target["webSocketDebuggerUrl"]))
            page.call("Page.enable")
            page.call("Page.navigate", url="file://" + os.path.abspath(self.report))
            deadline = time.time() + LOAD_TIMEOUT_S
            while page.eval("document.readyState") != "complete" or page.eval("location.protocol") != "file:":
                if time.time() > deadline:
                    check("the page loads", False, f"not loaded within {LOAD_TIMEOUT_S} s")
                time.sleep(0.05)
            return page
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
        return False


def time_load(chromium, report):
    """Prints the page's load time by the browser's navigation timing."""
    with open_page(chromium, report) as page:
        ms = page.eval(
            "(() => { const n = performance.getEntriesByType('navigation')[0];"
            " return Math.round(n.loadEventEnd - n.startTime); })()"
        )
        rows = page.eval("document.querySelectorAll('#tl>li').length")
        print(f"open: {ms / 1000:.2f} s, {rows} rows laid out")


def main():
    if sys.argv[1:2] == ["--time"]:
        time_load(*sys.argv[2:4])
        return
    chromium, report, expect_file = sys.argv[1:4]
    shot = sys.argv[4] if len(sys.argv) > 4 else None
    expect = json.load(open(expect_file))
    with open_page(chromium, report) as page:
        run_checks(page, expect)
        if shot:
            png = page.call("Page.captureScreenshot", format="png")["data"]
            with open(shot, "wb") as f:
                f.write(base64.b64decode(png))
            check("a screenshot is taken", os.path.getsize(shot) > 1000)


def run_lazy_checks(page, expect):
    """A timeline longer than the page lays out at once: the rows come a
    chunk at a time as the reader scrolls, and the filters still see all."""
    n = expect["records"]
    check(f"the script knows all {n} records", page.eval("cairnReport.records()") == n)
    first = page.eval("document.querySelectorAll('#tl>li').length")
    check("only a first chunk is laid out", 0 < first < n, f"{first}")
    check(
        "the count says every record is shown",
        page.eval("document.getElementById('n').textContent") == f"{n} of {n} records",
    )
    page.eval("window.scrollTo(0, document.body.scrollHeight)")
    deadline = time.time() + LOAD_TIMEOUT_S
    while page.eval("document.querySelectorAll('#tl>li').length") <= first and time.time() < deadline:
        time.sleep(0.05)
    check("scrolling down lays out more", page.eval("document.querySelectorAll('#tl>li').length") > first)
    last = expect["last_lsn"]
    page.eval(f"location.hash = '#r{last}'")
    deadline = time.time() + LOAD_TIMEOUT_S
    while not page.eval(f"!!document.getElementById('r{last}')") and time.time() < deadline:
        time.sleep(0.05)
    check("a link to the last record lays it out", page.eval(f"!!document.getElementById('r{last}')"))
    q = json.dumps(expect["search"])
    page.eval(
        f"(function(e){{e.value={q};e.dispatchEvent(new Event('input',{{bubbles:true}}))}})(document.getElementById('fq'))"
    )
    found = page.eval("cairnReport.shown()")
    check("the search finds records not laid out yet", found == expect["search_matches"], f"{found}")
    check(
        "and lays out what it found",
        page.eval("document.querySelectorAll('#tl>li').length") == min(found, first),
    )


def run_checks(page, expect):
    if expect.get("lazy"):
        return run_lazy_checks(page, expect)
    n = expect["records"]
    rows = page.eval("document.querySelectorAll('#tl>li').length")
    check(f"the timeline shows all {n} records", rows == n, f"{rows} rows")
    sessions = page.eval("document.querySelectorAll('table tbody tr').length")
    check("the sessions table has a row per session", sessions == expect["sessions"], f"{sessions}")
    check("the script ran: the filters are shown", page.eval("!document.getElementById('f').hidden"))
    check(
        "the count says every record is shown",
        page.eval("document.getElementById('n').textContent") == f"{n} of {n} records",
    )
    # A click on a checkpoint shows its files and their coloured diff.
    label = json.dumps(expect["checkpoint_label"])
    row = f"Array.from(document.querySelectorAll('#tl>li')).find(li => li.textContent.includes({label}))"
    check("a checkpoint's diff is closed at first", page.eval(f"!{row}.querySelector('details').open"))
    page.eval(f"{row}.querySelector('summary').click()")
    check("a click opens it", page.eval(f"{row}.querySelector('details').open"))
    check(
        "its diff is shown, coloured, naming the file",
        page.eval(
            f"(function(r){{var x=r.querySelector('.x');return x.offsetHeight>0 && x.textContent.includes({json.dumps(expect['checkpoint_path'])}) && r.querySelectorAll('pre .a, pre .d').length>0}})({row})"
        ),
    )
    # Filters hide what they should.
    def set_filter(fid, value):
        page.eval(
            f"(function(e){{e.value={json.dumps(value)};e.dispatchEvent(new Event('input',{{bubbles:true}}))}})(document.getElementById('{fid}'))"
        )

    visible = "Array.from(document.querySelectorAll('#tl>li')).filter(li => !li.hidden)"
    set_filter("fk", "checkpoint.create")
    shown = page.eval(f"{visible}.map(li => li.dataset.k)")
    check("the kind filter shows only that kind", shown and all(k == "checkpoint.create" for k in shown), f"{shown}")
    check(
        "and every record of it",
        len(shown) == page.eval("document.querySelectorAll('#tl>li[data-k=\"checkpoint.create\"]').length"),
    )
    set_filter("fk", "")
    set_filter("fo", "failed")
    shown = page.eval(f"{visible}.map(li => li.classList.contains('bad'))")
    check("the failed filter shows only failures", shown and all(shown), f"{shown}")
    set_filter("fo", "")
    set_filter("fq", expect["search"])
    shown = page.eval(f"{visible}.length")
    check("the search narrows the timeline", 0 < shown < n, f"{shown} of {n}")
    set_filter("fq", "")
    check("clearing the filters shows everything again", page.eval(f"{visible}.length") == n)
    # The hostile prompt is text: its markup never ran and is shown as typed.
    check("nothing from the history ran as script", page.eval("typeof window.__pwned") == "undefined")
    check("no element came from the history", page.eval("document.querySelectorAll('img, iframe, object, embed').length") == 0)
    check(
        "the hostile prompt is shown as text",
        page.eval(f"document.getElementById('tl').textContent.includes({json.dumps(expect['hostile_text'])})"),
    )


if __name__ == "__main__":
    main()
