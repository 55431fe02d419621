"""Pure conversions between Matrix events and fanbot's core values (no I/O).

Inbound: a raw ``m.room.message`` event dict (``nio`` events expose it as ``.source``;
decrypted events carry the cleartext content plus the ``m.relates_to`` of the envelope)
becomes an :class:`~bot.types.Inbound`. Outbound: markdown rendered by
:mod:`adapters.matrix.markup` becomes ``m.room.message`` content with the thread relation
and its reply fallback, or an ``m.replace`` edit.

Thread mapping (see docs/architecture.md): a message inside a thread belongs to the thread root's
session. A room-timeline message that addresses the bot starts a thread rooted at itself
when ``thread_replies`` is on, and stays in the timeline (``thread=None``) when it is off.
A timeline message that does not address the bot is still delivered, with
``mentioned=False`` and ``thread=None``; the gateway's mention gating ignores it. A command
(``!subagents list``, ``/stop``...) is addressed to the bot by its syntax, so it counts as
a mention, and it is answered where it was written (a command in the timeline opens no
thread). In a DM (a room of two members) timeline messages stay in the timeline: the
whole DM is the conversation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from bot.attachments import FileRef
from bot.commands import registry
from bot.errors import DeliveryError
from bot.types import Action, Inbound, Platform, Sender, ThreadRef

TEXT_MSGTYPES = frozenset({"m.text", "m.notice", "m.emote"})
FILE_MSGTYPES = frozenset({"m.file", "m.image", "m.audio", "m.video"})
THREAD_RELATIONS = frozenset({"m.thread", "io.element.thread"})
"""``rel_type`` of a message in a thread: ``io.element.thread`` is the unstable name that
Element versions from before threads were in the spec (v1.4) still send."""
COMMANDS = registry.MATCHED
_BANG_COMMAND = re.compile(r"^!(" + "|".join(COMMANDS) + r")\b", re.IGNORECASE)
_SLASH_COMMAND = re.compile(r"^/(" + "|".join(COMMANDS) + r")\b")


@dataclass(frozen=True, kw_only=True)
class RoomContext:
    """What convert needs to know about the room and the bot, gathered by the I/O shell.

    Attributes:
        room_id: The room the event arrived in.
        bot_user_id: Full Matrix id of the bot (``@fanbot:example.org``).
        bot_display_name: The bot's display name in this room, for name mentions.
        member_count: Joined and invited members; two means a DM.
        thread_replies: Answer timeline mentions in a new thread rooted at the message.
    """

    room_id: str
    bot_user_id: str
    bot_display_name: str = ""
    member_count: int = 0
    thread_replies: bool = True

    @property
    def is_dm(self) -> bool:
        return self.member_count == 2


def valid_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (valid pairs are joined)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def inbound_from_event(
    event: Mapping[str, Any], *, room: RoomContext, sender_name: str = ""
) -> Inbound | None:
    """Convert one ``m.room.message`` event; ``None`` for anything that is not a text message.

    Never raises: the event is whatever a room member sent (nio hands over schema-invalid
    events too, as ``BadEvent``), so every field is type-checked, and strings are made
    valid Unicode.
    """
    if event.get("type") != "m.room.message":
        return None
    content = event.get("content")
    sender = event.get("sender")
    event_id = event.get("event_id")
    if not isinstance(content, Mapping) or not isinstance(sender, str) or not sender:
        return None
    if not isinstance(event_id, str) or not event_id:
        return None
    sender, event_id = valid_text(sender), valid_text(event_id)
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, Mapping) else {}
    is_edit = relates.get("rel_type") == "m.replace"
    body_source = content.get("m.new_content") if is_edit else content
    if not isinstance(body_source, Mapping):
        return None
    msgtype = body_source.get("msgtype")
    body = body_source.get("body")
    if not isinstance(msgtype, str) or not isinstance(body, str):
        return None
    if msgtype in FILE_MSGTYPES:
        if media_url(body_source) is None:
            return None  # nothing to take
        body = _caption(body_source)
    elif msgtype not in TEXT_MSGTYPES:
        return None
    body = valid_text(body)
    if "m.in_reply_to" in relates and not relates.get("is_falling_back"):
        body = strip_reply_fallback(body)
    text = normalize_command(strip_mention(body, room))
    command = is_command(text)
    mentioned = command or is_mention(content, body, room)
    opens_thread = mentioned and not command and not is_edit
    return Inbound(
        thread=_thread_of(relates, event_id, room, opens_thread=opens_thread),
        sender=Sender(
            user_id=sender,
            display_name=valid_text(sender_name),
            is_bot=msgtype == "m.notice",
            is_self=sender == room.bot_user_id,
        ),
        text=text,
        message_id=event_id,
        mentioned=mentioned,
        is_dm=room.is_dm,
        is_edit=is_edit,
    )


def _caption(content: Mapping[str, Any]) -> str:
    """A file message's caption: ``body`` when a distinct ``filename`` is set, else none."""
    filename, body = content.get("filename"), content.get("body")
    if isinstance(filename, str) and filename and isinstance(body, str) and body != filename:
        return body
    return ""


