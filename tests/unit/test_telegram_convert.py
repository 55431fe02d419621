"""Telegram update JSON -> Inbound: threads, addressing, commands, drops (pure, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.telegram.convert import (
    BotIdentity,
    destination,
    thread_of,
    to_inbound,
    unowned_callback,
)
from bot.types import ThreadRef

ME = BotIdentity(id=4242, username="fanbot_bot")
ANN = {"id": 1001, "is_bot": False, "first_name": "Ann", "last_name": "Lee"}
FORUM = {"id": -1001, "type": "supergroup", "title": "F", "is_forum": True}
GROUP = {"id": -1002, "type": "supergroup", "title": "G"}
DM = {"id": 1001, "type": "private", "first_name": "Ann"}
BOT_USER = {"id": 4242, "is_bot": True, "first_name": "fanbot", "username": "fanbot_bot"}


def msg(chat: dict[str, Any], text: str | None = "hi", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message_id": 77, "date": 1, "chat": chat, "from": ANN}
    if text is not None:
        body["text"] = text
    body.update(extra)
    return {"update_id": 9, "message": body}


def ent(kind: str, offset: int, length: int, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "offset": offset, "length": length, **extra}


def test_forum_topic_message_maps_to_topic_thread() -> None:
    inbound = to_inbound(msg(FORUM, message_thread_id=5, is_topic_message=True), me=ME)
    assert inbound is not None
    assert inbound.thread == ThreadRef(
        platform="telegram", account="4242", chat="-1001", thread="5"
    )
    assert inbound.sender.user_id == "1001"
    assert inbound.sender.display_name == "Ann Lee"
    assert (inbound.message_id, inbound.event_id) == ("77", "-1001:77")
    assert not inbound.is_dm and not inbound.is_edit and not inbound.mentioned


def test_general_topic_has_no_thread() -> None:
    inbound = to_inbound(msg(FORUM), me=ME)
    assert inbound is not None and inbound.thread.thread is None


def test_non_forum_reply_chain_thread_id_is_not_a_topic() -> None:
    # In plain supergroups message_thread_id marks a reply chain, not a topic.
    inbound = to_inbound(msg(GROUP, message_thread_id=50), me=ME)
    assert inbound is not None
    assert inbound.thread == ThreadRef(platform="telegram", account="4242", chat="-1002")


def test_dm_is_dm_and_addressed() -> None:
    inbound = to_inbound(msg(DM, "what's up"), me=ME)
    assert inbound is not None
    assert inbound.is_dm and inbound.mentioned
    assert inbound.thread.chat == "1001" and inbound.thread.thread is None


@pytest.mark.parametrize(
    ("text", "entities", "expected_text", "mentioned"),
    [
        ("@fanbot_bot hello", [ent("mention", 0, 11)], "hello", True),
        ("hello @FanBot_Bot", [ent("mention", 6, 11)], "hello", True),
        ("🙂 @fanbot_bot go", [ent("mention", 3, 11)], "🙂 go", True),
        ("@someone_else hi", [ent("mention", 0, 13)], "@someone_else hi", False),
        ("fanbot do it", [ent("text_mention", 0, 6, user=BOT_USER)], "do it", True),
        ("/subagents list", [ent("bot_command", 0, 10)], "/subagents list", True),
        ("/subagents@fanbot_bot list", [ent("bot_command", 0, 21)], "/subagents list", True),
        ("/Stop@FANBOT_BOT", [ent("bot_command", 0, 16)], "/stop", True),
        ("/reset", [ent("bot_command", 0, 6)], "/reset", True),
        ("/model@fanbot_bot x", [ent("bot_command", 0, 17)], "/model x", True),
        ("/weather paris", [ent("bot_command", 0, 8)], "/weather paris", False),
        ("/weather@fanbot_bot", [ent("bot_command", 0, 19)], "/weather", True),
        ("plain chatter", [], "plain chatter", False),
    ],
)
def test_group_addressing(
    text: str, entities: list[dict[str, Any]], expected_text: str, mentioned: bool
) -> None:
    inbound = to_inbound(msg(GROUP, text, entities=entities), me=ME)
    assert inbound is not None
    assert (inbound.text, inbound.mentioned) == (expected_text, mentioned)


def test_command_for_another_bot_is_dropped() -> None:
    update = msg(GROUP, "/subagents@other_bot list", entities=[ent("bot_command", 0, 20)])
    assert to_inbound(update, me=ME) is None


def test_reply_to_the_bot_is_addressed() -> None:
    replied = {"message_id": 3, "date": 1, "chat": GROUP, "from": BOT_USER, "text": "earlier"}
    inbound = to_inbound(msg(GROUP, "thanks", reply_to_message=replied), me=ME)
    assert inbound is not None and inbound.mentioned


def test_reply_to_someone_else_is_not_addressed() -> None:
    replied = {"message_id": 3, "date": 1, "chat": GROUP, "from": ANN, "text": "earlier"}
    inbound = to_inbound(msg(GROUP, "thanks", reply_to_message=replied), me=ME)
    assert inbound is not None and not inbound.mentioned


def test_topic_root_created_by_the_bot_does_not_count_as_reply() -> None:
    root = {
        "message_id": 5, "date": 1, "chat": FORUM, "from": BOT_USER,
        "forum_topic_created": {"name": "t", "icon_color": 1},
    }  # fmt: skip
    update = msg(FORUM, "chatter", message_thread_id=5, is_topic_message=True,
                 reply_to_message=root)  # fmt: skip
    inbound = to_inbound(update, me=ME)
    assert inbound is not None and not inbound.mentioned and inbound.thread.thread == "5"


def test_edited_message_is_an_edit_with_its_own_event_id() -> None:
    update = {"update_id": 10, "edited_message": {**msg(GROUP)["message"], "edit_date": 99}}
    inbound = to_inbound(update, me=ME)
    assert inbound is not None and inbound.is_edit
    assert inbound.event_id == "-1002:77:edit:99"


def test_own_and_other_bots_messages_are_flagged() -> None:
    own = to_inbound({"update_id": 1, "message": {**msg(GROUP)["message"], "from": BOT_USER}},
                     me=ME)  # fmt: skip
    assert own is not None and own.sender.is_self and own.sender.is_bot


def test_caption_counts_as_text() -> None:
    update = msg(GROUP, None, caption="@fanbot_bot look", caption_entities=[ent("mention", 0, 11)])
    inbound = to_inbound(update, me=ME)
    assert inbound is not None and (inbound.text, inbound.mentioned) == ("look", True)


def test_anonymous_admin_speaks_as_the_chat() -> None:
    anon = {
        "id": 1087968824,
        "is_bot": True,
        "first_name": "Group",
        "username": "GroupAnonymousBot",
    }
    inbound = to_inbound(msg(GROUP, "hey", **{"from": anon, "sender_chat": GROUP}), me=ME)
    assert inbound is not None
    assert (inbound.sender.user_id, inbound.sender.is_bot) == ("-1002", False)


@pytest.mark.parametrize(
    "update",
    [
        msg(FORUM, None, message_thread_id=5, forum_topic_created={"name": "x", "icon_color": 1}),
        msg(GROUP, None, new_chat_members=[ANN]),
        msg(GROUP, None, sticker={"file_id": "x"}),
        {"update_id": 1, "channel_post": {"message_id": 1, "date": 1, "chat": {"id": -5, "type": "channel"}, "text": "x"}},
        {"update_id": 1, "message": {**msg(GROUP)["message"], "is_automatic_forward": True}},
        {"update_id": 1, "callback_query": {"id": "1"}},
        {"update_id": "nope"},
        {"update_id": 1, "message": {"message_id": 1}},
        {"update_id": 1, "message": {**msg(GROUP)["message"], "chat": "not a chat"}},
        {"update_id": 1, "message": {**msg(GROUP)["message"], "entities": [{"type": "mention"}]}},
        msg(GROUP, "🙂x", entities=[ent("mention", 1, 2)]),  # splits a surrogate pair
        {},
    ],
    ids=[
        "topic-created", "new-members", "sticker", "channel-post", "auto-forward",
        "callback", "bad-update-id", "no-chat", "chat-not-object", "bad-entity",
        "entity-splits-surrogate", "empty",
    ],
)  # fmt: skip
def test_non_conversation_or_malformed_updates_are_dropped(update: dict[str, Any]) -> None:
    assert to_inbound(update, me=ME) is None


def test_destination_omits_general_topic() -> None:
    assert destination(thread_of(-1001, None, me=ME)) == (-1001, None)
    assert destination(thread_of(-1001, 1, me=ME)) == (-1001, None)
    general = ThreadRef(platform="telegram", account="4242", chat="-1001", thread="1")
    assert destination(general) == (-1001, None)
    assert destination(thread_of(-1001, 5, me=ME)) == (-1001, 5)


def test_destination_rejects_foreign_refs() -> None:
    with pytest.raises(ValueError):
        destination(ThreadRef(platform="slack", account="T1", chat="C123", thread="1.2"))


def press(data: str | None, *, message: bool = True, **extra: Any) -> dict[str, Any]:
    query: dict[str, Any] = {"id": "q1", "from": ANN, "chat_instance": "ci", **extra}
    if data is not None:
        query["data"] = data
    if message:
        query["message"] = {**msg(FORUM)["message"], "from": BOT_USER}
    return {"update_id": 3, "callback_query": query}


@pytest.mark.parametrize("data", ["!approve 3f9a0b1c", "!deny 3f9a0b1c", "/approve 3F9A0B1C"])
def test_a_press_of_our_button_is_an_addressed_inbound(data: str) -> None:
    update = press(data)
    inbound = to_inbound(update, me=ME)
    assert inbound is not None
    assert (inbound.text, inbound.callback, inbound.mentioned) == (data, "q1", True)
    assert inbound.event_id == "callback:q1"
    assert unowned_callback(update) is None


@pytest.mark.parametrize(
    "update",
    [
        press("action_accept"),
        press("!approve"),  # no approval id
        press("approve 3f9a0b1c"),  # not as typed
        press('{"k": "v"}'),
        press(None, game_short_name="tetris"),
        press("!approve 3f9a0b1c", message=False, inline_message_id="im1"),
        press("Data from button callback", message=False, inline_message_id="im1"),
        {"update_id": 4, "callback_query": {"id": "q1", "message": "not a message"}},
    ],
    ids=["foreign", "no-id", "no-bang", "json", "game", "inline-ours", "inline", "malformed"],
)
def test_a_press_of_any_other_button_is_answered_and_starts_nothing(
    update: dict[str, Any],
) -> None:
    assert to_inbound(update, me=ME) is None
    assert unowned_callback(update) == "q1"


@pytest.mark.parametrize(
    "update",
    [msg(DM), {"update_id": 1, "callback_query": {"from": ANN}}, {"update_id": 1}, {}],
    ids=["message", "no-query-id", "no-kind", "empty"],
)
def test_only_a_button_press_with_an_id_is_unowned(update: dict[str, Any]) -> None:
    assert unowned_callback(update) is None
