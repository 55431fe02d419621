"""Every metric fanbot exports: its name, help text, labels and buckets, and the pure
functions that turn one event into the :mod:`bot.store.metrics` updates it causes.

Counters and histograms live in Redis (cluster-wide, see :mod:`bot.observe`); gauges are
read at scrape time (:mod:`bot.observe.export`). Label values come from configuration or
fixed vocabularies (platform, status, queue, agent, subagent type, model, outcome), so a
series count stays bounded: a model name nobody configured is ``other``
(:func:`model_label`; see docs/architecture.md, "Bounded growth and exposure").
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass

from bot.config import Settings
from bot.models import catalog as models_catalog
from bot.store.metrics import Count, Observe, Update
from bot.types import RunRecord, RunStatus, Usage

LATENCY_BUCKETS: tuple[float, ...] = (
    0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
"""Seconds: a 13 ms job start and an hour-long run both land in a useful bucket."""


class Kind(enum.StrEnum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    GAUGE = "gauge"


@dataclass(frozen=True)
class Metric:
    """One exported family (``name`` without the ``_total`` suffix of a counter)."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()


class InboundOutcome(enum.StrEnum):
    """What the gateway did with one inbound event (the ``outcome`` label)."""

    ACCEPTED = "accepted"  # a turn was queued or a command answered
    DEDUPED = "deduped"  # a redelivery of an event already handled
    REFUSED = "refused"  # the sender or chat is not allowed
    LIMITED = "limited"  # over a messages-per-minute limit (answered once, then dropped)
    IGNORED = "ignored"  # own or another bot's message, an edit, empty, not addressed
    BAD_REQUEST = "bad_request"  # a webhook request answered 4xx (signature, body)
    ERROR = "error"  # ingress crashed on it (a bug: logged, message dropped)


RUNS_STARTED = Metric("fanbot_runs_started", Kind.COUNTER, "Subagent runs spawned (recorded and queued).", ("agent", "type"))  # fmt: skip
RUNS_ENDED = Metric("fanbot_runs_ended", Kind.COUNTER, "Subagent runs that reached a terminal status.", ("agent", "type", "status"))  # fmt: skip
RUN_DURATION = Metric("fanbot_run_duration_seconds", Kind.HISTOGRAM, "Run time from start (or spawn, if it never started) to its end.", ("type", "status"))  # fmt: skip
QUEUE_WAIT = Metric("fanbot_queue_wait_seconds", Kind.HISTOGRAM, "Time a job waited from enqueue (a run: its spawn) to a worker starting it.", ("queue",))  # fmt: skip
FIRST_TOKEN = Metric("fanbot_spawn_to_first_token_seconds", Kind.HISTOGRAM, "Time from a run's spawn to the first streamed token of its model.", ("type",))  # fmt: skip
ANNOUNCE = Metric("fanbot_finish_to_announce_seconds", Kind.HISTOGRAM, "Time from a run's terminal transition to its announce accepted by the platform.", ("platform",))  # fmt: skip
MODEL_CALLS = Metric("fanbot_model_calls", Kind.COUNTER, "Chat-completion calls.", ("model", "outcome"))  # fmt: skip
MODEL_TOKENS = Metric("fanbot_model_tokens", Kind.COUNTER, "Tokens as the endpoint counted them (kind: prompt, completion, and the cached and reasoning tokens inside them).", ("model", "kind"))  # fmt: skip
MODEL_COST = Metric("fanbot_model_cost_usd", Kind.COUNTER, "Estimated USD (configured prices, else the genai-prices table).", ("model",))  # fmt: skip
DELIVERED = Metric("fanbot_outbox_delivered", Kind.COUNTER, "Outbox messages the platform accepted.", ("platform", "kind"))  # fmt: skip
RETRIES = Metric("fanbot_outbox_retries", Kind.COUNTER, "Failed sends that will be retried.", ("platform",))  # fmt: skip
DEAD_LETTERS = Metric("fanbot_outbox_dead_letters", Kind.COUNTER, "Messages moved to the dead-letter stream.", ("platform",))  # fmt: skip
INBOUND = Metric("fanbot_gateway_inbound", Kind.COUNTER, "InboundOutcome platform events by outcome.", ("platform", "outcome"))  # fmt: skip

QUEUE_DEPTH = Metric("fanbot_queue_depth", Kind.GAUGE, "Jobs waiting on the queue for a free worker.", ("queue",))  # fmt: skip
QUEUE_EXECUTING = Metric("fanbot_queue_executing", Kind.GAUGE, "Jobs of the queue a worker is executing.", ("queue",))  # fmt: skip
QUEUE_OLDEST = Metric("fanbot_queue_oldest_age_seconds", Kind.GAUGE, "Age of the job at the head of the queue.", ("queue",))  # fmt: skip
WAITING_FOR_SLOT = Metric("fanbot_subagents_waiting_for_slot", Kind.GAUGE, "Runs held back by FANBOT_SUBAGENTS__MAX_CONCURRENT.")  # fmt: skip
WORKERS = Metric("fanbot_workers", Kind.GAUGE, "RQ workers registered, on every host.")  # fmt: skip
RUNS_ACTIVE = Metric("fanbot_runs_active", Kind.GAUGE, "Runs not terminal yet.", ("status",))  # fmt: skip
APPROVALS_PARKED = Metric("fanbot_approvals_parked", Kind.GAUGE, "Tool calls parked for an approval (not counted yet: always 0).")  # fmt: skip
OUTBOX_BACKLOG = Metric("fanbot_outbox_backlog", Kind.GAUGE, "Outbox messages not acknowledged yet.")  # fmt: skip
OUTBOX_LAG = Metric("fanbot_outbox_lag_seconds", Kind.GAUGE, "Age of the oldest outbox message not acknowledged yet.")  # fmt: skip
DEAD_LETTERS_NOW = Metric("fanbot_dead_letters", Kind.GAUGE, "Entries in the dead-letter stream now.")  # fmt: skip
RESUMES = Metric("fanbot_resumes", Kind.COUNTER, "Runs and turns whose worker was lost, by what became of them (resumed, exhausted, stopped, not_resumable).", ("kind", "outcome"))  # fmt: skip
REDIS_UP = Metric("fanbot_redis_up", Kind.GAUGE, "1 when this scrape could read Redis.")  # fmt: skip

