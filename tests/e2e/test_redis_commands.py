"""Redis commands per subagent run, spawn -> announce delivered, stay under a bound.

Counted as ``fanbot bench commands`` counts them (:mod:`bot.bench.run_commands`, with
:mod:`bot.bench.redis_commands`, as ``fanbot bench compare`` does): the delta of ``INFO
commandstats`` over sequential runs on the real stack (gateway, forked workers, the fake
model), idle traffic subtracted, per run. A behaviour bound, not a
timing: it fails when a change adds round trips or commands to a run's path, and prints
where they come from (by command, and by script or key family).
"""

from __future__ import annotations

import pytest

from bot.bench.run_commands import measure

pytestmark = pytest.mark.timeout(300)

BOUND = 200
"""Commands per run of ``/subagents spawn`` -> its announce delivered (fork pool): 168 when
set, plus room for the idle traffic's noise; RQ's own worker and job bookkeeping is about
55 of it. It was 222 before issue 25's round (see CHANGELOG). Issue 27 adds about 25: the
message counted (``Usage.hit``, 4), the command's spawn counted (2), the run's places taken
(``Usage.reserve``, 7), the spawn's cost estimate (3: one ``LRANGE`` at spawn, ``LPUSH`` and
``EXPIRE`` in the finalize script), the model endpoint's shared window asked (3 per model
call, ``ModelLimits.acquire``) and the session keys' TTLs set again by each write (about 6);
measured 193.5."""


async def test_a_spawned_run_costs_at_most_the_bound_in_redis_commands(redis_url: str) -> None:
    result = await measure(redis_url, runs=10, idle_seconds=6)
    report = "\n".join(result.lines())
    print("\n" + report)
    assert result.total <= BOUND, report
