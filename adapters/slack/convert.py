"""Slack payloads -> :class:`~bot.types.Inbound` (pure; no I/O, fixture-tested).

Mapping (see docs/architecture.md):
``ThreadRef(account=team id, chat=channel, thread=root thread_ts)``.
A top-level channel message gets ``thread = its own ts`` so the answer opens a thread
under it; a top-level DM keeps ``thread=None`` (one session per user), a DM thread is its
own session. The dedupe id is ``<channel>:<ts>`` of the message, not the envelope's
``event_id``: Slack retries re-send the same message, and a mention arrives twice (as
``app_mention`` and as ``message``) with different event ids but the same ts.

Conversion never raises: anything malformed is ``None``. Strings are made valid Unicode
(a JSON body may escape lone surrogates, which Redis and every JSON encoder downstream
reject), and a message without a channel or ts is dropped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bot.types import Action, Inbound, Platform, Sender, ThreadRef

# Subtypes that carry something a person (or a bot) said; everything else is dropped:
# message_changed, message_deleted, channel_join, channel_topic, message_replied, ...
CONVERSATION_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message", "bot_message"})

_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")


def valid_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (valid pairs are joined)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


_Text = Annotated[str, AfterValidator(valid_text)]
_Id = Annotated[str, AfterValidator(valid_text), Field(min_length=1)]


@dataclass(frozen=True, kw_only=True)
class BotIdentity:
    """Who the bot is in this workspace (from ``auth.test``)."""

    user_id: str
    bot_id: str = ""
    team_id: str = ""


class _Payload(BaseModel):
    """A payload part: fields fanbot does not read are ignored."""

    model_config = ConfigDict(extra="ignore")


class _Event(_Payload):
    """The fields of a ``message`` / ``app_mention`` event fanbot reads."""

    type: str
    channel: _Id
    ts: _Id
    text: _Text = ""
    user: _Text | None = None
    bot_id: _Text | None = None
    subtype: str | None = None
    thread_ts: _Text | None = None
    channel_type: str | None = None
    team: _Text | None = None
    user_profile: dict[str, Any] | None = None


class _Command(_Payload):
    """A slash-command payload (form fields)."""

    command: str
    channel_id: _Id
    user_id: _Id
    team_id: _Text = ""
    text: _Text = ""
    trigger_id: _Text = ""
    channel_name: str = ""
    user_name: _Text = ""


class _Named(_Payload):
    id: _Id
    username: _Text = ""


class _Button(_Payload):
    action_id: _Text = ""
    value: _Text = ""
    action_ts: _Text = ""


class _Press(_Payload):
    """The fields of a ``block_actions`` payload fanbot reads."""

    user: _Named
    team: _Named | None = None
    channel: _Named | None = None
    container: dict[str, Any] = Field(default_factory=dict)
    message: dict[str, Any] = Field(default_factory=dict)
    actions: list[_Button] = Field(default_factory=list)


def dedupe_id(channel: str, ts: str) -> str:
    """The gateway's dedupe key for one Slack message."""
    return f"{channel}:{ts}"


def event_to_inbound(body: Mapping[str, Any], me: BotIdentity) -> Inbound | None:
    """Convert an Events API ``event_callback`` body; ``None`` for anything not a message.

    Args:
        body: The outer payload (``{"type": "event_callback", "team_id", "event": {...}}``).
        me: The bot's identity, for mention detection and ``is_self``.
    """
    raw = body.get("event") if isinstance(body, Mapping) else None
    if not isinstance(raw, Mapping) or raw.get("type") not in ("message", "app_mention"):
        return None
    try:
        event = _Event.model_validate(raw)
    except ValidationError:
        return None
    if event.subtype is not None and event.subtype not in CONVERSATION_SUBTYPES:
        return None
    is_bot = bool(event.bot_id) or event.subtype == "bot_message"
    user_id = event.user or event.bot_id
    if not user_id:
        return None
    is_dm = _is_dm(event.channel, event.channel_type)
    text, mentioned = strip_mention(event.text, me.user_id)
    team = valid_text(str(body.get("team_id") or event.team or me.team_id))
    return Inbound(
        thread=ThreadRef(
            platform=Platform.SLACK,
            account=team,
            chat=event.channel,
            thread=event.thread_ts or (None if is_dm else event.ts),
        ),
        sender=Sender(
            user_id=user_id,
            display_name=_display_name(event.user_profile),
            is_bot=is_bot,
            is_self=user_id == me.user_id or (bool(me.bot_id) and event.bot_id == me.bot_id),
        ),
        text=decode_text(text),
        message_id=event.ts,
        mentioned=mentioned or is_dm or event.type == "app_mention",
        is_dm=is_dm,
        event_id=dedupe_id(event.channel, event.ts),
    )