@dataclass(frozen=True, kw_only=True)
class EncryptedFileRef(FileRef):
    """A file of an encrypted room: ``source`` holds ciphertext that these values open.

    Attributes:
        key: The AES-CTR key, unpadded base64 (the JWK's ``k``).
        iv: The counter's initial value, unpadded base64.
        sha256: The ciphertext's SHA-256, unpadded base64.
    """

    key: str
    iv: str
    sha256: str


def _mxc(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith("mxc://") else None


def media_url(content: Mapping[str, Any]) -> str | None:
    """The ``mxc://`` URI of a file message: ``url``, or ``file.url`` when encrypted."""
    sealed = content.get("file")
    if isinstance(sealed, Mapping):
        return _mxc(sealed.get("url"))
    return _mxc(content.get("url"))


def _sealed(sealed: Mapping[str, Any]) -> dict[str, str]:
    """``key``, ``iv`` and ``sha256`` of an EncryptedFile object (``""`` where missing:
    decrypting then fails, and the file becomes a "not attached" note)."""
    key, hashes = sealed.get("key"), sealed.get("hashes")
    values = {
        "key": key.get("k") if isinstance(key, Mapping) else None,
        "iv": sealed.get("iv"),
        "sha256": hashes.get("sha256") if isinstance(hashes, Mapping) else None,
    }
    return {k: v if isinstance(v, str) else "" for k, v in values.items()}


def file_refs(event: Mapping[str, Any]) -> list[FileRef]:
    """The file of an ``m.file`` / ``m.image``... event, plain or encrypted (``file``)."""
    content = event.get("content")
    if not isinstance(content, Mapping) or content.get("msgtype") not in FILE_MSGTYPES:
        return []
    url = media_url(content)
    if url is None:
        return []
    info = content.get("info")
    info = info if isinstance(info, Mapping) else {}
    name = content.get("filename") or content.get("body") or "file"
    size, mimetype = info.get("size"), info.get("mimetype")
    ref = FileRef(
        name=valid_text(str(name)),
        source=url,
        content_type=mimetype if isinstance(mimetype, str) else "",
        size=size if isinstance(size, int) and size >= 0 else None,
    )
    sealed = content.get("file")
    if not isinstance(sealed, Mapping):
        return [ref]
    keys = _sealed(sealed)
    return [
        EncryptedFileRef(
            name=ref.name,
            source=ref.source,
            content_type=ref.content_type,
            size=ref.size,
            key=keys["key"],
            iv=keys["iv"],
            sha256=keys["sha256"],
        )
    ]


def file_content(
    *,
    name: str,
    content_type: str,
    size: int,
    url: str,
    keys: Mapping[str, Any] | None = None,
    thread: str | None,
    latest: str | None,
) -> dict[str, Any]:
    """An ``m.file`` event's content for an uploaded file, in ``thread`` if given.

    ``keys`` (what nio's encrypting upload returns) makes it an encrypted room's file: the
    URI and the keys go in ``file`` instead of ``url``.
    """
    content: dict[str, Any] = {
        "msgtype": "m.file",
        "body": name,
        "filename": name,
        "info": {"mimetype": content_type, "size": size},
    }
    if keys is None:
        content["url"] = url
    else:
        content["file"] = {**keys, "url": url}
    if thread:
        content["m.relates_to"] = thread_relation(thread, latest)
    return content


def _thread_of(
    relates: Mapping[str, Any], event_id: str, room: RoomContext, *, opens_thread: bool
) -> ThreadRef:
    thread: str | None = None
    root = relates.get("event_id")
    if relates.get("rel_type") in THREAD_RELATIONS and isinstance(root, str) and root:
        thread = valid_text(root)
    elif opens_thread and room.thread_replies and not room.is_dm:
        thread = event_id
    return ThreadRef(
        platform=Platform.MATRIX, account=room.bot_user_id, chat=room.room_id, thread=thread
    )


def is_mention(content: Mapping[str, Any], body: str, room: RoomContext) -> bool:
    """``m.mentions`` names the bot, or the body contains its user id or display name."""
    mentions = content.get("m.mentions")
    if isinstance(mentions, Mapping):
        user_ids = mentions.get("user_ids")
        if isinstance(user_ids, list) and room.bot_user_id in user_ids:
            return True
    if room.bot_user_id and room.bot_user_id in body:
        return True
    name = room.bot_display_name
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", body, re.I) is not None


def strip_mention(body: str, room: RoomContext) -> str:
    """Drop a leading ``@bot:server:`` / ``Display Name,`` address from the text."""
    text = body.strip()
    for name in (room.bot_user_id, room.bot_display_name):
        if name and text.lower().startswith(name.lower()):
            rest = text[len(name) :]
            if not rest or not (rest[0].isalnum() or rest[0] == "_"):
                return rest.lstrip(":,;").strip()
    return text


def strip_reply_fallback(body: str) -> str:
    """Remove the ``> <@user> quoted`` lines a client puts before a reply's own text."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    return "\n".join(lines[index:]).lstrip("\n")


def is_command(text: str) -> bool:
    """A normalized fanbot command (``/subagents``, ``/stop``, ``/help``) starts the text."""
    return _SLASH_COMMAND.match(text) is not None


def normalize_command(text: str) -> str:
    """``!subagents list`` → ``/subagents list`` (Element swallows unknown ``/`` commands)."""
    return _BANG_COMMAND.sub(lambda m: "/" + m.group(1).lower(), text, count=1)


ACTIONS_FIELD = "org.fanbot.actions"
"""Content field of a message with buttons: reaction key -> action id. Matrix has no
buttons: a reaction with that key on the message (or typing the action id) presses it."""


def reaction_key(action: Action) -> str:
    """The reaction that presses ``action``: its label's leading emoji (``✅ Approve`` ->
    ``✅``), else the whole label."""
    head = action.label.split(maxsplit=1)[0] if action.label.strip() else action.id
    return head if not any(c.isalnum() for c in head) else action.label


def actions_field(actions: Sequence[Action]) -> dict[str, str]:
    return {reaction_key(a): a.id for a in actions}


def reaction_of(event: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(annotated event id, key)`` of an ``m.reaction``; None for anything else."""
    if event.get("type") != "m.reaction":
        return None
    content = event.get("content")
    relates = content.get("m.relates_to") if isinstance(content, Mapping) else None
    if not isinstance(relates, Mapping) or relates.get("rel_type") != "m.annotation":
        return None
    target, key = relates.get("event_id"), relates.get("key")
    if not isinstance(target, str) or not target or not isinstance(key, str) or not key:
        return None
    return valid_text(target), valid_text(key)


