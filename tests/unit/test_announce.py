import pytest

from bot.config import Price, Settings
from bot.prices import estimate_cost
from bot.runs.render import history_note, render_announce, render_compact_card
from bot.text.units import duration, tokens
from bot.types import RunRecord, RunStatus, ThreadRef, Usage


def record(**kw: object) -> RunRecord:
    base: dict[str, object] = dict(
        run_id="0123456789abcdef",
        seq=2,
        session_key="agent:main:console:c:thread:t",
        child_session_key="agent:main:subagent:abc",
        session_id="sid",
        thread=ThreadRef(platform="console", account="a", chat="c", thread="t"),
        requester="console:alice",
        agent_id="main",
        subagent_type="researcher",
        task="Look into Django",
        label="Django research",
        model="m",
        created_at=100.0,
        started_at=100.0,
        prompt_tokens=2400,
        completion_tokens=700,
        cost_usd=0.0012,
    )
    base.update(kw)
    return RunRecord(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (59, "59s"), (62, "1m02s"), (3725, "1h02m")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(("n", "text"), [(950, "950"), (3100, "3.1k"), (2_500_000, "2.5M")])
def test_format_tokens(n: int, text: str) -> None:
    assert tokens(n) == text


def test_cost_needs_a_price() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=500_000)
    settings = Settings(prices={"m": Price(input=1.0, output=4.0)})
    assert estimate_cost(settings, "m", usage) == 3.0
    assert estimate_cost(settings, "other", usage) is None


def test_template_matches_the_design() -> None:
    text = render_announce(
        record(), status=RunStatus.SUCCESS, result="It is fine.", notes="", ended_at=162.0,
        transcript_ref="fanbot:transcript:sid",
    )  # fmt: skip
    assert text.splitlines() == [
        '✅ Subagent #2 "Django research" (researcher) finished',
        "Status: success",
        "Result: It is fine.",
        "runtime 1m02s · tokens 3.1k (in 2.4k / out 700) · est $0.0012 · session key "
        "agent:main:subagent:abc · session id sid · run id 01234567 · transcript "
        "fanbot:transcript:sid",
    ]


def test_the_footer_shows_cached_reasoning_and_estimated_tokens_when_there_are_any() -> None:
    rec = record(cached_tokens=2000, reasoning_tokens=500, usage_estimated=True)
    text = render_announce(
        rec, status=RunStatus.SUCCESS, result="ok", notes="", ended_at=162.0, transcript_ref="t"
    )
    assert "· tokens ~3.1k (in 2.4k, 2.0k cached / out 700, 500 reasoning) · est $0.0012" in text
    card = render_compact_card(rec, status=RunStatus.SUCCESS, ended_at=162.0)
    assert card.endswith("· 1m02s · ~3.1k tokens (2.0k cached, 500 reasoning) · est $0.0012")
    plain = render_compact_card(record(), status=RunStatus.SUCCESS, ended_at=162.0)
    assert plain.endswith("· 1m02s · 3.1k tokens · est $0.0012")


@pytest.mark.parametrize(
    ("status", "head"),
    [
        (RunStatus.ERROR, "❌"),
        (RunStatus.TIMEOUT, "⏱️"),
        (RunStatus.STOPPED, "⏹️"),
        (RunStatus.UNKNOWN, "❓"),
    ],
)
def test_status_line_comes_from_the_outcome(status: RunStatus, head: str) -> None:
    text = render_announce(
        record(cost_usd=None), status=status, result="", notes="boom", ended_at=101,
        transcript_ref="t",
    )  # fmt: skip
    assert text.startswith(head)
    assert f"Status: {status.value}" in text
    assert "Result: (none: it ended before it wrote any text)" in text
    assert "Notes: boom" in text
    assert "est $" not in text


def test_long_results_are_truncated_with_a_note() -> None:
    text = render_announce(
        record(), status=RunStatus.SUCCESS, result="x" * 500, notes="", ended_at=101,
        transcript_ref="t", max_result_chars=100,
    )  # fmt: skip
    assert "(truncated, 400 more characters)" in text


def test_label_falls_back_to_a_short_task_and_quotes_are_safe() -> None:
    rec = record(label="", task='Say "hi" ' + "very long " * 20)
    text = render_announce(
        rec, status=RunStatus.SUCCESS, result="ok", notes="", ended_at=101, transcript_ref="t"
    )
    first = text.splitlines()[0]
    assert "Say 'hi'" in first and first.count('"') == 2 and "…" in first


def test_history_note_names_the_run() -> None:
    note = history_note(record(), status=RunStatus.SUCCESS, result="R")
    assert note.startswith(
        '[Subagent #2 "Django research" (researcher) ended: success; run 01234567]'
    )
    # another run's result reaches the main agent as untrusted data
    assert note.endswith('\n<untrusted source="subagent-2">\nR\n</untrusted>')
