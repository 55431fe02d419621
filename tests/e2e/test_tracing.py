"""One user message that spawns a run is one trace: the gateway (in this process, spans in
the SDK's in-memory exporter), the forked turn and run horses (OTLP/HTTP to a local
collector) and the deliveries back in the gateway."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bot.observe import tracing
from bot.testing import FakeCollector, MemoryChannel, until
from bot.testing.fake_openai import FakeOpenAI
from bot.testing.scripted import Call, ChatRequest, ScriptedModel, Text, ToolCalls, is_subagent
from bot.testing.stack import Stack
from tests.e2e.conftest import stack_values


@pytest.fixture
def gateway_spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    tracing.shutdown()


def one_spawn() -> ScriptedModel:
    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool" or "research" not in req.last_user_message:
            return Text("started")
        return ToolCalls([Call("sessions_spawn", {"task": "look it up", "label": "r"})])

    return (
        ScriptedModel()
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, Text("found it"))
    )


async def test_one_message_that_spawns_a_run_is_one_trace_across_processes(
    redis_url: str, gateway_spans: InMemorySpanExporter
) -> None:
    async with FakeOpenAI(one_spawn(), models=["fake-model"]) as fake, FakeCollector() as otlp:
        values = stack_values(redis_url, fake.base_url, observe={"otlp_endpoint": otlp.url})
        channel = MemoryChannel()
        stack = Stack(values=values, adapters=[channel], workers=2)
        assert tracing.configure(stack.settings, service="gateway", exporter=gateway_spans)
        async with stack:
            await channel.say("please research this")
            await until(lambda: channel.announces and len(channel.replies) >= 1, timeout=40)
            await until(lambda: otlp.named("finalize") and otlp.named("run"), timeout=20)
            await until(lambda: len(_delivered(gateway_spans)) >= 2, timeout=20)
    tracing.flush()
    gateway = {s.name: s for s in gateway_spans.get_finished_spans()}
    ingress = gateway["gateway.ingress"]
    trace = f"{ingress.context.trace_id:032x}"
    worker = [s for s in otlp.spans if s.trace_id == trace]
    by_name = {s.name: s for s in worker}
    assert {"turn", "chat fake-model", "execute_tool sessions_spawn", "spawn", "run",
            "finalize"} <= set(by_name)  # fmt: skip
    ingress_id = f"{ingress.context.span_id:016x}"
    assert by_name["turn"].parent_span_id == ingress_id
    assert by_name["spawn"].parent_span_id == by_name["execute_tool sessions_spawn"].span_id
    assert by_name["run"].parent_span_id == by_name["spawn"].span_id
    assert by_name["finalize"].parent_span_id == by_name["run"].span_id
    subagent_chats = [s for s in worker if s.name == "chat fake-model"
                      and s.parent_span_id == by_name["run"].span_id]  # fmt: skip
    assert subagent_chats and subagent_chats[0].attributes["gen_ai.usage.output_tokens"] > 0
    assert {s.service for s in worker} == {"fanbot-worker"}
    deliveries = _delivered(gateway_spans)
    assert all(f"{d.context.trace_id:032x}" == trace for d in deliveries)
    parents = {f"{d.parent.span_id:016x}" for d in deliveries if d.parent is not None}
    assert by_name["finalize"].span_id in parents  # the announce
    assert by_name["turn"].span_id in parents  # the reply
    print(f"\ntrace {trace}:")
    for span in sorted(worker, key=lambda s: s.name):
        print(f"  {span.service:16} {span.name:28} {span.span_id} <- {span.parent_span_id}")
    for d in [ingress, *deliveries]:
        parent = f"{d.parent.span_id:016x}" if d.parent is not None else ""
        print(f"  {'fanbot-gateway':16} {d.name:28} {d.context.span_id:016x} <- {parent}")


def _delivered(exporter: InMemorySpanExporter) -> list:  # type: ignore[type-arg]
    tracing.flush()
    return [s for s in exporter.get_finished_spans() if s.name == "deliver"]
