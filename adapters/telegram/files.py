"""Telegram files: bounded downloads (``getFile`` + the file URL) and ``sendDocument``.

The refs come from :func:`adapters.telegram.convert.file_refs`; PTB builds the download URL
from ``base_file_url`` and the ``file_path`` that ``getFile`` returns.
"""

from __future__ import annotations

import logging
from typing import Any

from telegram.error import TelegramError

from bot import attachments as att
from bot.text import units
from bot.types import Attachment

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_SECONDS = 60.0


async def download(bot: Any, ref: att.FileRef, limit: int) -> Attachment:
    """One file of ``ref``, at most ``limit`` bytes; a failure becomes a skipped one."""
    try:
        file = await bot.get_file(ref.source)
        if file.file_size is not None and file.file_size > limit:
            return att.skip(ref, f"larger than the {units.size(limit)} limit")
        data = await file.download_as_bytearray(read_timeout=DOWNLOAD_TIMEOUT_SECONDS)
    except (TelegramError, OSError) as exc:
        log.warning("telegram: download of %s failed: %s", ref.name, type(exc).__name__)
        return att.skip(ref, f"download failed: {_short(exc)}")
    return att.downloaded(ref, bytes(data), max_bytes=limit)


def _short(exc: BaseException) -> str:
    """An error's text without the URL PTB may put in it (the URL holds the token)."""
    text = str(exc) if isinstance(exc, TelegramError) else type(exc).__name__
    return "request failed" if "/bot" in text or "/file/" in text else text[:200]
