"""Stopping a task whose library swallows a cancellation (the Matrix stop hang)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.matrix.channel import MatrixChannel
from bot.config import MatrixSettings
from bot.supervise.aio import cancel_all


async def _swallows_first_cancel(swallowed: list[int]) -> None:
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(1)  # e.g. a cancel turned into a timeout and retried


async def test_cancel_all_cancels_again_until_the_task_ends() -> None:
    swallowed: list[int] = []
    task = asyncio.create_task(_swallows_first_cancel(swallowed))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all([task], every=0.05), 5)
    assert task.done() and swallowed == [1]


async def test_cancel_all_ignores_done_tasks_and_their_errors() -> None:
    async def boom() -> None:
        raise RuntimeError("x")

    failed = asyncio.create_task(boom())
    await asyncio.sleep(0)
    await cancel_all([failed])
    assert isinstance(failed.exception(), RuntimeError)


async def test_matrix_stop_returns_when_a_sync_swallows_the_cancel(tmp_path: Path) -> None:
    channel = MatrixChannel(
        settings=MatrixSettings(
            homeserver="http://127.0.0.1:9",
            user_id="@b:x",
            password="p",  # type: ignore[arg-type]
        ),
        store_path=tmp_path,
    )
    swallowed: list[int] = []

    async def sync_once(**_: object) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            swallowed.append(1)  # nio retried: this sync "returns" normally

    channel._sync_once = sync_once  # type: ignore[method-assign]
    channel._task = asyncio.create_task(channel._sync_forever())
    await asyncio.sleep(0)
    await asyncio.wait_for(channel.stop(), 5)
    assert swallowed and channel._task is None
