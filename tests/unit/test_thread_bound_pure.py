"""Pure parts of thread-bound children: titles, keys, links, what people are told."""

from __future__ import annotations

import pytest

from adapters.matrix.convert import event_link
from adapters.telegram.convert import BotIdentity, destination, reply_root, to_inbound, topic_link
from bot.runs.thread_children import open_key, opened_messages, run_of_open_key, thread_title
from bot.store.threads import Binding, BindState
from bot.types import RunRecord, ThreadRef

PARENT = ThreadRef(platform="telegram", account="42", chat="-1001", thread=None)
CHILD = ThreadRef(platform="telegram", account="42", chat="-1001", thread="7")


def record(task: str = "map the repo", label: str = "") -> RunRecord:
    return RunRecord(
        run_id="r1", seq=3, session_key="s", child_session_key="c", session_id="i",
        thread=PARENT, requester="telegram:1", agent_id="main", subagent_type="explore",
        task=task, model="m", label=label,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("task", "label", "title"),
    [
        ("map the repo", "", "#3 explore: map the repo"),
        ("map\n  the   repo", "", "#3 explore: map the repo"),
        ("x", "Docs", "#3 explore: Docs"),
        ("y" * 300, "", "#3 explore: " + "y" * 83 + "…"),
    ],
)
def test_thread_title(task: str, label: str, title: str) -> None:
    assert thread_title(record(task, label)) == title
    assert len(thread_title(record(task, label))) <= 96


def test_open_key_round_trips() -> None:
    assert run_of_open_key(open_key("abc")) == "abc"
    assert run_of_open_key("announce:abc") == ""


@pytest.mark.parametrize(
    ("chat", "topic", "link"),
    [
        (-1001234567890, 55, "https://t.me/c/1234567890/55"),
        (-1001234567890, 1, "topic “T”"),  # the General topic has no link of its own
        (-4567, 55, "topic “T”"),  # a basic group: no t.me/c link
    ],
)
def test_topic_link(chat: int, topic: int, link: str) -> None:
    assert topic_link(chat, topic, name="T") == link


def test_event_link() -> None:
    assert event_link("!abc:hs.org", "$ev1") == "https://matrix.to/#/!abc:hs.org/$ev1"
    assert event_link("!a b:hs", "$e/1") == "https://matrix.to/#/!a%20b:hs/$e%2F1"


def test_opened_messages_name_the_thread_or_say_why_not() -> None:
    bound = Binding(run_id="r1", parent=PARENT, child=CHILD, link="L", state=BindState.BOUND)
    intro, note = opened_messages(bound, record())
    assert intro.thread == CHILD and "/subagents close 3" in intro.text
    assert note.thread == PARENT and note.text == "🧵 subagent #3 (explore) works in L"
    failed = Binding(run_id="r1", parent=PARENT, state=BindState.UNAVAILABLE, note="no forum")
    (only,) = opened_messages(failed, record())
    assert only.thread == PARENT and "no forum" in only.text and "it reports here" in only.text


def test_binding_round_trips() -> None:
    b = Binding(run_id="r", parent=PARENT, child=CHILD, link="L", title="T", state=BindState.BOUND)
    assert Binding.from_json(b.to_json()) == b
    pending = Binding(run_id="r", parent=PARENT)
    assert Binding.from_json(pending.to_json()) == pending


@pytest.mark.parametrize(
    ("thread", "root", "dest"),
    [
        ("reply:77", 77, (-1001, None)),
        ("12", None, (-1001, 12)),
        (None, None, (-1001, None)),
    ],
)
def test_telegram_reply_threads_are_sent_as_replies(
    thread: str | None, root: int | None, dest: tuple[int, int | None]
) -> None:
    ref = ThreadRef(platform="telegram", account="42", chat="-1001", thread=thread)
    assert reply_root(ref) == root
    assert destination(ref) == dest


def test_a_reply_in_a_group_without_topics_names_its_reply_thread() -> None:
    me = BotIdentity(id=42, username="fanbot_bot")
    base = {"date": 0, "chat": {"id": -1001, "type": "supergroup"}, "text": "hi"}
    person = {"id": 7, "is_bot": False, "first_name": "Ann"}
    reply = {"update_id": 1, "message": {**base, "message_id": 9, "from": person,
             "message_thread_id": 5, "reply_to_message": {**base, "message_id": 5}}}  # fmt: skip
    plain = {"update_id": 2, "message": {**base, "message_id": 10, "from": person}}
    topic = {"update_id": 3, "message": {**base, "message_id": 11, "from": person,
             "message_thread_id": 5, "is_topic_message": True}}  # fmt: skip
    got = [to_inbound(u, me=me) for u in (reply, plain, topic)]
    assert [(i.thread.thread, i.reply_thread) for i in got if i] == [
        (None, "reply:5"), (None, None), ("5", None)
    ]  # fmt: skip
