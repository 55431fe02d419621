"""Any ``/word`` at the start of a message is a command: known ones run, unknown ones get
"Unknown command", on every platform; a path such as ``/usr/bin`` is text for the model."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from bot.commands import default_router
from bot.commands.parse import parse_command
from bot.commands.registry import HELP_TEXT
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.ingress import Ingress
from bot.types import Inbound, Sender, ThreadRef

UNKNOWN_FOO = "Unknown command `/foo`. Try `/help`."


@pytest.mark.parametrize(
    ("text", "is_word"),
    [
        ("/foo", True),
        ("/foo bar baz", True),
        ("  /Foo\tbar", True),
        ("/start", True),
        ("/my_cmd-2 x", True),
        ("/usr/bin is where python lives", False),
        ("/r/python is great", False),
        ("/foo, what is this?", False),
        ("/über", False),
    ],
)
def test_a_command_is_a_slash_and_one_word(text: str, is_word: bool) -> None:
    command = parse_command(text)
    assert command is not None and command.is_word is is_word


@pytest.mark.parametrize("text", ["hello /foo", "/", "/ foo", "/123", "path /usr/bin"])
def test_text_that_is_no_command(text: str) -> None:
    assert parse_command(text) is None


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    built = Deps.build(Settings(redis_url=redis_url))
    yield built
    built.close()


def said(deps: Deps, key: str) -> list[str]:
    entries = [json.loads(f[b"data"]) for _, f in deps.redis.xrange(deps.keys.outbox)]
    return [str(e["text"]) for e in entries if e["idempotency_key"] == key]


@pytest.mark.parametrize("platform", ["console", "slack", "telegram", "matrix"])
@pytest.mark.parametrize(
    ("text", "answer"),
    [("/foo", UNKNOWN_FOO), ("/foo please do x", UNKNOWN_FOO), ("/start", HELP_TEXT)],
)
def test_ingress_answers_every_command_word(
    deps: Deps, platform: str, text: str, answer: str
) -> None:
    event = uuid.uuid4().hex
    inbound = Inbound(
        thread=ThreadRef(platform=platform, account="a", chat="c", thread="t"),
        sender=Sender(user_id="u1"),
        text=text,
        message_id=event,
        mentioned=True,
    )
    result = Ingress(deps=deps, router=default_router()).handle(inbound)
    assert result.job_id is None  # no model turn, so no subagent either
    assert said(deps, f"cmd:{platform}:{event}") == [answer]


def test_a_path_at_the_start_goes_to_the_model(deps: Deps) -> None:
    event = uuid.uuid4().hex
    inbound = Inbound(
        thread=ThreadRef(platform="console", account="a", chat="c", thread="t"),
        sender=Sender(user_id="u1"),
        text="/usr/bin/python3 crashes, why?",
        message_id=event,
        mentioned=True,
    )
    result = Ingress(deps=deps, router=default_router()).handle(inbound)
    assert result.job_id is not None
    assert said(deps, f"cmd:console:{event}") == []
