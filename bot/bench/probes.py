"""Read-only measurements for benchmarks: Redis memory and keys, streams, process RSS, logs."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bot.keys import Keys

OUTBOX_GROUP = "gateway"  # bot.store.outbox.GROUP (not imported: the gateway is a process)
_ERROR = re.compile(r"\b(?:ERROR|CRITICAL)\b")
_ID_PART = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{16,}|-?\d+(?:\.\d+)?")


def used_memory(client: redis.Redis) -> int:
    """Redis ``INFO memory`` ``used_memory`` in bytes."""
    info: dict[str, Any] = client.info("memory")
    return int(info["used_memory"])


def outbox_drained(client: redis.Redis, keys: Keys) -> bool:
    """Every outbox entry written so far was read by the gateway and acknowledged."""
    if not client.exists(keys.outbox):
        return True
    groups: list[dict[Any, Any]] = client.xinfo_groups(keys.outbox)
    group = next((g for g in groups if _text(g["name"]) == OUTBOX_GROUP), None)
    if group is None:
        return False
    stream: dict[Any, Any] = client.xinfo_stream(keys.outbox)
    last_read, last_written = group["last-delivered-id"], stream["last-generated-id"]
    return int(group["pending"]) == 0 and _text(last_read) == _text(last_written)


@dataclass(frozen=True, kw_only=True)
class Streams:
    """Lengths of fanbot's streams (entries, not bytes)."""

    outbox: int
    outbox_pending: int
    progress: int
    dead_letters: int


def streams(client: redis.Redis, keys: Keys) -> Streams:
    pending = 0
    if client.exists(keys.outbox):
        groups: list[dict[Any, Any]] = client.xinfo_groups(keys.outbox)
        pending = sum(int(g["pending"]) for g in groups)
    return Streams(
        outbox=int(client.xlen(keys.outbox)),
        outbox_pending=pending,
        progress=int(client.xlen(keys.progress)),
        dead_letters=int(client.xlen(keys.dead_letter)),
    )


def key_census(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """``{key shape: (count, bytes)}`` over every key; ids and numbers become ``*``."""
    names = [_text(k) for k in client.scan_iter(count=1000)]
    with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.memory_usage(name)
        sizes = pipe.execute()
    census: dict[str, list[int]] = {}
    for name, size in zip(names, sizes, strict=True):
        entry = census.setdefault(_ID_PART.sub("*", name), [0, 0])
        entry[0] += 1
        entry[1] += int(size or 0)
    return {shape: (count, size) for shape, (count, size) in census.items()}


def rss_bytes(pids: Iterable[int]) -> dict[int, int]:
    """Resident set size per live pid (vanished processes are left out)."""
    import psutil

    sizes = {}
    for pid in pids:
        try:
            sizes[pid] = int(psutil.Process(pid).memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    return sizes


def log_problems(path: Path) -> Counter[str]:
    """Counts of tracebacks and ``ERROR``/``CRITICAL`` lines in a log file."""
    found: Counter[str] = Counter()
    if not path.exists():
        return found
    with path.open(errors="replace") as lines:
        for line in lines:
            if line.startswith("Traceback"):
                found["tracebacks"] += 1
            elif _ERROR.search(line):
                found["error lines"] += 1
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
