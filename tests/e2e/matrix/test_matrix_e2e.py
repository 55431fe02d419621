"""fanbot on a real Synapse: gateway + forked workers + the Matrix adapter, a nio human.

What the person sees is checked on the server (``/relations``, room messages), not in the
bot's memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.matrix import build
from bot.config import Settings
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from bot.testing.synapse import MatrixUser, Synapse
from tests.e2e.conftest import stack_values
from tests.matrix_support import Human

pytestmark = pytest.mark.e2e


def spawn_one() -> ScriptedModel:
    """The main agent spawns one subagent per message; the subagent echoes its task."""

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.")
        task = f"research {req.last_user_message}"
        return ToolCalls([Call("sessions_spawn", {"task": task, "label": "R"})])

    def subagent(req: ChatRequest) -> Text:
        return Text(f"done: {req.last_user_message}")

    return (
        ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(is_subagent, subagent)
    )


def matrix_values(
    redis_url: str, base_url: str, synapse: Synapse, bot: MatrixUser, store: Path, **extra: Any
) -> dict[str, Any]:
    matrix = {
        "homeserver": synapse.url,
        "user_id": bot.user_id,
        "password": bot.password,
        "store_path": str(store),
        "sync_timeout_ms": 5_000,
        **extra,
    }
    return stack_values(redis_url, base_url, matrix=matrix)


def bodies(events: list[dict[str, Any]], sender: str) -> list[str]:
    return [e["content"].get("body", "") for e in events if e["sender"] == sender]


def not_cards(found: list[str]) -> list[str]:
    """The bot's messages other than status cards (``⏳ [type] Subagent #1 …``)."""
    return [b for b in found if not re.match(r"^\S+ \[[\w.-]+\] Subagent #", b)]


async def wait_thread(
    stack: Stack, human: Human, room: str, root: str, pred: Callable[[list[str]], bool]
) -> list[str]:
    """Poll the thread on the server until the bot's messages there satisfy ``pred``."""
    found: list[str] = []

    async def check() -> bool:
        nonlocal found
        events = await human.thread_events(room, root)
        found = bodies(events, stack.settings.matrix.user_id or "")
        return pred(found)

    await stack.wait_for(check, timeout=30, every=0.2)
    return found


def finished(found: list[str]) -> bool:
    return any("finished" in body for body in found)


async def test_threads_restart_mentions_and_commands(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    human, colleague = make_human("alice"), make_human("amy")
    room = await human.create_room(invite=[bot_user.user_id, colleague.user.user_id])
    await colleague.join(room)
    async with FakeOpenAI(spawn_one(), models=["fake-model"]) as fake:
        values = matrix_values(
            redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot",
            allow_users=[human.user.user_id],
        )  # fmt: skip
        adapter = build(Settings(**values))
        async with Stack(values=values, adapters=[adapter], workers=1) as stack:
            await human.wait_joined(room, bot_user.user_id)
            root_a = await human.send(room, "topic apples", mention=bot_user.user_id)
            root_b = await human.send(room, "topic bananas", mention=bot_user.user_id)
            chatter = await human.send(room, "just chatting, no bot here")

            in_a = await wait_thread(stack, human, room, root_a, finished)
            in_b = await wait_thread(stack, human, room, root_b, finished)
            announce_a = next(b for b in in_a if "finished" in b)
            announce_b = next(b for b in in_b if "finished" in b)
            assert "apples" in announce_a and "bananas" not in announce_a
            assert "bananas" in announce_b and "apples" not in announce_b
            assert "Started." in in_a and "Started." in in_b

            await stack.stop_gateway()
            await stack.start_gateway()
            await human.send(room, "!subagents list", thread=root_a)
            after = await wait_thread(
                stack, human, room, root_a, lambda found: len(found) > len(in_a)
            )
            listing = after[0]  # /relations lists newest first
            assert listing.startswith("**Subagents in this thread** — 0 active · 1 done")
            assert "#1 ✅ success · R" in listing
            assert sum("finished" in b for b in after) == 1
            assert after.count("Started.") == 1
            # Nothing said again in the other thread. A status card is best effort: under
            # load its first post can be slow (nio retries a timed-out send) and land late.
            in_b_now = bodies(await human.thread_events(room, root_b), bot_user.user_id)
            assert sorted(not_cards(in_b_now)) == sorted(not_cards(in_b))

            timeline = await human.api(
                "GET", f"/_matrix/client/v3/rooms/{room}/messages?dir=b&limit=100"
            )
            answers_in_timeline = [
                e
                for e in timeline["chunk"]
                if e["sender"] == bot_user.user_id
                and e["type"] == "m.room.message"
                and "m.relates_to" not in e["content"]
            ]
            assert answers_in_timeline == [], "the unmentioned message got an answer"
            assert chatter  # sent, and ignored above


async def test_encrypted_room_announce_reaches_the_human_decrypted(
    redis_url: str,
    synapse: Synapse,
    bot_user: MatrixUser,
    make_human: Callable[[str], Human],
    tmp_path: Path,
) -> None:
    human, colleague = make_human("ivan"), make_human("judy")
    # Three members: in a two-member room (a DM) the bot would answer in the timeline.
    room = await human.create_room(
        invite=[bot_user.user_id, colleague.user.user_id], encrypted=True
    )
    await colleague.join(room)
    async with FakeOpenAI(spawn_one(), models=["fake-model"]) as fake:
        values = matrix_values(
            redis_url, fake.base_url, synapse, bot_user, tmp_path / "bot",
            allow_users=[human.user.user_id], encryption=True,
        )  # fmt: skip
        adapter = build(Settings(**values))
        async with Stack(values=values, adapters=[adapter], workers=1):
            await human.wait_joined(room, bot_user.user_id)
            root = await human.send(room, "topic secrets", mention=bot_user.user_id)

            def in_thread(text: str) -> Callable[[Any], bool]:
                def match(event: Any) -> bool:
                    relates = event.source["content"].get("m.relates_to", {})
                    return (
                        event.sender == bot_user.user_id
                        and text in event.body
                        and relates.get("rel_type") == "m.thread"
                        and relates.get("event_id") == root
                    )

                return match

            await human.wait_message(in_thread("Started."), timeout=30)
            await human.send(room, "dig deeper", thread=root)
            got = await human.wait_message(
                lambda e: in_thread("finished")(e) and "dig deeper" in e.body, timeout=30
            )
            assert got.decrypted
            raw = await human.api("GET", f"/_matrix/client/v3/rooms/{room}/event/{got.event_id}")
            assert raw["type"] == "m.room.encrypted"
