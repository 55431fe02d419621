"""The soak's counting is not vacuous: it sees lost, duplicated and misrouted announces."""

from __future__ import annotations

from bot.bench.soak_plan import Kind, PlannedRun
from bot.bench.soak_report import announces, compare
from bot.runs.render import render_announce
from bot.testing.fake_telegram import SentMessage
from bot.types import RunRecord, RunStatus, ThreadRef

THREAD = ThreadRef(platform="telegram", account="1", chat="-100", thread="100")


def record(label: str, status: RunStatus) -> RunRecord:
    return RunRecord(
        run_id=f"{label}-id", seq=1, session_key="s", child_session_key="c", session_id="x",
        thread=THREAD, requester="telegram:1", agent_id="main", subagent_type="general-purpose",
        task=f"soak task {label}", model="m", label=label, status=status, created_at=1.0,
    )  # fmt: skip


def sent(run: RunRecord, topic: int, n: int) -> SentMessage:
    text = render_announce(
        run, status=run.status, result="r", notes="", ended_at=2.0, transcript_ref="t"
    )
    return SentMessage(
        message_id=n, chat_id=-100, message_thread_id=topic, text=text, raw_text=text,
        parse_mode=None,
    )  # fmt: skip


def test_compare_counts_each_kind_of_delivery_fault() -> None:
    plan = [PlannedRun(label=f"soak-000{i}", kind=Kind.OK, delay=0, topic=100) for i in range(5)]
    records = {
        "soak-0000": record("soak-0000", RunStatus.SUCCESS),
        "soak-0001": record("soak-0001", RunStatus.ERROR),
        "soak-0002": record("soak-0002", RunStatus.SUCCESS),
        "soak-0003": record("soak-0003", RunStatus.RUNNING),
    }  # soak-0004 has no record at all
    messages = [
        sent(records["soak-0000"], 100, 1),
        sent(records["soak-0001"], 100, 2),
        sent(records["soak-0001"], 100, 3),  # announced twice
        sent(records["soak-0002"], 101, 4),  # wrong topic
        sent(record("soak-0099", RunStatus.SUCCESS), 100, 5),  # not planned
        SentMessage(
            message_id=6, chat_id=-100, message_thread_id=100, text="⏳ #1 soak-0003 — started",
            raw_text="", parse_mode=None,
        ),  # a status message, not an announce
    ]  # fmt: skip
    found = announces(messages)
    assert [(a.label, a.status) for a in found][:2] == [
        ("soak-0000", "success"),
        ("soak-0001", "error"),
    ]
    delivery = compare(plan, records, found)
    assert delivery.not_terminal == ["soak-0003", "soak-0004"]
    assert delivery.not_announced == ["soak-0003", "soak-0004"]
    assert delivery.lost == ["soak-0003", "soak-0004"]
    assert delivery.duplicated == {"soak-0001": 2}
    assert delivery.misrouted == ["soak-0002"]
    assert delivery.stray == 1
    assert delivery.wrong_status == []
