"""Fuzzing platform payload conversion: malformed events never crash, and never poison.

Each converter gets real payload shapes (the ones the unit tests use) mutated by
hypothesis: keys dropped, values swapped for other JSON (None, lists where objects belong,
nested junk, huge or invalid-Unicode strings, huge ints), plus wholly random JSON. The
contract (module docstrings of ``adapters/*/convert.py``): conversion returns a valid
:class:`~bot.types.Inbound` or ``None`` and never raises. Valid means what the gateway
relies on: ids and text are ``str`` and encodable (Redis keys, JSON, HTTP), required ids are
non-empty, and the thread survives its JSON round trip.

Then, per platform, a malformed event goes through the channel's real handler path: it is
logged as a warning and dropped, and the channel keeps delivering the next good event, even
when conversion itself fails (simulated, as the defence behind the contract). The console's
is its stdin reader: undecodable bytes must not end (or hang) the session.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from hypothesis import given
from hypothesis import strategies as st
from nio import MatrixRoom
from nio.events.room_events import Event

from adapters.console.channel import ConsoleChannel
from adapters.console.convert import line_to_inbound, switch_target
from adapters.matrix import convert as matrix_convert
from adapters.matrix.channel import MatrixChannel
from adapters.matrix.convert import RoomContext, inbound_from_event
from adapters.slack import SlackChannel
from adapters.slack import convert as slack_convert
from adapters.slack.convert import BotIdentity as SlackIdentity
from adapters.slack.convert import command_to_inbound, event_to_inbound
from adapters.telegram import channel as telegram_channel
from adapters.telegram.channel import SECRET_HEADER, TelegramChannel
from adapters.telegram.convert import BotIdentity as TelegramIdentity
from adapters.telegram.convert import to_inbound
from bot.config import MatrixSettings
from bot.testing import slack_wire as wire
from bot.testing.fake_slack import FakeSlack
from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.netutil import LOOPBACK, bind_loopback
from bot.types import Inbound, ThreadRef
from tests.fuzz import fuzz_settings

FUZZ = fuzz_settings()


# -- the contract ----------------------------------------------------------------------------


def _valid_str(value: object, *, empty: bool = True) -> None:
    assert isinstance(value, str), f"{value!r} is not a str"
    value.encode("utf-8")  # raises on lone surrogates, as Redis and JSON encoders would
    assert empty or value, "required id is empty"


def check_inbound(result: object, platform: str) -> None:
    """``None``, or an Inbound the gateway can store, key and answer."""
    if result is None:
        return
    assert isinstance(result, Inbound)
    thread = result.thread
    assert thread.platform == platform
    _valid_str(thread.account)
    _valid_str(thread.chat, empty=False)
    if thread.thread is not None:
        _valid_str(thread.thread, empty=False)
    _valid_str(result.sender.user_id, empty=False)
    _valid_str(result.sender.display_name)
    _valid_str(result.text)
    _valid_str(result.message_id, empty=False)
    if result.event_id is not None:
        _valid_str(result.event_id, empty=False)
    flags = (result.mentioned, result.is_dm, result.is_edit, result.sender.is_bot)
    assert all(isinstance(flag, bool) for flag in (*flags, result.sender.is_self))
    assert ThreadRef.from_json(json.loads(json.dumps(thread.to_json()))) == thread


# -- strategies ------------------------------------------------------------------------------

odd_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "\ud800", "a\udcff b", "\U0001f642", "\x00\x1b[2J", "\u202e"]),
    st.text(alphabet=st.sampled_from("a \ud800\udfff\U0001f642<>|@&"), max_size=8),
    st.builds(
        lambda s, n: s * n,
        st.sampled_from(["x", "<@U0FANBOT> ", "🙂", "\n"]),
        st.integers(1000, 20_000),
    ),
)


class Googol(int):
    """An int too long for ``str()`` (Python's 4300-digit limit) that still prints."""

    def __new__(cls) -> Googol:
        return super().__new__(cls, 10**5000)

    def __repr__(self) -> str:
        return "10**5000"


odd_int = st.one_of(
    st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**63, -(2**63) - 1]), st.builds(Googol)
)
json_leaf = st.one_of(st.none(), st.booleans(), odd_int, st.floats(), odd_text)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=12,
)


