"""Thread bindings: which run owns a thread of its own (a thread-bound child), both ways.

Structures (keys in :mod:`bot.keys`): ``thread_bind:run:<run id>`` holds the binding as JSON
(parent thread, child thread, link, title, or ``pending`` while the gateway has not opened
the thread yet); ``thread_bind:thread:<platform>|<account>|<chat>|<thread>`` holds the
run id. Both live ``ttl`` seconds (the runs' retention); :meth:`ThreadBindings.unbind`
removes the thread's entry (``/subagents close``) and marks the run's as closed, so a
closed binding is not opened again by a redelivered request.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass

import redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.owner import RedisOwner
from bot.types import ThreadRef


class BindState(enum.StrEnum):
    """Where a run's own thread stands."""

    PENDING = "pending"
    BOUND = "bound"
    UNAVAILABLE = "unavailable"
    CLOSED = "closed"


@dataclass(frozen=True, kw_only=True)
class Binding:
    """One run's own thread.

    Attributes:
        run_id: The run it was opened for (follow-ups of its child session use it too).
        parent: The thread the run was spawned from.
        child: The thread opened for it (None while pending or when it could not be opened).
        link: A URL or a few words naming the child thread.
        title: The thread's title.
        state: pending, bound, unavailable or closed (:class:`BindState`).
        note: Why it is unavailable.
    """

    run_id: str
    parent: ThreadRef
    child: ThreadRef | None = None
    link: str = ""
    title: str = ""
    state: BindState = BindState.PENDING
    note: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "run_id": self.run_id,
                "parent": self.parent.to_json(),
                "child": self.child.to_json() if self.child else None,
                "link": self.link,
                "title": self.title,
                "state": self.state.value,
                "note": self.note,
            }
        )

    @classmethod
    def from_json(cls, raw: str) -> Binding:
        data = json.loads(raw)
        child = data.get("child")
        return cls(
            run_id=str(data["run_id"]),
            parent=ThreadRef.from_json(data["parent"]),
            child=ThreadRef.from_json(child) if child else None,
            link=str(data.get("link", "")),
            title=str(data.get("title", "")),
            state=BindState(data.get("state", BindState.PENDING.value)),
            note=str(data.get("note", "")),
        )


def thread_id(thread: ThreadRef) -> str:
    return f"{thread.platform}|{thread.account}|{thread.chat}|{thread.thread or ''}"


class ThreadBindings(RedisOwner):
    """Reads and writes thread bindings (sync; the gateway calls it from a worker thread).

    Args:
        redis: Sync client.
        keys: Key builder.
        ttl: Seconds a binding lives (the runs' retention).
    """

    def __init__(self, *, redis: redis.Redis, keys: Keys, ttl: int = 30 * 86_400) -> None:
        super().__init__(redis=redis, keys=keys)
        self.ttl = ttl

    def _run_key(self, run_id: str) -> str:
        return self.keys.thread_bind_run(run_id)

    def _thread_key(self, thread: ThreadRef) -> str:
        return self.keys.thread_bind_thread(thread_id(thread))

    def request(self, binding: Binding) -> None:
        """Note that ``binding.run_id`` waits for its thread (kept if one exists already)."""
        self.redis.set(self._run_key(binding.run_id), binding.to_json(), ex=self.ttl, nx=True)

    def for_run(self, run_id: str) -> Binding | None:
        raw = self.redis.get(self._run_key(run_id))
        return None if raw is None else Binding.from_json(as_text(raw))

    def for_thread(self, thread: ThreadRef) -> str | None:
        """The run id bound to ``thread``, if any."""
        raw = self.redis.get(self._thread_key(thread))
        return None if raw is None else as_text(raw)

    def settle(self, binding: Binding) -> None:
        """Record the outcome of opening (bound or unavailable), both ways when bound."""
        with self.redis.pipeline() as pipe:
            pipe.set(self._run_key(binding.run_id), binding.to_json(), ex=self.ttl)
            if binding.child is not None and binding.state == BindState.BOUND:
                pipe.set(self._thread_key(binding.child), binding.run_id, ex=self.ttl)
            pipe.execute()

    def unbind(self, run_id: str) -> Binding | None:
        """Close ``run_id``'s binding; returns it as it was (None: there was none)."""
        binding = self.for_run(run_id)
        if binding is None:
            return None
        closed = dataclasses.replace(binding, state=BindState.CLOSED)
        with self.redis.pipeline() as pipe:
            if binding.child is not None:
                pipe.delete(self._thread_key(binding.child))
            pipe.set(self._run_key(run_id), closed.to_json(), ex=self.ttl)
            pipe.execute()
        return binding
