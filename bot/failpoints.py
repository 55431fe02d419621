"""Failpoints: named places where a fault-injection test makes this process misbehave.

Off unless ``FANBOT_FAILPOINTS`` is set (read when the process's gateway, console or
worker is built: each owns a :class:`Failpoints`), e.g.::

    FANBOT_FAILPOINTS="egress.after_send=kill"          # SIGKILL self on the first hit
    FANBOT_FAILPOINTS="egress.before_send=kill@3"       # ... on the third hit
    FANBOT_FAILPOINTS="egress.after_send=raise;x=sleep(2)"

Actions: ``kill`` (SIGKILL this process: no cleanup, like a host dying), ``raise``
(:class:`FailpointError`), ``sleep(<seconds>)`` (blocks the calling thread). The same idea
as fail-rs / gofail: the test picks the exact instruction to die at, instead of racing a
signal against a running process. A failpoint that is not configured costs a dict lookup.

``!<path>`` after an entry makes it fire once per machine, not once per process: the first
process to fire it creates ``<path>``, and no process fires it while that file exists. A
worker killed at a failpoint is restarted with the same settings; its run's next attempt
then goes past the point (``run.tool_done.write_file=kill!/tmp/t/once``).

Failpoints in a run's or turn's agent loop are named ``run.<point>`` or ``turn.<point>``
(:mod:`bot.agent.loop`): ``before_first_step``, ``in_model_call`` (the first streamed
chunk arrived), ``tool_started.<tool>``, ``tool_done.<tool>`` (it ran; its result is not
recorded yet), ``between_steps``; and ``run.finalize`` (before the run's terminal write).
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass

from bot.config import FAILPOINTS_ENV, failpoint_spec

ENV = FAILPOINTS_ENV
_SPEC = re.compile(r"^(kill|raise|sleep\((\d+(?:\.\d+)?)\))(?:@(\d+))?(?:!(\S+))?$")


class FailpointError(RuntimeError):
    """Raised by a failpoint configured with ``raise``."""


@dataclass
class _Point:
    action: str
    seconds: float
    at_hit: int
    once_file: str = ""
    hits: int = 0


def parse(spec: str) -> dict[str, _Point]:
    """``"a=kill;b=sleep(1)@2"`` -> points; raise ``ValueError`` naming a bad entry."""
    points = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, _, action = part.partition("=")
        found = _SPEC.match(action.strip())
        if not name.strip() or found is None:
            raise ValueError(
                f"{ENV}: cannot parse {part!r} (want name=kill|raise|sleep(s)[@n][!path])"
            )
        points[name.strip()] = _Point(
            action=found[1].split("(")[0],
            seconds=float(found[2] or 0),
            at_hit=int(found[3] or 1),
            once_file=found[4] or "",
        )
    return points


class Failpoints:
    """The failpoints of one process, each with its hit count.

    Args:
        spec: ``"a=kill;b=sleep(1)@2"`` (:func:`parse`); empty: none (each hit is a no-op).

    Raises:
        ValueError: A bad entry in ``spec``, named.
    """

    def __init__(self, spec: str = "") -> None:
        self._points = parse(spec)

    @classmethod
    def from_env(cls) -> Failpoints:
        """The ones ``FANBOT_FAILPOINTS`` configures for this process."""
        return cls(failpoint_spec())

    def hit(self, name: str) -> None:
        """Trigger failpoint ``name`` if it is configured."""
        point = self._points.get(name)
        if point is None:
            return
        point.hits += 1
        if point.hits != point.at_hit:
            return
        if point.once_file and not _first_on_machine(point.once_file):
            return
        if point.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif point.action == "raise":
            raise FailpointError(f"failpoint {name}")
        else:
            time.sleep(point.seconds)


def _first_on_machine(path: str) -> bool:
    """Create ``path`` if it does not exist yet; True if this call created it."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True
