"""Status cards: learn-claude-code's progress lines, and a quiet end for a run that announces
nothing.

Pure rendering is table-tested; the worker side (execute, finalize) and the gateway side
(:class:`~bot.gateway.status_cards.ProgressRenderer`) run against real Redis and a
:class:`~bot.testing.MemoryChannel`.
"""

from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator, Iterator
from typing import cast

import pytest
import redis

from adapters.console.channel import ConsoleChannel
from adapters.console.terminal import Terminal
from bot.config import Settings
from bot.deps import Deps
from bot.errors import DeliveryError
from bot.gateway.runtime import async_client
from bot.gateway.status_cards import ProgressRenderer, moved_text, quiet_text, status_text
from bot.ports import DeletingChannel, PartLog
from bot.runs.execute import execute_run
from bot.runs.finalize import finalize_run
from bot.runs.naming import run_title
from bot.runs.progress_lines import tally
from bot.runs.stop import stop_run
from bot.steps import LoopControl, LoopResult, Meter
from bot.store.progress import ProgressEvent, ProgressStore, decode
from bot.testing import MemoryChannel
from bot.text.units import duration
from bot.types import Outbound, OutboundKind, RunRecord, RunStatus, ThreadRef

THREAD = ThreadRef(platform="console", account="a", chat="c", thread="t")
TITLE = '[explore] Subagent #2 "Research"'


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0.0s"),
        (3.24, "3.2s"),
        (59.9, "59.9s"),
        (59.96, "1m00s"),
        (62, "1m02s"),
        (3725, "1h02m"),
    ],
)
def test_format_elapsed(seconds: float, shown: str) -> None:
    assert duration(seconds, style="tenths") == shown


@pytest.mark.parametrize(
    ("text", "final", "tools", "elapsed", "card"),
    [
        ("started", False, None, None, f"⏳ {TITLE} — started"),
        (
            "step 3 · 🔧 search(django) · 1200 tokens",
            False,
            5,
            3.24,
            f"⏳ {TITLE} — step 3 · 🔧 search(django) · 1200 tokens · 5 tools, 3.2s",
        ),
        ("step 1 · answering · 9 tokens", False, 1, 0.4, f"⏳ {TITLE} — step 1 · answering · 9 tokens · 1 tool, 0.4s"),
        ("success", True, 8, 5.1, f"✅ {TITLE} — success (8 tools, 5.1s)"),
        ("timeout", True, 0, 600.0, f"⏱️ {TITLE} — timeout (0 tools, 10m00s)"),
        ("stopped", True, None, None, f"⏹️ {TITLE} — stopped"),
    ],
)  # fmt: skip
def test_status_text_as_seed_003(
    text: str, final: bool, tools: int | None, elapsed: float | None, card: str
) -> None:
    assert status_text(TITLE, text, final=final, tools=tools, elapsed=elapsed) == card


def test_tally_and_quiet_line() -> None:
    assert tally(1, 0.04) == "1 tool, 0.0s"
    assert tally(2, 61) == "2 tools, 1m01s"
    assert quiet_text(TITLE) == f"{TITLE} — done, nothing to announce"


# -- the worker side -------------------------------------------------------------------------


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    d = Deps.build(Settings(redis_url=redis_url), client=redis.Redis.from_url(redis_url))
    yield d
    d.close()


def make_run(deps: Deps, run_id: str = "r1", **kw: object) -> RunRecord:
    fields: dict[str, object] = dict(
        run_id=run_id,
        seq=2,
        session_key="agent:main:console:c:thread:t",
        child_session_key="agent:main:subagent:x",
        session_id=f"s-{run_id}",
        thread=THREAD,
        requester="console:alice",
        agent_id="main",
        subagent_type="explore",
        task="Research",
        model="m",
        created_at=time.time(),
        job_id=run_id,
    )
    fields.update(kw)
    record = RunRecord(**fields)  # type: ignore[arg-type]
    deps.runs.create(record)
    return record


def events(deps: Deps) -> list[ProgressEvent]:
    entries = deps.redis.xrange(deps.keys.progress)
    found = [decode({k.decode(): v.decode() for k, v in f.items()}) for _i, f in entries]
    return [e for e in found if e is not None]


