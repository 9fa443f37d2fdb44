"""Headless Chromium driven over the DevTools protocol, for the tests of
pages pvperf writes (the interactive flame graph).

Chromium's --remote-debugging-pipe speaks the protocol on file
descriptors 3 (commands in) and 4 (replies and events out), one JSON
message per NUL-terminated record: no port, no network, no client
package.  ``Browser`` opens one page and offers what the tests need:
evaluate an expression, click or hover at a point (real input events,
so hit-testing is Chromium's), type text.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import sessions

CHROMIUM = "chromium"


def chromium() -> str | None:
    return shutil.which(CHROMIUM)


def base_args(profile_dir: str, width: int, height: int) -> list[str]:
    # --no-sandbox: the tests may run as root, where Chromium refuses its
    # sandbox; the pages are pvperf's own.
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--hide-scrollbars",
            f"--user-data-dir={profile_dir}",
            f"--window-size={width},{height}"]


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    """``chromium --headless --screenshot`` of ``page``."""
    with tempfile.TemporaryDirectory(prefix="pvperf-chromium-") as d:
        subprocess.run([*base_args(d, width, height),
                        f"--screenshot={png}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)


def high_fd(fd: int) -> int:
    """``fd`` moved above 9, so that making it 3 or 4 clobbers nothing."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, page: Path, width: int = 1200, height: int = 800,
                 timeout: float = 60.0):
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="pvperf-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        cmd_r, out_w = high_fd(cmd_r), high_fd(out_w)
        # Chromium reads commands from fd 3 and writes to fd 4: bash moves
        # the pipe's ends there before it becomes Chromium (bash: dash
        # redirects one-digit fds only).
        move = f"exec 3<&{cmd_r} 4>&{out_w} {cmd_r}<&- {out_w}>&-; exec \"$@\""
        self.proc = subprocess.Popen(
            ["bash", "-c", move, "bash",
             *base_args(self._profile.name, width, height),
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(cmd_r, out_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(out_w)
        self._buf, self._next_id, self.session = b"", 0, None
        self.requests: list[str] = []   # every URL the page asked for
        try:
            self._open(page)
        except BaseException:
            self.close()
            raise

    def _open(self, page: Path) -> None:
        targets = self.call("Target.getTargets")["targetInfos"]
        target = next(t["targetId"] for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        self.call("Network.enable")
        self.call("Page.navigate", url=page.resolve().as_uri())
        deadline = time.monotonic() + self.timeout
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise BrowserError(f"{page} did not load")
            time.sleep(0.05)

    def call(self, method: str, **params):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("method") == "Network.requestWillBeSent":
                self.requests.append(reply["params"]["request"]["url"])
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply["result"]

    def _read(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise BrowserError("no reply from Chromium")
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                raise BrowserError(f"Chromium exited ({self.proc.poll()})")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def evaluate(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression,
                      returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise BrowserError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def mouse(self, kind: str, x: float, y: float) -> None:
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y,
                  button="left" if kind != "mouseMoved" else "none",
                  clickCount=1 if kind != "mouseMoved" else 0)

    def click(self, x: float, y: float) -> None:
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y)
        self.mouse("mouseReleased", x, y)

    def type_into(self, selector: str, text: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)})"
                      ".focus()")
        self.call("Input.insertText", text=text)

    def close(self) -> None:
        try:
            os.close(self._cmd_w)   # Chromium exits when its pipe closes
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self._out_r)
        self._profile.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- the flame graph's pages (pyhost/profile/flamegraph.js) ---------------

FRAMES_JS = """[...document.querySelectorAll('#fg .f')].map(e => {
  const r = e.getBoundingClientRect();
  return {id: +e.dataset.id, parent: +e.dataset.parent, name: e.dataset.name,
          space: e.dataset.space, samples: +e.dataset.samples,
          x: r.left, y: r.top, w: r.width, h: r.height,
          shown: getComputedStyle(e).display !== 'none',
          match: e.classList.contains('match'),
          bg: getComputedStyle(e).backgroundColor};
})"""


def frames(b: Browser) -> dict[tuple, dict]:
    """The DOM's frames by their stack of (name, space), root first."""
    raw = {f["id"]: f for f in b.evaluate(FRAMES_JS)}

    def path(f):
        p = ()
        while f["parent"] >= 0:
            p = ((f["name"], f["space"]),) + p
            f = raw[f["parent"]]
        return p
    return {path(f): f for f in raw.values()}


def assert_totals_match_report(got: dict, text: str) -> None:
    """The DOM's totals are report.txt's: all samples; each function's
    self samples (top functions); each guest function's frames (guest code
    + emulator work on its behalf)."""
    assert f"# Samples: {got[()]['samples']} " in text
    selfs, behalf = {}, {}
    for p, f in got.items():
        kids = sum(g["samples"] for q, g in got.items()
                   if len(q) == len(p) + 1 and q[:len(p)] == p)
        if p:
            name, space = p[-1]
            key = (space, name)
            selfs[key] = selfs.get(key, 0) + f["samples"] - kids
            if space.startswith("guest-"):
                behalf[key] = behalf.get(key, 0) + f["samples"]
    top = sessions.report_rows(text, "Top functions")
    for (space, symbol), n in top.items():
        key = ("host-kernel", symbol.split("] ", 1)[1]) \
            if symbol.startswith("[host kernel] ") else (space, symbol)
        assert selfs.get(key) == n, key
    rows = sessions.report_rows(text, "Guest code + emulator work")
    assert any(space.startswith("guest-") for space, _ in rows)
    for key, n in rows.items():
        if key[0].startswith("guest-"):
            assert behalf.get(key) == n, key
