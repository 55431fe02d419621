"""A work horse RQ's monitor killed past its job's time limit ends as a timeout, not as a
lost worker to resume (workers.callbacks.horse_killed)."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

from workers.callbacks import _past_hard_limit


def job(*, ran: float, timeout: int | None, naive: bool = True) -> Any:
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ran)
    return SimpleNamespace(started_at=started.replace(tzinfo=None) if naive else started,
                           timeout=timeout)  # fmt: skip


def test_only_a_horse_past_its_limit_counts_as_timed_out() -> None:
    assert _past_hard_limit(job(ran=700, timeout=615))
    assert _past_hard_limit(job(ran=700, timeout=615, naive=False))
    assert not _past_hard_limit(job(ran=30, timeout=615))  # killed by a fault: resume it
    assert not _past_hard_limit(job(ran=700, timeout=-1))  # no limit
    assert not _past_hard_limit(SimpleNamespace(started_at=None, timeout=615))
