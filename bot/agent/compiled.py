"""Compiled subagent types: a Python runnable does the work instead of the model loop.

The contract (the seeds' ``CompiledSubAgent``): the object a type's ``runnable``
(``"module:attribute"``) names receives ``{"messages": [...]}`` — OpenAI-style dicts: the
task, after the forked history for ``context: fork``, or a follow-up's transcript — and
returns, or streams, *states*: mappings with a ``messages`` list. The last message of the
last state is the run's result. Accepted shapes, in this order:

* an object with ``stream`` / ``astream`` (a LangGraph compiled graph, a deepagents agent;
  called with ``stream_mode="values"`` when it takes one), else ``invoke`` / ``ainvoke``;
* a function returning a state, an awaitable of one, or a (sync or async) generator of
  them (each yielded state is progress).

Messages may be dicts or LangChain message objects (``.type`` and ``.content``); they
become dicts for the transcript and the result, and an ``AIMessage``'s ``usage_metadata``
counts as the run's tokens. A state without ``messages`` at the end is an ``error`` run
whose notes state the contract.

In the fork pool the runnable runs in a daemon thread. The run's own thread waits for its
states and checks the stop flag and the soft deadline every :data:`POLL_SECONDS`, so a
runnable that never yields is still stopped or timed out: the run ends at once and the
work horse's exit ends the thread (an async runnable is also cancelled). RQ's hard timeout
interrupts the wait like any job.

In the threads pool (docs/architecture.md, "Worker pools") many runs share the process, so a
thread left behind would live on: the runnable runs in its run's own thread instead (the
hog watch then sees its CPU). The stop flag and the soft deadline are checked between its
states, a stop interrupts it in its thread, RQ's hard limit too; one stuck in a blocking
call is fenced, and its process replaced. A compiled run cannot be steered:
``/subagents send`` messages wait unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import queue
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rq.timeouts import BaseTimeoutException

from bot.agent.subagent import start_messages
from bot.agent.subagent_types import subagent_types
from bot.config import Settings
from bot.deps import Deps
from bot.errors import RunFailed, RunInterrupted
from bot.steps import LoopControl, LoopResult, Message, Meter
from bot.supervise import abort
from bot.types import RunRecord, Usage

POLL_SECONDS = 0.2
CONTRACT = (
    "a compiled subagent receives {'messages': [...]} and must return or yield a state "
    "(a mapping) with a 'messages' list whose last message is the result"
)
_ROLES = {"human": "user", "ai": "assistant", "AIMessageChunk": "assistant", "system": "system"}
_ROLES |= {"tool": "tool", "user": "user", "assistant": "assistant"}


def load_runnable(ref: str) -> Any:
    """The object ``"module:attribute"`` (dotted attributes allowed) names.

    Raises:
        RunFailed: It cannot be imported or found.
    """
    module_name, _, attr = ref.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except Exception as exc:
        raise RunFailed(f"cannot load runnable {ref!r}: {type(exc).__name__}: {exc}") from exc
    return found


def preload(settings: Settings) -> list[str]:
    """Import every compiled type's runnable now (a worker does it before forking, so each
    run's horse inherits the modules); returns what could not be loaded, one line each
    (runs of such a type end ``error`` with the same words)."""
    problems = []
    for sub_type in subagent_types(settings).values():
        if sub_type.runnable is not None:
            try:
                load_runnable(sub_type.runnable)
            except RunFailed as exc:
                problems.append(f"subagent type {sub_type.name!r}: {exc}")
    return problems


@dataclass(frozen=True, kw_only=True)
class CompiledBody:
    """A :class:`~bot.steps.RunBody` that runs the type's runnable.

    Attributes:
        deps: Stores and settings.
    """

    deps: Deps

    def __call__(self, record: RunRecord, *, control: LoopControl, meter: Meter) -> LoopResult:
        ref = str(subagent_types(self.deps.settings)[record.subagent_type].runnable)
        target = load_runnable(ref)
        messages = start_messages(self.deps, record, system=None)
        tracker = _Tracker(seen=len(messages), last=messages[-1] if messages else None)
        payload = {"messages": [dict(m) for m in messages]}
        final: Any = None
        if abort.current() is not None:  # threads pool: in this thread (module docstring)
            for state in _states_here(target, payload, ref=ref, checkpoint=control.checkpoint):
                final = state
                tracker.take(state, control=control, meter=meter)
            return LoopResult(text=result_text(final, ref=ref), complete=True)
        feed = _Feed.start(target, payload, ref=ref)
        try:
            for state in feed.states(control.checkpoint):
                final = state
                tracker.take(state, control=control, meter=meter)
        finally:
            feed.cancel()
        return LoopResult(text=result_text(final, ref=ref), complete=True)


@dataclass(kw_only=True)
class _Tracker:
    """Which of a stream's messages the transcript has; counts steps, text and tokens."""

    seen: int
    last: Message | None

    def take(self, state: Any, *, control: LoopControl, meter: Meter) -> None:
        meter.steps += 1
        items = state.get("messages") if isinstance(state, Mapping) else None
        if isinstance(items, list) and items:
            # A state that extends the last one (LangGraph's values) adds its tail;
            # one that does not (a function returning only its answer) adds its last.
            fresh = items[self.seen :] if len(items) > self.seen else items[-1:]
            self.seen = max(self.seen, len(items))
            for item in fresh:
                self._record(item, control=control, meter=meter)
        elapsed = int(time.monotonic() - meter.started)
        control.progress(f"step {meter.steps} · {self.seen} messages · {elapsed}s")

    def _record(self, item: Any, *, control: LoopControl, meter: Meter) -> None:
        message = to_message(item)
        if message == self.last:
            return
        self.last = message
        control.record(message)
        meter.usage += usage_of(item)
        if message["role"] == "assistant" and message["content"]:
            meter.last_text = message["content"]