def _slots(value: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key) in a JSON tree."""
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        out.append((value, key))
        _slots(child, out)
    return out


EDITS = ("drop", "junk", "none", "wrap", "add", "type", "odd", "odd")


@st.composite
def mutated(draw: st.DrawFn, base: Any, edits: tuple[str, ...] = EDITS, most: int = 4) -> Any:
    """``base`` with one to ``most`` random ``edits`` anywhere in its tree."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, most))):
        slots = _slots(value, [])
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        edit = draw(st.sampled_from(edits))
        if edit == "odd":  # same type, nasty value: the edits a lenient parser lets through
            old = container[key]
            kind = str if isinstance(old, str) else int if isinstance(old, int) else None
            container[key] = draw(odd_text if kind is str else odd_int if kind is int else json_any)
        elif edit == "drop":
            del container[key]
        elif edit == "junk":
            container[key] = draw(json_any)
        elif edit == "none":
            container[key] = None
        elif edit == "wrap":
            container[key] = [container[key]]
        elif edit == "add" and isinstance(container, dict):
            container[draw(st.text(max_size=12))] = draw(json_any)
        else:  # same name, other type: "1" <-> 1, {} -> "{}"
            old = container[key]
            container[key] = str(old) if not isinstance(old, str) else draw(odd_int)
    return value


def payloads(*bases: Any) -> st.SearchStrategy[Any]:
    """Real shapes, each with one nasty value, or with several edits of any kind; any JSON."""
    base = st.sampled_from(bases)
    return st.one_of(
        base,
        base.flatmap(lambda b: mutated(b, edits=("odd",), most=1)),
        base.flatmap(mutated),
        json_any,
    )


# -- Slack -----------------------------------------------------------------------------------

SLACK_ME = SlackIdentity(user_id="U0FANBOT", bot_id="B0FANBOT", team_id="T1")
SLACK_EVENTS = [
    wire.event_callback(e, team_id="T1", app_id="A1", event_id="Ev1")
    for e in (
        wire.message_event(text="<@U0FANBOT> hi <https://x.y|link> &amp;", ts="1.1"),
        wire.message_event(text="more", ts="2.2", thread_ts="1.1", user_profile={"name": "Ann"}),
        wire.message_event(text="dm", channel="D1", ts="3.3"),
        wire.message_event(text="b", ts="4.4", subtype="bot_message", bot_id="B9", user=None),
        wire.app_mention_event(text="<@U0FANBOT|fanbot> /subagents list", ts="5.5"),
    )
]
SLACK_COMMAND = {
    "command": "/subagents",
    "text": "info 1",
    "channel_id": "C1",
    "user_id": "U1",
    "team_id": "T1",
    "trigger_id": "tr",
    "channel_name": "general",
    "user_name": "ann",
}


@FUZZ
@given(body=payloads(*SLACK_EVENTS))
def test_slack_events_convert_or_drop(body: Any) -> None:
    check_inbound(event_to_inbound(body, SLACK_ME), "slack")


@FUZZ
@given(body=payloads(SLACK_COMMAND))
def test_slack_commands_convert_or_drop(body: Any) -> None:
    result = command_to_inbound(body, SLACK_ME)
    check_inbound(result, "slack")
    if result is not None:
        assert result.text.startswith("/subagents")


@FUZZ
@given(text=odd_text, me=st.sampled_from(["U0FANBOT", "", "U.*", "\ud800"]))
def test_slack_text_helpers(text: str, me: str) -> None:
    stripped, _ = slack_convert.strip_mention(text, me)
    assert isinstance(stripped, str)
    assert isinstance(slack_convert.decode_text(text), str)


# -- Telegram --------------------------------------------------------------------------------

TG_ME = TelegramIdentity(id=4242, username="fanbot_bot")
ANN = {"id": 1001, "is_bot": False, "first_name": "Ann", "last_name": "Lee", "username": "ann"}
FORUM = {"id": -1001, "type": "supergroup", "title": "F", "is_forum": True}


def _tg(kind: str = "message", **message: Any) -> dict[str, Any]:
    body = {"message_id": 77, "date": 1, "chat": FORUM, "from": ANN, "text": "hi"}
    return {"update_id": 9, kind: body | message}


TG_UPDATES = [
    _tg(
        text="@fanbot_bot hi 🙂 there",
        entities=[{"type": "mention", "offset": 0, "length": 11}],
        message_thread_id=5,
        is_topic_message=True,
    ),
    _tg(
        text="/subagents@fanbot_bot info 1",
        entities=[{"type": "bot_command", "offset": 0, "length": 21}],
    ),
    _tg(
        text=None,
        caption="look",
        caption_entities=[],
        reply_to_message={"message_id": 1, "from": ANN},
    ),
    _tg("edited_message", edit_date=5, sender_chat={"id": -100, "type": "channel", "title": "C"}),
    _tg(
        chat={"id": 1001, "type": "private", "first_name": "Ann"},
        text="hey",
        entities=[
            {
                "type": "text_mention",
                "offset": 0,
                "length": 3,
                "user": {"id": 4242, "first_name": "b"},
            }
        ],
    ),
]


