"""A minimal headless-Chromium driver for tests: the DevTools protocol over ``--remote-debugging-pipe``.

No Python package and no browser download: Debian's ``chromium`` is started with the protocol on
file descriptors 3 (commands in) and 4 (events and replies out), messages are NUL-terminated JSON.
Console errors (``console.error``, uncaught exceptions, failed loads and other ``Log`` errors) are
collected for the whole session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    """The path of a Chromium/Chrome executable on PATH, or ``None``."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    """``with Chromium() as browser: browser.open(url); browser.evaluate(js)``."""

    def __init__(self, executable: str | None = None, *, timeout: float = 30.0) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise FileNotFoundError(f"no Chromium on PATH (looked for {CHROMIUM_NAMES})")
        self.timeout = timeout
        self.console_errors: list[str] = []
        self._next_id = 0
        self._buffer = b""
        self._session: str | None = None

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="ensemblize-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # runs in the child: the protocol lives on fds 3 and 4
            r, w = os.dup(to_browser_r), os.dup(from_browser_w)  # above 4, so the dup2s cannot clobber them
            os.dup2(r, 3)  # dup2 makes 3 and 4 inheritable across exec
            os.dup2(w, 4)

        self._proc = subprocess.Popen(
            [self.executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,  # noqa: PLW1509 (single-threaded test process)
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self._session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
        )["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.send("Browser.close", session=False)
        except Exception:  # noqa: BLE001 - the browser may already be gone
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)

    # --- protocol ------------------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no message from Chromium in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise ConnectionError(f"Chromium closed the pipe (exit code {self._proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _handle_event(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console_errors.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            )
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.console_errors.append(
                details.get("exception", {}).get("description", details.get("text", ""))
            )
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.console_errors.append(params["entry"]["text"])
        elif method == "Page.loadEventFired":
            self._loaded = True

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = True
    ) -> dict[str, Any]:
        """Send one command and wait for its reply (events meanwhile are handled); returns ``result``."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self._session:
            msg["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._handle_event(reply)

    def open(self, url: str | Path) -> None:
        """Navigate to ``url`` (a path becomes a ``file://`` URL) and wait for the load event."""
        url = Path(url).resolve().as_uri() if isinstance(url, Path) else url
        self._loaded = False
        self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.timeout
        while not self._loaded:
            self._handle_event(self._read_message(deadline))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited, JSON-serialisable)."""
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press and release) at the centre of the first element matching ``selector``."""
        box = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)}); if (!el) return null;"
            " el.scrollIntoView({block: 'center'}); const r = el.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise LookupError(f"no element matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
            )
