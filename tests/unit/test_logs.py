"""No configured secret reaches a log line, whichever library writes it."""

from __future__ import annotations

import logging
from pathlib import Path

from bot.config import Settings
from bot.logs import RedactSecrets, configure, secrets_of


def test_every_secret_setting_is_found() -> None:
    settings = Settings(
        openai={"api_key": "sk-openai-123456"},
        slack={"bot_token": "xoxb-1-2-3", "signing_secret": "slack-signing-s3cret"},
        telegram={"bot_token": "4242:AAAA-secret"},
    )
    found = set(secrets_of(settings))
    assert {"sk-openai-123456", "xoxb-1-2-3", "slack-signing-s3cret", "4242:AAAA-secret"} <= found


def test_messages_args_and_tracebacks_are_redacted(tmp_path: Path) -> None:
    settings = Settings(telegram={"bot_token": "4242:AAAA-secret"}, log_level="INFO")
    path = tmp_path / "fanbot.log"
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure(settings, path)
        logging.getLogger("some.sdk").warning(
            "POST %s failed", "https://x/bot4242:AAAA-secret/getMe"
        )
        try:
            raise RuntimeError("url was https://x/bot4242:AAAA-secret/sendMessage")
        except RuntimeError:
            logging.getLogger("other").exception("boom")
        logging.getLogger("httpx").info("HTTP Request: POST https://x/bot4242:AAAA-secret/getMe")
        for handler in root.handlers:
            handler.flush()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    text = path.read_text()
    assert "AAAA-secret" not in text
    assert text.count("bot***") == 3  # the warning, the traceback's source line and message
    assert "HTTP Request" not in text  # httpx's per-request INFO line is quieted


def test_short_values_are_not_treated_as_secrets() -> None:
    assert RedactSecrets(["abc", ""]).secrets == []
