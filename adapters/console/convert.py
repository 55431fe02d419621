"""Console conversion (pure): a typed line -> Inbound or a local answer; Outbound -> text;
the live area (runs in flight, with ticking elapsed times) -> lines."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bot.runs.naming import Icon
from bot.text.units import duration
from bot.types import Inbound, Outbound, OutboundKind, Sender, ThreadRef

ACCOUNT = "local"
CHAT = "console"
MAX_LINE = 200_000
THREAD_COMMAND = ":thread"
THREADS_COMMAND = ":threads"
_WORKER_ELAPSED = re.compile(r", (?:\d+\.\ds|\d+m\d\ds|\d+h\d\dm)$")
"""The worker's elapsed time ending a status card's tally (``· 5 tools, 3.2s``)."""


def thread_ref(name: str) -> ThreadRef:
    return ThreadRef(platform="console", account=ACCOUNT, chat=CHAT, thread=name)


def switch_target(line: str) -> str | None:
    """``:thread NAME`` switches the console to another thread (a separate session)."""
    parts = line.strip().split()
    if len(parts) == 2 and parts[0] == THREAD_COMMAND and parts[1].isprintable():
        return parts[1][:64]
    return None


def thread_usage(line: str, *, current: str) -> str | None:
    """The answer to a ``:thread`` line that names no (single, printable) thread; ``None``
    for any other line. Such a line is the console's own command, never a chat message."""
    parts = line.strip().split(maxsplit=1)
    if not parts or parts[0] != THREAD_COMMAND or switch_target(line) is not None:
        return None
    return (
        f"Usage: `:thread NAME` switches to another thread (a separate conversation with its "
        f"own runs). You are in `{current}`."
    )


def is_threads_command(line: str) -> bool:
    """``:threads`` lists the console's threads (the console's own command)."""
    return line.strip() == THREADS_COMMAND


def threads_listing(
    known: Mapping[str, tuple[int, int]], *, current: str, typed: Iterable[str]
) -> str:
    """The answer to ``:threads`` (pure): every thread with a history (``known``: name ->
    (messages, runs), kept by the console's Redis across consoles) and the ones typed in
    this console, the current one marked."""
    names = sorted({*known, *typed, current}, key=lambda n: (n != current, n))
    lines = ["Threads (`:thread NAME` switches; `*` is this one):"]
    for name in names:
        messages, runs = known.get(name, (0, 0))
        said = f"{messages} message{'s' if messages != 1 else ''}"
        numbered = f"{runs} run{'s' if runs != 1 else ''}" if runs else "no runs"
        mark = "*" if name == current else "-"
        lines.append(f"{mark} `{name}` — {said}, {numbered}")
    return "\n".join(lines)


def line_to_inbound(line: str, *, thread: str, user: str, message_id: str) -> Inbound | None:
    """A typed line; ``None`` for a blank one.

    Undecodable input bytes arrive as lone surrogates (Python's ``surrogateescape`` stdin in
    a C/POSIX locale); they become U+FFFD, since nothing downstream can encode them.
    """
    text = line.rstrip("\r\n")
    if not text.strip():
        return None
    return Inbound(
        thread=thread_ref(thread),
        sender=Sender(user_id=user, display_name=user),
        text=text[:MAX_LINE].encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace"),
        message_id=message_id,
        mentioned=True,
    )


def thread_prefix(thread: str | None, *, show_thread: bool) -> str:
    return f"[{thread}] " if show_thread and thread else ""


def render(message: Outbound, *, show_thread: bool) -> str:
    """Plain text, for a pipe (the format scripts read; no markup is interpreted)."""
    prefix = thread_prefix(message.thread.thread, show_thread=show_thread)
    if message.kind is OutboundKind.STATUS:
        return f"{prefix}  · {message.text}"
    if message.kind is OutboundKind.ANNOUNCE:
        return "\n".join(prefix + line for line in message.text.splitlines())
    lines = message.text.splitlines() or [""]
    first, rest = lines[0], lines[1:]
    return "\n".join([f"{prefix}fanbot › {first}", *(prefix + "  " + r for r in rest)])


def render_edit(text: str, *, thread: str | None, show_thread: bool) -> str:
    return f"{thread_prefix(thread, show_thread=show_thread)}  · {text}"


# -- the live area ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LiveRun:
    """A run in flight, as the live area shows it.

    Attributes:
        thread: The console thread it reports to.
        title: ``[explore] Subagent #2 "Research"`` (as its status card shows it).
        running: Started (else queued).
        since: Epoch seconds it started (running) or was queued; elapsed ticks from here.
        position: Its place in the line of runs waiting to start (1 = next), when queued.
        status_id: The id of its status message, whose latest text adds the detail.
    """

    thread: str
    title: str
    running: bool
    since: float
    position: int | None = None
    status_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class LiveView:
    """What is in flight in the console's threads (a snapshot, refreshed every second)."""

    runs: tuple[LiveRun, ...] = ()
    thinking: frozenset[str] = field(default_factory=frozenset)
    """Threads whose main agent has an answer still to come."""
    waiting: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Threads (among ``thinking``) whose main agent is not calling the model but waiting for
    its subagents: the numbers of the runs it waits for (:mod:`bot.runs.turn_state`)."""


def ordinal_in_line(position: int) -> str:
    if position == 1:
        return "next in line"
    suffix = "th" if 10 <= position % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(position % 10)
    return f"{position}{suffix or 'th'} in line"


def run_detail(run: LiveRun, status_text: str | None) -> str:
    """What the run is doing: the latest status text without its title and without the
    worker's elapsed time (frozen between progress events; the live area ticks its own)."""
    if not run.running:
        return f"queued, {ordinal_in_line(run.position)}" if run.position else "queued"
    if not status_text:
        return "running"
    _, found, detail = status_text.partition(f"{run.title} — ")
    return _WORKER_ELAPSED.sub("", detail).strip() if found else "running"


MAX_NAMED_RUNS = 5


def turn_doing(waiting_for: tuple[int, ...]) -> str:
    """What the main agent is doing: thinking, or waiting for the runs ``waiting_for``
    (their numbers; empty: thinking)."""
    if not waiting_for:
        return "fanbot is thinking"
    if len(waiting_for) == 1:
        return f"waiting for subagent #{waiting_for[0]}"
    named = ", ".join(f"#{n}" for n in waiting_for[:MAX_NAMED_RUNS])
    more = ", …" if len(waiting_for) > MAX_NAMED_RUNS else ""
    return f"waiting for {len(waiting_for)} subagents ({named}{more})"


def live_lines(
    view: LiveView,
    *,
    now: float,
    status_texts: Mapping[str, str],
    thinking_since: Mapping[str, float],
    show_thread: bool,
) -> list[str]:
    """The live area: one line per thinking thread and per run in flight, elapsed times
    computed from ``now`` so they tick between snapshots."""
    lines = [
        f"{thread_prefix(t, show_thread=show_thread)}… {turn_doing(view.waiting.get(t, ()))} · "
        + duration(now - thinking_since.get(t, now), floor=True)
        for t in sorted(view.thinking)
    ]
    for run in view.runs:
        text = status_texts.get(run.status_id) if run.status_id else None
        detail = run_detail(run, text)
        elapsed = duration(now - run.since, floor=True)
        prefix = thread_prefix(run.thread, show_thread=show_thread)
        lines.append(f"{prefix}{Icon.WORKING} {run.title} — {detail} · {elapsed}")
    return lines
