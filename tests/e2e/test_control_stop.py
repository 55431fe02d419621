"""Stop through the real gateway and forked workers: who may, what ends, what is announced."""

from __future__ import annotations

from collections.abc import Callable

from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from bot.deps import Deps
from bot.sessions import requester_session_key
from bot.testing.channel import MemoryChannel
from bot.testing.fake_openai import FakeOpenAI, RecordedRequest
from bot.testing.scripted import (
    Call,
    ChatRequest,
    Hang,
    ScriptedModel,
    Text,
    ToolCalls,
    is_subagent,
)
from bot.testing.stack import Stack
from bot.types import RunRecord, RunStatus, ThreadRef
from tests.e2e.conftest import stack_values


def fanout_model(subagent: Callable[[ChatRequest], Text | Hang | ToolCalls]) -> ScriptedModel:
    """Main agent: ``spawn a b:delete`` spawns one run per word (label = the word)."""

    def main(req: ChatRequest) -> ToolCalls | Text:
        if req.last_role == "tool":
            return Text("Started.")
        words = req.last_user_message.split("spawn", 1)[-1].split()
        calls = []
        for word in words:
            label, _, cleanup = word.partition(":")
            calls.append(
                Call(
                    "sessions_spawn",
                    {"task": f"task {label}", "label": label, "cleanup": cleanup or "keep"},
                )
            )
        return ToolCalls(calls)

    def long_turn(req: ChatRequest) -> bool:
        return req.has_tool("sessions_spawn") and "think long" in req.last_user_message

    return (
        ScriptedModel()
        .on(long_turn, Hang(60))
        .on(lambda r: r.has_tool("sessions_spawn"), main)
        .on(is_subagent, subagent)
    )


def slow_unless_quick(req: ChatRequest) -> Text | Hang:
    if "task quick" in req.last_user_message:
        return Text("quick result", delay=2.5)
    return Hang(90, then=Text("too late"))


def turn_call(request: RecordedRequest) -> bool:
    return "think long" in request.chat.last_user_message


def runs_of(deps: Deps, thread: ThreadRef) -> dict[str, RunRecord]:
    key = requester_session_key(agent_id="main", thread=thread)
    return {r.label: r for r in deps.runs.session_runs(key)}


def announces_for(channel: MemoryChannel, run: RunRecord) -> list[str]:
    return [a.text for a in channel.announces if f"id {run.run_id[:8]}" in a.text]