def pressed(
    event: Mapping[str, Any],
    target: Mapping[str, Any],
    *,
    room: RoomContext,
    sender_name: str = "",
) -> Inbound | None:
    """A reaction on a message with actions, as the press of the action its key names
    (text = the action id, ``callback`` = the reaction's event id); None otherwise."""
    found = reaction_of(event)
    sender, event_id = event.get("sender"), event.get("event_id")
    content = target.get("content")
    actions = content.get(ACTIONS_FIELD) if isinstance(content, Mapping) else None
    if found is None or not isinstance(actions, Mapping) or not isinstance(sender, str):
        return None
    action = actions.get(found[1])
    if not isinstance(action, str) or not isinstance(event_id, str) or not event_id:
        return None
    relates = content.get("m.relates_to") if isinstance(content, Mapping) else None
    relation = relates if isinstance(relates, Mapping) else {}
    thread = _thread_of(relation, found[0], room, opens_thread=False)
    return Inbound(
        thread=thread,
        sender=Sender(
            user_id=valid_text(sender),
            display_name=valid_text(sender_name),
            is_self=sender == room.bot_user_id,
        ),
        text=valid_text(action),
        message_id=valid_text(event_id),
        mentioned=True,
        is_dm=room.is_dm,
        callback=valid_text(event_id),
    )


