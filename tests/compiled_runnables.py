"""Runnables for compiled subagent types, one per accepted shape (imported by name by the
tests and by forked workers: ``tests.compiled_runnables:<name>``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

State = dict[str, Any]
RELEASE = threading.Event()
"""Set it to let :func:`hang` return (a test's teardown; a forked horse just exits)."""


def _last(state: State) -> str:
    return str(state["messages"][-1]["content"])


def _answer(state: State, text: str) -> State:
    return {"messages": [*state["messages"], {"role": "assistant", "content": text}]}


def echo(state: State) -> State:
    return _answer(state, f"echo: {_last(state)}")


async def aecho(state: State) -> State:
    await asyncio.sleep(0)
    return _answer(state, f"async echo: {_last(state)}")


def steps(state: State) -> Iterator[State]:
    for n in (1, 2):
        state = _answer(state, f"thinking {n}")
        yield state
    yield _answer(state, f"done after steps: {_last(state)}")


async def asteps(state: State) -> AsyncIterator[State]:
    state = _answer(state, "async thinking")
    yield state
    await asyncio.sleep(0)
    yield _answer(state, "async done")


def only_answer(state: State) -> State:
    """Returns just its answer, not the whole conversation."""
    return {"messages": [{"role": "assistant", "content": "just the answer"}]}


class Invoker:
    def invoke(self, state: State) -> State:
        return _answer(state, "invoked")


class AsyncInvoker:
    async def ainvoke(self, state: State) -> State:
        return _answer(state, "ainvoked")


invoker = Invoker()
ainvoker = AsyncInvoker()


def no_messages(state: State) -> State:
    return {"answer": "forgot the contract"}


def boom(state: State) -> State:
    raise ValueError("the runnable broke")


def hang(state: State) -> State:
    """Never yields (until :data:`RELEASE`)."""
    RELEASE.wait(120)
    return _answer(state, "released")


async def ahang(state: State) -> State:
    await asyncio.sleep(120)
    return _answer(state, "woke up")


def langchain_messages(state: State) -> State:
    from langchain_core.messages import AIMessage

    reply = AIMessage(
        content=[{"type": "text", "text": "from "}, {"type": "text", "text": "langchain"}],
        usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
    )
    return {"messages": [*state["messages"], reply]}


not_callable = 42


def spin(state: State) -> State:
    """Busy in pure Python until :data:`RELEASE` is set (a CPU-bound runnable)."""
    n = 0
    while not RELEASE.is_set():
        n += 1
    return _answer(state, f"spun {n}")


def crash_once(state: State) -> State:
    """Kills its own process the first time (its task names a marker file it creates), and
    answers with how many times it began: a resumed run restarts it from its beginning."""
    import os
    import signal
    from pathlib import Path

    marker = Path(_last(state).split()[-1])
    began = marker.read_text().count("x") + 1 if marker.exists() else 1
    marker.write_text("x" * began)
    if began == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return _answer(state, f"began {began} times")