METRICS: tuple[Metric, ...] = (
    RUNS_STARTED, RUNS_ENDED, RUN_DURATION, QUEUE_WAIT, FIRST_TOKEN, ANNOUNCE, MODEL_CALLS,
    MODEL_TOKENS, MODEL_COST, DELIVERED, RETRIES, DEAD_LETTERS, INBOUND, QUEUE_DEPTH,
    QUEUE_EXECUTING, QUEUE_OLDEST, WAITING_FOR_SLOT, WORKERS, RUNS_ACTIVE, APPROVALS_PARKED,
    OUTBOX_BACKLOG, OUTBOX_LAG, DEAD_LETTERS_NOW, RESUMES, REDIS_UP,
)  # fmt: skip


def _observe(metric: Metric, labels: dict[str, str], seconds: float) -> Observe:
    return Observe(metric.name, labels, max(0.0, seconds), LATENCY_BUCKETS)


def inbound(platform: str, outcome: InboundOutcome) -> list[Update]:
    return [Count(INBOUND.name, {"platform": platform, "outcome": outcome.value})]


def run_started(record: RunRecord) -> list[Update]:
    return [Count(RUNS_STARTED.name, {"agent": record.agent_id, "type": record.subagent_type})]


def run_ended(record: RunRecord, status: RunStatus, *, ended_at: float) -> list[Update]:
    labels = {"agent": record.agent_id, "type": record.subagent_type, "status": status.value}
    since = record.started_at or record.created_at
    duration = {"type": record.subagent_type, "status": status.value}
    return [Count(RUNS_ENDED.name, labels), _observe(RUN_DURATION, duration, ended_at - since)]


def resume(kind: str, outcome: str) -> list[Update]:
    """A run or turn (``kind``) whose worker was lost: ``resumed``, ``exhausted``,
    ``stopped`` or ``not_resumable``."""
    return [Count(RESUMES.name, {"kind": kind, "outcome": outcome})]


def queue_wait(queue: str, seconds: float) -> list[Update]:
    return [_observe(QUEUE_WAIT, {"queue": queue}, seconds)]


def first_token(subagent_type: str, seconds: float) -> list[Update]:
    return [_observe(FIRST_TOKEN, {"type": subagent_type}, seconds)]


OTHER_MODEL = "other"
"""The ``model`` label of every model name outside the configured ones."""
MAX_MODEL_LABEL_CHARS = 64


def configured_models(settings: Settings) -> frozenset[str]:
    """The model names settings name (default, list, prices, agents', subagent types'): the
    only ones that become a ``model`` label. A name a spawn requested is not among them
    (with no model list it is trusted, not configured)."""
    names = {settings.openai.model, *settings.openai.models, *settings.prices}
    names |= {settings.subagents.model or ""}
    names |= {t.model or "" for t in settings.subagent_types}
    for agent in settings.agents.values():
        names |= {agent.model or "", agent.subagent_model or ""}
    names |= models_catalog.configured_models(settings)  # ``local/qwen3``: docs/models.md
    return frozenset(names - {""})


def model_label(model: str, known: Collection[str]) -> str:
    """``model`` as a ``model`` label: itself (cut to :data:`MAX_MODEL_LABEL_CHARS`) if
    ``known`` has it, else :data:`OTHER_MODEL`, so requests cannot mint series."""
    return model[:MAX_MODEL_LABEL_CHARS] if model in known else OTHER_MODEL


def model_call(model: str, usage: Usage, cost: float | None, *, ok: bool) -> list[Update]:
    """One model call's updates; ``model`` is already a label (:func:`model_label`)."""
    updates: list[Update] = [
        Count(MODEL_CALLS.name, {"model": model, "outcome": "ok" if ok else "error"}),
        Count(MODEL_TOKENS.name, {"model": model, "kind": "prompt"}, usage.prompt_tokens),
        Count(MODEL_TOKENS.name, {"model": model, "kind": "completion"}, usage.completion_tokens),
    ]
    # cached/reasoning are parts of prompt/completion: kind is one of four, never summed.
    for kind, count in (("cached", usage.cached_tokens), ("reasoning", usage.reasoning_tokens)):
        if count:
            updates.append(Count(MODEL_TOKENS.name, {"model": model, "kind": kind}, count))
    if cost:
        updates.append(Count(MODEL_COST.name, {"model": model}, cost))
    return updates


def delivered(platform: str, kind: str, *, since_written: float | None) -> list[Update]:
    """A message delivered; ``since_written``: an announce's age (its finish → now)."""
    updates: list[Update] = [Count(DELIVERED.name, {"platform": platform, "kind": kind})]
    if since_written is not None:
        updates.append(_observe(ANNOUNCE, {"platform": platform}, since_written))
    return updates


def retry(platform: str) -> list[Update]:
    return [Count(RETRIES.name, {"platform": platform})]


def dead_letter(platform: str) -> list[Update]:
    return [Count(DEAD_LETTERS.name, {"platform": platform or "unknown"})]
