"""Telegram updates -> :class:`~bot.types.Inbound`, and thread refs -> send destinations.

Pure functions over the Bot API's JSON (as received by a webhook or from PTB's
``Update.to_dict()``); no I/O. Mapping (see docs/architecture.md):

* ``ThreadRef.account`` is the bot's id, ``chat`` the chat id, ``thread`` the forum topic's
  ``message_thread_id`` (only when ``is_topic_message``; ``None`` for the General topic,
  non-forum groups, where ``message_thread_id`` marks reply chains, and plain DMs). A reply
  chain is ``Inbound.reply_thread`` (``reply:<root>``), a thread only for a child bound to it.
* ``mentioned``: an ``@BotName`` mention (stripped from the text), a reply to one of the
  bot's messages, a command addressed to the bot (``/cmd@BotName``, or one of our commands
  without ``@``), and every DM. ``/cmd@OtherBot`` is for another bot: dropped.
* Channel posts, service messages (topic created, members joined, ...) and anything that
  fails validation are dropped (``None``); conversion never raises. Malformed UTF-16 in a
  message's text (a lone surrogate, an entity that splits a pair) drops the message; names
  have lone surrogates replaced. Ids are 64-bit, as in the Bot API.
* A ``callback_query`` (an inline keyboard button pressed) on one of fanbot's buttons (its
  ``callback_data`` is an approval decision, :mod:`bot.runs.decisions`) becomes an addressed
  Inbound whose text is that data and whose ``callback`` is the query id. Any other press (a
  stale keyboard of another bot or an earlier deployment, an inline message's button, a
  game) is :func:`unowned_callback`: the channel answers it and it starts nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bot.attachments import FileRef
from bot.commands import registry
from bot.runs.decisions import parse_decision
from bot.types import Action, Inbound, Platform, Sender, ThreadRef

COMMANDS: tuple[tuple[str, str], ...] = registry.menu()
"""Registered with ``setMyCommands``; unaddressed ``/cmd`` counts as addressed only for these."""

COMMAND_NAMES = registry.MATCHED
GENERAL_TOPIC = 1
REPLY_THREAD = "reply:"
"""``ThreadRef.thread`` of a reply thread (``reply:<root message id>``): a thread-bound
child's own thread in a supergroup without topics; its messages are replies to the root."""
_SPACE = " ".encode("utf-16-le")


@dataclass(frozen=True, kw_only=True)
class BotIdentity:
    """Who the bot is (from ``getMe``)."""

    id: int
    username: str


def _valid_text(text: str) -> str:
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


