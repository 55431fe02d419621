"""One owner per state directory: the lock, and a private Redis that a second process
pointed at the same directory refuses to touch (it used to shut it down as "stale")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import ConfigError, DirectoryBusy
from bot.redis.server import RedisServer
from bot.supervise.dirlock import DirLock

HOLD = "import sys, time; from bot.supervise.dirlock import DirLock; DirLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)"


def test_a_held_lock_refuses_others_and_names_its_holder(tmp_path: Path) -> None:
    first = DirLock(tmp_path / "x.lock").acquire()
    assert first.acquire() is first  # the holder may ask again
    with pytest.raises(DirectoryBusy) as refused:
        DirLock(tmp_path / "x.lock").acquire()
    assert refused.value.pid == os.getpid() and refused.value.directory == tmp_path
    assert isinstance(refused.value, ConfigError)  # the CLI exits 2 with its message
    first.release()
    with DirLock(tmp_path / "x.lock") as second:
        assert second.held


def test_the_lock_of_a_killed_process_is_free(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryBusy) as refused:
            DirLock(path).acquire()
        assert refused.value.pid == holder.pid
    finally:
        holder.kill()
        holder.communicate()
    with DirLock(path) as lock:  # no stale lock to clean up after a SIGKILL
        assert lock.held


def test_a_second_redis_on_the_same_directory_leaves_the_first_running(tmp_path: Path) -> None:
    with RedisServer(data_dir=tmp_path / "r") as first:
        with pytest.raises(DirectoryBusy):
            RedisServer(data_dir=tmp_path / "r").start()
        assert first.ping()
    with RedisServer(data_dir=tmp_path / "r") as again:  # stop() released the directory
        assert again.ping()
