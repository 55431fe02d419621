"""``/new``, ``/model``, ``/status`` and ``/usage`` against real Redis, the real turn
function and the real ``openai`` SDK talking to :class:`FakeOpenAI` (docs/chat-commands.md):
a model switched with ``/model`` is the one the next turn asks for; ``/new`` leaves the next
turn without the thread's earlier messages; spend shows in ``/status`` and ``/usage``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bot.agent.router import ModelRouter
from bot.agent.turn import execute_turn
from bot.commands import default_router
from bot.commands.parse import parse_command
from bot.commands.router import CommandRequest
from bot.config import Settings
from bot.deps import Deps
from bot.store.jobs import TurnJob
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import ScriptedModel, Text
from bot.types import Inbound, RunRecord, Sender, ThreadRef

SESSION = "agent:main:console:c:thread:t"
THREAD = {"platform": "console", "account": "a", "chat": "c", "thread": "t"}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    model = ScriptedModel(default=lambda r: Text(f"{r.model} answers"))
    with FakeOpenAI(model, models=["fake-model", "fake-big", "fake-admin", "qwen3"]) as server:
        yield server


@pytest.fixture
def deps(redis_url: str, fake: FakeOpenAI) -> Iterator[Deps]:
    settings = Settings(
        redis_url=redis_url,
        openai={  # type: ignore[arg-type]
            "base_url": fake.base_url,
            "model": "fake-model",
            "models": ["fake-model", "fake-big", "fake-admin"],
            "max_retries": 0,
        },
        models={  # type: ignore[arg-type]
            "endpoints": {"local": {"base_url": fake.base_url, "model": "qwen3"}},
            "allowed": ["fake-big", "local/qwen3"],
        },
        budgets={"thread_daily_tokens": 1_000_000},  # type: ignore[arg-type]
        admins=["console:root"],
    )
    made = Deps.build(settings)
    yield made
    made.close()


def say(deps: Deps, text: str, *, user: str = "alice") -> str:
    inbound = Inbound(
        thread=ThreadRef(**THREAD), sender=Sender(user_id=user, display_name=user.title()),
        text=text, message_id=f"cmd-{text}",
    )  # fmt: skip
    command = parse_command(text)
    assert command is not None
    return default_router().dispatch(
        CommandRequest(command=command, inbound=inbound, session_key=SESSION, deps=deps)
    )


def turn(deps: Deps, i: int, text: str) -> str:
    job = TurnJob(
        session_key=SESSION, thread=THREAD, platform="console", sender_id="alice",
        sender_name="Alice", text=text, message_id=f"m{i}",
    )  # fmt: skip
    model = ModelRouter(deps.settings)  # as a worker builds it (workers/context.py)
    try:
        return execute_turn(deps, model, job)
    finally:
        model.close()


def test_a_switched_model_is_the_one_the_next_turn_asks_for(deps: Deps, fake: FakeOpenAI) -> None:
    assert turn(deps, 1, "hello") == "fake-model answers"
    shown = say(deps, "/model")
    assert "`fake-model` (the agent's)" in shown
    assert "`fake-big`" in shown and "`local/qwen3`" in shown

    assert "now uses `fake-big`" in say(deps, "/model fake-big")
    assert turn(deps, 2, "again") == "fake-big answers"
    assert fake.requests[-1].body["model"] == "fake-big"
    assert "`fake-big` (set with `/model`" in say(deps, "/model")
    assert 0 < deps.redis.ttl(deps.keys.session_model(SESSION)) <= 30 * 86_400

    # endpoint/model reaches that endpoint's model name
    assert "now uses `local/qwen3`" in say(deps, "/subagents model local/qwen3")
    assert turn(deps, 3, "third") == "qwen3 answers"

    assert "back on the agent's model" in say(deps, "/model default")
    assert deps.thread_models.get(SESSION) is None
    assert turn(deps, 4, "fourth") == "fake-model answers"
    assert "already uses the agent's model" in say(deps, "/model reset")


def test_switching_is_limited_to_the_allowed_list_and_admins_pick_any_configured(
    deps: Deps, fake: FakeOpenAI
) -> None:
    refused = say(deps, "/model fake-admin")
    assert "not one of the models you may pick" in refused and "An admin can" in refused
    assert deps.thread_models.get(SESSION) is None

    assert "any configured model" in say(deps, "/model", user="root")
    assert "not a configured model" in say(deps, "/model gpt-nope", user="root")
    assert "now uses `fake-admin`" in say(deps, "/model fake-admin", user="root")
    assert turn(deps, 1, "hi") == "fake-admin answers"
    # someone else may still go back to an allowed one
    assert "now uses `fake-big`" in say(deps, "/model fake-big")
    assert "takes one model name" in say(deps, "/model a b")
    assert "is not a model name" in say(deps, "/model `rm;-rf`")


def test_new_forgets_the_thread_and_keeps_its_model_and_runs(deps: Deps, fake: FakeOpenAI) -> None:
    turn(deps, 1, "remember the word pelican")
    deps.summaries.replace(SESSION, "an old summary", covered=[])
    say(deps, "/model fake-big")
    deps.runs.create(_run(deps))

    answer = say(deps, "/new")
    assert "forgot this thread's 2 earlier message(s)" in answer
    assert "1 subagent run(s) still going here keep going" in answer
    assert "keeps its model, `fake-big`" in answer
    assert deps.history.load(SESSION) == [] and deps.summaries.get(SESSION) is None

    turn(deps, 2, "what was the word?")
    sent = fake.requests[-1].body
    assert sent["model"] == "fake-big"
    assert "pelican" not in str(sent["messages"]) and "old summary" not in str(sent["messages"])
    assert "forgot this thread's 2 earlier message(s)" in say(deps, "/reset")  # the alias
    assert "nothing to forget" in say(deps, "/subagents new")


def test_status_and_usage_show_todays_spend_and_the_budget_left(deps: Deps) -> None:
    empty = say(deps, "/usage")
    assert "• You: 0 tokens" in empty and "This thread in all" in empty
    turn(deps, 1, "hello")
    status = say(deps, "/status")
    assert "Model: `fake-model` (the agent's)" in status
    assert "Subagents: none running here" in status
    assert "Left today: this thread" in status and "of 1M tokens" in status
    assert "this thread 0 tokens" not in status
    usage = say(deps, "/usage")
    assert "• You: 0 tokens" not in usage and "of 1M tokens" in usage
    assert say(deps, "/subagents usage") == usage
    deps.runs.create(_run(deps))
    assert "Subagents: 0 running, 1 queued" in say(deps, "/status")


def _run(deps: Deps) -> RunRecord:
    return RunRecord(
        run_id="r1", seq=deps.runs.next_seq(SESSION), session_key=SESSION,
        child_session_key="agent:main:subagent:r1", session_id="s-r1",
        thread=ThreadRef(**THREAD), requester="console:alice", agent_id="main",
        subagent_type="general-purpose", task="t", model="m", created_at=time.time(),
        job_id="r1",
    )  # fmt: skip
