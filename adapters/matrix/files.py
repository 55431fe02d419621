"""Matrix files: bounded downloads of ``mxc://`` media and uploads for ``m.file`` events.

nio 0.26 downloads through the authenticated media API
(``/_matrix/client/v1/media/download/...``, which Synapse requires for local media) and
uploads to ``/_matrix/media/v3/upload``. nio reads a download whole, so the size the event
announces is checked first and the bytes again after.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence

from aiohttp import ClientError
from nio import AsyncClient, MemoryDownloadResponse, UploadResponse

from bot import attachments as att
from bot.config import AttachmentSettings
from bot.errors import DeliveryError
from bot.types import Attachment

log = logging.getLogger(__name__)


async def download_all(
    client: AsyncClient, refs: Sequence[att.FileRef], *, limits: AttachmentSettings
) -> tuple[Attachment, ...]:
    """Download what :func:`bot.attachments.select` allows; failures become skipped ones."""
    fetch, skipped = att.select(refs, max_files=limits.max_files, max_bytes=limits.max_bytes)
    got = [await _one(client, ref, limits.max_bytes) for ref in fetch]
    return (*got, *skipped)


async def _one(client: AsyncClient, ref: att.FileRef, limit: int) -> Attachment:
    try:
        response = await client.download(mxc=ref.source)
    except (ClientError, TimeoutError) as exc:
        return att.skip(ref, f"download failed: {type(exc).__name__}")
    if not isinstance(response, MemoryDownloadResponse):
        log.warning("matrix: download of %s failed: %s", ref.source, response)
        return att.skip(
            ref, f"download failed: {getattr(response, 'status_code', None) or 'error'}"
        )
    return att.downloaded(ref, bytes(response.body), max_bytes=limit)


async def upload(client: AsyncClient, *, name: str, content_type: str, data: bytes) -> str:
    """Put ``data`` into the media repository; returns its ``mxc://`` URI."""
    try:
        response, _ = await client.upload(
            io.BytesIO(data), content_type=content_type, filename=name, filesize=len(data)
        )
    except (ClientError, TimeoutError) as exc:
        raise DeliveryError(f"matrix: upload of {name} failed: {exc}") from exc
    if not isinstance(response, UploadResponse):
        raise DeliveryError(f"matrix: upload of {name} failed: {response}")
    return str(response.content_uri)