@FUZZ
@given(update=payloads(*TG_UPDATES))
def test_telegram_updates_convert_or_drop(update: Any) -> None:
    check_inbound(to_inbound(update, me=TG_ME), "telegram")


# -- Matrix ----------------------------------------------------------------------------------

MX_BOT = "@fanbot:example.org"
MX_ROOMS = [
    RoomContext(
        room_id="!r:example.org", bot_user_id=MX_BOT, bot_display_name="FanBot", member_count=5
    ),
    RoomContext(room_id="!d:example.org", bot_user_id=MX_BOT, member_count=2, thread_replies=False),
    RoomContext(room_id="!e:example.org", bot_user_id="", bot_display_name="(", member_count=0),
]


def _mx(content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "m.room.message", "sender": "@a:x", "event_id": "$e", "content": content}


MX_EVENTS = [
    _mx(
        {
            "msgtype": "m.text",
            "body": "> <@b:x> quoted\n\nFanBot: more",
            "m.mentions": {"user_ids": [MX_BOT]},
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": "$root",
                "m.in_reply_to": {"event_id": "$p"},
            },
        }
    ),
    _mx({"msgtype": "m.notice", "body": "!subagents list"}),
    _mx(
        {
            "msgtype": "m.text",
            "body": "* edited",
            "m.new_content": {"msgtype": "m.text", "body": "edited"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"},
        }
    ),
]


@FUZZ
@given(event=payloads(*MX_EVENTS), room=st.sampled_from(MX_ROOMS), name=odd_text)
def test_matrix_events_convert_or_drop(event: Any, room: RoomContext, name: str) -> None:
    if not isinstance(event, dict):  # the channel hands over nio's ``source`` dicts only
        event = {"content": event}
    check_inbound(inbound_from_event(event, room=room, sender_name=name), "matrix")


# -- console ---------------------------------------------------------------------------------


@FUZZ
@given(
    line=st.one_of(
        odd_text, st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\udc80\udcff"))
    )
)
def test_console_lines_convert_or_drop(line: str) -> None:
    check_inbound(line_to_inbound(line, thread="main", user="you", message_id="m1"), "console")
    target = switch_target(line)
    assert target is None or (target.isprintable() and 0 < len(target) <= 64)


# -- the channels' handler paths -------------------------------------------------------------

MALFORMED_SLACK = [
    {"type": "message", "channel": "C1", "ts": "9.9", "user": "U1", "text": "a\ud800b"},
    {"type": "message", "channel": "", "ts": "", "user": "U1", "text": "no ids"},
    {"type": "message", "channel": ["C1"], "ts": {"x": 1}, "user": 5},
]
GOOD_SLACK = {
    "type": "app_mention",
    "channel": "C1",
    "ts": "10.1",
    "user": "U1",
    "text": "<@U0FANBOT> hi",
}


class Sink:
    def __init__(self) -> None:
        self.items: list[Inbound] = []

    async def __call__(self, inbound: Inbound) -> None:
        self.items.append(inbound)


def broken(*_: Any, **__: Any) -> Any:
    raise TypeError("a converter bug")


@pytest.fixture
async def slack_http() -> AsyncIterator[tuple[FakeSlack, str, Sink]]:
    sink = Sink()
    async with FakeSlack() as fake:
        adapter = SlackChannel(settings=fake.settings(mode="http", app_token=None))
        app = web.Application()
        app.add_routes(adapter.http_routes())
        runner = web.AppRunner(app)
        await runner.setup()
        sock = bind_loopback()
        await web.SockSite(runner, sock).start()
        await adapter.start(sink)
        try:
            yield fake, f"http://{LOOPBACK}:{sock.getsockname()[1]}/slack/events", sink
        finally:
            await adapter.stop()
            await runner.cleanup()