def test_card_title_carries_the_type_tag(deps: Deps) -> None:
    assert run_title(make_run(deps), kind="tag") == '[explore] Subagent #2 "Research"'


def test_an_event_round_trips_through_the_stream_and_tolerates_bad_numbers(deps: Deps) -> None:
    event = ProgressEvent(run_id="r", thread=THREAD, text="x", tools=3, elapsed=1.25, quiet=True)
    deps.progress.put(event)
    deps.progress.put(ProgressEvent(run_id="r", thread=THREAD, text="y"))
    assert events(deps) == [event, ProgressEvent(run_id="r", thread=THREAD, text="y")]
    fields = {"run_id": "r", "thread": '{"platform": "console", "account": "a", "chat": "c"}'}
    odd = decode({**fields, "tools": "-1", "elapsed": "nan"})
    assert odd is not None and (odd.tools, odd.elapsed) == (None, None)


def counting_body(tools: int, answer: str = "done") -> object:
    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        for i in range(tools):
            meter.tool_calls += 1
            control.progress(f"step {i + 1} · 🔧 search · 0 tokens")
        return LoopResult(text=answer, complete=True)

    return body


def test_a_run_reports_its_tool_count_as_it_goes_and_a_final_tally(deps: Deps) -> None:
    make_run(deps)
    assert execute_run(deps, "r1", counting_body(tools=4)) == "success"  # type: ignore[arg-type]
    seen = events(deps)
    assert seen[0].text == "started" and seen[0].tools is None
    steps = [e for e in seen[1:] if not e.final]
    assert steps and steps[0].tools == 1 and steps[0].elapsed is not None  # then throttled
    last = seen[-1]
    assert last.final and last.text == "success" and not last.quiet
    assert last.tools == 4 and last.elapsed is not None and 0 <= last.elapsed < 5


def test_a_stopped_run_keeps_the_count_it_reached(deps: Deps) -> None:
    make_run(deps)
    assert deps.runs.start("r1", heartbeat_ttl=30).started
    deps.runs.update("r1", tool_calls=7)
    assert finalize_run(deps, "r1", status=RunStatus.STOPPED, notes="stopped by a")
    last = events(deps)[-1]
    assert (last.final, last.text, last.tools, last.quiet) == (True, "stopped", 7, False)


def test_the_run_s_own_end_saves_its_count_in_the_terminal_transition(deps: Deps) -> None:
    make_run(deps)
    assert deps.runs.start("r1", heartbeat_ttl=30).started
    deps.runs.update("r1", tool_calls=2)  # what progress saved last
    assert finalize_run(deps, "r1", status=RunStatus.SUCCESS, result="done", tools=5)
    assert deps.runs.field("r1", "tool_calls") == "5"
    assert events(deps)[-1].tools == 5
    assert not finalize_run(deps, "r1", status=RunStatus.ERROR, tools=9)  # ended already
    assert deps.runs.field("r1", "tool_calls") == "5"