async def test_who_may_stop_and_what_stop_all_ends(redis_url: str) -> None:
    async with FakeOpenAI(fanout_model(slow_unless_quick), models=["fake-model"]) as fake:
        values = stack_values(
            redis_url,
            fake.base_url,
            admins=["console:dave"],
            subagents={"hard_kill_grace_seconds": 0.5},
        )
        channel = MemoryChannel()
        a, b = channel.thread("A"), channel.thread("B")
        async with Stack(values=values, adapters=[channel], workers=4) as stack:
            assert stack.gateway is not None
            deps = stack.gateway.deps

            def status(thread: ThreadRef, label: str) -> RunStatus:
                return runs_of(deps, thread)[label].status

            # /stop aborts the running turn, even one stuck in a long model call, but only
            # for an admin or the person whose message it answers.
            await channel.say("think long", thread=b, user="carol")
            await stack.wait_for(lambda: any(turn_call(r) for r in fake.requests), timeout=20)
            await channel.say("/stop", thread=b, user="bob")
            await channel.say("/stop", thread=b, user="carol")
            await stack.wait_for(lambda: all(
                r.outcome == "disconnected" for r in fake.requests if turn_call(r)), timeout=10)  # fmt: skip

            await channel.say("spawn quick slow1", thread=a, user="alice")
            await stack.wait_for(lambda: len(runs_of(deps, a)) == 2 and all(
                r.status is RunStatus.RUNNING for r in runs_of(deps, a).values()), timeout=20)  # fmt: skip
            quick, slow1 = runs_of(deps, a)["quick"], runs_of(deps, a)["slow1"]

            # Bob did not start it and is no admin: refused, the run carries on.
            await channel.say(f"/subagents stop {quick.run_id[:6]}", thread=a, user="bob")
            # Alice stops her own run.
            await channel.say(f"/subagents stop {slow1.run_id[:6]}", thread=a, user="alice")
            assert status(a, "slow1") is RunStatus.STOPPED  # at once, mid model call
            await stack.wait_for(lambda: announces_for(channel, slow1), timeout=5)
            await stack.wait_for(lambda: announces_for(channel, quick), timeout=15)

            # A second wave in A and one run in B; the admin stops everything in A.
            await channel.say("spawn slow2 slow3", thread=a, user="alice")
            await channel.say("spawn slowb", thread=b, user="carol")
            await stack.wait_for(lambda: len(runs_of(deps, a)) == 4 and len(runs_of(deps, b)) == 1
                                 and status(b, "slowb") is RunStatus.RUNNING, timeout=20)  # fmt: skip
            await stack.wait_for(lambda: all(
                status(a, x) is RunStatus.RUNNING for x in ("slow2", "slow3")), timeout=20)  # fmt: skip
            await channel.say("/subagents stop all", thread=a, user="dave")
            assert {status(a, x) for x in ("slow2", "slow3")} == {RunStatus.STOPPED}
            await stack.wait_for(lambda: len(channel.announces) == 4, timeout=5)
            assert status(b, "slowb") is RunStatus.RUNNING  # other sessions untouched

            await channel.say("/stop", thread=b, user="carol")
            await stack.wait_for(lambda: len(channel.announces) == 5, timeout=5)
            # Its reply is queued after the run's announce: wait for it too before leaving.
            await stack.wait_for(
                lambda: (
                    ("B", "⏹️ Stopped 1: #1.")
                    in [(m.thread.thread, m.text) for m in channel.replies]
                ),
                timeout=5,
            )

            def slow_calls() -> list[RecordedRequest]:
                return [r for r in fake.requests if "task slow" in r.chat.last_user_message]

            def job_states() -> dict[str, JobStatus | None]:
                runs = {**runs_of(deps, a), **runs_of(deps, b)}
                return {
                    label: Job.fetch(
                        r.job_id, connection=deps.redis, serializer=JSONSerializer
                    ).get_status()
                    for label, r in runs.items()
                }

            def settled() -> bool:
                busy = (JobStatus.STARTED, JobStatus.QUEUED)
                return all(s not in busy for s in job_states().values())

            await stack.wait_for(settled, timeout=10)
            states = job_states()

    replies = [(m.thread.thread, m.text) for m in channel.replies]
    nothing = "Nothing to stop: no subagent is queued or running here."
    assert replies[:2] == [
        (
            "B",
            f"The answer in progress was asked for by someone else, so I left it running.\n{nothing}",
        ),
        ("B", f"⏹️ Stopping the answer in progress.\n{nothing}"),
    ]
    assert ("A", "I can't stop subagent #1 · quick: Only an admin or the person who started it "
                 "can stop this run.") in replies  # fmt: skip
    assert (
        "A",
        f"⏹️ Stopped subagent #2 · slow1 (`{slow1.run_id[:8]}`). Its announce follows.",
    ) in replies
    assert ("A", "⏹️ Stopped 2: #3, #4.") in replies  # each run's own number
    assert ("B", "⏹️ Stopped 1: #1.") in replies
    (done,) = announces_for(channel, quick)
    assert "finished\nStatus: success\nResult: quick result" in done
    for label, thread in [("slow1", a), ("slow2", a), ("slow3", a), ("slowb", b)]:
        texts = [m.text for m in channel.announces if f'"{label}"' in m.text]
        assert len(texts) == 1, (label, texts)  # exactly one announce each
        assert "was stopped\nStatus: stopped" in texts[0]
        assert "Notes: stopped by " in texts[0]
        assert all(m.thread == thread for m in channel.announces if f'"{label}"' in m.text)
        # The work horse was hard-stopped mid model call, not left to finish it.
        assert states[label] is JobStatus.STOPPED
    assert "stopped by console:alice after" in announces_for(channel, slow1)[0]
    assert "stopped by console:dave after" in next(
        m.text for m in channel.announces if '"slow2"' in m.text
    )
    assert states["quick"] is JobStatus.FINISHED
    assert all(r.outcome == "disconnected" for r in slow_calls())
