"""Workers forked from the launcher: exit codes and signals as ``subprocess.Popen`` reports
them, a session of their own, the launcher's listening sockets closed in them, and the
launcher's logging usable on both sides of the fork."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from workers.forked import Forked, fork_worker

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork")


def _sleep() -> int:
    time.sleep(60)
    return 0


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()  # fork_worker froze this process's objects, as it does the launcher's


def test_the_exit_code_of_the_body_is_the_returncode() -> None:
    child = fork_worker(lambda: 3, close=[])
    assert child.wait(timeout=30) == 3
    assert child.returncode == 3 and child.poll() == 3


@pytest.mark.parametrize(("exc", "code"), [(SystemExit(2), 2), (RuntimeError("boom"), 1)])
def test_a_body_that_raises_exits_with_an_error(exc: BaseException, code: int) -> None:
    def body() -> int:
        raise exc

    assert fork_worker(body, close=[]).wait(timeout=30) == code


def test_a_signal_is_a_negative_returncode_as_popen_reports_it() -> None:
    child = fork_worker(_sleep, close=[])
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.1)
    child.kill()
    assert child.wait(timeout=30) == -signal.SIGKILL
    child.send_signal(signal.SIGTERM)  # gone: nothing to signal, no error


def test_the_worker_has_a_session_of_its_own_and_default_sigterm() -> None:
    read, write = os.pipe()

    def body() -> int:
        os.close(read)
        handler = signal.getsignal(signal.SIGTERM)
        os.write(write, f"{os.getsid(0)} {os.getpid()} {handler == signal.SIG_DFL}".encode())
        return 0

    child = fork_worker(body, close=[])
    os.close(write)
    with os.fdopen(read) as answer:
        sid, pid, default = answer.read().split()
    assert child.wait(timeout=30) == 0
    assert sid == pid == str(child.pid) and default == "True"
    assert os.getsid(0) != child.pid


def test_a_sigterm_sent_right_after_the_fork_is_not_lost_to_the_launchers_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setsid = os.setsid

    def slow_setsid() -> None:  # the worker is slow to restore the default handler
        time.sleep(0.3)
        setsid()

    monkeypatch.setattr(os, "setsid", slow_setsid)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # as the launcher's: swallows it
    try:
        child = fork_worker(_sleep, close=[])
        os.kill(child.pid, signal.SIGTERM)
        assert child.wait(timeout=30) == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_listening_sockets_of_the_launcher_are_closed_in_the_worker() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        fd = listener.fileno()

        def body() -> int:
            try:
                os.fstat(fd)
            except OSError:
                return 0
            return 1

        assert fork_worker(body, close=[listener]).wait(timeout=30) == 0
        assert listener.fileno() == fd  # still open here


def test_logging_works_in_the_worker_and_after_the_fork_here() -> None:
    log = logging.getLogger("test.forked")
    handler = logging.StreamHandler(sys.stderr)
    log.addHandler(handler)
    try:

        def body() -> int:
            log.warning("from the worker")
            return 0

        child = fork_worker(body, close=[])
        assert child.wait(timeout=30) == 0
        assert handler.lock is not None and handler.lock.acquire(timeout=1)  # released here
        handler.lock.release()
    finally:
        log.removeHandler(handler)


def test_a_child_reaped_elsewhere_counts_as_gone() -> None:
    child = fork_worker(lambda: 0, close=[])
    os.waitpid(child.pid, 0)
    assert Forked(child.pid).poll() == 255
