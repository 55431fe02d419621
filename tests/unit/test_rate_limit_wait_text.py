"""A run waiting for the model's rate limit says so on its status card and in
``/subagents list``, and stops saying so when the wait ends (issue 27)."""

from __future__ import annotations

from typing import Any, cast

from bot.agent.context import ToolContext
from bot.agent.llm import WAITING_FOR_RATE_LIMIT
from bot.agent.loop import run_loop
from bot.commands.answers import render_list
from bot.gateway.status_cards import status_text
from bot.models.completion import Completion, CompletionRequest
from bot.steps import LoopControl, Meter
from bot.types import RunRecord, RunStatus, ThreadRef

THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")


class _WaitingModel:
    """Waits for the rate limit (as :class:`bot.agent.llm.OpenAIChatModel` tells it), then answers."""

    base_url = "http://model.test/v1"

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def complete(self, request: CompletionRequest) -> Completion:
        assert request.on_wait is not None
        request.on_wait(WAITING_FOR_RATE_LIMIT)
        request.on_wait(WAITING_FOR_RATE_LIMIT)  # told again while it waits: one card change
        self.seen.append("sent")
        request.on_wait("")
        return Completion(content="done")

    def known_models(self) -> frozenset[str] | None:
        return None


def test_the_card_shows_the_wait_and_drops_it_when_the_call_goes() -> None:
    cards: list[str] = []
    states: list[str] = []
    meter = Meter(note="nearing its budget")  # a standing warning the wait covers for a while

    def progress(text: str) -> None:
        cards.append(status_text("Subagent #1", text, final=False, note=meter.note))

    control = LoopControl(progress=progress, wait=states.append)
    ctx = ToolContext(deps=cast(Any, None), session_key="s", thread=THREAD, requester="u",
                      agent_id="main")  # fmt: skip
    seen: list[str] = []
    result = run_loop(model=_WaitingModel(seen), model_name="m", messages=[], tools=[], ctx=ctx,
                      max_steps=2, meter=meter, control=control)  # fmt: skip
    assert result.text == "done"
    assert states == ["waiting for the model's rate limit", ""]
    assert len(cards) == 2
    assert cards[0].endswith("· ⏸️ waiting for the model's rate limit")
    assert "rate limit" not in cards[1] and cards[1].endswith("· ⚠️ nearing its budget")
    assert meter.note == "nearing its budget"


def test_subagents_list_shows_a_running_run_waiting_for_the_rate_limit() -> None:
    base: dict[str, Any] = {
        "seq": 1, "session_key": "s", "session_id": "x", "thread": THREAD,
        "requester": "u", "agent_id": "main", "subagent_type": "general", "task": "t",
        "model": "m", "created_at": 1.0, "started_at": 1.0,
    }  # fmt: skip
    waiting = RunRecord(run_id="aaaa1111", child_session_key="c1", status=RunStatus.RUNNING,
                        waiting=WAITING_FOR_RATE_LIMIT, **base)  # fmt: skip
    ended = RunRecord(run_id="bbbb2222", child_session_key="c2", status=RunStatus.SUCCESS,
                      waiting=WAITING_FOR_RATE_LIMIT, ended_at=2.0, **base)  # fmt: skip
    going = RunRecord(run_id="cccc3333", child_session_key="c3", status=RunStatus.RUNNING, **base)
    lines = render_list([waiting, ended, going], now=10.0).splitlines()
    assert "🏃 waiting for the model's rate limit · " in lines[1]
    assert "rate limit" not in lines[2] and "✅ success" in lines[2]
    assert "🏃 running · " in lines[3]
