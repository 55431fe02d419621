"""A gateway's stop: every step bounded, a hanging or failing one logged and left behind,
the whole stop said in one line; Telegram's poller says it stopped and never waits long
for its confirming getUpdates."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from adapters.telegram import polling
from adapters.telegram.polling import Poller
from bot.gateway.runtime import StopSteps


async def test_a_hanging_step_is_left_behind_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    steps = StopSteps(limit=0.05)
    done: list[str] = []

    async def fine(name: str) -> None:
        done.append(name)

    async def boom() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.INFO, logger="bot.gateway.runtime"):
        await steps.run("egress", fine("egress"))
        await steps.run("telegram", asyncio.Event().wait())  # never returns
        await steps.run("matrix", boom())
        await steps.run("redis", fine("redis"))
    assert done == ["egress", "redis"]
    assert "stopping: telegram did not stop within 0.05s; going on" in caplog.text
    assert "stopping: matrix failed" in caplog.text
    line = steps.summary()
    assert line.startswith("stopped in ") and "telegram 0.0" in line
    assert "egress" not in line  # quick steps are not named


def test_a_quick_stop_names_no_step() -> None:
    steps = StopSteps()
    assert steps.summary().startswith("stopped in 0.0") and "(" not in steps.summary()


class HeldBot:
    """A bot whose getUpdates is held until cancelled (a long poll, a dead network)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def _post(self, method: str, data: dict[str, Any], **_kw: Any) -> list[Any]:
        assert method == "getUpdates"  # the poller reads getUpdates as JSON
        self.calls.append(data)
        await asyncio.Event().wait()
        return []


def poller(bot: HeldBot) -> Poller:
    async def deliver(update: dict[str, Any]) -> None:
        return None

    return Poller(bot=bot, deliver=deliver, timeout=30, allowed_updates=["message"])  # type: ignore[arg-type]


async def test_a_cancelled_poller_says_it_stopped(caplog: pytest.LogCaptureFixture) -> None:
    bot = HeldBot()
    p = poller(bot)
    p.offset = 1007
    task = asyncio.create_task(p.run())
    async with asyncio.timeout(10):
        while not bot.calls:
            await asyncio.sleep(0.01)
    assert bot.calls[0]["timeout"] == 30
    with caplog.at_level(logging.INFO, logger="adapters.telegram.polling"):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert "stopping: telegram polling stopped (offset 1007)" in caplog.text


async def test_the_confirming_get_updates_is_bounded(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(polling, "CONFIRM_SECONDS", 0.05)
    bot = HeldBot()
    p = poller(bot)
    await p.confirm()  # nothing taken: nothing to confirm
    assert bot.calls == []
    p.offset = 12
    await p.confirm()
    assert bot.calls[0]["offset"] == 12
    assert "telegram: could not confirm updates below 12" in caplog.text
