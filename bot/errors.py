"""The exception tree of fanbot.

::

    FanbotError
    ├── ConfigError          a user's configuration mistake: clear message, exit code 2
    │   └── DirectoryBusy    a state/data directory is locked by another live process
    ├── RedisUnavailable     the shared state cannot be reached
    ├── InboundBusy          another delivery of the same platform event is being handled
    ├── DeliveryError        a platform refused or failed a send (retry_after, permanent)
    ├── ToolError            a tool call the model made is invalid; the model sees the text
    │   └── SpawnRejected    sessions_spawn parameters are invalid
    ├── ModelCallFailed      the model endpoint failed a call after its retries
    └── RunInterrupted       a run must end early (stop flag or soft deadline)
        ├── RunStopped
        └── RunDeadline
"""

from __future__ import annotations

from pathlib import Path


class FanbotError(Exception):
    """Root of every error fanbot raises on purpose."""


class ConfigError(FanbotError):
    """The configuration is invalid; the message names the setting."""


class DirectoryBusy(ConfigError):
    """Another live process holds the directory's lock (:class:`bot.dirlock.DirLock`).

    Args:
        directory: The locked directory.
        pid: The holder's process id, when it could be read.
    """

    def __init__(self, directory: Path, *, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"{directory} is in use by {who}")
        self.directory = directory
        self.pid = pid


class RedisUnavailable(FanbotError):
    """Redis cannot be reached."""


class InboundBusy(FanbotError):
    """Another delivery of the same platform event is being handled; confirm nothing to the
    platform and retry this one later."""


class DeliveryError(FanbotError):
    """A platform send failed.

    Args:
        message: What went wrong, safe to log (no secrets).
        retry_after: Seconds the platform asked us to wait, if it said.
        permanent: Retrying cannot succeed (e.g. the channel does not exist).
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, permanent: bool = False
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.permanent = permanent


class ToolError(FanbotError):
    """A tool call cannot be carried out; the text goes back to the model."""


class SpawnRejected(ToolError):
    """``sessions_spawn`` was called with invalid parameters."""


class ModelCallFailed(FanbotError):
    """The model endpoint failed a call (after the client's retries).

    Args:
        message: What failed, safe to show (an HTTP status and the endpoint's words).
        timed_out: The call timed out rather than being refused.
    """

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class RunInterrupted(FanbotError):
    """A run must end between steps."""


class RunStopped(RunInterrupted):
    """Someone asked the run to stop."""


class RunDeadline(RunInterrupted):
    """The run's soft deadline passed."""
