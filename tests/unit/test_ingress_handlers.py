"""Which of ingress's handlers takes which message (pure: the handlers' ``match`` steps)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import pytest

from bot.commands import default_router
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.ingress import Ingress, Message
from bot.types import Inbound, RunRecord, Sender, ThreadRef

THREAD = ThreadRef(platform="slack", account="T", chat="C1", thread="1.0")
CHILD = RunRecord(
    run_id="r1",
    seq=1,
    session_key="s",
    child_session_key="s:r1",
    session_id="sid",
    thread=THREAD,
    requester="slack:U1",
    agent_id="main",
    subagent_type="general-purpose",
    task="t",
    model="m",
)


def ingress(settings: Settings | None = None) -> Ingress:
    deps = cast("Deps", SimpleNamespace(settings=settings or Settings()))  # match steps only
    return Ingress(deps=deps, router=default_router())


def message(text: str = "hello", **kw: object) -> Message:
    fields: dict[str, object] = {"mentioned": True}
    fields |= {k: kw.pop(k) for k in list(kw) if k in ("mentioned", "is_dm", "is_edit")}
    sender = cast("Sender", kw.pop("sender", Sender(user_id="U1")))
    inbound = Inbound(thread=THREAD, sender=sender, text=text, message_id="m1", **fields)  # type: ignore[arg-type]
    return replace(Message(inbound=inbound, session_key="s", job_id="j"), **kw)  # type: ignore[arg-type]


BOT = Sender(user_id="B", is_bot=True)
SELF = Sender(user_id="ME", is_self=True)


@pytest.mark.parametrize(
    ("msg", "handler"),
    [
        (message("!approve ab12cd"), "approval decision"),
        (message("!deny ab12cd", mentioned=False), "approval decision"),  # addressed by nature
        (message("!approve ab12cd", sender=BOT), "ignored"),
        (message("hello", sender=SELF), "ignored"),
        (message("hello", sender=BOT), "ignored"),
        (message("hello", is_edit=True), "ignored"),
        (message("   "), "ignored"),
        (message("hello", mentioned=False), "ignored"),  # not addressed, no session yet
        (message("hello", mentioned=False, session_exists=True), "turn"),  # a thread it is in
        (  # a child's own thread (prepare counts its session as existing)
            message("hello", mentioned=False, bound=CHILD, session_exists=True),
            "bound thread",
        ),
        (message("/subagents list"), "command"),
        (message("/nosuchcommand"), "command"),  # any /word is answered, never a turn
        (message("/subagents list", bound=CHILD), "command"),
        (message("/usr/bin/env is a path"), "turn"),
        (message("hello", bound=CHILD), "bound thread"),
        (message("hello"), "turn"),
        (message("x" * 10, cut=5), "turn"),  # the cut note passes it on
        (message("hello", is_dm=True, mentioned=False), "turn"),
    ],
)
def test_route(msg: Message, handler: str) -> None:
    assert ingress().route(msg).name == handler


def test_the_order_is_the_documented_one() -> None:
    names = [h.name for h in ingress().handlers]
    assert names == [
        "approval decision",
        "ignored",
        "message limit",
        "cut note",
        "command",
        "bound thread",
        "turn",
    ]
    assert [h.name for h in ingress().handlers if not h.final] == ["message limit", "cut note"]


ALLOW_U1 = Settings(slack={"allow_users": ["U1"]})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("msg", "handler"),
    [
        (message("!approve ab12cd"), "approval decision"),
        (message("!approve ab12cd", sender=Sender(user_id="U9")), "ignored"),  # not allowed
        (message("!deny ab12cd", sender=Sender(user_id="U9"), mentioned=False), "ignored"),
        (message("hello", sender=Sender(user_id="U9")), "ignored"),  # the same answer: none
    ],
)
def test_decisions_pass_the_access_policy_first(msg: Message, handler: str) -> None:
    assert ingress(ALLOW_U1).route(msg).name == handler
