"""Status cards end to end (forked workers, the gateway's renderer, a memory channel):
learn-claude-code's tally at the end, and a quiet end for a run that answers
``ANNOUNCE_SKIP``."""

from __future__ import annotations

import re

from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Reply,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import OutboundKind
from tests.e2e.conftest import stack_values


def model() -> ScriptedModel:
    """The main agent spawns "work" and "skip"; each calls one tool, then "skip" answers
    ``ANNOUNCE_SKIP`` and "work" a result."""

    def main(req: ChatRequest) -> Reply:
        if req.last_role == "tool":
            return Text("Started 2.")
        return ToolCalls(
            [Call("sessions_spawn", {"task": t, "label": t}) for t in ("work", "skip")]
        )

    def subagent(req: ChatRequest) -> Reply:
        if req.last_role != "tool":
            return ToolCalls([Call("current_time", {})])
        return Text("ANNOUNCE_SKIP" if req.last_user_message == "skip" else "done", delay=0.5)

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


async def test_cards_end_with_a_tally_or_go_away_quietly(redis_url: str) -> None:
    async with FakeOpenAI(model(), models=["fake-model"]) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("two things")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=40)
            await stack.wait_for(lambda: len(channel.deleted) == 1, timeout=10)
            await stack.wait_for(lambda: any("— success (" in e.text for e in channel.edits))
    [announce] = channel.announces
    assert '"work"' in announce.text
    cards = {
        m.text: i for i, m in enumerate(channel.sent, start=1) if m.kind is OutboundKind.STATUS
    }
    skip_card = next(f"msg-{i}" for text, i in cards.items() if '"skip"' in text)
    assert [d.message_id for d in channel.deleted] == [skip_card]
    skip_texts = [e.text for e in channel.edits if e.message_id == skip_card]
    assert not any("— success" in t for t in skip_texts), skip_texts
    work_texts = [m for m in cards if '"work"' in m] + [
        e.text for e in channel.edits if '"work"' in e.text
    ]
    assert work_texts[0].startswith('⏳ [general-purpose] Subagent #1 "work" — ')
    assert re.fullmatch(
        r'✅ \[general-purpose\] Subagent #1 "work" — success \(1 tool, \d+\.\ds\)', work_texts[-1]
    ), work_texts
