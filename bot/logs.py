"""Logging set-up for every fanbot process: one format, and no secret ever written out.

SDKs log request URLs (the Telegram Bot API puts the bot token in every URL) and may echo
headers in errors, so a filter on the handlers replaces every configured secret with
``***`` in whatever reaches the log, whichever library wrote it.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, SecretStr

from bot.config import Settings
from bot.observe import scope as observe_scope
from bot.observe import tracing
from bot.redis.url import secrets_in

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_MIN_SECRET = 6  # shorter values would redact ordinary words
_CHATTY = ("httpx", "httpcore", "httpx2", "httpcore2")  # one INFO line per HTTP request


def secrets_of(model: BaseModel) -> Iterator[str]:
    """Every :class:`SecretStr` value in ``model`` and its nested settings."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, SecretStr):
            yield value.get_secret_value()
        elif isinstance(value, BaseModel):
            yield from secrets_of(value)


class RedactSecrets(logging.Filter):
    """Replace each secret in a record's final message (and traceback text) with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


def configure(settings: Settings, path: Path | None = None) -> None:
    """Log at ``settings.log_level`` to stderr or ``path``, with secrets redacted."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(path)
    else:
        handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if settings.log_format == "json" else logging.Formatter(FORMAT)
    )
    handler.addFilter(RedactSecrets([*secrets_of(settings), *secrets_in(settings.redis_url)]))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


class JsonFormatter(logging.Formatter):
    """One JSON object per line (``FANBOT_LOG_FORMAT=json``), with the job's run id,
    session key and trace id where known (:mod:`bot.observe.scope`). Secrets are already
    redacted by the handler's filter, which runs before any formatter."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        scope = observe_scope.current()
        ids = {"run_id": scope.run_id, "session_key": scope.session_key}
        data |= {k: v for k, v in ids.items() if v}
        if trace := tracing.trace_id():
            data["trace_id"] = trace
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exception"] = record.exc_text
        return json.dumps(data, ensure_ascii=False, default=str)


class ThrottledLog:
    """At most one record per key per ``interval`` seconds; the rest are counted, not written.

    For conditions that repeat for as long as they last (Redis down, a flood of forged
    requests): the first occurrence is logged at once, later ones fold into the next line's
    ``(N more like it)`` suffix, so an outage costs a line a minute, not one per request.

    Args:
        logger: Where the lines go.
        interval: Seconds between two lines with the same key.
        clock: Monotonic time source (swappable in tests).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}

    def warning(self, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at WARNING unless ``key`` was logged recently; True if written."""
        return self._emit(logging.WARNING, key, msg, args)

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Like :meth:`warning`, at ``level``."""
        return self._emit(level, key, msg, args)

    def _emit(self, level: int, key: str, msg: str, args: tuple[object, ...]) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval:
            self._last[key] = (last[0], last[1] + 1)
            return False
        suppressed = last[1] if last is not None else 0
        if suppressed:
            msg += f" ({suppressed} more like it in the last {self.interval:.0f}s)"
        self.logger.log(level, msg, *args, stacklevel=3)  # the caller's file and line
        self._last[key] = (now, 0)
        return True