async def test_slack_channel_drops_malformed_events_and_keeps_going(
    slack_http: tuple[FakeSlack, str, Sink],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, url, sink = slack_http
    statuses = [(await fake.deliver_http(url, fake.event_body(e))).status for e in MALFORMED_SLACK]
    assert statuses == [200, 200, 400]  # bolt itself rejects the wrongly typed ids
    [delivered] = sink.items  # the lone surrogate was replaced, not passed on
    assert delivered.text == "a\ufffdb"

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(slack_convert, "event_to_inbound", broken)
        result = await fake.deliver_http(url, fake.event_body(GOOD_SLACK | {"ts": "11.1"}))
    assert result.status == 200  # acked: a retry would fail the same way
    assert _warned(caplog, "slack: dropped")

    result = await fake.deliver_http(url, fake.event_body(GOOD_SLACK))
    assert result.status == 200 and sink.items[-1].text == "hi"


SECRET = "s3cret"


@pytest.fixture
async def telegram_webhook() -> AsyncIterator[tuple[FakeTelegram, str, Sink]]:
    sink = Sink()
    sock = bind_loopback()
    url = f"http://{LOOPBACK}:{sock.getsockname()[1]}/tg/hook"
    async with FakeTelegram() as tg:
        channel = TelegramChannel(
            token=tg.token,
            api_url=tg.api_url,
            file_url=tg.file_url,
            webhook_url=url,
            webhook_secret=SECRET,
        )
        app = web.Application()
        app.add_routes(channel.http_routes())
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        await channel.start(sink)
        try:
            yield tg, url, sink
        finally:
            await channel.stop()
            await runner.cleanup()


async def _post(url: str, raw: str) -> int:
    headers = {SECRET_HEADER: SECRET, "Content-Type": "application/json"}
    async with ClientSession() as http, http.post(url, data=raw, headers=headers) as resp:
        return resp.status


async def test_telegram_webhook_drops_malformed_updates_and_keeps_going(
    telegram_webhook: tuple[FakeTelegram, str, Sink],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tg, url, sink = telegram_webhook
    good = {"update_id": 1, **tg.message(chat=forum(), text="@fanbot_bot go")}
    lone = copy.deepcopy(good) | {"update_id": 2}
    lone["message"]["text"] = "\ud800 go"
    bad_names = copy.deepcopy(good) | {"update_id": 3}
    bad_names["message"]["from"] = {"id": 7, "first_name": "\udcff"}
    for update in (lone, {"update_id": 4, "message": [1, 2]}, bad_names):
        # json.dumps escapes the lone surrogate exactly as a forged body would carry it
        assert await _post(url, json.dumps(update)) == 200
    [named] = sink.items
    assert named.sender.display_name == "\ufffd"

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(telegram_channel, "to_inbound", broken)
        assert await _post(url, json.dumps(good | {"update_id": 5})) == 200
    assert _warned(caplog, "telegram: dropped")

    assert await _post(url, json.dumps(good | {"update_id": 6})) == 200
    assert sink.items[-1].text == "go"


async def test_matrix_channel_drops_malformed_events_and_keeps_syncing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = MatrixSettings(homeserver="http://127.0.0.1:9", user_id=MX_BOT, password="x")  # type: ignore[arg-type]
    channel = MatrixChannel(settings=settings, store_path=tmp_path)
    sink = Sink()
    channel._sink = sink  # start() needs a homeserver; the event path below does not
    room = MatrixRoom("!r:example.org", MX_BOT)

    def nio_event(content: Any) -> Event:
        source = {
            "type": "m.room.message",
            "sender": "@a:x",
            "event_id": "$x",
            "origin_server_ts": 1,
        }
        return Event.parse_event(source | {"content": content})

    # Any room member can send these; nio hands them over as BadEvent with the raw source.
    for content in ({"msgtype": [], "body": "x"}, {"msgtype": {"a": 1}, "body": "y"}, []):
        await channel._deliver_event(nio_event(content), room)
    assert sink.items == []

    with monkeypatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(matrix_convert, "inbound_from_event", broken)
        await channel._deliver_event(nio_event({"msgtype": "m.text", "body": "hi"}), room)
    assert _warned(caplog, "matrix: dropped")

    await channel._deliver_event(nio_event({"msgtype": "m.text", "body": "hi"}), room)
    assert [i.text for i in sink.items] == ["hi"]


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"])
async def test_console_reads_on_after_undecodable_input(errors: str) -> None:
    # strict: a UTF-8 terminal's stdin; surrogateescape: Python's stdin in a C/POSIX locale.
    raw = io.BytesIO(b"hello\n\xff\xfe latin-1 \xe9\nafter\n")
    stdin = io.TextIOWrapper(raw, encoding="utf-8", errors=errors)
    sink = Sink()
    channel = ConsoleChannel(stdin=stdin, stdout=io.StringIO())
    await channel.start(sink)
    try:
        async with asyncio.timeout(10):
            await channel.eof.wait()
    finally:
        await channel.stop()
    assert [i.text for i in sink.items] == ["hello", "\ufffd\ufffd latin-1 \ufffd", "after"]
    for inbound in sink.items:
        check_inbound(inbound, "console")


def _warned(caplog: pytest.LogCaptureFixture, prefix: str) -> bool:
    return any(
        r.levelno == logging.WARNING and r.getMessage().startswith(prefix) and r.exc_info
        for r in caplog.records
    )
