"""A headless Chromium driven over the Chrome DevTools Protocol, for the browser tests.

The system ``chromium`` (Debian package) runs with ``--remote-debugging-port=0``; the port
it picked is read from ``DevToolsActivePort`` in its profile directory, and one page target
is driven over a websocket (aiohttp's client): navigate, evaluate, type, click with real
mouse events, and take screenshots. Nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        if path := shutil.which(name):
            return path
    return None


class BrowserError(RuntimeError):
    """A DevTools command failed, or the page did not do what was expected."""


class Page:
    """One tab, driven over its DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, asyncio.Future[dict[str, Any]]]] = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type is not aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            future = self._pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            for method, waiter in list(self._waiters):
                if data.get("method") == method and not waiter.done():
                    waiter.set_result(data.get("params", {}))
                    self._waiters.remove((method, waiter))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def next_event(self, method: str) -> asyncio.Future[dict[str, Any]]:
        """A future for the next ``method`` event (create it before causing the event)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((method, future))
        return future

    async def goto(self, url: str) -> None:
        loaded = self.next_event("Page.loadEventFired")
        await self.send("Page.navigate", url=url)
        await asyncio.wait_for(loaded, 30)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` evaluated in the page."""
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def texts(self, selector: str) -> list[str]:
        """The visible text of every element matching ``selector``."""
        found = await self.evaluate(
            f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.innerText)"
        )
        return list(found or [])

    async def type(self, selector: str, text: str) -> None:
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        await self.send("Input.insertText", text=text)

    async def click(self, selector: str, *, navigates: bool = True) -> None:
        """Scroll ``selector`` into view and click its centre with real mouse events."""
        box = await self.evaluate(
            f"""(() => {{
              const e = document.querySelector({json.dumps(selector)});
              if (!e) return null;
              e.scrollIntoView({{block: "center"}});
              const r = e.getBoundingClientRect();
              return {{x: r.x + r.width / 2, y: r.y + r.height / 2}};
            }})()"""
        )
        if box is None:
            raise BrowserError(f"nothing matches {selector!r}")
        loaded = self.next_event("Page.loadEventFired") if navigates else None
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box["x"],
                y=box["y"],
                button="left",
                clickCount=1,
            )
        if loaded is not None:
            await asyncio.wait_for(loaded, 30)

    async def viewport(self, width: int, height: int, *, mobile: bool) -> None:
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=2 if mobile else 1,
            mobile=mobile,
        )

    async def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the viewport) at ``path``."""
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        shot = await self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self.ws.close()


@contextlib.asynccontextmanager
async def chromium(executable: str) -> AsyncIterator[Page]:
    """A headless Chromium with one blank page; killed (and its profile removed) on exit."""
    profile = Path(tempfile.mkdtemp(prefix="fanbot-chromium-"))
    log = (profile / "chromium.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        executable,
        "--headless=new",
        "--no-sandbox",  # tests run as root in containers
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
        stdout=log,
        stderr=log,
        start_new_session=True,  # its own process group: the exit kills every child too
    )
    try:
        async with aiohttp.ClientSession() as http:
            port = await _devtools_port(profile, proc)
            async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            [target] = [t for t in targets if t["type"] == "page"][:1]
            ws = await http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0)
            page = Page(ws)
            try:
                await page.send("Page.enable")
                yield page
            finally:
                await page.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the browser, its renderers and helpers
        await proc.wait()
        log.close()
        shutil.rmtree(profile, ignore_errors=True)


async def _devtools_port(profile: Path, proc: asyncio.subprocess.Process) -> int:
    marker = profile / "DevToolsActivePort"
    for _ in range(300):
        if proc.returncode is not None:
            raise BrowserError(f"chromium exited with {proc.returncode}")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        await asyncio.sleep(0.1)
    raise BrowserError("chromium did not open its DevTools port within 30 s")
