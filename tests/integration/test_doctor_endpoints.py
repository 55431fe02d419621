"""``fanbot doctor`` probes every model endpoint once: its model list, then one small
streamed call offering a tool, and says per finding what fanbot does about it.

Real CLI in a subprocess; two protocol-level fake endpoints and one that is down.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from aiohttp import web

from bot.demo.replies import ChatRequest, Text, ToolCalls
from bot.testing import Call, ScriptedModel
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.netutil import free_port
from tests.integration.test_doctor import doctor


class NoUsageOpenAI(FakeOpenAI):
    """A server that ignores ``stream_options`` (sends no usage), as some local ones do."""

    async def _read(self, request: web.Request) -> ChatRequest | web.Response:
        chat = await super()._read(request)
        if isinstance(chat, web.Response):
            return chat
        body = {k: v for k, v in chat.body.items() if k != "stream_options"}
        return dataclasses.replace(chat, body=body)


def tool_caller() -> ScriptedModel:
    return ScriptedModel(default=ToolCalls([Call("probe_echo", {"text": "ok"})]))


async def test_each_endpoint_gets_its_own_lines(tmp_path: Path, redis_url: str) -> None:
    down = f"http://127.0.0.1:{free_port()}/v1"
    async with (
        FakeOpenAI(tool_caller(), models=("gpt-4o-mini", "other")) as main,
        NoUsageOpenAI(
            ScriptedModel(default=Text("I can't call tools.")), models=("qwen3",)
        ) as local,
    ):
        report = await doctor(
            tmp_path,
            FANBOT_REDIS_URL=redis_url,
            FANBOT_OPENAI__BASE_URL=main.base_url,
            FANBOT_MODELS__ENDPOINTS__LOCAL__BASE_URL=local.base_url,
            FANBOT_MODELS__ENDPOINTS__LOCAL__MODEL="qwen3",
            FANBOT_MODELS__ENDPOINTS__LOCAL__KIND="ollama",
            FANBOT_MODELS__ENDPOINTS__GONE__BASE_URL=down,
        )
        assert report.line("model") == "ok   model: endpoint lists 2 model(s); 'gpt-4o-mini' listed"
        assert report.line("model kind") == (
            "ok   model kind: generic (guessed from the URL; set `kind` if wrong): the output "
            "limit as max_completion_tokens, asks for usage in streams, thinking as reasoning_effort"
        )
        assert report.line("model local kind").startswith("ok   model local kind: ollama (set): ")
        assert report.line("model stream").startswith("ok   model stream: streams (")
        assert report.line("model tools") == "ok   model tools: answers tool calls"
        assert report.line("model usage").startswith("ok   model usage: usage in streams (")
        assert (
            report.line("model local")
            == "ok   model local: endpoint lists 1 model(s); 'qwen3' listed"
        )
        assert report.line("model local tools").startswith(
            "warn model local tools: no tool call in the probe's answer"
        )
        assert "I can't call tools." in report.line("model local tools")
        assert report.line("model local usage") == (
            "ok   model local usage: no usage in streams: fanbot counts tokens itself (shown with ~)"
        )
        assert (
            report.line("model gone")
            == f"BAD  model gone: cannot reach the model endpoint at {down}"
        )
        assert "model gone stream" not in report.stdout
        assert report.code == 1
        # once each, cheaply: one list and one capped call per reachable endpoint
        for fake in (main, local):
            assert len(fake.requests) == 1
            body = fake.requests[0].body
            assert body["tools"][0]["function"]["name"] == "probe_echo"
            assert (body.get("max_completion_tokens") or body.get("max_tokens")) == 64