_Id = Annotated[int, Field(ge=-(2**63), lt=2**63)]
_Name = Annotated[str, AfterValidator(_valid_text)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _User(_Model):
    id: _Id
    is_bot: bool = False
    first_name: _Name = ""
    last_name: _Name | None = None
    username: _Name | None = None


class _Chat(_Model):
    id: _Id
    type: str
    title: _Name | None = None
    is_forum: bool = False


class _Entity(_Model):
    type: str
    offset: int = Field(ge=0)
    length: int = Field(ge=0)
    user: _User | None = None


class _Replied(_Model):
    message_id: _Id
    from_: _User | None = Field(None, alias="from")
    forum_topic_created: dict[str, Any] | None = None


class _Message(_Model):
    message_id: _Id
    chat: _Chat
    from_: _User | None = Field(None, alias="from")
    sender_chat: _Chat | None = None
    text: str | None = None
    entities: list[_Entity] = Field(default_factory=list)
    caption: str | None = None
    caption_entities: list[_Entity] = Field(default_factory=list)
    message_thread_id: _Id | None = None
    is_topic_message: bool = False
    is_automatic_forward: bool = False
    reply_to_message: _Replied | None = None
    edit_date: _Id | None = None
    document: dict[str, Any] | None = None
    photo: list[dict[str, Any]] | None = None


class _CallbackQuery(_Model):
    id: str
    from_: _User = Field(alias="from")
    message: _Message | None = None
    data: str | None = None


class _Update(_Model):
    update_id: _Id
    message: _Message | None = None
    edited_message: _Message | None = None
    callback_query: _CallbackQuery | None = None


def to_inbound(
    update: Mapping[str, Any],
    *,
    me: BotIdentity,
    commands: Collection[str] = COMMAND_NAMES,
) -> Inbound | None:
    """Convert one update; ``None`` when it is not a conversation message for us."""
    try:
        parsed = _Update.model_validate(update)
    except ValidationError:
        return None
    if parsed.callback_query is not None:
        return _pressed(parsed.callback_query, me)
    msg = parsed.message or parsed.edited_message
    if msg is None or msg.chat.type == "channel" or msg.is_automatic_forward:
        return None
    text, entities = (msg.text, msg.entities) if msg.text is not None else (
        msg.caption, msg.caption_entities
    )  # fmt: skip
    sender = _sender(msg, me)
    if text is None and (msg.document or msg.photo):
        text = ""  # a file without a caption: still a message (its file is the content)
    if text is None or sender is None:
        return None
    try:
        stripped = _address(text, entities, me, commands)
    except UnicodeError:  # a lone surrogate, or entity offsets that split a pair: malformed
        return None
    if stripped is None:
        return None
    body, addressed = stripped
    is_dm = msg.chat.type == "private"
    return Inbound(
        thread=thread_of(msg.chat.id, _topic(msg), me=me),
        sender=sender,
        text=body,
        message_id=str(msg.message_id),
        mentioned=addressed or is_dm or _replies_to_me(msg, me),
        is_dm=is_dm,
        is_edit=parsed.message is None,
        event_id=f"{msg.chat.id}:{msg.message_id}"
        + (f":edit:{msg.edit_date or 0}" if parsed.message is None else ""),
        reply_thread=_reply_thread(msg),
    )


def _owned(query: _CallbackQuery) -> bool:
    """A press of one of fanbot's buttons: under a message, its data a decision."""
    return query.message is not None and parse_decision(query.data or "") is not None


def unowned_callback(update: Mapping[str, Any]) -> str | None:
    """The query id of a button press that is not fanbot's (to answer and drop), else None."""
    try:
        parsed = _Update.model_validate(update)
    except ValidationError:
        raw = update.get("callback_query") if isinstance(update, Mapping) else None
        query_id = raw.get("id") if isinstance(raw, Mapping) else None
        return query_id if isinstance(query_id, str) and query_id else None
    query = parsed.callback_query
    if query is None or _owned(query):
        return None
    return query.id


def _pressed(query: _CallbackQuery, me: BotIdentity) -> Inbound | None:
    """A press of one of fanbot's buttons: its ``callback_data`` is the action's id, and
    the answer goes to ``answerCallbackQuery`` (``Inbound.callback``)."""
    msg = query.message
    if msg is None or not query.data or not _owned(query):
        return None
    user = query.from_
    name = " ".join(p for p in (user.first_name, user.last_name) if p) or user.username or ""
    return Inbound(
        thread=thread_of(msg.chat.id, _topic(msg), me=me),
        sender=Sender(user_id=str(user.id), display_name=name, is_bot=user.is_bot),
        text=query.data,
        message_id=str(msg.message_id),
        mentioned=True,
        is_dm=msg.chat.type == "private",
        event_id=f"callback:{query.id}",
        callback=query.id,
    )


def inline_keyboard(actions: Sequence[Action]) -> dict[str, Any] | None:
    """The ``reply_markup`` of a message with buttons: one row, ``callback_data`` = the
    action's id (at most 64 bytes, as the Bot API allows); None without actions."""
    if not actions:
        return None
    row = [{"text": a.label, "callback_data": a.id.encode()[:64].decode(errors="ignore")}
           for a in actions]  # fmt: skip
    return {"inline_keyboard": [row]}


def file_refs(update: Mapping[str, Any]) -> list[FileRef]:
    """The files of an update's message: its ``document``, or its largest ``photo`` size."""
    raw = update.get("message") if isinstance(update, Mapping) else None
    if not isinstance(raw, Mapping):
        return []
    refs = []
    doc = raw.get("document")
    if isinstance(doc, Mapping) and isinstance(doc.get("file_id"), str):
        name = doc.get("file_name") or f"document-{doc.get('file_unique_id', 'file')}"
        refs.append(_ref(doc, str(name), str(doc.get("mime_type") or "")))
    sizes = raw.get("photo")
    photos = [p for p in sizes if isinstance(p, Mapping)] if isinstance(sizes, list) else []
    photos = [p for p in photos if isinstance(p.get("file_id"), str)]
    if photos:
        biggest = max(photos, key=lambda p: _int(p.get("width")) * _int(p.get("height")))
        name = f"photo-{biggest.get('file_unique_id', raw.get('message_id', 'file'))}.jpg"
        refs.append(_ref(biggest, name, "image/jpeg"))
    return refs


def _ref(item: Mapping[str, Any], name: str, content_type: str) -> FileRef:
    size = item.get("file_size")
    return FileRef(
        name=name,
        source=str(item["file_id"]),
        content_type=content_type,
        size=size if isinstance(size, int) and size >= 0 else None,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def thread_of(chat_id: int, topic: int | None, *, me: BotIdentity) -> ThreadRef:
    """The :class:`ThreadRef` of a chat (and forum topic) as this bot sees it."""
    return ThreadRef(
        platform=Platform.TELEGRAM.value,
        account=str(me.id),
        chat=str(chat_id),
        thread=None if topic in (None, GENERAL_TOPIC) else str(topic),
    )


def destination(thread: ThreadRef) -> tuple[int, int | None]:
    """``(chat_id, message_thread_id)`` for sending into ``thread``.

    The General topic gets no thread id: Telegram rejects ``message_thread_id=1`` with
    "message thread not found".

    Raises:
        ValueError: The ref does not hold Telegram ids.
    """
    if reply_root(thread) is not None:
        return int(thread.chat), None  # a reply thread: sent as a reply to its root
    topic = int(thread.thread) if thread.thread else None
    return int(thread.chat), None if topic == GENERAL_TOPIC else topic


def _topic(msg: _Message) -> int | None:
    return msg.message_thread_id if msg.is_topic_message else None


def _reply_thread(msg: _Message) -> str | None:
    """``reply:<root>`` for a message of a reply thread in a supergroup without topics."""
    if msg.is_topic_message or msg.message_thread_id is None:
        return None
    return f"{REPLY_THREAD}{msg.message_thread_id}"


def reply_root(thread: ThreadRef) -> int | None:
    """The root message a reply thread's messages answer (None: not a reply thread)."""
    raw = thread.thread or ""
    return int(raw[len(REPLY_THREAD) :]) if raw.startswith(REPLY_THREAD) else None


def _sender(msg: _Message, me: BotIdentity) -> Sender | None:
    if msg.sender_chat is not None:  # anonymous admin or a channel speaking in the group
        chat = msg.sender_chat
        return Sender(user_id=str(chat.id), display_name=chat.title or "", is_bot=False)
    user = msg.from_
    if user is None:
        return None
    name = " ".join(p for p in (user.first_name, user.last_name) if p) or user.username or ""
    return Sender(
        user_id=str(user.id), display_name=name, is_bot=user.is_bot, is_self=user.id == me.id
    )


def _replies_to_me(msg: _Message, me: BotIdentity) -> bool:
    replied = msg.reply_to_message
    if replied is None or replied.from_ is None or replied.from_.id != me.id:
        return False
    # In a forum every topic message "replies" to the topic's creation message; a topic the
    # bot created would otherwise make every message in it count as addressed.
    is_topic_root = msg.is_topic_message and replied.message_id == msg.message_thread_id
    return replied.forum_topic_created is None and not is_topic_root


def _address(
    text: str, entities: list[_Entity], me: BotIdentity, commands: Collection[str]
) -> tuple[str, bool] | None:
    """Strip mentions of the bot and normalize a leading command; ``None`` = not for us."""
    units = text.encode("utf-16-le")
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement) in UTF-16 units
    addressed = False
    for ent in entities:
        start, end = ent.offset, ent.offset + ent.length
        piece = units[2 * start : 2 * end].decode("utf-16-le")
        if _is_me(ent, piece, me):
            edits.append((start, end, ""))
            addressed = True
        elif ent.type == "bot_command" and start == 0:
            name, _, target = piece[1:].partition("@")
            if target and target.lower() != me.username.lower():
                return None
            addressed = addressed or bool(target) or name.lower() in commands
            edits.append((start, end, f"/{name.lower()}"))
    for start, end, replacement in sorted(edits, reverse=True):
        if not replacement and units[2 * end : 2 * end + 2] == _SPACE:
            end += 1  # swallow one space after a removed mention
        units = units[: 2 * start] + replacement.encode("utf-16-le") + units[2 * end :]
    return units.decode("utf-16-le").strip(), addressed


def _is_me(ent: _Entity, piece: str, me: BotIdentity) -> bool:
    if ent.type == "mention":
        return bool(me.username) and piece[1:].lower() == me.username.lower()
    return ent.type == "text_mention" and ent.user is not None and ent.user.id == me.id


def is_supergroup(chat_id: int) -> bool:
    """Supergroup (and channel) ids start with ``-100``; only they have reply threads."""
    return str(chat_id).startswith("-100")


def topic_link(chat_id: int, topic: int, *, name: str) -> str:
    """A ``t.me`` link to a forum topic of a supergroup (``-100…`` ids), else "topic <name>".

    ``https://t.me/c/<id>/<topic>`` opens for members only; the General topic and chats
    that are no supergroup have no such link.
    """
    raw = str(chat_id)
    if raw.startswith("-100") and topic != GENERAL_TOPIC:
        return f"https://t.me/c/{raw[4:]}/{topic}"
    return f"topic “{name}”"


def message_link(chat_id: int, message_id: int, *, name: str) -> str:
    """A ``t.me`` link to one message of a supergroup (a reply thread's root), else
    "the message “<name>”"."""
    raw = str(chat_id)
    if raw.startswith("-100"):
        return f"https://t.me/c/{raw[4:]}/{message_id}"
    return f"the message “{name}”"