def reaction_content(target: str, key: str) -> dict[str, Any]:
    """Content of an ``m.reaction`` with ``key`` on event ``target``."""
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": target, "key": key}}


def thread_relation(root: str, latest: str | None) -> dict[str, Any]:
    """``m.relates_to`` for a message in thread ``root`` with the reply fallback.

    ``latest`` is the newest event the bot knows in that thread; clients without thread
    support render the message as a reply to it.
    """
    return {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": latest or root},
    }


def message_content(
    *, body: str, html: str | None, msgtype: str, thread: str | None, latest: str | None
) -> dict[str, Any]:
    """Content of an ``m.room.message`` (``html`` becomes ``formatted_body``)."""
    content: dict[str, Any] = {"msgtype": msgtype, "body": body}
    if html is not None:
        content["format"] = "org.matrix.custom.html"
        content["formatted_body"] = html
    if thread:
        content["m.relates_to"] = thread_relation(thread, latest)
    return content


def edit_content(*, original: str, body: str, html: str | None, msgtype: str) -> dict[str, Any]:
    """An ``m.replace`` edit of event ``original`` (``* `` prefix for clients without edits)."""
    new_content = message_content(body=body, html=html, msgtype=msgtype, thread=None, latest=None)
    content = message_content(
        body="* " + body,
        html=None if html is None else "* " + html,
        msgtype=msgtype,
        thread=None,
        latest=None,
    )
    content["m.new_content"] = new_content
    content["m.relates_to"] = {"rel_type": "m.replace", "event_id": original}
    return content


def may_join(inviter: str | None, *, allow_users: list[str], join_any: bool) -> bool:
    """Accept an invite only from an allowlisted user (an empty allowlist joins nobody).

    ``allow_users`` empty means "everyone may talk to the bot" for the gateway, but joining
    any room anyone invites it to would let strangers pull the bot (and its model budget)
    anywhere, so that needs ``join_any_invite`` explicitly.
    """
    if join_any:
        return True
    return inviter is not None and inviter in allow_users


# Retrying cannot help: the room is gone, the bot is not allowed, or the event is bad.
PERMANENT_ERRCODES = frozenset(
    {"M_FORBIDDEN", "M_NOT_FOUND", "M_BAD_JSON", "M_NOT_JSON", "M_TOO_LARGE", "M_UNKNOWN_ROOM"}
)


def delivery_error(
    *, errcode: str | None, message: str, retry_after_ms: int | None = None
) -> DeliveryError:
    """Map a Matrix error response to :class:`~bot.errors.DeliveryError`.

    ``M_LIMIT_EXCEEDED`` carries the server's ``retry_after_ms`` as seconds; the gateway's
    outbox waits that long before the next attempt.
    """
    text = f"matrix: {errcode or 'error'}: {message}"
    if errcode == "M_LIMIT_EXCEEDED":
        retry_after = (retry_after_ms or 1000) / 1000
        return DeliveryError(text, retry_after=retry_after)
    return DeliveryError(text, permanent=errcode in PERMANENT_ERRCODES)


def event_link(room_id: str, event_id: str) -> str:
    """A ``matrix.to`` link to one event of a room (a thread root opens its thread)."""
    safe = "!:@$"
    return f"https://matrix.to/#/{quote(room_id, safe=safe)}/{quote(event_id, safe=safe)}"
