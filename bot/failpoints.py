"""Failpoints: named places where a fault-injection test makes this process misbehave.

Off unless ``FANBOT_FAILPOINTS`` is set (read once per process), e.g.::

    FANBOT_FAILPOINTS="egress.after_send=kill"          # SIGKILL self on the first hit
    FANBOT_FAILPOINTS="egress.before_send=kill@3"       # ... on the third hit
    FANBOT_FAILPOINTS="egress.after_send=raise;x=sleep(2)"

Actions: ``kill`` (SIGKILL this process: no cleanup, like a host dying), ``raise``
(:class:`FailpointError`), ``sleep(<seconds>)`` (blocks the calling thread). The same idea
as fail-rs / gofail: the test picks the exact instruction to die at, instead of racing a
signal against a running process. A failpoint that is not configured costs a dict lookup.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass

ENV = "FANBOT_FAILPOINTS"
_SPEC = re.compile(r"^(kill|raise|sleep\((\d+(?:\.\d+)?)\))(?:@(\d+))?$")


class FailpointError(RuntimeError):
    """Raised by a failpoint configured with ``raise``."""


@dataclass
class _Point:
    action: str
    seconds: float
    at_hit: int
    hits: int = 0


def parse(spec: str) -> dict[str, _Point]:
    """``"a=kill;b=sleep(1)@2"`` -> points; raise ``ValueError`` naming a bad entry."""
    points = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, _, action = part.partition("=")
        found = _SPEC.match(action.strip())
        if not name.strip() or found is None:
            raise ValueError(f"{ENV}: cannot parse {part!r} (want name=kill|raise|sleep(s)[@n])")
        points[name.strip()] = _Point(
            action=found[1].split("(")[0],
            seconds=float(found[2] or 0),
            at_hit=int(found[3] or 1),
        )
    return points


_points: dict[str, _Point] | None = None


def load() -> None:
    """Read ``FANBOT_FAILPOINTS`` now (at start-up), so a typo fails fast with a clear error."""
    global _points
    _points = parse(os.environ.get(ENV, ""))


def hit(name: str) -> None:
    """Trigger failpoint ``name`` if this process was configured with it."""
    if _points is None:
        load()
    assert _points is not None
    point = _points.get(name)
    if point is None:
        return
    point.hits += 1
    if point.hits != point.at_hit:
        return
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "raise":
        raise FailpointError(f"failpoint {name}")
    else:
        time.sleep(point.seconds)