def test_a_stop_from_elsewhere_sees_every_tool_call_so_far(deps: Deps) -> None:
    make_run(deps)

    def body(record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        for _ in range(3):  # within one progress interval: one event, every count saved
            meter.tool_calls += 1
            control.progress("step 1 · 🔧 search · 0 tokens")
        assert stop_run(deps, record.run_id, by="alice").ended  # as /stop would, meanwhile
        control.checkpoint()  # raises RunStopped
        raise AssertionError("not stopped")

    assert execute_run(deps, "r1", body) == "stopped"
    finals = [e for e in events(deps) if e.final]
    assert [(e.text, e.tools) for e in finals] == [("stopped", 3)]


def test_a_run_that_never_started_has_no_tally(deps: Deps) -> None:
    make_run(deps)
    assert finalize_run(deps, "r1", status=RunStatus.STOPPED)
    last = events(deps)[-1]
    assert (last.final, last.tools, last.elapsed) == (True, None, None)


def test_announce_skip_ends_the_card_quietly(deps: Deps) -> None:
    make_run(deps)
    assert execute_run(deps, "r1", counting_body(1, "ANNOUNCE_SKIP")) == "success"  # type: ignore[arg-type]
    assert deps.redis.exists(deps.keys.outbox) == 0
    last = events(deps)[-1]
    assert last.final and last.quiet and last.text == "success"


def test_other_answers_are_not_quiet(deps: Deps) -> None:
    make_run(deps)
    assert finalize_run(deps, "r1", status=RunStatus.ERROR, result="ANNOUNCE_SKIP")
    assert deps.redis.xlen(deps.keys.outbox) == 1  # only a success may skip its announce
    assert not events(deps)[-1].quiet


# -- the gateway side ------------------------------------------------------------------------


class EditOnlyChannel:
    """An outbound channel without ``delete`` (a third-party adapter, say)."""

    platform = "console"

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.edits: list[tuple[str, str]] = []

    async def send(self, message: Outbound, *, parts: PartLog | None = None) -> list[str]:
        self.sent.append(message.text)
        return [f"m{len(self.sent)}"]

    async def edit(self, thread: ThreadRef, message_id: str, text: str) -> None:
        self.edits.append((message_id, text))

    async def typing(self, thread: ThreadRef) -> None:
        return None


class RefusingChannel(MemoryChannel):
    """A channel whose platform refuses the delete (too old, no permission)."""

    async def delete(self, thread: ThreadRef, message_id: str) -> None:
        raise DeliveryError("message can't be deleted", permanent=True)


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[object]:
    client = async_client(redis_url)
    yield client
    await client.aclose()


async def render(deps: Deps, aredis: object, channel: object, *batch: ProgressEvent) -> None:
    renderer = ProgressRenderer(
        redis=aredis,  # type: ignore[arg-type]
        keys=deps.keys,
        adapters={"console": channel},  # type: ignore[dict-item]
        min_interval=0.0,
        card_of=lambda _run_id: (TITLE, None),
    )
    for event in batch:
        await renderer._on_event(event)
    await renderer.close()


def step(**kw: object) -> ProgressEvent:
    fields: dict[str, object] = dict(
        run_id="r1", thread=THREAD, text="step 1", tools=1, elapsed=0.5
    )
    fields.update(kw)
    return ProgressEvent(**fields)  # type: ignore[arg-type]


async def test_the_card_shows_tools_as_it_goes_and_the_final_tally(
    deps: Deps, aredis: object
) -> None:
    channel = MemoryChannel()
    await render(
        deps, aredis, channel,
        step(text="started", tools=None, elapsed=None),
        step(text="step 2 · 🔧 search", tools=3, elapsed=2.0),
        step(text="success", final=True, tools=3, elapsed=2.5),
    )  # fmt: skip
    assert [m.text for m in channel.sent] == [f"⏳ {TITLE} — started"]
    assert [e.text for e in channel.edits] == [
        f"⏳ {TITLE} — step 2 · 🔧 search · 3 tools, 2.0s",
        f"✅ {TITLE} — success (3 tools, 2.5s)",
    ]
    assert channel.deleted == []


async def test_a_quiet_end_deletes_the_card(deps: Deps, aredis: object) -> None:
    channel = MemoryChannel()
    assert isinstance(channel, DeletingChannel)
    await render(deps, aredis, channel, step(), step(text="success", final=True, quiet=True))
    assert [d.message_id for d in channel.deleted] == ["msg-1"]
    assert channel.edits == []  # never reads "success"


async def test_a_quiet_end_edits_to_a_neutral_line_where_delete_is_missing_or_refused(
    deps: Deps, aredis: object
) -> None:
    plain = EditOnlyChannel()
    assert not isinstance(plain, DeletingChannel)
    await render(deps, aredis, plain, step(), step(text="success", final=True, quiet=True))
    assert plain.edits == [("m1", quiet_text(TITLE))]

    refusing = RefusingChannel()
    end = step(run_id="r2", text="success", final=True, quiet=True)
    await render(deps, aredis, refusing, step(run_id="r2"), end)
    assert [e.text for e in refusing.edits] == [quiet_text(TITLE)]


async def test_a_quiet_end_without_a_card_posts_none(deps: Deps, aredis: object) -> None:
    channel = MemoryChannel()
    await render(deps, aredis, channel, step(text="success", final=True, quiet=True))
    assert channel.sent == [] and channel.edits == [] and channel.deleted == []


async def test_a_restarted_gateway_deletes_the_card_it_did_not_post(
    deps: Deps, aredis: object
) -> None:
    await ProgressStore(redis=aredis, keys=deps.keys).remember_status("r1", "msg-9")  # type: ignore[arg-type]
    channel = MemoryChannel()
    await render(deps, aredis, channel, step(text="success", final=True, quiet=True))
    assert [d.message_id for d in channel.deleted] == ["msg-9"] and channel.sent == []


async def test_the_console_drops_a_deleted_card_from_its_live_area() -> None:
    piped = ConsoleChannel(stdin=io.StringIO(), stdout=io.StringIO())
    with pytest.raises(DeliveryError):  # printed lines stay: the renderer prints the quiet line
        await piped.delete(THREAD, "console-1")

    live = ConsoleChannel(stdin=io.StringIO(), stdout=io.StringIO())
    live.terminal = cast(Terminal, object())  # only its presence matters for status cards
    [card] = await live.send(Outbound(thread=THREAD, text="⏳ x", kind=OutboundKind.STATUS))
    assert card in live._status_texts
    await live.delete(THREAD, card)
    assert card not in live._status_texts


CHILD = ThreadRef(platform="console", account="a", chat="c", thread="child")


def _renderer(deps: Deps, aredis: object, channel: object, **kw: object) -> ProgressRenderer:
    return ProgressRenderer(
        redis=aredis,  # type: ignore[arg-type]
        keys=deps.keys,
        adapters={"console": channel},  # type: ignore[dict-item]
        min_interval=0.0,
        **{"card_of": lambda _run_id: (TITLE, None), **kw},  # type: ignore[arg-type]
    )


async def test_a_card_moves_to_the_thread_the_gateway_opened_for_its_run(
    deps: Deps, aredis: object
) -> None:
    channel = MemoryChannel()
    renderer = _renderer(deps, aredis, channel)
    await renderer._on_event(step(text="started"))  # posted before the thread was opened
    await renderer.rebind("r1", CHILD)
    await renderer._on_event(step(text="step 2"))  # the run's events still name the parent
    await renderer._on_event(step(text="success", final=True, thread=CHILD))
    await renderer.close()
    assert [d.message_id for d in channel.deleted] == ["msg-1"]  # the parent's card
    assert [(m.thread, m.text.split(" — ")[-1]) for m in channel.sent] == [
        (THREAD, "started · 1 tool, 0.5s"),
        (CHILD, "started · 1 tool, 0.5s"),
    ]
    assert [(e.thread, e.message_id) for e in channel.edits] == [
        (CHILD, "msg-2"),
        (CHILD, "msg-2"),
    ]


async def test_a_final_event_in_another_thread_moves_the_card_without_reposting(
    deps: Deps, aredis: object
) -> None:
    channel = MemoryChannel()
    renderer = _renderer(deps, aredis, channel)
    await renderer._on_event(step(text="started"))
    await renderer._on_event(step(text="success", final=True, thread=CHILD))
    await renderer.close()
    assert [d.message_id for d in channel.deleted] == ["msg-1"]
    assert [(m.thread, m.text) for m in channel.sent] == [
        (THREAD, f"⏳ {TITLE} — started · 1 tool, 0.5s"),
        (CHILD, f"✅ {TITLE} — success (1 tool, 0.5s)"),
    ]


async def test_a_new_card_goes_to_the_runs_thread_now_not_the_events(
    deps: Deps, aredis: object
) -> None:
    channel = MemoryChannel()
    renderer = _renderer(deps, aredis, channel, card_of=lambda _run_id: (TITLE, CHILD))
    await renderer._on_event(step(text="started"))
    await renderer.close()
    assert [m.thread for m in channel.sent] == [CHILD]


async def test_where_a_card_cannot_be_deleted_it_says_where_the_run_went(
    deps: Deps, aredis: object
) -> None:
    channel = RefusingChannel()
    renderer = _renderer(deps, aredis, channel)
    await renderer._on_event(step(text="started"))
    await renderer.rebind("r1", CHILD)
    await renderer.close()
    assert [(e.thread, e.message_id, e.text) for e in channel.edits] == [
        (THREAD, "msg-1", moved_text(TITLE))
    ]
    assert [m.thread for m in channel.sent] == [THREAD, CHILD]
