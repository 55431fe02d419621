"""Oversized inputs end to end: a 1 MB message, a 10 MB tool result, a 100k-token reply.

Each is cut with a note on its way through the gateway and forked workers, the run or turn
still ends normally, and every stored copy (history, transcript, run record, outbox) stays
bounded. The plug-in tools below are loaded by the workers through ``tools.extra``.
"""

from __future__ import annotations

import io
import json
import logging
import resource
import time
from typing import Any

import aiohttp
import psutil
import pytest
import redis

from adapters.slack import build
from bot.agent.tools import NoArgs, Tool
from bot.config import Settings
from bot.keys import Keys
from bot.testing import slack_wire
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.fake_slack import FakeSlack
from bot.testing.netutil import LOOPBACK, free_port
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from bot.text.clip import cut_note
from bot.types import Usage
from tests.e2e.conftest import stack_values

pytestmark = pytest.mark.e2e

MB = 1_000_000
TOOL_RESULT_CHARS = 10 * MB
REPLY_CHARS = 420_000  # ~105k tokens at 4 characters a token
NOTE_ROOM = 48  # a cut note with its newline is never longer


def _memory() -> str:
    """``rss_kb=… maxrss_kb=…`` of this process (the work horse running the tool)."""
    rss_kb = psutil.Process().memory_info().rss // 1024
    return f"rss_kb={rss_kb} maxrss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}"


def _huge(ctx: object, args: NoArgs) -> str:
    head = _memory() + "\n"
    return head + "x" * (TOOL_RESULT_CHARS - len(head))


def _probe(ctx: object, args: NoArgs) -> str:
    return _memory()


OVERSIZED_TOOLS = [
    Tool(name="huge_tool", description="Returns 10 MB of text.", args=NoArgs, run=_huge),
    Tool(name="memory_probe", description="This process's memory.", args=NoArgs, run=_probe),
]


def _kb(text: str, name: str) -> int:
    return int(text.split(f"{name}=")[1].split()[0])


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def _history(url: str, session_key: str) -> list[dict[str, Any]]:
    with _client(url) as client:
        return [json.loads(m) for m in client.lrange(Keys().history(session_key), 0, -1)]


def _outbox_sizes(url: str) -> list[int]:
    with _client(url) as client:
        return [len(fields["data"]) for _, fields in client.xrange(Keys().outbox)]


def _run(url: str) -> dict[str, str]:
    with _client(url) as client:
        [run_id] = client.zrange(Keys().all_runs, 0, -1)
        return dict(client.hgetall(Keys().run(run_id)))


def _transcript(url: str, session_id: str) -> list[dict[str, Any]]:
    with _client(url) as client:
        return [json.loads(m) for m in client.lrange(Keys().transcript(session_id), 0, -1)]


async def test_megabyte_message_is_cut_with_a_note_before_the_turn(redis_url: str) -> None:
    def main(req: ChatRequest) -> Text:
        return Text(f"read {len(req.last_user_message)} characters")

    message = "please read: " + "y" * (1_048_576 - 13)
    async with FakeOpenAI(ScriptedModel(default=main)) as fake:
        channel = MemoryChannel()
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=1) as stack:
            result = await channel.say(message)
            await stack.wait_for(lambda: len(channel.replies) == 2, timeout=40)
    limit = Settings().gateway.max_inbound_chars
    notice, answer = channel.replies
    assert notice.text == (
        f"✂️ Your message was 1,048,576 characters long; I read only the first {limit:,}."
    )
    [request] = fake.requests
    seen = request.chat.last_user_message
    assert seen == "alice: " + message[:limit] + "\n" + cut_note(1_048_576 - limit)
    assert answer.text == f"read {len(seen)} characters"
    history = _history(redis_url, result.session_key)  # type: ignore[attr-defined]
    assert [m["role"] for m in history] == ["user", "assistant"]
    kept = Settings().history.max_message_chars
    # History keeps less than the turn saw; its one note counts everything cut.
    assert history[0]["content"] == seen[:kept] + "\n" + cut_note(len("alice: ") + 1_048_576 - kept)
    assert max(_outbox_sizes(redis_url)) < 1_000


