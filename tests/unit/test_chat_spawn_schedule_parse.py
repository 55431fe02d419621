"""Pure parts of spawn from chat and schedules: intervals, cron, firings, command parsing."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from bot.commands.schedule_chat import EveryAsk, parse_every_command, parse_schedule_id
from bot.commands.spawn_command import SpawnAsk, parse_spawn, started_text
from bot.config import Settings
from bot.runs.access import Actor
from bot.runs.recurring import may_schedule
from bot.runs.schedule_spec import (
    Every,
    every_from_text,
    parse_every,
    parse_interval,
    plan_firing,
)
from bot.text.units import duration

TYPES = ("general-purpose", "explore", "plan")


@pytest.mark.parametrize(
    ("word", "seconds"),
    [("30m", 1800), ("2h", 7200), ("1d", 86_400), ("1h30m", 5400), ("45s", 45), ("2H", 7200)],
)
def test_intervals(word: str, seconds: int) -> None:
    assert parse_interval(word) == seconds


@pytest.mark.parametrize("word", ["30", "m", "2x", "1.5h", "-1h", "h2", "", "30 m", "1h 30m"])
def test_not_intervals(word: str) -> None:
    assert parse_interval(word) is None


def test_parse_every_interval_and_cron() -> None:
    assert parse_every(["30m", "x"], min_seconds=60) == (Every(text="30m", seconds=1800), 1)
    cron = parse_every(["0", "9", "*", "*", "1-5", "summarize"], min_seconds=60)
    assert cron == (Every(text="0 9 * * 1-5"), 5)
    assert "too often" in str(parse_every(["30s"], min_seconds=60))
    assert "neither an interval" in str(parse_every(["61", "9", "*", "*", "*"], min_seconds=60))
    assert "neither an interval" in str(parse_every(["0", "9", "*", "*"], min_seconds=60))
    assert "needs an interval" in str(parse_every([], min_seconds=60))


def test_interval_ticks_are_anchored() -> None:
    every = Every(text="30m", seconds=1800)
    assert every.next_after(1000.0, anchor=1000.0) == 2800.0
    assert every.next_after(2800.0, anchor=1000.0) == 4600.0
    assert every.next_after(2799.0, anchor=1000.0) == 2800.0


def test_cron_ticks_in_utc() -> None:
    every = every_from_text("0 9 * * 1-5")
    assert every.is_cron
    friday_noon = datetime(2026, 11, 20, 12, 0, tzinfo=UTC).timestamp()
    monday_nine = datetime(2026, 11, 23, 9, 0, tzinfo=UTC).timestamp()
    assert every.next_after(friday_noon, anchor=0) == monday_nine


def test_on_time_firing_is_not_late() -> None:
    every = Every(text="1m", seconds=60)
    firing = plan_firing(every, due=1060.0, now=1062.0, anchor=1000.0, late_after=120)
    assert firing.next_at == 1120.0 and firing.late_seconds == 0 and firing.late_note() == ""


def test_a_long_outage_fires_once_and_says_so() -> None:
    every = Every(text="1h", seconds=3600)
    firing = plan_firing(every, due=4600.0, now=4600.0 + 7500, anchor=1000.0, late_after=120)
    assert firing.next_at == 15_400.0  # the next tick after now: the missed ones are skipped
    assert firing.missed == 2
    assert firing.late_note() == (
        "fired 2h 5m late: workers were down (2 more ticks passed meanwhile; it ran once)"
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (59, "59s"), (3600, "1h"), (3660, "1h 1m"), (90061, "1d 1h")]
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds, style="spaced") == text


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        ("explore map the repo", SpawnAsk(subagent_type="explore", task="map the repo")),
        ("explorer map", SpawnAsk(subagent_type=None, task="explorer map")),
        ("Explore map", SpawnAsk(subagent_type="explore", task="map")),
        ("  do   the  thing ", SpawnAsk(subagent_type=None, task="do   the  thing")),
        ("plan\nline one\nline two", SpawnAsk(subagent_type="plan", task="line one\nline two")),
        ("run ls --all please", SpawnAsk(subagent_type=None, task="run ls --all please")),
        ("--thread explore x", SpawnAsk(subagent_type="explore", task="x", own_thread=True)),
        ("--THREAD x", SpawnAsk(subagent_type=None, task="x", own_thread=True)),
        ("--thread --thread x", SpawnAsk(subagent_type=None, task="x", own_thread=True)),
        ("--model local/qwen3 x", SpawnAsk(subagent_type=None, task="x", model="local/qwen3")),
        (
            "--MODEL=local/qwen3 --thread explore x",
            SpawnAsk(subagent_type="explore", task="x", own_thread=True, model="local/qwen3"),
        ),
    ],
)
def test_parse_spawn(rest: str, expected: SpawnAsk | str) -> None:
    assert parse_spawn(rest, TYPES) == expected


@pytest.mark.parametrize(
    ("rest", "fragment"),
    [
        ("", "the task is missing"),
        ("explore", "the task is missing"),
        ("--fast x do it", "I don't know the option `--fast`"),
        ("--model", "`--model` needs a model name"),
        ("--model= x", "`--model` needs a model name"),
        ("x" * 20_001, "at most 20,000"),
    ],
)
def test_parse_spawn_refusals(rest: str, fragment: str) -> None:
    answer = parse_spawn(rest, TYPES)
    assert isinstance(answer, str) and fragment in answer


def test_parse_every_command() -> None:
    got = parse_every_command("2h explore check ci", TYPES, min_seconds=60)
    assert got == EveryAsk(
        every=Every(text="2h", seconds=7200),
        ask=SpawnAsk(subagent_type="explore", task="check ci"),
    )
    cron = parse_every_command("*/15 * * * * ping", TYPES, min_seconds=60)
    assert isinstance(cron, EveryAsk) and cron.every.text == "*/15 * * * *"
    assert "the task is missing" in str(parse_every_command("2h", TYPES, min_seconds=60))


@pytest.mark.parametrize(
    ("token", "expected"), [("4", "4"), ("#4", "4"), ("04", "4"), ("x", None), ("", None)]
)
def test_schedule_ids(token: str, expected: str | None) -> None:
    assert parse_schedule_id(token) == expected


def test_started_text_shortens_and_warns() -> None:
    text = started_text(3, "explore", "t" * 200, ["unknown model 'x'; using 'm'"])
    first, second = text.split("\n")
    assert first.startswith("🚀 Started subagent #3 (explore): ttt") and first.endswith("…")
    assert second == "⚠️ unknown model 'x'; using 'm'"


@pytest.mark.parametrize(
    ("user", "who", "owner", "allowed"),
    [
        ("UADMIN", "admins", None, True),
        ("U1", "admins", None, False),
        ("U1", "anyone", None, True),
        ("U1", "anyone", "slack:U1", True),
        ("U1", "anyone", "slack:U2", False),
        ("UADMIN", "anyone", "slack:U2", True),
        ("U1", "admins", "slack:U1", False),
    ],
)
def test_who_may_schedule(user: str, who: str, owner: str | None, allowed: bool) -> None:
    actor = Actor(platform="slack", user_id=user, admins=("slack:UADMIN",))
    assert may_schedule(actor, who=who, owner=owner).allowed is allowed


def test_schedules_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANBOT_SCHEDULES__WHO", "anyone")
    assert Settings().schedules.who == "anyone"
    assert Settings(schedules={"who": "admins"}).schedules.who == "admins"  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Settings(schedules={"who": "everyone"})  # type: ignore[arg-type]


def test_receipt_texts_and_their_edit() -> None:
    from bot.runs.steer_receipts import receipt_text, update_of
    from bot.store.receipts import Receipt, ReceiptState
    from bot.types import Outbound, ThreadRef

    thread = ThreadRef(platform="slack", account="T", chat="C", thread="1.0")
    base = Receipt(
        receipt_id="r1",
        state=ReceiptState.QUEUED,
        run_id="x",
        name="subagent #1 · work",
        thread=thread,
        reply_key="cmd:slack:9",
    )
    assert receipt_text(base).startswith("📨 Queued for subagent #1 · work:")
    delivered = update_of(dataclasses.replace(base, state=ReceiptState.DELIVERED))
    assert delivered.text.startswith("✅ Delivered to subagent #1 · work")
    assert (
        delivered.replaces == "cmd:slack:9" and delivered.idempotency_key == "receipt:r1:delivered"
    )
    assert Outbound.from_json(delivered.to_json()) == delivered
    missed = dataclasses.replace(base, state=ReceiptState.MISSED, follow_up="#2 (`ab`)")
    assert "so I started a follow-up on the same session with it: run #2" in receipt_text(missed)
    dropped = dataclasses.replace(base, state=ReceiptState.MISSED)
    assert receipt_text(dropped).startswith("⚠️ Subagent #1 · work ended before reading")
    private = update_of(dataclasses.replace(base, state=ReceiptState.DELIVERED, ephemeral_to="U"))
    assert private.replaces == "" and private.ephemeral_to == "U"
