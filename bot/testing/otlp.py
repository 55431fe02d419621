"""A tiny OTLP/HTTP trace collector on a loopback port (needs the ``fanbot[otel]`` extra).

Point any process's exporter at it (``FANBOT_OBSERVE__OTLP_ENDPOINT=collector.url``) and
read back the spans every process sent, forked job horses included::

    async with FakeCollector() as collector:
        ...
        spans = await until(lambda: collector.named("deliver"))
        assert {s.trace_id for s in collector.spans} == {spans[0].trace_id}
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.demo.chat_server import LOOPBACK, bind_loopback


@dataclass(frozen=True, kw_only=True)
class CollectedSpan:
    """One span as an exporter sent it (ids in lowercase hex, "" for no parent)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)


class FakeCollector:
    """Accepts ``POST /v1/traces`` (protobuf) and keeps every span in :attr:`spans`."""

    def __init__(self) -> None:
        self.spans: list[CollectedSpan] = []
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def url(self) -> str:
        """The base URL (the exporter appends ``/v1/traces``)."""
        return f"http://{LOOPBACK}:{self._port}"

    def named(self, name: str) -> list[CollectedSpan]:
        return [s for s in self.spans if s.name == name]

    async def __aenter__(self) -> FakeCollector:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([web.post("/v1/traces", self._traces)])
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = bind_loopback()
        await web.SockSite(runner, sock).start()
        self._port, self._runner = sock.getsockname()[1], runner
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb

        body = await request.read()
        message = pb.ExportTraceServiceRequest()
        await asyncio.to_thread(message.ParseFromString, body)
        self.spans.extend(_spans(message))
        reply = pb.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type="application/x-protobuf")


def _spans(message: Any) -> list[CollectedSpan]:
    found = []
    for resource_spans in message.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    CollectedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        service=str(resource.get("service.name", "")),
                        attributes=_attributes(span.attributes),
                    )
                )
    return found


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        out[pair.key] = getattr(value, kind) if kind else None
    return out
