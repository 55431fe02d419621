"""The threads pool's stop, end to end: a stopped run's sandbox command (bubblewrap) is
killed in a worker process that lives on (docs/architecture.md, "Worker pools")."""

from __future__ import annotations

import contextlib

from bot.testing import (
    Call,
    MemoryChannel,
    ScriptedModel,
    Stack,
    Text,
    ToolCalls,
    is_subagent,
    until,
)
from bot.testing.fake_openai import FakeOpenAI
from tests.e2e.conftest import stack_values


def sleeps_under(pids: list[int]) -> list[int]:
    """``sleep`` processes among the descendants of ``pids``."""
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [
                p.pid for p in psutil.Process(pid).children(recursive=True) if p.name() == "sleep"
            ]
    return found


async def test_a_stopped_runs_sandbox_command_dies_with_it_and_the_worker_lives_on(
    redis_url: str,
) -> None:
    model = (
        ScriptedModel(default=Text("Done."))
        .on(is_subagent, ToolCalls([Call("execute", {"command": "sleep 60"})]), times=1)
        .on(is_subagent, Text("after the sleep"))
        .on("nap", ToolCalls([Call("sessions_spawn", {"task": "nap", "label": "Nap"})]), times=1)
    )
    values = stack_values(redis_url, "")
    channel = MemoryChannel()
    async with FakeOpenAI(model) as llm:
        values["openai"]["base_url"] = llm.base_url
        # The threads pool's stop (the fork pool's kills the whole horse): the run's
        # command is killed in a worker process that lives on.
        async with Stack(values=values, adapters=[channel], workers=1, pool="threads") as stack:
            await channel.say("take a nap")
            # Once a job executes, the launcher's children are its workers (not its start-up
            # probes, such as the sandbox's).
            await stack.wait_for(lambda: bool(stack.pool.run_pids()), timeout=30)
            workers = stack.pool.worker_pids()
            await stack.wait_for(lambda: bool(sleeps_under(workers)), timeout=30)
            await channel.say("/subagents stop 1")
            [announce] = await until(lambda: channel.announces, timeout=20)
            await stack.wait_for(lambda: not sleeps_under(workers), timeout=5)
            assert stack.pool.worker_pids() == workers  # the stop took the run, not the worker
    assert "Status: stopped" in announce.text, announce.text
