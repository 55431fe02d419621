"""The terminal chat: stdin lines in, printed messages out (works with pipes and TTYs)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import logging
import sys
import threading
import uuid
from typing import TextIO

from adapters.console.convert import line_to_inbound, render, render_edit, switch_target
from bot.ports import InboundSink
from bot.types import Outbound, ThreadRef

log = logging.getLogger(__name__)


class ConsoleChannel:
    """A local chat channel.

    Args:
        stdin: Where lines come from (``sys.stdin`` by default).
        stdout: Where messages are printed.
        user: The name the person types as.
        thread: The initial thread name; ``:thread NAME`` switches.
    """

    platform = "console"

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user: str = "you",
        thread: str = "main",
    ) -> None:
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.user = user
        self.thread = thread
        self.threads: set[str] = {thread}
        self.eof = asyncio.Event()
        self._nonce = uuid.uuid4().hex[:8]
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        self._ids_sent = itertools.count(1)

    async def start(self, sink: InboundSink) -> None:
        self._reader = asyncio.create_task(self._read(sink), name="console-input")

    def _pump(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str]) -> None:
        # A daemon thread, not the default executor: a blocked readline must not hold up exit.
        if isinstance(self.stdin, io.TextIOWrapper):
            # Bytes invalid in the terminal's encoding become U+FFFD; a strict decoder would
            # kill this thread and leave the console waiting for input forever.
            self.stdin.reconfigure(errors="replace")
        try:
            for line in iter(self.stdin.readline, ""):
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except (OSError, ValueError):
            log.warning("console: reading input failed; treating it as end of input", exc_info=True)
        loop.call_soon_threadsafe(lines.put_nowait, "")

    async def _read(self, sink: InboundSink) -> None:
        lines: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, args=(loop, lines), daemon=True).start()
        try:
            while True:
                line = await lines.get()
                if not line:
                    break
                target = switch_target(line)
                if target:
                    self.thread = target
                    self.threads.add(target)
                    self._print(f"(now in thread {target})")
                    continue
                message_id = f"{self._nonce}-{next(self._ids)}"
                inbound = line_to_inbound(
                    line, thread=self.thread, user=self.user, message_id=message_id
                )
                if inbound is not None:
                    await sink(inbound)
        finally:
            self.eof.set()

    def _print(self, text: str) -> None:
        print(text, file=self.stdout, flush=True)

    async def send(self, message: Outbound) -> list[str]:
        self._print(render(message, show_thread=len(self.threads) > 1))
        return [f"console-{next(self._ids_sent)}"]

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        self._print(render_edit(text, thread=thread.thread, show_thread=len(self.threads) > 1))

    async def typing(self, thread: ThreadRef) -> None:
        return None

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
