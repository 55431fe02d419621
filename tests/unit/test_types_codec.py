"""The codecs of the core values round-trip, as bot/types.py promises."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.store.runs import decode_record, encode_record
from bot.types import Cleanup, Outbound, OutboundKind, RunRecord, RunStatus, ThreadRef, Usage

ids = st.text(min_size=1, max_size=20)
threads = st.builds(
    ThreadRef,
    platform=st.sampled_from(["slack", "telegram", "matrix", "console"]),
    account=st.text(max_size=20),
    chat=ids,
    thread=st.none() | ids,
)
outbounds = st.builds(
    Outbound,
    thread=threads,
    text=st.text(),
    kind=st.sampled_from(OutboundKind),
    edit_of=st.none() | ids,
    idempotency_key=st.text(max_size=40),
    ephemeral_to=st.none() | ids,
)
# Deterministic and writes no example database into the tree (as tests/fuzz).
quick = settings(database=None, derandomize=True, deadline=None)
floats = st.floats(allow_nan=False, allow_infinity=False)
records = st.builds(
    RunRecord,
    run_id=ids,
    seq=st.integers(min_value=1, max_value=10_000),
    session_key=ids,
    child_session_key=ids,
    session_id=ids,
    thread=threads,
    requester=ids,
    agent_id=ids,
    subagent_type=ids,
    task=st.text(),
    model=ids,
    label=st.text(max_size=20),
    thinking=st.sampled_from(["", "low", "high"]),
    timeout_s=st.integers(min_value=1, max_value=86_400),
    cleanup=st.sampled_from(Cleanup),
    status=st.sampled_from(RunStatus),
    created_at=floats,
    started_at=st.none() | floats,
    ended_at=st.none() | floats,
    result=st.text(),
    notes=st.text(),
    prompt_tokens=st.integers(min_value=0, max_value=10**9),
    completion_tokens=st.integers(min_value=0, max_value=10**9),
    cost_usd=st.none() | floats,
    job_id=st.text(max_size=40),
    warnings=st.lists(st.text(max_size=30), max_size=3).map(tuple),
    archived_at=st.none() | floats,
    cached_tokens=st.integers(min_value=0, max_value=10**9),
    reasoning_tokens=st.integers(min_value=0, max_value=10**9),
    usage_estimated=st.booleans(),
)


@quick
@given(threads)
def test_thread_ref_round_trips_through_json(thread: ThreadRef) -> None:
    assert ThreadRef.from_json(json.loads(json.dumps(thread.to_json()))) == thread


def test_an_empty_thread_is_read_back_as_the_main_timeline() -> None:
    data = ThreadRef(platform="slack", account="T", chat="C", thread="").to_json()
    assert ThreadRef.from_json(data) == ThreadRef(platform="slack", account="T", chat="C")


@quick
@given(outbounds)
def test_outbound_round_trips_through_json(message: Outbound) -> None:
    assert Outbound.from_json(json.loads(json.dumps(message.to_json()))) == message


@quick
@given(records)
def test_run_record_round_trips_through_its_hash_codec(record: RunRecord) -> None:
    encoded = encode_record(record)
    assert all(isinstance(v, str) for v in encoded.values())  # what HSET stores
    as_redis_returns = {k.encode(): v.encode() for k, v in encoded.items()}
    assert decode_record(encoded) == record
    assert decode_record(as_redis_returns) == record


def test_a_record_stored_before_cached_and_reasoning_tokens_reads_with_none() -> None:
    record = RunRecord(
        run_id="r", seq=1, session_key="s", child_session_key="c", session_id="i",
        thread=ThreadRef(platform="console", account="a", chat="c"), requester="u",
        agent_id="main", subagent_type="t", task="x", model="m",
        prompt_tokens=10, completion_tokens=5,
    )  # fmt: skip
    old = {
        k: v
        for k, v in encode_record(record).items()
        if k not in {"cached_tokens", "reasoning_tokens", "usage_estimated"}
    }
    assert decode_record(old).usage == Usage(prompt_tokens=10, completion_tokens=5)


def test_the_estimated_mark_is_stored_as_the_usage_fields_write_it() -> None:
    usage = Usage(prompt_tokens=3, completion_tokens=2, cached_tokens=1, estimated=True)
    stored = {k: str(v) for k, v in usage.record_fields().items()}
    record = RunRecord(
        run_id="r", seq=1, session_key="s", child_session_key="c", session_id="i",
        thread=ThreadRef(platform="console", account="a", chat="c"), requester="u",
        agent_id="main", subagent_type="t", task="x", model="m",
    )  # fmt: skip
    base = encode_record(record)
    assert decode_record(base | stored).usage == usage
    assert decode_record(base | {"usage_estimated": "True"}).usage_estimated
    assert not decode_record(base | {"usage_estimated": "0"}).usage_estimated
