"""Console conversion (pure): a typed line -> Inbound; Outbound -> printable lines."""

from __future__ import annotations

from bot.types import Inbound, Outbound, OutboundKind, Sender, ThreadRef

ACCOUNT = "local"
CHAT = "console"
MAX_LINE = 200_000


def thread_ref(name: str) -> ThreadRef:
    return ThreadRef(platform="console", account=ACCOUNT, chat=CHAT, thread=name)


def switch_target(line: str) -> str | None:
    """``:thread NAME`` switches the console to another thread (a separate session)."""
    parts = line.strip().split()
    if len(parts) == 2 and parts[0] == ":thread" and parts[1].isprintable():
        return parts[1][:64]
    return None


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


def render(message: Outbound, *, show_thread: bool) -> str:
    prefix = f"[{message.thread.thread}] " if show_thread and message.thread.thread else ""
    if message.kind is OutboundKind.STATUS:
        return f"{prefix}  · {message.text}"
    if message.kind is OutboundKind.ANNOUNCE:
        return "\n".join(prefix + line for line in message.text.splitlines())
    lines = message.text.splitlines() or [""]
    first, rest = lines[0], lines[1:]
    return "\n".join([f"{prefix}fanbot › {first}", *(prefix + "  " + r for r in rest)])


def render_edit(text: str, *, thread: str | None, show_thread: bool) -> str:
    prefix = f"[{thread}] " if show_thread and thread else ""
    return f"{prefix}  · {text}"