def result_text(state: Any, *, ref: str) -> str:
    """The final state's last message as text.

    Raises:
        RunFailed: ``state`` breaks the contract (the notes say how, and what it is).
    """
    if state is None:
        raise RunFailed(f"runnable {ref} produced no state; {CONTRACT}")
    if not isinstance(state, Mapping) or "messages" not in state:
        what = f"a mapping with keys {sorted(map(str, state))[:8]}"
        what = what if isinstance(state, Mapping) else f"a {type(state).__name__}"
        raise RunFailed(f"runnable {ref} returned {what}, without 'messages'; {CONTRACT}")
    items = state["messages"]
    if not isinstance(items, list | tuple) or not items:
        raise RunFailed(f"runnable {ref} returned an empty or non-list 'messages'; {CONTRACT}")
    return str(to_message(items[-1])["content"])


def to_message(item: Any) -> Message:
    """A state's message (dict, LangChain message, or bare text) as a transcript dict."""
    if isinstance(item, str):
        return {"role": "assistant", "content": item}
    if isinstance(item, Mapping):
        kind = item.get("role") or item.get("type") or "assistant"
        message: Message = {
            "role": _ROLES.get(str(kind), str(kind)),
            "content": text_of(item.get("content")),
        }
        calls, call_id = item.get("tool_calls"), item.get("tool_call_id")
    elif hasattr(item, "content"):
        kind = getattr(item, "type", "ai")
        message = {"role": _ROLES.get(str(kind), "assistant"), "content": text_of(item.content)}
        calls, call_id = getattr(item, "tool_calls", None), getattr(item, "tool_call_id", None)
    else:
        raise RunFailed(f"a message of type {type(item).__name__} is not a message; {CONTRACT}")
    if calls:
        message["tool_calls"] = [_tool_call(c) for c in calls]
    if call_id:
        message["tool_call_id"] = str(call_id)
    return message


def _tool_call(call: Any) -> dict[str, Any]:
    """A LangChain ``{"name", "args", "id"}`` tool call in OpenAI's shape (kept if it is)."""
    if not isinstance(call, Mapping) or "function" in call:
        return dict(call) if isinstance(call, Mapping) else {"function": {"name": str(call)}}
    arguments = json.dumps(call.get("args") or {}, ensure_ascii=False, default=str)
    function = {"name": str(call.get("name", "")), "arguments": arguments}
    return {"id": str(call.get("id") or ""), "type": "function", "function": function}


