"""Matrix event dicts → Inbound, and outgoing content (pure, fixture-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.matrix import convert
from adapters.matrix.convert import RoomContext, inbound_from_event
from bot.types import ThreadRef

BOT = "@fanbot:example.org"
ROOM = "!room:example.org"
GROUP = RoomContext(room_id=ROOM, bot_user_id=BOT, bot_display_name="FanBot", member_count=5)
DM = RoomContext(room_id=ROOM, bot_user_id=BOT, bot_display_name="FanBot", member_count=2)


def event(content: dict[str, Any], *, sender: str = "@alice:example.org", eid: str = "$ev") -> Any:
    return {"type": "m.room.message", "sender": sender, "event_id": eid, "content": content}


def where(thread: str | None) -> ThreadRef:
    return ThreadRef(platform="matrix", account=BOT, chat=ROOM, thread=thread)


def test_message_in_a_thread_belongs_to_its_root() -> None:
    content = {
        "msgtype": "m.text",
        "body": "more details",
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": "$root",
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": "$prev"},
        },
    }
    got = inbound_from_event(event(content), room=GROUP, sender_name="Alice")
    assert got is not None
    assert got.thread == where("$root")
    assert got.text == "more details"
    assert not got.mentioned and not got.is_dm and not got.is_edit
    assert got.sender.display_name == "Alice" and not got.sender.is_bot


@pytest.mark.parametrize("rel_type", ["m.thread", "io.element.thread"])
def test_a_mention_inside_a_thread_is_answered_in_that_thread(rel_type: str) -> None:
    # io.element.thread: what Element sent before threads were in the spec (ruma reads it too).
    content = {
        "msgtype": "m.text",
        "body": "FanBot: and you?",
        "m.relates_to": {"rel_type": rel_type, "event_id": "$root"},
    }
    got = inbound_from_event(event(content, eid="$m"), room=GROUP)
    assert got is not None and got.mentioned
    assert got.thread == where("$root")
    assert got.text == "and you?"


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ({"body": "FanBot: what is up", "m.mentions": {"user_ids": [BOT]}}, "what is up"),
        ({"body": f"{BOT} what is up"}, "what is up"),
        ({"body": "hey fanbot, look"}, "hey fanbot, look"),
    ],
)
def test_timeline_mention_opens_a_thread_at_the_message(content: dict[str, Any], text: str) -> None:
    got = inbound_from_event(event({"msgtype": "m.text", **content}, eid="$m"), room=GROUP)
    assert got is not None and got.mentioned
    assert got.thread == where("$m")
    assert got.text == text


def test_timeline_mention_stays_in_timeline_when_thread_replies_off() -> None:
    room = RoomContext(room_id=ROOM, bot_user_id=BOT, member_count=5, thread_replies=False)
    content = {"msgtype": "m.text", "body": "hi", "m.mentions": {"user_ids": [BOT]}}
    got = inbound_from_event(event(content), room=room)
    assert got is not None and got.mentioned and got.thread == where(None)


def test_unmentioned_timeline_message_is_delivered_unmentioned() -> None:
    got = inbound_from_event(event({"msgtype": "m.text", "body": "lunch?"}), room=GROUP)
    assert got is not None and not got.mentioned and got.thread == where(None)


def test_name_inside_a_word_is_no_mention() -> None:
    got = inbound_from_event(event({"msgtype": "m.text", "body": "superfanbots"}), room=GROUP)
    assert got is not None and not got.mentioned


def test_dm_message_is_dm_in_the_timeline() -> None:
    got = inbound_from_event(event({"msgtype": "m.text", "body": "hello"}), room=DM)
    assert got is not None and got.is_dm and got.thread == where(None)


def test_edit_is_flagged_and_uses_the_new_content() -> None:
    content = {
        "msgtype": "m.text",
        "body": "* fixed",
        "m.new_content": {"msgtype": "m.text", "body": "fixed"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$orig"},
    }
    got = inbound_from_event(event(content), room=GROUP)
    assert got is not None and got.is_edit and got.text == "fixed"


def test_notice_from_another_bot_is_marked_bot() -> None:
    content = {"msgtype": "m.notice", "body": "build passed"}
    got = inbound_from_event(event(content, sender="@ci:example.org"), room=GROUP)
    assert got is not None and got.sender.is_bot and not got.sender.is_self


def test_own_message_is_self() -> None:
    got = inbound_from_event(event({"msgtype": "m.text", "body": "x"}, sender=BOT), room=GROUP)
    assert got is not None and got.sender.is_self


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "m.room.member", "sender": "@a:b", "event_id": "$e", "content": {}},
        event({"msgtype": "m.image", "body": "cat.png"}),
        event({"msgtype": "m.text"}),
        event({"msgtype": "m.text", "body": 42}),
        {"type": "m.room.message", "sender": "@a:b", "event_id": "$e", "content": "nope"},
        {"type": "m.room.message", "event_id": "$e", "content": {"msgtype": "m.text", "body": "x"}},
        {"type": "m.room.message", "sender": "@a:b", "content": {"msgtype": "m.text", "body": "x"}},
        event({"msgtype": "m.text", "body": "x", "m.relates_to": {"rel_type": "m.replace"}}),
    ],
)
def test_malformed_or_non_text_events_are_dropped(raw: dict[str, Any]) -> None:
    assert inbound_from_event(raw, room=GROUP) is None


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("!subagents list", "/subagents list"),
        ("FanBot: !subagents info 1", "/subagents info 1"),
        ("!STOP", "/stop"),
        ("!help", "/help"),
        ("!new", "/new"),
        ("!Reset", "/reset"),
        ("!model local/qwen3", "/model local/qwen3"),
        ("!status", "/status"),
        ("!usage", "/usage"),
        ("/subagents list", "/subagents list"),
        ("!subagentsx", "!subagentsx"),
        ("say !subagents", "say !subagents"),
    ],
)
def test_bang_commands_are_normalized(body: str, text: str) -> None:
    got = inbound_from_event(event({"msgtype": "m.text", "body": body}), room=GROUP)
    assert got is not None and got.text == text


def test_a_command_addresses_the_bot_where_it_was_written() -> None:
    timeline = inbound_from_event(
        event({"msgtype": "m.text", "body": "!subagents list"}), room=GROUP
    )
    assert timeline is not None and timeline.mentioned and timeline.thread == where(None)
    content = {
        "msgtype": "m.text",
        "body": "!stop",
        "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"},
    }
    inside = inbound_from_event(event(content), room=GROUP)
    assert inside is not None and inside.mentioned and inside.thread == where("$root")
    assert inside.text == "/stop"


def test_reply_fallback_is_stripped() -> None:
    content = {
        "msgtype": "m.text",
        "body": "> <@bob:example.org> earlier words\n> more\n\nmy answer",
        "m.relates_to": {"m.in_reply_to": {"event_id": "$earlier"}},
    }
    got = inbound_from_event(event(content), room=GROUP)
    assert got is not None and got.text == "my answer"


def test_thread_message_content_carries_the_reply_fallback() -> None:
    content = convert.message_content(
        body="hi", html="<b>hi</b>", msgtype="m.text", thread="$root", latest="$last"
    )
    assert content == {
        "msgtype": "m.text",
        "body": "hi",
        "format": "org.matrix.custom.html",
        "formatted_body": "<b>hi</b>",
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": "$root",
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": "$last"},
        },
    }


def test_timeline_message_content_has_no_relation() -> None:
    content = convert.message_content(
        body="hi", html=None, msgtype="m.notice", thread=None, latest=None
    )
    assert content == {"msgtype": "m.notice", "body": "hi"}


def test_edit_content_replaces_with_star_fallback() -> None:
    content = convert.edit_content(original="$s", body="done", html=None, msgtype="m.notice")
    assert content == {
        "msgtype": "m.notice",
        "body": "* done",
        "m.new_content": {"msgtype": "m.notice", "body": "done"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$s"},
    }


@pytest.mark.parametrize(
    ("inviter", "allow", "join_any", "expected"),
    [
        ("@a:x", ["@a:x"], False, True),
        ("@b:x", ["@a:x"], False, False),
        ("@b:x", [], False, False),
        (None, [], True, True),
        (None, ["@a:x"], False, False),
    ],
)
def test_may_join(inviter: str | None, allow: list[str], join_any: bool, expected: bool) -> None:
    assert convert.may_join(inviter, allow_users=allow, join_any=join_any) is expected


def test_limit_exceeded_maps_to_retry_after() -> None:
    error = convert.delivery_error(errcode="M_LIMIT_EXCEEDED", message="slow", retry_after_ms=2500)
    assert error.retry_after == 2.5 and not error.permanent


@pytest.mark.parametrize(
    ("errcode", "permanent"), [("M_FORBIDDEN", True), ("M_UNKNOWN", False), (None, False)]
)
def test_other_errors_map_to_permanence(errcode: str | None, permanent: bool) -> None:
    error = convert.delivery_error(errcode=errcode, message="x")
    assert error.permanent is permanent and error.retry_after is None


SEALED = {
    "url": "mxc://example.org/abc",
    "key": {"kty": "oct", "alg": "A256CTR", "k": "KEY", "key_ops": ["decrypt"], "ext": True},
    "iv": "IV",
    "hashes": {"sha256": "HASH"},
    "v": "v2",
}


def test_encrypted_file_event_is_delivered_with_its_keys() -> None:
    raw = event(
        {
            "msgtype": "m.file",
            "body": "a.txt",
            "file": SEALED,
            "info": {"mimetype": "text/plain", "size": 3},
            "m.mentions": {"user_ids": [BOT]},
        }
    )
    got = inbound_from_event(raw, room=GROUP)
    assert got is not None and got.mentioned and got.text == ""
    [ref] = convert.file_refs(raw)
    assert ref == convert.EncryptedFileRef(
        name="a.txt",
        source="mxc://example.org/abc",
        content_type="text/plain",
        size=3,
        key="KEY",
        iv="IV",
        sha256="HASH",
    )


def test_encrypted_file_with_broken_keys_is_kept_to_fail_decryption() -> None:
    raw = event({"msgtype": "m.file", "body": "a.txt", "file": {**SEALED, "key": "nope"}})
    [ref] = convert.file_refs(raw)
    assert isinstance(ref, convert.EncryptedFileRef) and ref.key == ""
    no_url = event({"msgtype": "m.file", "body": "a.txt", "file": {**SEALED, "url": 3}})
    assert inbound_from_event(no_url, room=GROUP) is None and convert.file_refs(no_url) == []


def test_file_content_puts_keys_and_url_in_file_when_encrypted() -> None:
    keys = {k: v for k, v in SEALED.items() if k != "url"}
    common: dict[str, Any] = {"name": "r.txt", "content_type": "text/plain", "size": 2}
    sealed = convert.file_content(**common, url="mxc://x/y", keys=keys, thread=None, latest=None)
    assert sealed["file"] == {**keys, "url": "mxc://x/y"} and "url" not in sealed
    plain = convert.file_content(**common, url="mxc://x/y", thread=None, latest=None)
    assert plain["url"] == "mxc://x/y" and "file" not in plain
