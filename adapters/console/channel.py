"""The terminal chat channel: typed messages in, printed messages out.

Two faces over one conversion (:mod:`adapters.console.convert`):

* **interactive** (stdin and stdout are a terminal): a prompt-toolkit prompt with editing,
  history and whole pastes; replies and announces rendered from markdown with rich; the
  runs in flight in a live area under the prompt. Ctrl-C at the prompt calls
  ``on_interrupt``; Ctrl-D ends input.
* **plain** (a pipe, or streams given by the caller): one line is one message, messages are
  printed as plain text, status lines as lines — the format scripts read.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import logging
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.text import Text

from adapters.console.convert import (
    LiveView,
    is_threads_command,
    line_to_inbound,
    live_lines,
    render,
    render_edit,
    switch_target,
    thread_prefix,
    thread_ref,
    thread_usage,
    threads_listing,
)
from adapters.console.richtext import renderable, to_ansi
from adapters.console.terminal import Interrupted, Terminal
from bot.errors import DeliveryError
from bot.ports import InboundSink, PartLog
from bot.types import Outbound, OutboundKind, ThreadRef

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

MAX_STATUS_TEXTS = 500
THINKING_FROM_INPUT = 5.0
"""A turn first seen this soon after the person's message is timed from that message."""


class ConsoleChannel:
    """A local chat channel.

    Args:
        stdin: Where lines come from (``sys.stdin`` by default).
        stdout: Where messages are printed.
        user: The name the person types as.
        thread: The initial thread name; ``:thread NAME`` switches.
        interactive: Use the terminal face; by default when no streams are given and both
            standard streams are a terminal.
        history: The interactive prompt's history file.
        on_interrupt: Called on Ctrl-C at the interactive prompt.
        known_threads: Reads the threads with a history (name -> messages, runs), for
            ``:threads``; without it only the threads typed here are listed.
    """

    platform = "console"

    def __init__(
        self,
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        user: str = "you",
        thread: str = "main",
        interactive: bool | None = None,
        history: Path | None = None,
        on_interrupt: Callable[[], None] | None = None,
        known_threads: Callable[[], Awaitable[Mapping[str, tuple[int, int]]]] | None = None,
    ) -> None:
        if interactive is None:
            interactive = stdin is None and stdout is None and _is_terminal()
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.user = user
        self.thread = thread
        self.threads: set[str] = {thread}
        self.eof = asyncio.Event()
        self.on_interrupt = on_interrupt
        self.known_threads = known_threads
        self.failed_turns = 0
        """Replies that said their turn failed (the model call failed, a hook failed...)."""
        self.terminal: Terminal | None = None
        if interactive:
            self.terminal = Terminal(history=history, live=self._live_lines)
        self._nonce = uuid.uuid4().hex[:8]
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        self._ids_sent = itertools.count(1)
        self._view = LiveView()
        self._status_texts: dict[str, str] = {}
        self._thinking_since: dict[str, float] = {}
        self._waiting: dict[str, bool] = {}
        self._last_input: dict[str, float] = {}

    @property
    def interactive(self) -> bool:
        return self.terminal is not None

    @property
    def show_thread(self) -> bool:
        return len(self.threads) > 1

    async def start(self, sink: InboundSink) -> None:
        read = self._read_terminal if self.terminal else self._read_lines
        self._reader = asyncio.create_task(read(sink), name="console-input")

    def http_routes(self) -> list[web.RouteDef]:
        return []

    # -- input ---------------------------------------------------------------------------

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

    async def _read_lines(self, sink: InboundSink) -> None:
        lines: asyncio.Queue[str] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, args=(loop, lines), daemon=True).start()
        try:
            while line := await lines.get():
                await self._handle(line, sink)
        finally:
            self.eof.set()

    async def _read_terminal(self, sink: InboundSink) -> None:
        assert self.terminal is not None
        try:
            while (text := await self.terminal.read(self._prompt())) is not None:
                await self._handle(text, sink)
        except Interrupted:
            # Input stops here: the terminal leaves raw mode, so a second Ctrl-C arrives
            # as SIGINT, which the console handles as "force".
            if self.on_interrupt is not None:
                self.on_interrupt()
            return
        except Exception:
            log.exception("console: the prompt failed; treating it as end of input")
        self.eof.set()

    def _prompt(self) -> str:
        return thread_prefix(self.thread, show_thread=self.show_thread) + "you › "

    async def _handle(self, line: str, sink: InboundSink) -> None:
        """One typed message: a console command (``:thread``) or a message for the bot."""
        usage = thread_usage(line, current=self.thread)
        if usage is not None:
            await self._show(Outbound(thread=thread_ref(self.thread), text=usage))
            return
        if is_threads_command(line):
            await self._list_threads()
            return
        target = switch_target(line)
        if target:
            self.thread = target
            self.threads.add(target)
            await self.say(f"(now in thread {target})")
            return
        message_id = f"{self._nonce}-{next(self._ids)}"
        inbound = line_to_inbound(line, thread=self.thread, user=self.user, message_id=message_id)
        if inbound is None:
            return
        self._last_input[self.thread] = time.time()
        try:
            await sink(inbound)
        except Exception:  # e.g. Redis unreachable: say so, and keep the prompt
            log.warning("console: message %s not taken", message_id, exc_info=True)
            await self.say("That message could not be sent (see console.log); try again.")

    async def _list_threads(self) -> None:
        known: Mapping[str, tuple[int, int]] = {}
        if self.known_threads is not None:
            try:
                known = await self.known_threads()
            except Exception:  # e.g. Redis unreachable: the threads typed here still list
                log.warning("console: reading the threads failed", exc_info=True)
        text = threads_listing(known, current=self.thread, typed=self.threads)
        await self._show(Outbound(thread=thread_ref(self.thread), text=text))

    # -- output --------------------------------------------------------------------------

    async def say(self, text: str, *, style: str = "dim") -> None:
        """A line from the console itself (not from the bot); ``style`` is a rich style,
        used on a terminal. Lost without complaint when the terminal is gone."""
        try:
            if self.terminal is None:
                print(text, file=self.stdout, flush=True)
                return
            item = Text(text, style=style)
            await self.terminal.write(to_ansi(item, width=self.terminal.width))
        except OSError:
            log.debug("console: could not print %r", text[:80], exc_info=True)

    async def _show(self, message: Outbound) -> None:
        """Print a message; a closed terminal or pipe fails the delivery, so the message
        stays in the outbox for the next console."""
        try:
            if self.terminal is None:
                print(render(message, show_thread=self.show_thread), file=self.stdout, flush=True)
                return
            item = renderable(message, show_thread=self.show_thread)
            await self.terminal.write(to_ansi(item, width=self.terminal.width))
        except OSError as exc:
            raise DeliveryError(f"console output is gone: {exc}") from exc

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        """Print ``message`` as one part (nothing when ``parts`` says it is printed)."""
        book = parts or PartLog(key=message.idempotency_key)
        if book.todo(1):
            if message.failed:
                self.failed_turns += 1
            message_id = f"console-{next(self._ids_sent)}"
            if message.kind is OutboundKind.STATUS and self.terminal is not None:
                self._remember_status(message_id, message.text)  # shown in the live area
            else:
                await self._show(message)
            await book.record(0, message_id)
        return book.ids(1)

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        if self.terminal is not None:
            self._remember_status(message_id, text)
            return
        print(render_edit(text, thread=thread.thread, show_thread=self.show_thread),
              file=self.stdout, flush=True)  # fmt: skip

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        """Drop a status line from the live area; a printed line cannot be taken back."""
        if self.terminal is None:
            raise DeliveryError("the console printed it already", permanent=True)
        self._status_texts.pop(message_id, None)

    async def typing(self, thread: ThreadRef) -> None:
        return None

    # -- the live area ---------------------------------------------------------------------

    def show_live(self, view: LiveView) -> None:
        """Replace what is in flight (the live area redraws from it every second)."""
        now = time.time()
        for thread in view.thinking - self._thinking_since.keys():
            sent = self._last_input.get(thread, 0.0)
            self._thinking_since[thread] = sent if now - sent < THINKING_FROM_INPUT else now
        for thread in self._thinking_since.keys() - view.thinking:
            del self._thinking_since[thread]
        # Thinking and waiting for subagents are each timed from when they began.
        for thread in view.thinking:
            waiting = bool(view.waiting.get(thread))
            if thread in self._waiting and waiting != self._waiting[thread]:
                self._thinking_since[thread] = now
            self._waiting[thread] = waiting
        for thread in self._waiting.keys() - view.thinking:
            del self._waiting[thread]
        self._view = view

    def _remember_status(self, message_id: str, text: str) -> None:
        self._status_texts.pop(message_id, None)
        self._status_texts[message_id] = text
        while len(self._status_texts) > MAX_STATUS_TEXTS:
            del self._status_texts[next(iter(self._status_texts))]

    def _live_lines(self) -> list[str]:
        return live_lines(
            self._view,
            now=time.time(),
            status_texts=self._status_texts,
            thinking_since=self._thinking_since,
            show_thread=self.show_thread,
        )

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


def _is_terminal() -> bool:
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False
