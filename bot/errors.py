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
    ├── RunFailed            a run's body ended it as an error, saying why (a compiled
    │                        runnable broke its contract, an answer missed its schema)
    │   └── HookFailed       a configured hook raised (docs/hooks.md)
    └── RunInterrupted       a run must end early (stop flag or soft deadline)
        ├── RunStopped
        ├── RunDeadline
        ├── RunStalled       no model output and no tool event for too long (ends timeout)
        └── BudgetExceeded   a spend limit is used up (the message names it and the spend)
"""

from __future__ import annotations

from pathlib import Path


class FanbotError(Exception):
    """Root of every error fanbot raises on purpose."""


class ConfigError(FanbotError):
    """The configuration is invalid; the message names the setting."""


class DirectoryBusy(ConfigError):
    """Another live process holds the directory's lock (:class:`bot.supervise.dirlock.DirLock`).

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


class RunFailed(FanbotError):
    """A run's body decided the run failed; the message is its notes.

    Args:
        message: Why, for the announce's notes.
        result: The run's result despite the failure (e.g. the raw answer), if any.
    """

    def __init__(self, message: str, *, result: str | None = None) -> None:
        super().__init__(message)
        self.result = result


class HookFailed(RunFailed):
    """A hook named in ``middleware`` raised (or returned something it may not): the run
    fails with this message as its notes, ``hook <path> failed: <type>: <message>``."""


class RunInterrupted(FanbotError):
    """A run must end between steps."""


class RunParked(FanbotError):
    """An orchestrator run answered while its children still run: its job ends without a
    terminal transition, and its fan-in resumes it (:mod:`bot.runs.join`).

    A run that reached a tool call needing approval parks the same way, with
    ``approval_id`` set: a person's decision (or its timeout) resumes it.

    Args:
        text: What it said so far.
        rounds: How many fan-in rounds it has been through.
        approval_id: The approval it waits for ("" = it waits for its children).
    """

    def __init__(self, text: str, *, rounds: int, approval_id: str = "") -> None:
        super().__init__(text)
        self.text = text
        self.rounds = rounds
        self.approval_id = approval_id


class RunStopped(RunInterrupted):
    """Someone asked the run to stop."""


class RunDeadline(RunInterrupted):
    """The run's soft deadline passed."""


class RunStalled(RunInterrupted):
    """The run showed no sign of life for its stall limit and grace (the message says how
    long, and what it did last)."""


class BudgetExceeded(RunInterrupted):
    """A spend limit (run, tree, thread or user per day) is used up before a model call.

    Args:
        message: Names the limit and the spend, for the run's notes or the thread.
        kind: Which limit: ``run``, ``tree``, ``thread`` or ``user``.
    """

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind
