"""Every size cap on the way in and out, on its own: cut with a note, memory bounded."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from adapters.slack.markup import split as slack_split
from adapters.slack.markup import to_mrkdwn
from adapters.telegram.markup import render_parts
from bot.agent.llm import Completion, ToolCallRequest, fold_stream
from bot.agent.loop import LoopControl, Meter, run_loop
from bot.agent.tools import NoArgs, Tool, execute_tool
from bot.config import OpenAISettings, Settings
from bot.errors import ToolError
from bot.gateway.admission import cap_inbound
from bot.runs.render import history_note, render_announce
from bot.text.chunking import split_markdown
from bot.text.clip import clip, clip_markdown, cut_note, split_note
from bot.types import Inbound, RunRecord, RunStatus, Sender, ThreadRef
from bot.types import Usage as TokenUsage

MB = 1_000_000
T = TypeVar("T")


def peak_bytes(fn: Callable[[], T]) -> tuple[T, int]:
    """``fn()`` and the peak of memory it allocated (tracemalloc), in bytes."""
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- clip --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("x" * 10, 10, "x" * 10),
        ("x" * 11, 10, "x" * 10 + "\n[… 1 characters cut]"),
        ("x" * 1_234_567, 3, "xxx\n[… 1,234,564 characters cut]"),
        # A cut text cut again: one note, counting both cuts.
        ("x" * 20 + "\n[… 1,000 characters cut]", 5, "x" * 5 + "\n[… 1,015 characters cut]"),
        # Already within the limit apart from its note: unchanged.
        ("x" * 5 + "\n[… 1,000 characters cut]", 5, "x" * 5 + "\n[… 1,000 characters cut]"),
        # Something that only looks like a note in the middle is just text.
        ("[… 9 characters cut] and more", 4, "[… 9\n[… 25 characters cut]"),
    ],
)
def test_clip(text: str, limit: int, expected: str) -> None:
    assert clip(text, limit) == expected
    assert clip(expected, limit) == expected  # idempotent


def test_split_note_finds_only_a_trailing_note() -> None:
    assert split_note("abc\n" + cut_note(12_345)) == (3, 12_345)
    assert split_note("abc") == (3, 0)
    assert split_note(cut_note(5) + " tail") == (len(cut_note(5)) + 5, 0)


def test_clip_markdown_closes_an_open_fence_before_the_note() -> None:
    text = "intro\n```python\n" + "print(1)\n" * 1000 + "```\nafter"
    cut = clip_markdown(text, 100)
    assert cut == text[:100] + "\n```\n" + cut_note(len(text) - 100)
    assert clip_markdown("no fence " * 100, 50) == clip("no fence " * 100, 50)


def test_clipping_a_huge_text_copies_only_the_head() -> None:
    text = "z" * (10 * MB)
    cut, peak = peak_bytes(lambda: clip(text, 20_000))
    assert len(cut) < 20_100
    assert peak < 100_000


# -- inbound -----------------------------------------------------------------------------


def inbound(text: str) -> Inbound:
    return Inbound(
        thread=ThreadRef(platform="slack", account="T", chat="C1", thread="1.0"),
        sender=Sender(user_id="U1"),
        text=text,
        message_id="m1",
        mentioned=True,
    )


def test_megabyte_inbound_is_cut_to_the_limit_with_a_note() -> None:
    big = inbound("q" * (1 << 20))
    (capped, cut), peak = peak_bytes(lambda: cap_inbound(big, 32_000))
    assert cut == (1 << 20) - 32_000
    assert capped.text == "q" * 32_000 + "\n[… 1,016,576 characters cut]"
    assert (capped.message_id, capped.thread, capped.sender) == ("m1", big.thread, big.sender)
    assert peak < 4 * 32_000 + 10_000
    small = inbound("hello")
    assert cap_inbound(small, 32_000) == (small, 0)


def test_size_settings_have_defaults_env_names_and_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings()
    assert settings.gateway.max_inbound_chars == 32_000
    assert settings.gateway.max_outbound_chars == 20_000
    assert settings.openai.max_reply_chars == 200_000
    monkeypatch.setenv("FANBOT_GATEWAY__MAX_INBOUND_CHARS", "5000")
    monkeypatch.setenv("FANBOT_GATEWAY__MAX_OUTBOUND_CHARS", "8000")
    monkeypatch.setenv("FANBOT_OPENAI__MAX_REPLY_CHARS", "50000")
    monkeypatch.setenv("FANBOT_CONFIG", "/nonexistent/fanbot.toml")
    settings = Settings()
    assert settings.gateway.max_inbound_chars == 5000
    assert settings.gateway.max_outbound_chars == 8000
    assert settings.openai.max_reply_chars == 50_000
    # The turn job accepts 200k characters: the inbound limit stays well below.
    with pytest.raises(ValueError, match="max_inbound_chars"):
        Settings(gateway={"max_inbound_chars": 500_000})  # type: ignore[arg-type]


# -- model reply -------------------------------------------------------------------------


class FakeStream:
    """Chat-completion chunks made on the fly (so only the fold's memory is measured)."""

    def __init__(self, chunks: Iterator[Any]) -> None:
        self.chunks = chunks
        self.closed = False

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.closed = True

    def __iter__(self) -> Iterator[Any]:
        return self.chunks


def delta_chunk(content: str | None = None, tool_calls: Any = None) -> Any:
    delta = SimpleNamespace(content=content, tool_calls=tool_calls)
    choice = SimpleNamespace(finish_reason=None, delta=delta)
    return SimpleNamespace(usage=None, choices=[choice])


def text_stream(chars: int, piece: int = 4, *, tool_args: int = 0) -> Iterator[Any]:
    word = "abcdefgh"[:piece]
    for i in range(chars // piece):
        yield delta_chunk(content=f"{i % 10}{word[1:]}")  # a fresh string per chunk
    if tool_args:
        opening = SimpleNamespace(
            index=0, id="call_1", function=SimpleNamespace(name="calculate", arguments="")
        )
        yield delta_chunk(tool_calls=[opening])
        for _ in range(tool_args // 8):
            more = SimpleNamespace(
                index=0, id=None, function=SimpleNamespace(name=None, arguments="1+1+1+1+")
            )
            yield delta_chunk(tool_calls=[more])
    done = SimpleNamespace(prompt_tokens=7, completion_tokens=chars // 4)
    yield SimpleNamespace(usage=done, choices=[])


def test_hundred_thousand_token_reply_is_cut_with_a_note_and_usage_kept() -> None:
    stream = FakeStream(text_stream(420_000))
    seen: list[int] = []
    started = time.perf_counter()
    completion = fold_stream(stream, seen.append, limit=200_000)
    elapsed = time.perf_counter() - started
    assert completion.content.endswith("\n" + cut_note(220_000))
    assert len(completion.content) == 200_000 + 1 + len(cut_note(220_000))
    assert completion.cut_chars == 220_000
    assert completion.usage == TokenUsage(prompt_tokens=7, completion_tokens=105_000)
    assert seen[-1] == 420_000 and len(seen) == 105_000
    assert stream.closed
    assert elapsed < 5, f"folding 105k chunks took {elapsed:.1f}s"


def test_folding_memory_does_not_grow_with_the_reply_length() -> None:
    def fold(chars: int) -> Completion:
        return fold_stream(FakeStream(text_stream(chars, 8)), limit=20_000)

    short, short_peak = peak_bytes(lambda: fold(50_000))
    long, long_peak = peak_bytes(lambda: fold(500_000))
    assert short.cut_chars == 30_000 and long.cut_chars == 480_000
    print(f"\nfold peak: 50k chars {short_peak} B, 500k chars {long_peak} B (limit 20k)")
    assert long_peak < 1.5 * short_peak
    assert long_peak < 25 * 20_000  # the kept pieces (~60 B each for 8 characters) and a join


class Scripted:
    """A stand-in for ChatModel answering from a list."""

    def __init__(self, replies: list[Completion]) -> None:
        self.settings = OpenAISettings()
        self.replies = replies

    def complete(self, request: Any) -> Completion:
        return self.replies.pop(0)


def test_cut_tool_arguments_never_run_and_are_not_sent_back() -> None:
    completion = fold_stream(FakeStream(text_stream(0, tool_args=300_000)), limit=200_000)
    [call] = completion.tool_calls
    assert call.cut_chars == 100_000 and len(call.arguments) == 200_000
    assert completion.as_message()["tool_calls"][0]["function"]["arguments"] == "{}"

    model = Scripted([completion, Completion(content="gave up")])

    recorded: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    result = run_loop(
        model=model,  # type: ignore[arg-type]
        model_name="m",
        messages=messages,
        tools=[],
        ctx=None,  # type: ignore[arg-type]
        max_steps=3,
        meter=Meter(),
        control=LoopControl(record=recorded.append),
    )
    assert result.text == "gave up"
    tool_message = next(m for m in recorded if m["role"] == "tool")
    assert tool_message["content"] == (
        "error: the arguments for calculate were too long (300,000 characters; the limit is "
        "200,000) and were cut, so the call did not run"
    )


def test_the_answer_step_puts_no_status_of_its_own_on_the_card() -> None:
    """Each tool call shows on the status card; the answer does not (the run's end and its
    final card follow at once: a status in between would cost an edit on the platform)."""
    tool_step = Completion(
        content="", tool_calls=(ToolCallRequest(id="c1", name="nothing", arguments="{}"),)
    )
    model = Scripted([tool_step, Completion(content="the answer")])
    shown: list[str] = []
    result = run_loop(
        model=model,  # type: ignore[arg-type]
        model_name="m",
        messages=[{"role": "user", "content": "go"}],
        tools=[],
        ctx=None,  # type: ignore[arg-type]
        max_steps=3,
        meter=Meter(),
        control=LoopControl(progress=shown.append),
    )
    assert result.text == "the answer" and result.complete
    assert len(shown) == 1 and "🔧 nothing" in shown[0]


# -- tool result -------------------------------------------------------------------------


def run_tool(run: Callable[[Any, NoArgs], str], limit: int = 20_000) -> str:
    tools = {"big": Tool(name="big", description="", args=NoArgs, run=run)}
    return execute_tool(tools, name="big", arguments="{}", ctx=None, max_chars=limit)  # type: ignore[arg-type]


def test_ten_megabyte_tool_result_is_cut_within_four_times_its_size() -> None:
    size = 10 * MB
    result, peak = peak_bytes(lambda: run_tool(lambda _c, _a: "r" * size))
    assert result == "r" * 20_000 + f"\n[… truncated: {size - 20_000} more characters]"
    print(f"\nexecute_tool peak for a 10 MB result: {peak / MB:.1f} MB")
    assert peak < 4 * size
    # A result that already exists costs only the kept head.
    ready = "s" * size
    result, peak = peak_bytes(lambda: run_tool(lambda _c, _a: ready))
    assert len(result) < 20_100 and peak < 100_000


@pytest.mark.parametrize(
    "fail",
    [
        pytest.param(ToolError("e" * MB), id="tool-error"),
        pytest.param(ValueError("v" * MB), id="crash"),
    ],
)
def test_huge_tool_errors_are_cut_too(fail: Exception) -> None:
    def run(_c: Any, _a: NoArgs) -> str:
        raise fail

    result = run_tool(run, limit=1_000)
    assert result.startswith("error: ") and result.endswith("more characters]")
    assert len(result) < 1_100


def test_the_model_and_the_transcript_see_the_cut_tool_result() -> None:
    tool = Tool(name="big", description="", args=NoArgs, run=lambda _c, _a: "b" * (10 * MB))

    call = ToolCallRequest(id="c1", name="big", arguments="{}")
    model = Scripted([Completion(content="", tool_calls=(call,)), Completion(content="done")])

    recorded: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    run_loop(
        model=model,  # type: ignore[arg-type]
        model_name="m",
        messages=messages,
        tools=[tool],
        ctx=None,  # type: ignore[arg-type]
        max_steps=3,
        meter=Meter(),
        control=LoopControl(record=recorded.append),
        max_tool_chars=5_000,
    )
    [in_context] = [m for m in messages if m["role"] == "tool"]
    [in_transcript] = [m for m in recorded if m["role"] == "tool"]
    assert in_context is in_transcript
    assert len(in_context["content"]) < 5_100


# -- announce and posts ------------------------------------------------------------------


def record() -> RunRecord:
    return RunRecord(
        run_id="r" * 32,
        session_key="agent:main:telegram:1:topic:2",
        child_session_key="agent:main:subagent:x",
        session_id="s1",
        seq=1,
        task="write a lot",
        label="long",
        subagent_type="general-purpose",
        model="m",
        thread=ThreadRef(platform="telegram", account="b", chat="1", thread="2"),
        requester="telegram:7",
        agent_id="main",
        created_at=1000.0,
    )


def huge_reply() -> str:
    text = ("A paragraph of a very long reply. " * 6 + "\n\n") * 2_000
    return clip(text, 200_000)  # as the model client leaves it


def test_announce_of_a_huge_result_is_a_handful_of_messages() -> None:
    result = huge_reply()
    text = render_announce(
        record(),
        status=RunStatus.SUCCESS,
        result=result,
        notes="n" * MB,
        ended_at=1062.0,
        transcript_ref="fanbot:transcript:s1",
        max_result_chars=20_000,
    )
    assert "Status: success" in text
    assert "Notes: nnn" in text and f"(truncated, {MB - 2_000:,} more characters)" in text
    total = split_note(result)[1] + 200_000 - 20_000
    assert f"(truncated, {total:,} more characters)" in text
    assert len(text) < 20_000 + 2_000 + 1_000
    telegram = render_parts(text)
    slack = slack_split(to_mrkdwn(text), 3_900)
    matrix = split_markdown(text, limit=8_000)
    print(f"\nannounce: {len(text)} chars -> Telegram {len(telegram)}, Slack {len(slack)}, "
          f"Matrix {len(matrix)} messages")  # fmt: skip
    assert len(telegram) <= 6 and len(slack) <= 7 and len(matrix) <= 3


def test_a_huge_turn_reply_posts_a_handful_of_messages() -> None:
    reply = huge_reply()
    end, earlier = split_note(reply)
    posted = clip_markdown(reply, Settings().gateway.max_outbound_chars)
    assert posted.endswith("\n" + cut_note(end + earlier - 20_000))
    assert len(render_parts(posted)) <= 6


def test_history_note_of_a_huge_result_is_bounded() -> None:
    note = history_note(record(), status=RunStatus.SUCCESS, result=huge_reply(), max_chars=16_000)
    assert note.startswith('[Subagent #1 "long" (general-purpose) ended: success; run rrrrrrrr]\n')
    assert len(note) < 16_200 and "more characters)" in note
