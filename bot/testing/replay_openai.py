"""A chat-completions server that replays recorded wire traffic of a real server.

The conformance suite (``tests/conformance``, docs/models.md "Conformance: server kinds ×
features") keeps, per server kind and case, a :class:`Fixture`: where the traffic was taken
from, what fanbot's client must send, what the server answers (SSE events as raw JSON data
strings ending with ``[DONE]``, or an error status and body) and what fanbot must read.
:class:`ReplayOpenAI` serves those answers byte for byte to the real ``openai`` SDK; it is a
:class:`~bot.testing.fake_openai.FakeOpenAI` (lifecycle, ``/v1/models``, request recording)
whose answers come from the fixture instead of a script::

    fixture = Fixture.load(Path("tests/conformance/fixtures/ollama/parallel_tools.json"))
    with ReplayOpenAI(fixture.responses) as server:
        ...  # point a client at server.base_url
        server.requests[0].body  # what the client sent

Several responses are answered in order (an "unsupported parameter" 400, then a success);
the last one answers every request after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.demo.replies import ChatRequest, Reply
from bot.testing.fake_openai import FakeOpenAI

DONE = "[DONE]"
SUPPORT_LEVELS = ("works", "adapted", "not supported")
"""What a fixture's ``expect.support`` says fanbot does with the server's behaviour."""


@dataclass(frozen=True, kw_only=True)
class Response:
    """One recorded answer.

    Attributes:
        status: HTTP status.
        headers: Response headers (a stream's ``Content-Type`` defaults to SSE).
        events: SSE data strings in order (raw JSON, ``[DONE]``; one starting with ``:`` is
            sent as an SSE comment line, as OpenRouter and DeepSeek send keep-alives); empty
            for an error answer.
        body: The JSON body of an error answer (any JSON: Gemini's is a list).
        text: A non-JSON body, sent as it is (when ``body`` is None).
    """

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    events: tuple[str, ...] = ()
    body: Any = None
    text: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Response:
        events = tuple(str(e) for e in data.get("events") or ())
        for event in events:
            if event != DONE and not event.startswith(":"):
                json.loads(event)  # a fixture's events are JSON: fail on load, not mid-test
        return cls(
            status=int(data.get("status", 200)),
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            events=events,
            body=data.get("body"),
            text=data.get("text"),
        )

    @property
    def streamed(self) -> bool:
        return bool(self.events)


@dataclass(frozen=True, kw_only=True)
class Fixture:
    """One conformance case of one server kind, as stored in its JSON file.

    Attributes:
        kind: The server kind (``bot.config.ServerKind``), the file's folder.
        case: The case (``plain``, ``parallel_tools``...), the file's name.
        source: Where the traffic was taken from (a documentation URL, or repository and path).
        settings: ``OpenAISettings`` fields for the client beyond ``base_url`` and ``kind``.
        call: What is asked (``model``, ``messages``, ``tools``, ``thinking``).
        request: What the client must send: ``present`` and ``absent`` keys (dotted paths into
            the body), ``equals`` (path: value).
        responses: The server's answers, in order.
        expect: What fanbot must read (``content``, ``tool_calls``, ``reasoning``, ``usage``,
            ``finish_reason``, or ``failure``) and ``support`` (one of :data:`SUPPORT_LEVELS`).
    """

    kind: str
    case: str
    source: str
    settings: Mapping[str, Any]
    call: Mapping[str, Any]
    request: Mapping[str, Any]
    responses: tuple[Response, ...]
    expect: Mapping[str, Any]
    note: str = ""

    @classmethod
    def load(cls, path: Path) -> Fixture:
        """Read ``<kind>/<case>.json``; a malformed fixture raises ``ValueError``."""
        data = json.loads(path.read_text(encoding="utf-8"))
        raw = data.get("responses") or [data.get("response")]
        if not raw or any(not isinstance(r, dict) for r in raw):
            raise ValueError(f"{path}: needs `response` (an object) or `responses` (a list)")
        for key in ("source", "call", "expect"):
            if not data.get(key):
                raise ValueError(f"{path}: `{key}` is missing")
        if data["expect"].get("support") not in SUPPORT_LEVELS:
            raise ValueError(f"{path}: `expect.support` must be one of {SUPPORT_LEVELS}")
        return cls(
            kind=path.parent.name,
            case=path.stem,
            source=str(data["source"]),
            settings=dict(data.get("settings") or {}),
            call=dict(data["call"]),
            request=dict(data.get("request") or {}),
            responses=tuple(Response.from_json(r) for r in raw),
            expect=dict(data["expect"]),
            note=str(data.get("note", "")),
        )


def load_fixtures(root: Path) -> list[Fixture]:
    """Every ``<kind>/<case>.json`` under ``root``, sorted by kind then case."""
    return [Fixture.load(p) for p in sorted(root.glob("*/*.json"))]


class ReplayOpenAI(FakeOpenAI):
    """Answers ``/v1/chat/completions`` with recorded responses, in order; records every
    request (:attr:`requests`: body and headers) and lists ``models`` at ``/v1/models``."""

    def __init__(
        self, responses: Response | Sequence[Response], *, models: Sequence[str] = ("model",)
    ) -> None:
        super().__init__(models=models)
        self.responses = (responses,) if isinstance(responses, Response) else tuple(responses)
        if not self.responses:
            raise ValueError("ReplayOpenAI needs at least one response")

    async def _answer(
        self,
        request: web.Request,
        chat: ChatRequest,
        index: int,
        on_reply: Callable[[Reply], None] | None = None,
    ) -> web.StreamResponse:
        recorded = self.responses[min(index, len(self.responses) - 1)]
        if not recorded.streamed:
            if recorded.body is None:
                return web.Response(
                    status=recorded.status, text=recorded.text or "", headers=recorded.headers
                )
            return web.json_response(
                recorded.body, status=recorded.status, headers=recorded.headers
            )
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        response = web.StreamResponse(status=recorded.status, headers=headers)
        response.headers.update(recorded.headers)
        await response.prepare(request)
        for event in recorded.events:
            line = event if event.startswith(":") else f"data: {event}"
            await response.write(line.encode() + b"\n\n")
        await response.write_eof()
        return response