async def test_ten_megabyte_tool_result_is_cut_before_model_transcript_and_result(
    redis_url: str,
) -> None:
    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.")
        return ToolCalls([Call("sessions_spawn", {"task": "dump it", "label": "dump"})])

    def subagent(req: ChatRequest) -> ToolCalls | Text:
        done = [r.name for r in req.tool_results]
        if not done:
            return ToolCalls([Call("huge_tool", {})])
        if done == ["huge_tool"]:
            return ToolCalls([Call("memory_probe", {})])
        return Text(f"the tool said {len(req.tool_results[0].content)} characters")

    model = ScriptedModel().on(is_subagent, subagent).on(lambda r: True, main)
    async with FakeOpenAI(model) as fake:
        channel = MemoryChannel()
        values = stack_values(
            redis_url, fake.base_url, tools={"extra": ["tests.e2e.test_oversized:OVERSIZED_TOOLS"]}
        )
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            await channel.say("dump it")
            await stack.wait_for(lambda: len(channel.announces) == 1, timeout=60)
    limit = Settings().subagents.max_result_chars
    [announce] = channel.announces
    assert "Status: success" in announce.text
    cut = f"\n[… truncated: {TOOL_RESULT_CHARS - limit} more characters]"
    assert f"Result: the tool said {limit + len(cut)} characters" in announce.text
    sub_requests = [r.chat for r in fake.requests if is_subagent(r.chat)]
    tool_text, probe_text = (r.content for r in sub_requests[-1].tool_results)
    assert tool_text.startswith("rss_kb=") and tool_text.endswith(cut)
    run = _run(redis_url)
    assert run["status"] == "success"
    tool_entries = [m for m in _transcript(redis_url, run["session_id"]) if m["role"] == "tool"]
    assert tool_entries[0]["content"] == tool_text
    # The horse's peak memory grew by less than four copies of the result.
    before, peak = _kb(tool_text, "rss_kb"), _kb(probe_text, "maxrss_kb")
    print(f"\nhorse RSS before the tool {before} kB, peak after it {peak} kB")
    assert peak - before < 4 * TOOL_RESULT_CHARS // 1024


