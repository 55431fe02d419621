"""The progress stream and the status message of each run, in one owner.

Workers append progress events (:class:`ProgressWriter`, sync, ``deps.progress``) to a
capped stream, so a flood never delays an announce; the gateway reads them from "now" and
keeps, per run, the platform id of the status message it edits (:class:`ProgressStore`,
async), so a restarted gateway edits the same message instead of posting a new one.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from bot.keys import Keys
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import AsyncRedisOwner, RedisOwner
from bot.types import ThreadRef

PROGRESS_MAXLEN = 10_000
STATUS_TTL = 7 * 86_400

PUT_PROGRESS_LUA = """
local function put_progress(stream, maxlen, run_id, thread, text, ts)
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'run_id', run_id,
    'thread', thread, 'text', text, 'final', '', 'ts', ts)
end
"""
"""A Lua function writing a plain step event as :meth:`ProgressWriter.put` does (for scripts that
put one beside their own writes; ``thread`` as the run hash keeps it: the same JSON)."""

_FINAL_PROGRESS = """
local function put_final_progress(k, a, tools)
  local fields = {'run_id', a[1], 'thread', a[2], 'text', a[3], 'final', '1', 'ts', a[4]}
  if a[5] ~= '' then
    for _, v in ipairs({'tools', tools, 'elapsed', a[5]}) do table.insert(fields, v) end
  end
  if a[6] ~= '' then
    table.insert(fields, 'quiet')
    table.insert(fields, '1')
  end
  redis.call('XADD', k[1], 'MAXLEN', '~', a[7], '*', unpack(fields))
end
"""
FINAL_PROGRESS = Fragment(name="put_final_progress", lua=_FINAL_PROGRESS, keys=1, args=7)
"""A run's last event, as :meth:`ProgressWriter.put` writes it, as a piece of the finalize script
(``a``: run id, thread JSON, status, ts, elapsed or "" for a run that never started, "1"
for quiet, the stream's MAXLEN); ``tools``, its tool count, comes from the run's hash (the finalize script reads
it there). See :mod:`bot.store.lua_parts`."""


def final_progress_part(
    keys: Keys,
    *,
    run_id: str,
    thread: ThreadRef,
    status: str,
    ts: float,
    elapsed: float | None,
    quiet: bool,
) -> Part:
    """:data:`FINAL_PROGRESS`'s part: the final event of ``run_id`` (``elapsed`` None: it
    never started, so no tally)."""
    args = (
        run_id,
        json.dumps(thread.to_json()),
        status,
        ts,
        "" if elapsed is None else f"{elapsed:.3f}",
        "1" if quiet else "",
        PROGRESS_MAXLEN,
    )
    return Part(fragment=FINAL_PROGRESS, keys=(keys.progress,), args=args)


@dataclass(frozen=True, kw_only=True)
class ProgressEvent:
    """One step of a run, rendered by the gateway as that run's status line.

    Attributes:
        run_id: The run.
        thread: Where its status card lives.
        text: What it is doing (a final event: its status).
        final: The run ended; the card shows how.
        tools: Tool calls so far (None: not counted, e.g. before the first step).
        elapsed: Seconds since the run started (None: not known).
        quiet: A final event of a run that announces nothing (``ANNOUNCE_SKIP``): its
            card goes away instead of showing the status.
        note: A standing remark the card shows while the run works (a budget warning).
    """

    run_id: str
    thread: ThreadRef
    text: str
    final: bool = False
    tools: int | None = None
    elapsed: float | None = None
    quiet: bool = False
    note: str = ""


class ProgressWriter(RedisOwner):
    """The workers' side: append events to the capped stream."""

    def put(self, event: ProgressEvent, *, pipe: redis.client.Pipeline | None = None) -> None:
        """Append ``event`` (a flood never delays announces); with ``pipe`` the write joins
        the caller's batch."""
        target = self.redis if pipe is None else pipe  # an empty pipeline is falsy
        target.xadd(self.keys.progress, _fields(event), maxlen=PROGRESS_MAXLEN, approximate=True)


def _fields(event: ProgressEvent) -> dict[FieldT, EncodableT]:
    fields: dict[FieldT, EncodableT] = {
        "run_id": event.run_id,
        "thread": json.dumps(event.thread.to_json()),
        "text": event.text,
        "final": "1" if event.final else "",
        "ts": str(time.time()),
    }
    if event.tools is not None:
        fields["tools"] = str(event.tools)
    if event.elapsed is not None:
        fields["elapsed"] = f"{event.elapsed:.3f}"
    if event.quiet:
        fields["quiet"] = "1"
    if event.note:
        fields["note"] = event.note
    return fields


def decode(fields: Mapping[str, str]) -> ProgressEvent | None:
    """A stream entry's fields as an event; ``None`` when malformed."""
    try:
        thread = ThreadRef.from_json(json.loads(fields["thread"]))
        return ProgressEvent(
            run_id=fields["run_id"],
            thread=thread,
            text=fields.get("text", ""),
            final=bool(fields.get("final")),
            tools=_count(fields.get("tools")),
            elapsed=_seconds(fields.get("elapsed")),
            quiet=bool(fields.get("quiet")),
            note=fields.get("note", ""),
        )
    except (KeyError, ValueError, TypeError):
        return None


def _count(raw: str | None) -> int | None:
    """An optional count; a malformed one is dropped, not the event."""
    return int(raw) if raw is not None and raw.isdigit() and raw.isascii() else None


def _seconds(raw: str | None) -> float | None:
    """An optional duration; a malformed one is dropped, not the event."""
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value < math.inf else None


class ProgressStore(AsyncRedisOwner):
    """The gateway's side: read events, remember status message ids."""

    async def read(self, after: str, *, count: int = 200) -> list[tuple[str, ProgressEvent | None]]:
        """Events after stream id ``after`` (``"$"``: from now), blocking up to 1 s."""
        replies: Any = await self.redis.xread({self.keys.progress: after}, count=count, block=1000)
        return [(i, decode(f)) for _stream, entries in replies or [] for i, f in entries]

    async def status_message(self, run_id: str) -> str | None:
        found: Any = await self.redis.hget(self.keys.status_message(run_id), "id")
        return None if found is None else str(found)

    async def remember_status(self, run_id: str, message_id: str) -> None:
        key = self.keys.status_message(run_id)
        # No MULTI: an expiry lost with a broken connection is set again when the run is
        # archived (RunsRegistry.mark_archived), and the id alone is harmless meanwhile.
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, "id", message_id)
            pipe.expire(key, STATUS_TTL)
            await pipe.execute()
