"""Builders for Bot API objects (users, chats, entities) used by the fake and by tests."""

from __future__ import annotations

import re
from typing import Any

from bot.testing.telegram_html import utf16_len

__all__ = ["detect_entities", "forum", "group", "private", "user"]

_MENTION = re.compile(r"(?<![\w@])@[A-Za-z]\w{3,31}")
_COMMAND = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z]\w{3,31})?")


def user(user_id: int, first_name: str = "User", *, username: str | None = None) -> dict[str, Any]:
    """A Telegram ``User`` object for a person."""
    data: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
    if username:
        data["username"] = username
    return data


def forum(chat_id: int = -1001000000001, title: str = "Forum") -> dict[str, Any]:
    """A forum supergroup ``Chat`` (topics enabled)."""
    return {"id": chat_id, "type": "supergroup", "title": title, "is_forum": True}


def group(chat_id: int = -1001000000002, title: str = "Group") -> dict[str, Any]:
    """A supergroup ``Chat`` without topics."""
    return {"id": chat_id, "type": "supergroup", "title": title}


def private(person: dict[str, Any]) -> dict[str, Any]:
    """The private ``Chat`` with ``person``."""
    return {"id": person["id"], "type": "private", "first_name": person["first_name"]}


def detect_entities(text: str) -> list[dict[str, Any]]:
    """``mention`` and leading ``bot_command`` entities, as Telegram's server adds them."""
    found: list[dict[str, Any]] = []
    if command := _COMMAND.match(text):
        found.append({"type": "bot_command", "offset": 0, "length": utf16_len(command[0])})
    for match in _MENTION.finditer(text):
        offset = utf16_len(text[: match.start()])
        found.append({"type": "mention", "offset": offset, "length": utf16_len(match[0])})
    return found
