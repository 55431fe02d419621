"""Files in and out, end to end: the gateway, forked workers, PTB and the fake Bot API.

A person posts a text file into a forum topic; the turn's text names ``inbox/<file>`` and
the session workspace holds its bytes. A subagent whose model writes ``out/result.txt``
gets that file posted into the topic after its announce.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from bot.testing.fake_telegram import FakeTelegram, forum
from bot.testing.scripted import Call, ChatRequest, Reply, ScriptedModel, Text, ToolCalls
from bot.testing.scripted import is_subagent as _is_subagent
from tests.e2e.test_telegram_e2e import BOT, announces, main_agent, running

pytestmark = pytest.mark.e2e

FORUM = forum()
TOPIC = 11


def main(request: ChatRequest) -> Reply:
    if "[attached:" in request.last_user_message:
        return Text("I see the file.")
    return main_agent(request)


def writer(request: ChatRequest) -> Reply:
    if request.last_role == "tool":
        return Text("wrote out/result.txt")
    return ToolCalls([Call("write_file", {"file_path": "out/result.txt", "content": "42\n"})])


def model() -> ScriptedModel:
    return ScriptedModel().on(lambda r: r.has_tool("sessions_spawn"), main).on(_is_subagent, writer)


def document_message(tg: FakeTelegram, name: str, data: bytes, caption: str) -> dict[str, Any]:
    update = tg.message(
        chat=FORUM, text="", thread_id=TOPIC, document=tg.files.document(name, data),
        caption=caption, caption_entities=[{"type": "mention", "offset": 0, "length": len(BOT)}],
    )  # fmt: skip
    del update["message"]["text"]
    return update


def workspace_file(redis_url: str, path: str) -> bytes | None:
    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter("fanbot:workspace:*"):
            data = client.hget(key, path)
            if data is not None:
                return bytes(data)
        return None
    finally:
        client.close()


async def test_a_posted_file_reaches_the_turn_and_a_written_file_the_announce(
    redis_url: str,
) -> None:
    async with running(redis_url, model()) as env:
        tg = env.tg
        tg.push(
            document_message(tg, "notes.txt", b"alpha beta", f"{BOT} summarize the attached file")
        )
        await env.stack.wait_for(lambda: "I see the file." in env.texts(), timeout=30)
        [turn] = [r for r in env.main_requests() if "[attached:" in r.last_user_message]
        assert "summarize the attached file" in turn.last_user_message
        assert "[attached: inbox/notes.txt (text/plain, 10 B)]" in turn.last_user_message
        assert workspace_file(redis_url, "/inbox/notes.txt") == b"alpha beta"

        tg.push(tg.message(chat=FORUM, text=f"{BOT} spawn report", thread_id=TOPIC))
        await env.stack.wait_for(lambda: len(tg.files.documents) == 1, timeout=40)
        await env.stack.wait_for(env.drained)
    [announce] = announces(tg.messages)
    assert "wrote out/result.txt" in announce.text
    [doc] = tg.files.documents
    assert (doc.filename, doc.data, doc.message_thread_id) == ("result.txt", b"42\n", TOPIC)
    assert doc.message_id > announce.message_id  # after the text parts


async def test_an_oversized_file_is_skipped_with_a_note_and_the_message_handled(
    redis_url: str,
) -> None:
    async with running(redis_url, model(), attachments={"max_bytes": 1_000}) as env:
        tg = env.tg
        tg.push(document_message(tg, "big.bin", b"x" * 5_000, f"{BOT} what is in it?"))
        await env.stack.wait_for(
            lambda: any(t.startswith("echo: ") for t in env.texts()), timeout=30
        )
    [turn] = env.main_requests()
    assert "what is in it?" in turn.last_user_message
    assert "[not attached: big.bin (larger than the 1 KB limit)]" in turn.last_user_message
    assert workspace_file(redis_url, "/inbox/big.bin") is None
