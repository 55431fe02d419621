"""The pure parts of observing: series encoding, histogram buckets, event -> updates,
readiness verdicts, inbound outcomes, JSON log lines, and tracing off costing nothing."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from bot.config import Settings
from bot.keys import Keys
from bot.logs import JsonFormatter, RedactSecrets
from bot.observe import metric_defs as catalog
from bot.observe import tracing
from bot.observe.gateway import adapter_checks, outcome
from bot.observe.health import Check, verdict
from bot.observe.scope import bound
from bot.store.metrics import (
    Count,
    Histogram,
    MetricsStore,
    Observe,
    bucket_of,
    parse_series,
    series,
)
from bot.types import RunRecord, RunStatus, ThreadRef, Usage

ROOT = Path(__file__).resolve().parents[2]


def test_a_series_round_trips_with_sorted_labels_and_cut_values() -> None:
    text = series("m", {"b": "2", "a": "x|y", "c": "z" * 500})
    name, labels = parse_series(text)
    assert name == "m"
    assert labels == (("a", "x|y"), ("b", "2"), ("c", "z" * 100))
    assert series("m", {"a": "1", "b": "2"}) == series("m", {"b": "2", "a": "1"})


@pytest.mark.parametrize(
    ("value", "bound"), [(0.0, 0.1), (0.1, 0.1), (0.11, 1.0), (5.0, 10.0), (11.0, math.inf)]
)
def test_a_value_lands_in_the_first_bucket_at_or_above_it(value: float, bound: float) -> None:
    assert bucket_of(value, (10.0, 0.1, 1.0)) == bound


def test_cumulative_buckets_end_at_inf() -> None:
    hist = Histogram(buckets={1.0: 2, 0.5: 1, math.inf: 1}, sum=3.0, count=4)
    assert hist.cumulative() == [(0.5, 1), (1.0, 3), (math.inf, 4)]
    assert Histogram(buckets={1.0: 2}).cumulative() == [(1.0, 2), (math.inf, 2)]


def test_the_store_counts_and_observes_in_redis(rconn: redis.Redis) -> None:
    store = MetricsStore(redis=rconn, keys=Keys(prefix="t:"))
    store.write([Count("c", {"k": "v"}), Count("c", {"k": "v"}, 2), Count("f", {}, 0.25)])
    store.write([Observe("h", {"q": "a"}, 0.3, (0.1, 1.0)), Observe("h", {"q": "a"}, 7, (1.0,))])
    snap = store.read()
    assert snap.counters == {("c", (("k", "v"),)): 3.0, ("f", ()): 0.25}
    hist = snap.histograms[("h", (("q", "a"),))]
    assert (hist.count, hist.sum) == (2, pytest.approx(7.3))
    assert hist.cumulative() == [(1.0, 1), (math.inf, 2)]


def test_kept_updates_merge_per_field_and_are_written_in_one_pipeline(rconn: redis.Redis) -> None:
    store = MetricsStore(redis=rconn, keys=Keys(prefix="t:"))
    store.add([Count("c", {"k": "v"}), Observe("h", {}, 0.3, (1.0,))])
    store.add([Count("c", {"k": "v"}, 2), Count("f", {}, 0.25), Observe("h", {}, 0.5, (1.0,))])
    assert not store.due()  # just added
    assert store.read().counters == {}  # kept, not written
    assert sorted(w[2] for w in store.pending.take()) == [
        'c|{"k":"v"}',
        "f|{}",
        "h|{}|1.0",
        "h|{}|sum",
    ]  # one write per field: 3 events of c, 2 of h's bucket
    store.add([Count("c", {"k": "v"}, 3), Observe("h", {}, 0.3, (1.0,))])
    rconn.config_resetstat()
    store.flush()
    assert not store.pending
    assert rconn.info("commandstats")["cmdstat_hincrby"]["calls"] == 2  # c, h's bucket
    snap = store.read()
    assert snap.counters == {("c", (("k", "v"),)): 3.0}
    assert snap.histograms[("h", ())].count == 1  # the buckets say it


def test_a_histogram_count_an_older_version_stored_is_not_read(rconn: redis.Redis) -> None:
    store = MetricsStore(redis=rconn, keys=Keys(prefix="t:"))
    rconn.hset(store.keys.metrics_histograms, mapping={"h|{}|1.0": 2, "h|{}|count": 2})
    store.write([Observe("h", {}, 5.0, (1.0,))])
    assert store.read().histograms[("h", ())].count == 3


def test_kept_updates_come_back_when_their_write_fails(rconn: redis.Redis) -> None:
    store = MetricsStore(redis=rconn, keys=Keys(prefix="t:"))
    store.add([Count("c", {})])
    with pytest.raises(RuntimeError), store.carried() as writes:
        assert writes and not store.pending
        raise RuntimeError("the script failed")
    assert store.pending
    part = store.part([Count("c", {})], store.pending.take())
    assert json.loads(str(part.args[0])) == [["HINCRBY", 1, "c|{}", "2"]]  # merged


def test_a_forked_child_starts_with_nothing_kept(rconn: redis.Redis) -> None:
    store = MetricsStore(redis=rconn, keys=Keys(prefix="t:"))
    store.add([Count("c", {})])
    pid = os.fork()
    if pid == 0:  # the child: what it inherited is its parent's to write
        os._exit(0 if not store.pending and store.pending.take() == [] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.pending  # still the parent's


def _record(**changes: object) -> RunRecord:
    values: dict[str, object] = {
        "run_id": "r1", "seq": 1, "session_key": "s", "child_session_key": "c",
        "session_id": "x", "thread": ThreadRef(platform="slack", account="a", chat="c"),
        "requester": "u", "agent_id": "main", "subagent_type": "researcher", "task": "t",
        "model": "m", "created_at": 100.0, "started_at": 101.0,
    }  # fmt: skip
    values.update(changes)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_a_run_ending_counts_by_agent_type_status_and_times_from_its_start() -> None:
    ended, duration = catalog.run_ended(_record(), RunStatus.TIMEOUT, ended_at=131.0)
    assert ended == Count(
        "fanbot_runs_ended", {"agent": "main", "type": "researcher", "status": "timeout"}
    )
    assert isinstance(duration, Observe) and duration.value == 30.0
    never_started = catalog.run_ended(_record(started_at=None), RunStatus.STOPPED, ended_at=110.0)
    assert never_started[1].value == 10.0  # type: ignore[union-attr]


def test_a_model_call_counts_tokens_and_cost_only_when_known() -> None:
    updates = catalog.model_call("m", Usage(prompt_tokens=3, completion_tokens=4), None, ok=True)
    assert [u.amount for u in updates if isinstance(u, Count)] == [1, 3, 4]
    priced = catalog.model_call("m", Usage(prompt_tokens=1), 0.5, ok=False)
    assert priced[0].labels == {"model": "m", "outcome": "error"}
    assert priced[-1] == Count("fanbot_model_cost_usd", {"model": "m"}, 0.5)


def test_a_model_call_counts_cached_and_reasoning_tokens_when_there_are_any() -> None:
    usage = Usage(prompt_tokens=10, completion_tokens=6, cached_tokens=8, reasoning_tokens=4)
    counts = [u for u in catalog.model_call("m", usage, None, ok=True) if isinstance(u, Count)]
    kinds = {u.labels.get("kind"): u.amount for u in counts if "kind" in u.labels}
    assert kinds == {"prompt": 10, "completion": 6, "cached": 8, "reasoning": 4}


def test_only_an_announce_has_a_finish_to_announce_latency() -> None:
    assert len(catalog.delivered("slack", "reply", since_written=None)) == 1
    announce = catalog.delivered("slack", "announce", since_written=-1.0)
    assert isinstance(announce[1], Observe) and announce[1].value == 0.0  # clock skew: 0


class _Result:
    def __init__(self, verdict: str, duplicate: bool = False) -> None:
        self.verdict, self.duplicate = verdict, duplicate


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (None, "error"),
        (_Result("accept", duplicate=True), "deduped"),
        (_Result("accept"), "accepted"),
        (_Result("ignored: not allowed"), "refused"),
        (_Result("ignored: another bot"), "ignored"),
        (_Result("ignored: not addressed to the bot"), "ignored"),
    ],
)
def test_inbound_outcomes(result: _Result | None, expected: str) -> None:
    assert outcome(result).value == expected


def test_readiness_names_what_is_not_ready() -> None:
    assert verdict([Check(name="redis", ok=True)]) == (
        200,
        {"status": "ready", "checks": {"redis": {"ok": True, "detail": ""}}},
    )
    checks = [Check(name="redis", ok=True), *adapter_checks(
        ["slack", "telegram", "matrix"], started={"telegram"}, retrying=["slack"]
    )]  # fmt: skip
    status, body = verdict(checks)
    assert status == 503
    assert body["not_ready"] == ["adapter:slack", "adapter:matrix"]
    assert body["checks"]["adapter:slack"]["detail"] == "starting (retrying to connect)"
    assert body["checks"]["adapter:matrix"]["detail"] == "not started"


def _line(record: logging.LogRecord, secrets: tuple[str, ...] = ()) -> dict[str, object]:
    RedactSecrets(secrets).filter(record)
    parsed: dict[str, object] = json.loads(JsonFormatter().format(record))
    return parsed


def _log_record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("token sekret123 leaked")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("bot.x", logging.WARNING, __file__, 1, msg, args, info)


def test_a_json_log_line_carries_the_job_scope_and_keeps_secrets_out() -> None:
    line = _line(_log_record("plain %s", "text"))
    assert line["message"] == "plain text" and line["level"] == "WARNING"
    assert line["logger"] == "bot.x" and "run_id" not in line and "trace_id" not in line
    with bound(run_id="r1", session_key="agent:main:slack:C1"):
        scoped = _line(_log_record("key %s", "sekret123"), secrets=("sekret123",))
    assert scoped["run_id"] == "r1" and scoped["session_key"] == "agent:main:slack:C1"
    assert scoped["message"] == "key ***"
    failed = _line(_log_record("boom", exc=True), secrets=("sekret123",))
    assert "ValueError: token *** leaked" in str(failed["exception"])


def test_a_json_log_line_has_the_trace_id_inside_a_span() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    assert tracing.configure(Settings(), service="t", exporter=InMemorySpanExporter())
    try:
        with tracing.span("outer"):
            line = _line(_log_record("in a span"))
            assert line["trace_id"] == tracing.trace_id() and len(str(line["trace_id"])) == 32
            assert tracing.traceparent().startswith("00-" + str(line["trace_id"]))
    finally:
        tracing.shutdown()


def test_tracing_off_imports_nothing_and_changes_nothing() -> None:
    # redis-py itself imports parts of opentelemetry when it is installed; tracing off must
    # add none (no SDK, no exporter) to what the process loaded anyway.
    code = (
        "import sys, redis\n"
        "before = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "from bot.observe import tracing\n"
        "from bot.config import Settings\n"
        "assert not tracing.configure(Settings(), service='x')\n"
        "with tracing.span('a', parent='00-' + '1' * 32 + '-' + '2' * 16 + '-01') as s:\n"
        "    assert s is None and tracing.traceparent() == '' and tracing.trace_id() == ''\n"
        "tracing.flush()\n"
        "after = {m for m in sys.modules if m.startswith('opentelemetry')}\n"
        "print(sorted(after - before))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "FANBOT_CONFIG": "/dev/null"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    assert out.stdout.strip() == "[]"
