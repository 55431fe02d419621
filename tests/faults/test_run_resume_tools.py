"""A run whose worker dies around a tool call (issue 26): write_file, not safe to repeat, is
reported to the model as interrupted and never run twice; read_file, safe, runs again.
See :mod:`tests.faults.resume_script`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.testing.stack import Stack  # noqa: F401 - its workers run in both pools (conftest)
from tests.faults.resume_script import check_killed_at

pytestmark = pytest.mark.e2e

POINTS = [
    "run.tool_started.write_file",
    "run.tool_done.write_file",
    "run.tool_started.read_file",
    "run.tool_done.read_file",
]


@pytest.mark.parametrize("point", POINTS)
async def test_a_run_killed_here_resumes_and_succeeds_once(
    redis_url: str, tmp_path: Path, point: str
) -> None:
    await check_killed_at(redis_url, tmp_path, point)
