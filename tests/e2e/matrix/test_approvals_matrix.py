"""Approvals on a real Synapse: gateway + forked workers + the Matrix adapter, nio humans.

The request is an ``m.notice`` in the run's thread carrying its actions
(``org.fanbot.actions``: reaction key -> action id), with the bot's own ✅/❌ reactions on
it. A person decides with a ✅/❌ reaction (``m.reaction``) or by typing ``!approve <id>``
/ ``!deny <id>``; the request is edited (``m.replace``) to the outcome. What the person sees
is read from the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nio import RoomSendResponse

from adapters.matrix import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.stack import Stack
from bot.testing.synapse import MatrixUser, Synapse
from bot.testing.wait import until
from tests.e2e.approvals_script import model
from tests.e2e.conftest import stack_values
from tests.matrix_support import Human

pytestmark = pytest.mark.e2e


def values_for(
    redis_url: str,
    base_url: str,
    synapse: Synapse,
    bot: MatrixUser,
    store: Path,
    people: list[Human],
    **extra: Any,
) -> dict[str, Any]:
    matrix = {
        "homeserver": synapse.url,
        "user_id": bot.user_id,
        "password": bot.password,
        "store_path": str(store),
        "sync_timeout_ms": 2_000,
        "allow_users": [p.user.user_id for p in people],
    }
    return stack_values(
        redis_url, base_url, matrix=matrix, tools={"require_approval": ["calculate"]}, **extra
    )


async def react(human: Human, room: str, event_id: str, key: str) -> None:
    content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
    await human.sync()
    response = await human.client.room_send(
        room, "m.reaction", content, ignore_unverified_devices=True
    )
    assert isinstance(response, RoomSendResponse), response


async def relations(human: Human, room: str, event_id: str, rel: str) -> list[dict[str, Any]]:
    path = f"/_matrix/client/v1/rooms/{room}/relations/{event_id}/{rel}?limit=100"
    chunk: list[dict[str, Any]] = (await human.api("GET", path))["chunk"]
    return chunk


class Thread:
    """What the humans see in one thread (read from the server)."""

    def __init__(self, human: Human, room: str, root: str, bot: str) -> None:
        self.human, self.room, self.root, self.bot = human, room, root, bot
        self.events: list[dict[str, Any]] = []

    async def refresh(self) -> list[dict[str, Any]]:
        events = await self.human.thread_events(self.room, self.root)
        self.events = [e for e in events if e["sender"] == self.bot]
        return self.events

    def request(self) -> dict[str, Any] | None:
        found = [e for e in self.events if "org.fanbot.actions" in e["content"]]
        return found[0] if found else None

    def bodies(self) -> list[str]:
        return [str(e["content"].get("body", "")) for e in self.events]

    async def edited(self, event_id: str) -> str:
        """The newest text of ``event_id`` (its latest ``m.replace``), or ""."""
        edits = await relations(self.human, self.room, event_id, "m.replace")
        return str(edits[0]["content"]["m.new_content"]["body"]) if edits else ""


async def started(
    stack: Stack, alice: Human, room: str, bot: MatrixUser
) -> tuple[Thread, dict[str, Any], str]:
    root = await alice.send(room, "go", mention=bot.user_id)
    thread = Thread(alice, room, root, bot.user_id)

    async def asked() -> bool:
        await thread.refresh()
        return thread.request() is not None

    await stack.wait_for(asked, timeout=40, every=0.3)
    request = thread.request()
    assert request is not None
    found = re.search(r"\bid `?([0-9a-f]{8})\b", request["content"]["body"])
    assert found is not None
    return thread, request, found[1]


async def wait_announce(stack: Stack, thread: Thread, text: str) -> None:
    async def announced() -> bool:
        await thread.refresh()
        return any("finished" in b and text in b for b in thread.bodies())

    await stack.wait_for(announced, timeout=60, every=0.3)


async def test_reactions_refuse_others_and_approve_after_the_worker_died(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    alice, bob = make_human("alice"), make_human("bob")
    room = await alice.create_room(invite=[bot_user.user_id, bob.user.user_id])
    await bob.join(room)
    async with FakeOpenAI(model(), models=["fake-model"]) as fake:
        values = values_for(
            redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot", [alice, bob]
        )
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            await alice.wait_joined(room, bot_user.user_id)
            thread, request, approval_id = await started(stack, alice, room, bot_user)
            actions = request["content"]["org.fanbot.actions"]
            assert actions == {"✅": f"!approve {approval_id}", "❌": f"!deny {approval_id}"}

            async def offered() -> bool:  # the bot reacts just after posting the request
                found = await relations(alice, room, request["event_id"], "m.annotation")
                return {e["content"]["m.relates_to"]["key"] for e in found} >= {"✅", "❌"}

            await until(offered, timeout=20, every=0.2)

            await react(bob, room, request["event_id"], "✅")

            async def refused() -> bool:
                await thread.refresh()
                return any("only the person who started" in b for b in thread.bodies())

            await stack.wait_for(refused, timeout=30, every=0.3)
            assert await thread.edited(request["event_id"]) == ""  # still waiting

            first = stack.pool.worker_pids()
            stack.pool.kill_all()  # the host dies while the run waits: no job holds it
            stack.pool.start()
            await react(alice, room, request["event_id"], "✅")
            await wait_announce(stack, thread, "answer: 42")
            outcome = await thread.edited(request["event_id"])
            assert outcome.startswith("✅") and f"approved by {alice.user.user_id}" in outcome
            assert set(stack.pool.worker_pids()).isdisjoint(first)


async def test_typed_deny_and_a_timeout(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    alice, bob = make_human("alice"), make_human("bob")  # three members: not a DM
    room = await alice.create_room(invite=[bot_user.user_id, bob.user.user_id])
    async with FakeOpenAI(model(), models=["fake-model"]) as fake:
        values = values_for(
            redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot", [alice],
            approvals={"timeout_seconds": 6},
        )  # fmt: skip
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            await alice.wait_joined(room, bot_user.user_id)
            thread, request, approval_id = await started(stack, alice, room, bot_user)
            await alice.send(room, f"!deny {approval_id}", thread=thread.root)
            await wait_announce(stack, thread, f"denied by {alice.user.user_id}")
            outcome = await thread.edited(request["event_id"])
            assert outcome.startswith("❌")

            late, late_request, _ = await started(stack, alice, room, bot_user)
            await wait_announce(stack, late, "nobody answered in time")
            assert (await late.edited(late_request["event_id"])).startswith("⌛")


async def test_a_reaction_in_an_encrypted_room(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    """The bot reads the request's actions back from the encrypted event it sent."""
    alice, bob = make_human("alice"), make_human("bob")
    room = await alice.create_room(invite=[bot_user.user_id, bob.user.user_id], encrypted=True)
    async with FakeOpenAI(model(), models=["fake-model"]) as fake:
        values = values_for(redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot", [alice])
        values["matrix"]["encryption"] = True
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=2) as stack:
            await alice.wait_joined(room, bot_user.user_id)
            await alice.send(room, "go", mention=bot_user.user_id)

            def request() -> Any:
                for event in alice.timeline:
                    content = getattr(event, "source", {}).get("content", {})
                    if "org.fanbot.actions" in content:
                        return event
                return None

            async def asked() -> bool:
                await alice.sync(timeout=500)
                return request() is not None

            await stack.wait_for(asked, timeout=40, every=0.2)
            event = request()
            raw = await alice.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{event.event_id}")
            assert raw["type"] == "m.room.encrypted"
            await react(alice, room, event.event_id, "✅")

            def approved() -> bool:
                return any("answer: 42" in getattr(e, "body", "") for e in alice.timeline)

            async def announced() -> bool:
                await alice.sync(timeout=500)
                return approved()

            await stack.wait_for(announced, timeout=60, every=0.2)