def command_to_inbound(
    payload: Mapping[str, Any], me: BotIdentity, *, slash_command: str = "/subagents"
) -> Inbound | None:
    """Convert a slash command; ``None`` unless it is the registered ``slash_command``.

    Slash commands carry no thread, so the Inbound is channel-level (``thread=None``) and
    its text is normalized to ``/subagents <args>`` whatever name the command has.
    """
    try:
        cmd = _Command.model_validate(payload)
    except ValidationError:
        return None
    if cmd.command != slash_command:
        return None
    is_dm = cmd.channel_name == "directmessage" or cmd.channel_id.startswith("D")
    args = cmd.text.strip()
    key = cmd.trigger_id or f"{cmd.channel_id}:{cmd.user_id}:{args}"
    return Inbound(
        thread=ThreadRef(
            platform=Platform.SLACK, account=cmd.team_id or me.team_id, chat=cmd.channel_id
        ),
        sender=Sender(user_id=cmd.user_id, display_name=cmd.user_name),
        text=f"/subagents {args}".rstrip(),
        message_id=key,
        mentioned=True,
        is_dm=is_dm,
        event_id=f"command:{key}",
    )


ACTION_PREFIX = "fanbot_action_"
"""``action_id`` prefix of the buttons fanbot posts (one per :class:`~bot.types.Action`)."""


def action_to_inbound(payload: Mapping[str, Any], me: BotIdentity) -> Inbound | None:
    """Convert a ``block_actions`` payload (a button of ours pressed): the text is the
    button's ``value`` (the action id) and ``callback`` marks it as a press; ``None`` for
    anything else."""
    if not isinstance(payload, Mapping) or payload.get("type") != "block_actions":
        return None
    try:
        press = _Press.model_validate(payload)
    except ValidationError:
        return None
    mine = [a for a in press.actions if a.action_id.startswith(ACTION_PREFIX) and a.value]
    if not mine or press.channel is None:
        return None
    action, channel = mine[0], press.channel.id
    is_dm = _is_dm(channel, None)
    root = press.container.get("thread_ts") or press.message.get("thread_ts")
    ts = str(press.message.get("ts") or press.container.get("message_ts") or "")
    return Inbound(
        thread=ThreadRef(
            platform=Platform.SLACK,
            account=press.team.id if press.team else me.team_id,
            chat=channel,
            thread=valid_text(str(root)) if root else (None if is_dm else ts or None),
        ),
        sender=Sender(user_id=press.user.id, display_name=press.user.username),
        text=action.value,
        message_id=ts,
        mentioned=True,
        is_dm=is_dm,
        event_id=f"action:{channel}:{ts}:{press.user.id}:{action.action_ts}",
        callback=f"{action.action_id}:{action.action_ts}",
    )


def action_blocks(text: str, actions: Sequence[Action]) -> list[dict[str, Any]]:
    """Block Kit for a message with buttons (pure): its mrkdwn ``text`` in a section, then
    one ``actions`` block whose buttons carry each action's id as ``value``."""
    buttons = []
    for index, action in enumerate(actions):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"{ACTION_PREFIX}{index}",
            "text": {"type": "plain_text", "text": action.label[:75], "emoji": True},
            "value": action.id,
        }
        if action.style in ("primary", "danger"):
            button["style"] = action.style
        buttons.append(button)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}
    if not buttons:
        return [section]
    return [section, {"type": "actions", "block_id": "fanbot_actions", "elements": buttons}]


def strip_mention(text: str, bot_user_id: str) -> tuple[str, bool]:
    """Remove every ``<@BOT>`` / ``<@BOT|name>`` token; say whether there was one."""
    if not bot_user_id:
        return text.strip(), False
    pattern = re.compile(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>")
    stripped, count = pattern.subn(" ", text)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip(), count > 0


def decode_text(text: str) -> str:
    """Slack's wire text -> plain markdown-ish text for the model.

    ``<url|label>`` becomes ``[label](url)``, ``<#C1|general>`` ``#general``, ``<!here>``
    ``@here``; user mentions stay ``<@U1>`` (the model can echo them back), and the three
    escaped entities are unescaped.
    """

    def link(match: re.Match[str]) -> str:
        target, label = match.group(1), match.group(2)
        if target.startswith("@"):
            return match.group(0)
        if target.startswith("#"):
            return f"#{label}" if label else target
        if target.startswith("!"):
            return f"@{label or target[1:].split('^')[0]}"
        return f"[{label}]({target})" if label and label != target else target

    return html.unescape(_LINK.sub(link, text))


def _is_dm(channel: str, channel_type: str | None) -> bool:
    if channel_type is not None:
        return channel_type == "im"
    return channel.startswith("D")


def _display_name(profile: Mapping[str, Any] | None) -> str:
    if not profile:
        return ""
    for key in ("display_name", "real_name", "name"):
        value = profile.get(key)
        if isinstance(value, str) and value:
            return valid_text(value)
    return ""
