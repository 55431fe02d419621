"""Spawn from chat and a steer receipt on a real Synapse: what the person sees, read from
the server (the receipt's update is an ``m.replace`` edit of the command's reply)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.matrix import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.stack import Stack
from bot.testing.synapse import MatrixUser, Synapse
from tests.e2e.matrix.test_approvals_matrix import relations
from tests.e2e.matrix.test_matrix_e2e import bodies, matrix_values, wait_thread
from tests.e2e.test_control_stop import fanout_model
from tests.e2e.test_schedules_e2e import answer
from tests.matrix_support import Human

pytestmark = pytest.mark.e2e


async def test_spawn_and_a_steer_receipt_on_matrix(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    alice = make_human("alice")
    room = await alice.create_room(invite=[bot_user.user_id])
    async with FakeOpenAI(fanout_model(answer), models=["fake-model"]) as fake:
        values = matrix_values(
            redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot",
            allow_users=[alice.user.user_id],
        )  # fmt: skip
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            await alice.wait_joined(room, bot_user.user_id)
            root = await alice.send(room, "a thread for the work")  # unaddressed: ignored
            await alice.send(
                room,
                "!subagents spawn explore slow map the repo",
                thread=root,
                mention=bot_user.user_id,
            )
            await wait_thread(stack, alice, room, root, lambda b: any("🚀" in x for x in b))
            await alice.send(
                room, "!subagents send 1 focus on tests", thread=root, mention=bot_user.user_id
            )
            seen = await wait_thread(
                stack, alice, room, root, lambda b: any("steered: focus on tests" in x for x in b)
            )
            events = await alice.thread_events(room, root)
            (receipt,) = [
                e
                for e in events
                if e["sender"] == bot_user.user_id
                and str(e["content"].get("body", "")).startswith("📨 Queued")
            ]

            async def delivered() -> bool:
                edits = await relations(alice, room, receipt["event_id"], "m.replace")
                return any(
                    str(e["content"]["m.new_content"]["body"]).startswith("✅ Delivered")
                    for e in edits
                )

            await stack.wait_for(delivered, timeout=20, every=0.3)

    assert "🚀 Started subagent #1 (explore): slow map the repo" in seen
    assert any("Result: steered: focus on tests" in b for b in seen)
    assert bodies(events, bot_user.user_id)