async def test_hundred_thousand_token_reply_is_cut_everywhere(redis_url: str) -> None:
    big = ("All work and no play makes a long reply. " * (REPLY_CHARS // 41 + 1))[:REPLY_CHARS]
    usage = Usage(prompt_tokens=500, completion_tokens=REPLY_CHARS // 4)

    def main(req: ChatRequest) -> ToolCalls | Text:
        if "ramble" in req.last_user_message:
            return Text(big, usage=usage)
        if req.last_role == "tool":
            return Text("Started.")
        return ToolCalls([Call("sessions_spawn", {"task": "write a lot", "label": "long"})])

    model = ScriptedModel().on(is_subagent, Text(big, usage=usage)).on(lambda r: True, main)
    # 64-character stream pieces: ~6.6k chunks per reply keeps the test quick.
    async with FakeOpenAI(model, stream_chunk_chars=64) as fake:
        channel = MemoryChannel()
        spawn, ramble = channel.thread("spawn"), channel.thread("ramble")
        values = stack_values(redis_url, fake.base_url)
        async with Stack(values=values, adapters=[channel], workers=2) as stack:
            started = time.monotonic()
            spawned = await channel.say("spawn one", thread=spawn)
            said = await channel.say("ramble on", thread=ramble)
            await stack.wait_for(
                lambda: len(channel.announces) == 1 and len(channel.replies) == 2, timeout=60
            )
            print(f"\nboth oversized replies delivered in {time.monotonic() - started:.1f}s")
    settings = Settings()
    max_reply = settings.openai.max_reply_chars
    stored_cut = cut_note(REPLY_CHARS - max_reply)
    run = _run(redis_url)
    assert run["status"] == "success"
    assert run["result"] == big[:max_reply] + "\n" + stored_cut
    [announce] = channel.announces
    assert "Status: success" in announce.text
    result_limit = settings.subagents.max_result_chars
    assert f"… (truncated, {REPLY_CHARS - result_limit:,} more characters)" in announce.text
    assert "tokens 105.5k (in 500 / out 105.0k)" in announce.text
    assert len(announce.text) < result_limit + 1_000
    [reply] = channel.of_kind(announce.kind.REPLY, ramble)
    outbound_limit = settings.gateway.max_outbound_chars
    assert reply.text == big[:outbound_limit] + "\n" + cut_note(REPLY_CHARS - outbound_limit)
    # The requester's history: the subagent's note and the long reply, each bounded.
    kept = settings.history.max_message_chars
    notes = _history(redis_url, spawned.session_key)  # type: ignore[attr-defined]
    assert all(len(m["content"]) < kept + 200 for m in notes)
    assert any("(truncated, " in m["content"] for m in notes)
    turn = _history(redis_url, said.session_key)  # type: ignore[attr-defined]
    assert turn[-1]["content"].endswith(cut_note(REPLY_CHARS - kept))
    assert len(turn[-1]["content"]) <= kept + NOTE_ROOM
    transcript = _transcript(redis_url, run["session_id"])
    assert transcript[-1]["content"].endswith(cut_note(REPLY_CHARS - 100_000))
    assert max(_outbox_sizes(redis_url)) < result_limit + 2_000


async def _post_signed(url: str, body: dict[str, Any], secret: str) -> tuple[int, str]:
    """POST a signed Slack event; a file-like body, as aiohttp wants for big ones."""
    raw = json.dumps(body)
    headers = slack_wire.sign(raw, secret=secret) | {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=io.BytesIO(raw.encode()), headers=headers) as resp,
    ):
        return resp.status, (await resp.text())[:60]


async def test_slack_http_body_over_the_limit_gets_413_and_the_gateway_goes_on(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def main(req: ChatRequest) -> Text:
        return Text(f"read {len(req.last_user_message)} characters")

    port = free_port()
    async with FakeOpenAI(ScriptedModel(default=main)) as fake, FakeSlack() as slack:
        slack_values = {
            "bot_token": slack.bot_token,
            "signing_secret": slack.signing_secret,
            "api_url": slack.api_url,
            "mode": "http",
        }
        values = stack_values(
            redis_url,
            fake.base_url,
            slack=slack_values,
            gateway={"http_host": LOOPBACK, "http_port": port},
        )
        async with Stack(values=values, adapters=[build(Settings(**values))], workers=1) as stack:
            url = f"http://{LOOPBACK}:{port}/slack/events"

            def body(text: str) -> dict[str, Any]:
                return slack.event_body(slack.app_mention(text=f"<@U0FANBOT> {text}"))

            too_big = await _post_signed(url, body("z" * 1_100_000), slack.signing_secret)
            fits = body("w" * 900_000)
            ok = await _post_signed(url, fits, slack.signing_secret)
            await stack.wait_for(lambda: len(slack.messages) == 2, timeout=40)
    assert too_big[0] == 413
    assert too_big[1].startswith("Maximum request body size 1048576 exceeded")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no crash logged
    assert ok[0] == 200
    limit = Settings().gateway.max_inbound_chars
    notice, answer = (m.text for m in slack.messages)
    assert notice.startswith("✂️ Your message was 900,000 characters long")
    [request] = fake.requests
    assert request.chat.last_user_message.endswith(cut_note(900_000 - limit))
    assert answer == f"read {len(request.chat.last_user_message)} characters"
    assert all(m.thread_ts == fits["event"]["ts"] for m in slack.messages)
