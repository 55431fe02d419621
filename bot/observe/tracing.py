"""Optional OpenTelemetry tracing: one trace per user message, across every process.

Spans: ``gateway.ingress`` → ``turn`` (the RQ horse) → ``chat <model>`` and
``execute_tool <name>`` → ``spawn`` → ``run`` (another horse) → ``chat`` … → ``finalize``
→ ``deliver`` (the gateway again). The context crosses Redis and RQ as a W3C
``traceparent`` string stored in the turn job's payload, the run record and each outbox
message, so a trace survives queues, forks and restarts.

It is off unless an endpoint is configured (``FANBOT_OBSERVE__OTLP_ENDPOINT``, or the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) and the
``fanbot[otel]`` extra is installed. Off, every helper here is a no-op that never imports
``opentelemetry``. Spans go out over OTLP/HTTP (protobuf) in batches; a job horse
flushes before it exits (:func:`flush`), since RQ ends it with ``os._exit``.

The tracer is process state (as OpenTelemetry's own provider is): it is set once per
process by :func:`configure` and read by the helpers, so instrumented code needs no extra
argument. fanbot keeps its own provider rather than replacing the global one.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from bot.config import Settings, otlp_traces_url

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

log = logging.getLogger(__name__)

Attributes = Mapping[str, str | int | float | bool]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(kw_only=True)
class _State:
    provider: TracerProvider | None = None
    tracer: Tracer | None = None


_state = _State()


def endpoint(settings: Settings) -> str:
    """The OTLP/HTTP traces URL to export to, or "" (tracing off)."""
    return otlp_traces_url(settings.observe)


def configure(settings: Settings, *, service: str, exporter: SpanExporter | None = None) -> bool:
    """Start tracing in this process if an endpoint (or ``exporter``) is given.

    Returns:
        Whether tracing is on. Without an endpoint nothing is imported and an earlier
        configuration stays.
    """
    url = endpoint(settings)
    if exporter is None and not url:
        return enabled()
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "tracing is configured but OpenTelemetry is missing: pip install 'fanbot[otel]'"
        )
        return False
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=url)
    shutdown()
    name = f"{settings.observe.service_name}-{service}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    _state.provider, _state.tracer = provider, provider.get_tracer("fanbot")
    log.info("tracing: spans of %s go to %s", name, url or type(exporter).__name__)
    return True


def enabled() -> bool:
    return _state.tracer is not None


@contextlib.contextmanager
def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: str = "",
    server: bool = False,
) -> Iterator[Span | None]:
    """A span around the block (``None`` and nothing else when tracing is off).

    Args:
        name: The span's name.
        attributes: Its attributes.
        parent: A ``traceparent`` to continue (a context carried through Redis); empty:
            the current span, else a new trace.
        server: The span starts a request (the gateway's ingress).
    """
    tracer = _state.tracer
    if tracer is None:
        yield None
        return
    from opentelemetry.trace import SpanKind, Status, StatusCode

    context = _extract(parent) if parent else None
    kind = SpanKind.SERVER if server else SpanKind.INTERNAL
    with tracer.start_as_current_span(
        name, context=context, kind=kind, attributes=dict(attributes or {}),
        record_exception=True, set_status_on_exception=False,
    ) as current:  # fmt: skip
        try:
            yield current
        except BaseException as exc:
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def set_attributes(current: Span | None, attributes: Attributes) -> None:
    """Add attributes to a span from :func:`span` (no-op on ``None``)."""
    if current is not None:
        current.set_attributes(dict(attributes))


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` value ("" when off or outside a span)."""
    if _state.tracer is None:
        return ""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent", "")


def trace_id() -> str:
    """The current trace id in hex ("" when off or outside a span)."""
    if _state.tracer is None:
        return ""
    from opentelemetry.trace import get_current_span

    ctx = get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else ""


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans still buffered (before a job horse exits)."""
    if _state.provider is not None:
        _state.provider.force_flush(timeout_ms)


def shutdown() -> None:
    """Flush and stop exporting (tests re-configure; a process ends)."""
    provider, _state.provider, _state.tracer = _state.provider, None, None
    if provider is not None:
        provider.shutdown()


def _extract(traceparent: str) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def traced(name: str) -> Callable[[F], F]:
    """Decorate a function so each call runs in a span called ``name`` (when tracing)."""

    def wrap(func: F) -> F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            if _state.tracer is None:
                return func(*args, **kwargs)
            with span(name):
                return func(*args, **kwargs)

        return cast("F", run)

    return wrap