def text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-block list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p if isinstance(p, str) else p.get("text", "") for p in content if _texty(p)]
        return "".join(str(p) for p in parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def _texty(part: Any) -> bool:
    return isinstance(part, str) or (isinstance(part, Mapping) and "text" in part)


def usage_of(item: Any) -> Usage:
    """Tokens a LangChain ``AIMessage`` reports in ``usage_metadata`` (else none)."""
    meta = getattr(item, "usage_metadata", None)
    if meta is None and isinstance(item, Mapping):
        meta = item.get("usage_metadata")
    if not isinstance(meta, Mapping):
        return Usage()
    return Usage(
        prompt_tokens=int(meta.get("input_tokens") or 0),
        completion_tokens=int(meta.get("output_tokens") or 0),
    )


def open_states(target: Any, payload: dict[str, Any], *, ref: str) -> Any:
    """The states ``target`` produces for ``payload``: a sync or an async iterator (calls
    ``target`` when it is a function, so run it where blocking is fine)."""
    for name in ("stream", "astream"):
        method = getattr(target, name, None)
        if callable(method):
            return method(payload, **_values_mode(method))
    invoke, ainvoke = getattr(target, "invoke", None), getattr(target, "ainvoke", None)
    if callable(invoke):
        return _once(lambda: invoke(payload))
    if callable(ainvoke):
        return _aonce(ainvoke(payload))
    if not callable(target):
        raise RunFailed(f"runnable {ref} is a {type(target).__name__}, not callable; {CONTRACT}")
    out = target(payload)
    if inspect.isasyncgen(out) or isinstance(out, AsyncIterator):
        return out
    if inspect.isawaitable(out):
        return _aonce(out)
    if inspect.isgenerator(out) or isinstance(out, Iterator):
        return out
    return iter([out])


def _values_mode(method: Callable[..., Any]) -> dict[str, str]:
    try:
        takes = "stream_mode" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        takes = False
    return {"stream_mode": "values"} if takes else {}


def _states_here(
    target: Any, payload: dict[str, Any], *, ref: str, checkpoint: Callable[[], None]
) -> Iterator[Any]:
    """The runnable's states, produced in this thread (the threads pool's: the run's own
    thread, so its CPU is the run's, and nothing of it outlives the run). The stop flag and
    the soft deadline are checked between states; an abort interrupts the runnable itself
    (:func:`bot.supervise.abort.interrupting`)."""
    checkpoint()
    with abort.interrupting():
        try:
            states = open_states(target, payload, ref=ref)
            if isinstance(states, AsyncIterator) or inspect.isasyncgen(states):
                states = _drive_async(states)
            for state in states:
                yield state
                checkpoint()
        except (RunInterrupted, abort.Aborted):
            raise
        except BaseTimeoutException:
            raise
        except BaseException as exc:  # everything the runnable raises ends the run
            raise _failure(exc, ref) from exc


def _drive_async(states: AsyncIterator[Any]) -> Iterator[Any]:
    """An async iterator's items, driven by an event loop of this thread's own."""
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(anext(states))
            except StopAsyncIteration:
                return
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _once(call: Callable[[], Any]) -> Iterator[Any]:
    yield call()


async def _aonce(awaitable: Awaitable[Any]) -> AsyncIterator[Any]:
    yield await awaitable


@dataclass(kw_only=True)
class _Feed:
    """The runnable in a daemon thread, handing its states over through a queue."""

    ref: str
    events: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    task: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None

    @classmethod
    def start(cls, target: Any, payload: dict[str, Any], *, ref: str) -> _Feed:
        feed = cls(ref=ref)
        name = f"runnable-{ref}"[:60]
        threading.Thread(target=feed._run, args=(target, payload), name=name, daemon=True).start()
        return feed

    def states(self, checkpoint: Callable[[], None]) -> Iterator[Any]:
        """Each state as it comes; ``checkpoint`` runs between waits (it may raise)."""
        while True:
            checkpoint()
            try:
                kind, value = self.events.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    def cancel(self) -> None:
        self.cancelled.set()
        if self.task is not None:
            loop, task = self.task
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(task.cancel)

    def _run(self, target: Any, payload: dict[str, Any]) -> None:
        try:
            states = open_states(target, payload, ref=self.ref)
            if isinstance(states, AsyncIterator) or inspect.isasyncgen(states):
                asyncio.run(self._drain_async(states))
            else:
                for state in states:
                    if self.cancelled.is_set():
                        return
                    self.events.put(("state", state))
            self.events.put(("end", None))
        except BaseException as exc:  # everything the runnable raises ends the run
            self.events.put(("error", _failure(exc, self.ref)))

    async def _drain_async(self, states: AsyncIterator[Any]) -> None:
        current = asyncio.current_task()
        if current is not None:
            self.task = (asyncio.get_running_loop(), current)
        if self.cancelled.is_set():
            return
        async for state in states:
            self.events.put(("state", state))


def _failure(exc: BaseException, ref: str) -> BaseException:
    if isinstance(exc, RunFailed):
        return exc
    failed = RunFailed(f"runnable {ref} raised {type(exc).__name__}: {exc}")
    failed.__cause__ = exc
    return failed
