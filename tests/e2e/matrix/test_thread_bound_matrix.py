"""Thread-bound children on a real Synapse: ``!subagents spawn --thread`` posts a new thread
root in the room; a person's message in that thread steers the running child; its answer is
announced there and, with a ``matrix.to`` link to the root, in the thread it was spawned
from; ``!subagents close`` gives the thread back to the main agent. Read from the server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from adapters.matrix import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.stack import Stack
from bot.testing.synapse import MatrixUser, Synapse
from tests.e2e.matrix.test_matrix_e2e import matrix_values, wait_thread
from tests.e2e.thread_script import STEER, TASK, Gate, model
from tests.matrix_support import Human

pytestmark = pytest.mark.e2e


async def test_a_child_in_its_own_thread_is_steered_there_and_closed(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    alice = make_human("alice")
    bot = bot_user.user_id
    room = await alice.create_room(invite=[bot])
    gate = Gate()
    async with FakeOpenAI(model(gate), models=["fake-model"]) as fake:
        values = matrix_values(
            redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot",
            allow_users=[alice.user.user_id],
        )  # fmt: skip
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            await alice.wait_joined(room, bot)
            parent = await alice.send(room, "a thread for the work")
            spawn = f"!subagents spawn --thread {TASK}"
            await alice.send(room, spawn, thread=parent, mention=bot)
            opened = await alice.wait_message(
                lambda e: e.sender == bot and e.body.startswith("🧵 #1"), timeout=30
            )
            root = opened.event_id
            assert opened.body == f"🧵 #1 general-purpose: {TASK}"
            link = f"https://matrix.to/#/{room}/{root}"
            await wait_thread(stack, alice, room, parent, lambda b: any(link in x for x in b))
            await wait_thread(stack, alice, room, root, lambda b: any("go to it" in x for x in b))
            await asyncio.wait_for(gate.started.wait(), timeout=20)
            await alice.send(room, STEER, thread=root)
            await wait_thread(stack, alice, room, root, lambda b: any("📨 Passed" in x for x in b))
            gate.go.set()
            seen = await wait_thread(
                stack, alice, room, root, lambda b: any("final: read" in x for x in b)
            )
            in_parent = await wait_thread(
                stack, alice, room, parent, lambda b: any(f"Its thread: {link}" in x for x in b)
            )
            await alice.send(room, "!subagents close 1", thread=root, mention=bot)
            await wait_thread(stack, alice, room, root, lambda b: any("Closed the" in x for x in b))
            await alice.send(room, "hello", thread=root, mention=bot)
            await wait_thread(stack, alice, room, root, lambda b: any("main agent" in x for x in b))
    assert sum("final: read" in b for b in seen) == 1
    assert any("Subagent #1" in b and "final: read" in b for b in in_parent)
