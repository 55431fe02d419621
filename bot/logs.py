"""Logging set-up for every fanbot process: one format, and no secret ever written out.

SDKs log request URLs (the Telegram Bot API puts the bot token in every URL) and may echo
headers in errors, so a filter on the handlers replaces every configured secret with
``***`` in whatever reaches the log, whichever library wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel, SecretStr

from bot.config import Settings

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
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RedactSecrets(secrets_of(settings)))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
