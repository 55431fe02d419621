"""Approvals: the pure parts (which calls wait, parsing, who may decide, the texts) and each
adapter's conversion of a press and of a message with actions (table-driven, no I/O)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adapters.matrix import convert as mx
from adapters.slack import convert as sl
from adapters.telegram import convert as tg
from bot.commands.answers import _state
from bot.config import Settings, SubagentType
from bot.runs.approval_gate import (
    DecisionRequest,
    denied_result,
    may_decide,
    needs_approval,
    outcome_text,
    parse_decision,
    request_actions,
    request_text,
)
from bot.store.approvals import ApprovalRecord, ApprovalState, PendingCall, decode, encode
from bot.types import Action, Outbound, RunRecord, RunStatus, ThreadRef

THREAD = ThreadRef(platform="telegram", account="4242", chat="-100", thread=None)


def approval(**kw: Any) -> ApprovalRecord:
    values: dict[str, Any] = {
        "approval_id": "0a1b2c3d",
        "run_id": "r1",
        "thread": THREAD,
        "requester": "telegram:1001",
        "calls": (PendingCall(id="c1", name="execute", arguments='{"command": "ls"}'),),
        "label": "#1 calc",
    }
    return ApprovalRecord(**(values | kw))


def run(**kw: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": "r1", "seq": 1, "session_key": "s", "child_session_key": "c",
        "session_id": "i", "thread": THREAD, "requester": "telegram:1001", "agent_id": "main",
        "subagent_type": "general-purpose", "task": "t", "model": "m",
        "status": RunStatus.RUNNING,
    }  # fmt: skip
    return RunRecord(**(values | kw))


@pytest.mark.parametrize(
    ("global_", "typed", "tool", "expected"),
    [
        ([], False, "execute", False),
        (["execute"], False, "execute", True),
        (["mcp_*_write*"], False, "mcp_fs_write_file", True),
        (["mcp_*_write*"], False, "mcp_fs_read_file", False),
        ([], True, "calculate", True),
        ([], ["web_*"], "web_fetch", True),
        ([], ["web_*"], "calculate", False),
    ],
)
def test_which_calls_wait(global_: list[str], typed: Any, tool: str, expected: bool) -> None:
    settings = Settings(tools={"require_approval": global_})
    sub_type = SubagentType(name="t", require_approval=typed)
    assert needs_approval(settings, sub_type, tool) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("!approve 0a1b2c3d", DecisionRequest(approval_id="0a1b2c3d", approve=True)),
        ("/deny 0A1B2C3D", DecisionRequest(approval_id="0a1b2c3d", approve=False)),
        (
            '!approve 0a1b2c3d {"command": "pwd"}',
            DecisionRequest(approval_id="0a1b2c3d", approve=True, arguments='{"command": "pwd"}'),
        ),
        ("!deny 0a1b2c3d because", DecisionRequest(approval_id="0a1b2c3d", approve=False)),
        ("please !approve 0a1b2c3d", None),
        ("!approve", None),
        ("!approved 0a1b2c3d", None),
        ("!approve zz", None),
    ],
)
def test_parse_decision(text: str, expected: DecisionRequest | None) -> None:
    assert parse_decision(text) == expected


@pytest.mark.parametrize(
    ("platform", "user", "admins", "record", "allowed"),
    [
        ("telegram", "1001", [], run(), True),  # the requester
        ("telegram", "2002", ["telegram:2002"], run(), True),  # an admin
        ("telegram", "2002", [], run(), False),
        ("slack", "1001", [], run(), False),  # same id, another platform
        ("telegram", "1001", [], run(status=RunStatus.STOPPED), False),  # ended meanwhile
        ("telegram", "1001", [], None, False),
    ],
)
def test_who_may_decide(
    platform: str, user: str, admins: list[str], record: RunRecord | None, allowed: bool
) -> None:
    refusal = may_decide(
        Settings(admins=admins), approval(), record, platform=platform, user_id=user
    )
    assert (refusal == "") is allowed


def test_texts() -> None:
    asked = request_text(approval(), timeout_s=3600)
    assert "wants to run `execute`" in asked and '"command": "ls"' in asked
    assert "no answer in 1 h means deny" in asked and "!approve 0a1b2c3d" in asked
    decided = {"decided_by": "telegram:1001", "arguments": '{"command": "ls"}'}
    approved = approval(state=ApprovalState.APPROVED, **decided)
    assert outcome_text(approved) == "✅ Subagent #1 calc: `execute` approved by @1001."
    edited = approval(state=ApprovalState.APPROVED, decided_by="matrix:@ann:hs", arguments="{}")
    assert outcome_text(edited).endswith("approved with edited arguments by @ann:hs.")
    denied = approval(state=ApprovalState.DENIED, decided_by="slack:U1")
    assert outcome_text(denied) == "❌ Subagent #1 calc: `execute` denied by @U1."
    assert denied_result(denied) == "error: denied by @U1; the call did not run"
    expired = approval(state=ApprovalState.EXPIRED)
    assert outcome_text(expired).startswith("⌛") and "nobody answered" in denied_result(expired)


def test_record_codec_round_trips() -> None:
    record = approval(
        calls=(PendingCall(id="a", name="x", arguments="{}"), PendingCall(id="b", name="y", arguments="[]")),
        state=ApprovalState.APPROVED, decided_by="slack:U1", decided_at=5.0, due_at=9.0,
    )  # fmt: skip
    assert decode(encode(record)) == record


def test_outbound_codec_keeps_actions_and_callback() -> None:
    message = Outbound(thread=THREAD, text="t", actions=request_actions("0a1b2c3d"), callback="q1")
    assert Outbound.from_json(json.loads(json.dumps(message.to_json()))) == message
    plain = Outbound(thread=THREAD, text="t")
    assert "actions" not in plain.to_json() and "callback" not in plain.to_json()


def test_list_shows_a_run_waiting_for_approval() -> None:
    assert _state(run(parked_at=1.0, approval_id="0a1b2c3d")) == "waiting for approval"
    assert _state(run(parked_at=1.0)) == "waiting for its subagents"


# -- adapters --------------------------------------------------------------------------------

ACTIONS = (
    Action(id="!approve 0a1b2c3d", label="✅ Approve", style="primary"),
    Action(id="!deny 0a1b2c3d", label="❌ Deny", style="danger"),
)
ME = tg.BotIdentity(id=4242, username="fanbot_bot")


def test_telegram_keyboard_and_press() -> None:
    assert tg.inline_keyboard(()) is None
    assert tg.inline_keyboard(ACTIONS) == {
        "inline_keyboard": [
            [
                {"text": "✅ Approve", "callback_data": "!approve 0a1b2c3d"},
                {"text": "❌ Deny", "callback_data": "!deny 0a1b2c3d"},
            ]
        ]
    }
    chat = {"id": -100123, "type": "supergroup", "is_forum": True}
    update = {
        "update_id": 7,
        "callback_query": {
            "id": "987", "from": {"id": 1001, "is_bot": False, "first_name": "Ann"},
            "chat_instance": "ci", "data": "!deny 0a1b2c3d",
            "message": {"message_id": 55, "date": 0, "chat": chat, "text": "🔐 …",
                        "message_thread_id": 11, "is_topic_message": True,
                        "from": {"id": 4242, "is_bot": True, "first_name": "fanbot"}},
        },
    }  # fmt: skip
    inbound = tg.to_inbound(update, me=ME)
    assert inbound is not None
    assert (inbound.text, inbound.callback, inbound.sender.user_id) == (
        "!deny 0a1b2c3d",
        "987",
        "1001",
    )
    assert inbound.thread == ThreadRef(
        platform="telegram", account="4242", chat="-100123", thread="11"
    )
    assert inbound.event_id == "callback:987" and inbound.mentioned
    no_data = json.loads(json.dumps(update))
    del no_data["callback_query"]["data"]  # a game button: not ours
    assert tg.to_inbound(no_data, me=ME) is None


SLACK_ME = sl.BotIdentity(user_id="U0FANBOT", team_id="T1")


def test_slack_blocks_and_press() -> None:
    section, actions = sl.action_blocks("*hi*", ACTIONS)
    assert section == {"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}
    assert [(b["action_id"], b["value"], b["style"]) for b in actions["elements"]] == [
        ("fanbot_action_0", "!approve 0a1b2c3d", "primary"),
        ("fanbot_action_1", "!deny 0a1b2c3d", "danger"),
    ]
    assert sl.action_blocks("done", ()) == [section | {"text": {"type": "mrkdwn", "text": "done"}}]
    payload = {
        "type": "block_actions", "user": {"id": "U2", "username": "bob"}, "team": {"id": "T1"},
        "channel": {"id": "C1"}, "container": {"message_ts": "2.0", "thread_ts": "1.0"},
        "message": {"ts": "2.0", "thread_ts": "1.0"},
        "actions": [{"action_id": "fanbot_action_0", "value": "!approve 0a1b2c3d",
                     "action_ts": "3.5"}],
    }  # fmt: skip
    inbound = sl.action_to_inbound(payload, SLACK_ME)
    assert inbound is not None
    assert inbound.thread == ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")
    assert (inbound.text, inbound.sender.user_id) == ("!approve 0a1b2c3d", "U2")
    assert inbound.callback == "fanbot_action_0:3.5"
    foreign = json.loads(json.dumps(payload))
    foreign["actions"][0]["action_id"] = "someone_elses"
    assert sl.action_to_inbound(foreign, SLACK_ME) is None
    assert sl.action_to_inbound({"type": "view_submission"}, SLACK_ME) is None


ROOM = mx.RoomContext(
    room_id="!r:hs", bot_user_id="@bot:hs", bot_display_name="bot", member_count=3
)


def test_matrix_actions_and_reactions() -> None:
    assert mx.actions_field(ACTIONS) == {"✅": "!approve 0a1b2c3d", "❌": "!deny 0a1b2c3d"}
    assert mx.reaction_key(Action(id="x", label="Approve")) == "Approve"
    reaction = {
        "type": "m.reaction", "sender": "@ann:hs", "event_id": "$re",
        "content": mx.reaction_content("$req", "❌"),
    }  # fmt: skip
    assert mx.reaction_of(reaction) == ("$req", "❌")
    content = mx.message_content(body="🔐", html=None, msgtype="m.notice", thread="$root",
                                 latest=None)  # fmt: skip
    target = {
        "sender": "@bot:hs",
        "content": content | {mx.ACTIONS_FIELD: mx.actions_field(ACTIONS)},
    }
    inbound = mx.pressed(reaction, target, room=ROOM, sender_name="Ann")
    assert inbound is not None
    assert (inbound.text, inbound.callback, inbound.sender.user_id) == (
        "!deny 0a1b2c3d",
        "$re",
        "@ann:hs",
    )
    assert inbound.thread.thread == "$root"
    other_key = reaction | {"content": mx.reaction_content("$req", "👍")}
    assert mx.pressed(other_key, target, room=ROOM) is None
    assert mx.pressed(reaction, {"content": content}, room=ROOM) is None  # no actions there
    assert mx.reaction_of({"type": "m.room.message", "content": {}}) is None
