"""Matrix files: bounded downloads of ``mxc://`` media and uploads for ``m.file`` events.

nio 0.26 downloads through the authenticated media API
(``/_matrix/client/v1/media/download/...``, which Synapse requires for local media) and
uploads to ``/_matrix/media/v3/upload``. nio reads a download whole, so the size the event
announces is checked first and the bytes again after.

Encrypted rooms: a file arrives as ciphertext whose key, IV and SHA-256 travel in the
event's ``file`` object (:class:`~adapters.matrix.convert.EncryptedFileRef`); it is
checked against the bound, verified and decrypted here. Uploads to such a room are
encrypted by nio, which returns the keys that go into the ``m.file`` event.
"""

from __future__ import annotations

import io
import logging
from typing import Any

from aiohttp import ClientError
from nio import AsyncClient, EncryptionError, MemoryDownloadResponse, UploadResponse
from nio.crypto.attachments import decrypt_attachment

from adapters.matrix.convert import EncryptedFileRef
from bot import attachments as att
from bot.errors import DeliveryError
from bot.types import Attachment

log = logging.getLogger(__name__)


async def download(client: AsyncClient, ref: att.FileRef, limit: int) -> Attachment:
    """One file of ``ref``, at most ``limit`` bytes; a failure becomes a skipped one."""
    try:
        response = await client.download(mxc=ref.source)
    except (ClientError, TimeoutError) as exc:
        return att.skip(ref, f"download failed: {type(exc).__name__}")
    if not isinstance(response, MemoryDownloadResponse):
        log.warning("matrix: download of %s failed: %s", ref.source, response)
        return att.skip(
            ref, f"download failed: {getattr(response, 'status_code', None) or 'error'}"
        )
    data = bytes(response.body)
    if isinstance(ref, EncryptedFileRef) and len(data) <= limit:
        try:
            data = decrypt(ref, data)
        except EncryptionError as exc:
            log.warning("matrix: could not decrypt %s: %s", ref.source, exc)
            return att.skip(ref, "could not decrypt it")
    return att.downloaded(ref, data, max_bytes=limit)


def decrypt(ref: EncryptedFileRef, ciphertext: bytes) -> bytes:
    """The plaintext of an encrypted room's file (its SHA-256 checked first).

    Raises:
        EncryptionError: The hash does not match, or the key or IV is malformed.
    """
    try:
        plain = decrypt_attachment(ciphertext, ref.key, ref.sha256, ref.iv)
    except (ValueError, TypeError) as exc:  # a malformed hash string, say
        raise EncryptionError(f"bad key material: {exc}") from exc
    return bytes(plain)


async def upload(
    client: AsyncClient, *, name: str, content_type: str, data: bytes, encrypt: bool = False
) -> tuple[str, dict[str, Any] | None]:
    """Put ``data`` into the media repository; its ``mxc://`` URI and, when ``encrypt``,
    the keys that decrypt it (an ``EncryptedFile`` object without ``url``)."""
    try:
        response, keys = await client.upload(
            io.BytesIO(data),
            content_type=content_type,
            filename=name,
            filesize=len(data),
            encrypt=encrypt,
        )
    except (ClientError, TimeoutError) as exc:
        raise DeliveryError(f"matrix: upload of {name} failed: {exc}") from exc
    if not isinstance(response, UploadResponse):
        raise DeliveryError(f"matrix: upload of {name} failed: {response}")
    return str(response.content_uri), (dict(keys) if encrypt and keys else None)
