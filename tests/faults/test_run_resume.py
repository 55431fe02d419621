"""A crashed worker loses no work: a run goes on from its last completed step (issue 26).

A failpoint (:mod:`bot.failpoints`) SIGKILLs the worker at one exact place of a run; the
``!<path>`` marker makes it fire once per machine, so the restarted worker's next attempt
goes past it. Each test asserts what the issue promises: the run ends ``success`` once,
announced once, its card says it was resumed, its stats count every attempt's tokens, a
call that is not safe to repeat is reported to the model as interrupted (never run twice),
a read-only one runs again, and a model call in flight is made again (once).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.testing.stack import Stack  # noqa: F401 - its workers run in both pools (conftest)
from tests.faults.resume_script import check_killed_at

pytestmark = pytest.mark.e2e

POINTS = [
    "run.before_first_step",
    "run.in_model_call",
    "run.between_steps",
    "run.finalize",
]


@pytest.mark.parametrize("point", POINTS)
async def test_a_run_killed_here_resumes_and_succeeds_once(
    redis_url: str, tmp_path: Path, point: str
) -> None:
    await check_killed_at(redis_url, tmp_path, point)
