"""The console's threads, for ``:threads``: every console thread with a history in the
console's Redis (it outlives a console: the next one on the same state directory goes on
with the same threads, runs and run numbers until ``fanbot console --reset``)."""

from __future__ import annotations

from bot.deps import Deps

MAX_THREADS = 200


def known_threads(deps: Deps, prefix: str) -> dict[str, tuple[int, int]]:
    """Thread name -> (messages in its history, runs numbered in it), for the sessions
    whose key starts with ``prefix`` (every console thread's) (sync: a SCAN)."""
    found = deps.history.sessions_under(prefix, limit=MAX_THREADS)
    return {key.removeprefix(prefix): counts for key, counts in found.items()}
