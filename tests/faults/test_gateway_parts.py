"""A 50,000-character announce and a gateway SIGKILLed between its parts.

A real ``fanbot gateway`` splits the announce (Telegram: 4096 UTF-16 units, Slack: 3,900
characters per part) and dies at a failpoint while posting it; a second gateway takes the
entry over and resumes from the parts the first recorded in Redis. Every part appears once,
in order, in the fake platform's thread. Killed after the platform took a part but before
Redis recorded it, Slack still shows each part once (the part is found by its metadata);
Telegram, which lets a bot read nothing back, shows that one part twice.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from bot.testing.stack import Stack
from tests.faults.test_gateway_faults import TOPICS, exited, slack_env, telegram_env

pytestmark = pytest.mark.e2e

PARAGRAPHS = 200
_MARK = re.compile(r"§(\d{4})")


def big_announce() -> str:
    text = "\n\n".join(f"§{i:04d} " + "lorem ipsum dolor " * 14 for i in range(PARAGRAPHS))
    assert len(text) >= 50_000
    return text


def marks(texts: list[str]) -> list[int]:
    return [int(m) for text in texts for m in _MARK.findall(text)]


def once_in_order(posted: list[str], *, repeated: int | None) -> None:
    """Every paragraph once, in order; with ``repeated``, that one part came twice in a row."""
    if repeated is not None:
        assert posted[repeated] == posted[repeated - 1]
        posted = posted[:repeated] + posted[repeated + 1 :]
    assert len(posted) == len(set(posted)) > 12
    assert marks(posted) == list(range(PARAGRAPHS))


@pytest.mark.parametrize(
    ("failpoint", "before", "repeated"),
    [
        ("egress.between_parts=kill@2", 2, None),  # parts 0-1 posted and recorded
        ("egress.after_send=kill@5", 5, 5),  # part 4 posted, not recorded: posted again
    ],
    ids=["between-parts", "part-in-doubt"],
)
async def test_telegram_split_announce_survives_a_sigkill_between_parts(
    redis_url: str, tmp_path: Path, failpoint: str, before: int, repeated: int | None
) -> None:
    async with telegram_env(redis_url, tmp_path) as env:
        env.put(TOPICS[0], big_announce())
        first = env.gateway(failpoints=failpoint, name="first").start()
        assert await exited(first) == -9, first.log()
        assert len(env.posted()) == before

        with env.gateway(name="second"):
            await Stack.wait_for(env.drained, timeout=30)
            await asyncio.sleep(0.5)  # negative check: a repeat, if any, would arrive now
        once_in_order(env.posted(TOPICS[0]), repeated=repeated)


@pytest.mark.parametrize(
    ("failpoint", "before"),
    [("egress.between_parts=kill@2", 2), ("egress.after_send=kill@5", 5)],
    ids=["between-parts", "part-in-doubt"],
)
async def test_slack_split_announce_survives_a_sigkill_between_parts_exactly_once(
    redis_url: str, tmp_path: Path, failpoint: str, before: int
) -> None:
    async with slack_env(redis_url, tmp_path) as env:
        env.put(big_announce())
        first = env.gateway(failpoints=failpoint, name="first").start()
        assert await exited(first) == -9, first.log()
        assert len(env.posted()) == before

        with env.gateway(name="second"):
            await Stack.wait_for(env.drained, timeout=30)
            await asyncio.sleep(0.5)  # negative check: a repeat, if any, would arrive now
        once_in_order(env.posted(), repeated=None)
        assert all(m.metadata for m in env.slack.messages)
