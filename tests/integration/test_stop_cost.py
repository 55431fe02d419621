"""What one ``/subagents stop N`` costs: Redis round trips and reads of the run's hash.

Counted on the wire: every packed send of a connection is one round trip (a pipeline or a
script is one). The figures are budgets: a change that adds a round trip to the stop, or
reads the run a second time, fails here first.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from bot.agent.context import ToolContext
from bot.agent.spawn_tool import SpawnArgs, spawn
from bot.commands import default_router
from bot.config import Settings
from bot.deps import Deps
from bot.gateway.ingress import Ingress
from bot.sessions import requester_session_key
from bot.types import Inbound, RunRecord, RunStatus, Sender, ThreadRef

THREAD = ThreadRef(platform="slack", account="T1", chat="C1", thread="1.0")


def commands(packed: bytes) -> list[list[bytes]]:
    """The commands in one packed send (RESP arrays of bulk strings)."""
    out, i = [], 0
    while i < len(packed):
        end = packed.index(b"\r\n", i)
        count, i = int(packed[i + 1 : end]), end + 2
        args = []
        for _ in range(count):
            end = packed.index(b"\r\n", i)
            size, i = int(packed[i + 1 : end]), end + 2
            args.append(packed[i : i + size])
            i += size + 2
        out.append(args)
    return out


class Wire:
    """Records each round trip's commands while ``on``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips: list[list[list[bytes]]] = []
        self.on = False
        send = AbstractConnection.send_packed_command

        def counting(conn: AbstractConnection, command: Any, check_health: bool = True) -> None:
            if self.on:
                parts = [command] if isinstance(command, (bytes, str)) else command
                data = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in parts)
                self.trips.append(commands(data))
            send(conn, command, check_health)  # type: ignore[no-untyped-call]

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)

    def since(self, marker: bytes) -> list[list[list[bytes]]]:
        """The round trips from the first one that names ``marker`` on."""
        for at, trip in enumerate(self.trips):
            if any(marker in arg for cmd in trip for arg in cmd):
                return self.trips[at:]
        return []


@pytest.fixture
def deps(redis_url: str) -> Iterator[Deps]:
    settings = Settings(redis_url=redis_url, openai={"models": ["m"], "model": "m"})
    built = Deps.build(settings, client=redis.Redis.from_url(redis_url))
    yield built
    built.close()


def running_run(deps: Deps) -> RunRecord:
    session = requester_session_key(agent_id="main", thread=THREAD)
    ctx = ToolContext(
        deps=deps, session_key=session, thread=THREAD, requester="slack:U1", agent_id="main"
    )
    run_id = str(spawn(ctx, SpawnArgs(task="t"))["runId"])
    assert deps.runs.start(run_id, heartbeat_ttl=30).started
    record = deps.runs.get(run_id)
    assert record is not None
    return record


def stop_command(record: RunRecord, message_id: str) -> Inbound:
    return Inbound(
        thread=THREAD,
        sender=Sender(user_id="U1", display_name="alice"),
        text=f"/subagents stop {record.seq}",
        message_id=message_id,
        mentioned=True,
    )


def test_stopping_one_running_run_reads_it_once_in_six_round_trips(
    deps: Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingress = Ingress(deps=deps, router=default_router())
    ingress.handle(stop_command(running_run(deps), "m-warm"))  # loads the scripts
    record = running_run(deps)
    wire = Wire(monkeypatch)
    wire.on = True
    ingress.handle(stop_command(record, "m-stop"))
    wire.on = False

    run_key = deps.keys.run(record.run_id).encode()
    every = [cmd for trip in wire.trips for cmd in trip]
    reads = [c for c in every if c[0].upper() == b"HGETALL" and c[1] == run_key]
    assert len(reads) == 1  # the command's read of the session's runs; the stop reuses it
    # The stop: from its first read (how far the run got) on, without the command's reply
    # and the dedupe marker that follow it.
    stop = wire.since(deps.keys.transcript(record.session_id).encode())
    skip = (deps.keys.outbox.encode(), b"dedupe")
    stop = [t for t in stop if not any(m in c[1] for c in t if len(c) > 1 for m in skip)]
    assert len(stop) <= 6, [[c[0] for c in t] for t in stop]
    ended = deps.runs.get(record.run_id)
    assert ended is not None and ended.status is RunStatus.STOPPED
