"""Slack payloads -> Inbound, and markdown -> mrkdwn / splitting (pure, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack import convert, markup
from bot.testing import slack_wire as wire
from bot.types import Inbound, Sender, ThreadRef

ME = convert.BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


def body(event: Any, team_id: str = "T1") -> dict[str, Any]:
    return {"type": "event_callback", "team_id": team_id, "event_id": "Ev1", "event": event}


def ref(chat: str, thread: str | None) -> ThreadRef:
    return ThreadRef(platform="slack", account="T1", chat=chat, thread=thread)


MENTION = {"type": "app_mention", "user": "U1", "text": "<@UBOT> hi there", "ts": "10.1"}
MENTION_IN_CHANNEL = MENTION | {"channel": "C1"}

EVENT_CASES: list[tuple[str, dict[str, Any], Inbound | None]] = [
    (
        "top-level app_mention opens a thread under itself",
        MENTION_IN_CHANNEL,
        Inbound(
            thread=ref("C1", "10.1"),
            sender=Sender(user_id="U1"),
            text="hi there",
            message_id="10.1",
            mentioned=True,
            event_id="C1:10.1",
        ),
    ),
    (
        "the same mention delivered as a message event: same dedupe id",
        wire.message_event(text="<@UBOT> hi there", user="U1", channel="C1", ts="10.1"),
        Inbound(
            thread=ref("C1", "10.1"),
            sender=Sender(user_id="U1"),
            text="hi there",
            message_id="10.1",
            mentioned=True,
            event_id="C1:10.1",
        ),
    ),
    (
        "reply in a thread without mention continues the root thread",
        wire.message_event(text="and more", user="U2", channel="C1", ts="11.5", thread_ts="10.1"),
        Inbound(
            thread=ref("C1", "10.1"),
            sender=Sender(user_id="U2"),
            text="and more",
            message_id="11.5",
            event_id="C1:11.5",
        ),
    ),
    (
        "top-level DM: no thread, is_dm, addressed",
        wire.message_event(text="hello", user="U1", channel="D1", ts="12.0"),
        Inbound(
            thread=ref("D1", None),
            sender=Sender(user_id="U1"),
            text="hello",
            message_id="12.0",
            mentioned=True,
            is_dm=True,
            event_id="D1:12.0",
        ),
    ),
    (
        "thread inside a DM is its own thread",
        wire.message_event(text="deeper", user="U1", channel="D1", ts="13.0", thread_ts="12.0"),
        Inbound(
            thread=ref("D1", "12.0"),
            sender=Sender(user_id="U1"),
            text="deeper",
            message_id="13.0",
            mentioned=True,
            is_dm=True,
            event_id="D1:13.0",
        ),
    ),
    (
        "another bot's message is marked is_bot",
        wire.message_event(
            text="beep", user=None, bot_id="BOTHER", subtype="bot_message", channel="C1", ts="14.0"
        ),
        Inbound(
            thread=ref("C1", "14.0"),
            sender=Sender(user_id="BOTHER", is_bot=True),
            text="beep",
            message_id="14.0",
            event_id="C1:14.0",
        ),
    ),
    (
        "our own message is marked is_self",
        wire.message_event(text="done", user="UBOT", bot_id="BBOT", channel="C1", ts="15.0"),
        Inbound(
            thread=ref("C1", "15.0"),
            sender=Sender(user_id="UBOT", is_bot=True, is_self=True),
            text="done",
            message_id="15.0",
            event_id="C1:15.0",
        ),
    ),
    (
        "links, channels, specials and entities are decoded; other mentions kept",
        wire.message_event(
            text="<@UBOT|fanbot> see <https://x.io/a|docs> &amp; <https://y.io> in "
            "<#C9|ops> <!here> a &lt; b <@U7>",
            user="U1",
            channel="C1",
            ts="16.0",
        ),
        Inbound(
            thread=ref("C1", "16.0"),
            sender=Sender(user_id="U1"),
            text="see [docs](https://x.io/a) & https://y.io in #ops @here a < b <@U7>",
            message_id="16.0",
            mentioned=True,
            event_id="C1:16.0",
        ),
    ),
    (
        "thread_broadcast is a reply in the thread",
        wire.message_event(
            text="fyi",
            user="U1",
            channel="C1",
            ts="17.0",
            thread_ts="10.1",
            subtype="thread_broadcast",
        ),
        Inbound(
            thread=ref("C1", "10.1"),
            sender=Sender(user_id="U1"),
            text="fyi",
            message_id="17.0",
            event_id="C1:17.0",
        ),
    ),
    (
        "display name from user_profile",
        wire.message_event(
            text="yo", user="U1", channel="C1", ts="18.0", user_profile={"display_name": "Ann"}
        ),
        Inbound(
            thread=ref("C1", "18.0"),
            sender=Sender(user_id="U1", display_name="Ann"),
            text="yo",
            message_id="18.0",
            event_id="C1:18.0",
        ),
    ),
    (
        "message_changed is dropped",
        {
            "type": "message",
            "subtype": "message_changed",
            "channel": "C1",
            "ts": "19.0",
            "message": {"type": "message", "user": "U1", "text": "edited", "ts": "10.1"},
        },
        None,
    ),
    (
        "message_deleted is dropped",
        {"type": "message", "subtype": "message_deleted", "channel": "C1", "ts": "20.0"},
        None,
    ),
    (
        "channel_join is dropped",
        wire.message_event(text="<@U3> has joined", user="U3", subtype="channel_join", ts="21.0"),
        None,
    ),
    ("reaction_added is not a message", {"type": "reaction_added", "user": "U1"}, None),
    ("event without channel", {"type": "message", "user": "U1", "text": "x", "ts": "1.0"}, None),
    (
        "event with a list as text",
        {"type": "message", "channel": "C1", "ts": "1", "text": []},
        None,
    ),
    ("event is not an object", "message", None),
    ("message without user or bot", {"type": "message", "channel": "C1", "ts": "1"}, None),
]


@pytest.mark.parametrize(
    ("name", "event", "expected"), EVENT_CASES, ids=[c[0] for c in EVENT_CASES]
)
def test_event_to_inbound(name: str, event: Any, expected: Inbound | None) -> None:
    assert convert.event_to_inbound(body(event), ME) == expected


@pytest.mark.parametrize("outer", [None, [], "x", {}, {"event": None}, {"event": [1, 2]}])
def test_malformed_outer_bodies_give_none(outer: Any) -> None:
    assert convert.event_to_inbound(outer, ME) is None


def test_app_mention_and_message_of_one_ts_share_the_dedupe_id() -> None:
    mention = convert.event_to_inbound(body(MENTION_IN_CHANNEL), ME)
    message = wire.message_event(text=MENTION["text"], user="U1", channel="C1", ts="10.1")
    as_message = convert.event_to_inbound(body(message), ME)
    assert mention is not None and as_message is not None
    assert mention.dedupe_id == as_message.dedupe_id == "C1:10.1"


def test_team_falls_back_to_identity() -> None:
    inbound = convert.event_to_inbound({"event": MENTION_IN_CHANNEL}, ME)
    assert inbound is not None and inbound.thread.account == "T1"


COMMAND_CASES: list[tuple[str, dict[str, Any], str | None, bool]] = [
    ("list", {"command": "/subagents", "text": "list"}, "/subagents list", False),
    ("no args", {"command": "/subagents", "text": "  "}, "/subagents", False),
    (
        "in a DM",
        {"command": "/subagents", "text": "stop 2", "channel_id": "D1"},
        "/subagents stop 2",
        True,
    ),
    ("other command", {"command": "/weather", "text": "x"}, None, False),
]


@pytest.mark.parametrize(
    ("name", "fields", "text", "is_dm"), COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES]
)
def test_command_to_inbound(
    name: str, fields: dict[str, Any], text: str | None, is_dm: bool
) -> None:
    payload = {"channel_id": "C1", "user_id": "U1", "team_id": "T1", "trigger_id": "tr1"} | fields
    inbound = convert.command_to_inbound(payload, ME)
    if text is None:
        assert inbound is None
        return
    assert inbound is not None
    assert inbound.text == text
    assert inbound.thread == ref(payload["channel_id"], None)
    assert inbound.mentioned and inbound.is_dm is is_dm
    assert inbound.event_id == "command:tr1"


def test_renamed_slash_command_is_normalized() -> None:
    payload = {"command": "/fanbot", "text": "info 1", "channel_id": "C1", "user_id": "U1"}
    inbound = convert.command_to_inbound(payload, ME, slash_command="/fanbot")
    assert inbound is not None and inbound.text == "/subagents info 1"


def test_malformed_command_gives_none() -> None:
    assert convert.command_to_inbound({"text": "list"}, ME) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<@UBOT> /subagents list", ("/subagents list", True)),
        ("hey <@UBOT|fanbot>  do it", ("hey do it", True)),
        ("no mention <@U2>", ("no mention <@U2>", False)),
        ("<@UBOTX> lookalike", ("<@UBOTX> lookalike", False)),
    ],
)
def test_strip_mention(text: str, expected: tuple[str, bool]) -> None:
    assert convert.strip_mention(text, "UBOT") == expected


MRKDWN_CASES = [
    ("**bold** and *it*", "*bold* and _it_"),
    ("~~gone~~", "~gone~"),
    ("[docs](https://x.io/a?b=1&c=2)", "<https://x.io/a?b=1&c=2|docs>"),
    ("# Title", "*Title*"),
    ("- one\n- two", "•   one\n•   two"),
    ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
    ("ping <@U123>", "ping <@U123>"),
    ("`x<y>&z`", "`x&lt;y&gt;&amp;z`"),
    ("```python\n#!/bin/sh\nif a < b: **x**\n```", "```\n#!/bin/sh\nif a &lt; b: **x**\n```"),
    ("", ""),
]


@pytest.mark.parametrize(("markdown", "expected"), MRKDWN_CASES)
def test_to_mrkdwn(markdown: str, expected: str) -> None:
    assert markup.to_mrkdwn(markdown) == expected


def test_split_balances_fences_below_the_limit() -> None:
    code = "```\n" + "\n".join(f"line {i} = {i * 7}" for i in range(400)) + "\n```"
    text = markup.to_mrkdwn("\n\n".join(["intro " * 50, code, "middle " * 300, code, "end"]))
    parts = markup.split(text, 1000)
    assert len(parts) > 5 and all(len(p) <= 1000 for p in parts)
    for part in parts:
        assert sum(1 for ln in part.splitlines() if ln.startswith("```")) % 2 == 0
    joined = "\n".join(parts)
    assert all(f"line {i} = {i * 7}" in joined for i in range(400))
    assert joined.index("intro") < joined.index("middle") < joined.index("end")


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("ping <!channel> now", "ping &lt;!channel&gt; now"),
        ("<!here|here>", "&lt;!here|here&gt;"),
        ("<!everyone>", "&lt;!everyone&gt;"),
        ("<!subteam^S1|devs> look", "&lt;!subteam^S1|devs&gt; look"),
        ("ask <@U123>", "ask <@U123>"),  # a single person may still be mentioned
    ],
)
def test_model_output_never_notifies_a_whole_channel(markdown: str, expected: str) -> None:
    from adapters.slack.markup import to_mrkdwn

    assert to_mrkdwn(markdown) == expected
