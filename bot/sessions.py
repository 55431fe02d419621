"""Session keys: the names under which conversations and runs are stored.

Requester sessions are derived from where a message was written; child sessions belong to
one subagent and are independent of any thread.
"""

from __future__ import annotations

import uuid

from bot.types import ThreadRef

_THREAD_WORD = {"telegram": "topic"}


def requester_session_key(
    *, agent_id: str, thread: ThreadRef, is_dm: bool = False, user_id: str = ""
) -> str:
    """Session key for a conversation.

    ``agent:<agentId>:<platform>:<chat>`` plus ``:thread:<id>`` (Slack, Matrix, console) or
    ``:topic:<id>`` (Telegram); DMs are ``agent:<agentId>:<platform>:dm:<user>`` (with the
    thread suffix when a DM has threads of its own).
    """
    base = f"agent:{agent_id}:{thread.platform}:"
    base += f"dm:{user_id}" if is_dm and user_id else thread.chat
    if thread.thread:
        base += f":{_THREAD_WORD.get(thread.platform, 'thread')}:{thread.thread}"
    return base


def new_child_session_key(agent_id: str) -> str:
    """A fresh ``agent:<agentId>:subagent:<uuid>`` key."""
    return f"agent:{agent_id}:subagent:{uuid.uuid4()}"


def is_child_session_key(key: str) -> bool:
    parts = key.split(":")
    return len(parts) == 4 and parts[0] == "agent" and parts[2] == "subagent"


def qualified_user(platform: str, user_id: str) -> str:
    """``platform:user_id``: the only form admin lists and run ownership use."""
    return f"{platform}:{user_id}"
