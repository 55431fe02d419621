"""Slack files: refs from a message (pure), bounded downloads, uploads into a thread.

A message's ``files`` carry ``url_private_download``, fetched with the bot token as a
Bearer header (so the token only goes to Slack's own hosts or the configured API host).
Uploads use ``files_upload_v2``: ``files.getUploadURLExternal``, the upload itself, then
``files.completeUploadExternal`` with ``channel_id`` and ``thread_ts``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from bot import attachments as att
from bot.text import units
from bot.types import Attachment

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT_SECONDS = 60.0
_CHUNK = 64 * 1024
_GONE_MODES = frozenset({"tombstone", "hidden_by_limit", "external"})


def file_refs(body: Mapping[str, Any]) -> list[att.FileRef]:
    """The downloadable files of an event callback body (pure; junk is left out)."""
    event = body.get("event") if isinstance(body, Mapping) else None
    files = event.get("files") if isinstance(event, Mapping) else None
    refs = []
    for f in files if isinstance(files, list) else ():
        if not isinstance(f, Mapping) or f.get("mode") in _GONE_MODES:
            continue
        url = f.get("url_private_download") or f.get("url_private")
        if not isinstance(url, str) or not url:
            continue
        name = f.get("name") or f.get("title") or f.get("id") or "file"
        size = f.get("size")
        refs.append(
            att.FileRef(
                name=str(name),
                source=url,
                content_type=str(f.get("mimetype") or ""),
                size=size if isinstance(size, int) and size >= 0 else None,
            )
        )
    return refs


def trusted(url: str, api_url: str) -> bool:
    """Whether the bot token may be sent to ``url``: Slack's hosts over https only, or the
    configured API host over the scheme it is configured with (a test server's http).
    Any other scheme (``http://files.slack.com``, ``ftp://``) would send the token in clear."""
    parsed, api = urlparse(url), urlparse(api_url)
    host = parsed.hostname or ""
    if host == "slack.com" or host.endswith(".slack.com"):
        return parsed.scheme == "https"
    return bool(host) and host == api.hostname and parsed.scheme == api.scheme


async def download(
    session: aiohttp.ClientSession, ref: att.FileRef, token: str, api_url: str, limit: int
) -> Attachment:
    """One file of ``ref``, at most ``limit`` bytes; a failure becomes a skipped one."""
    if not trusted(ref.source, api_url):
        return att.skip(ref, "not a Slack file URL")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with asyncio.timeout(DOWNLOAD_TIMEOUT_SECONDS):
            async with session.get(ref.source, headers=headers, allow_redirects=False) as resp:
                if resp.status != 200:
                    return att.skip(ref, f"download failed: HTTP {resp.status}")
                data = bytearray()
                async for chunk in resp.content.iter_chunked(_CHUNK):
                    data += chunk
                    if len(data) > limit:
                        return att.skip(ref, f"larger than the {units.size(limit)} limit")
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("slack: download of %s failed: %s", ref.name, exc)
        return att.skip(ref, f"download failed: {type(exc).__name__}")
    return att.downloaded(ref, bytes(data), max_bytes=limit)


async def upload(
    client: AsyncWebClient, *, channel: str, thread_ts: str | None, name: str, data: bytes
) -> str:
    """Post ``data`` as a file in the thread; returns the file id."""
    resp = await client.files_upload_v2(
        channel=channel,
        thread_ts=thread_ts,
        content=data,
        filename=name,
        title=name,
        request_file_info=False,
    )
    file = resp.get("file") or {}
    return str(file.get("id", "")) if isinstance(file, Mapping) else ""
