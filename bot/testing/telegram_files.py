"""The files half of the fake Bot API: ``getFile``, file downloads, ``sendDocument``.

:meth:`TelegramFiles.document` and :meth:`TelegramFiles.photo` keep bytes and return the
``document`` / ``photo`` field of a message; ``getFile`` answers with a ``file_path`` that
the fake serves at ``<base_file_url><token>/<file_path>`` (as Telegram does, refusing
files past 20 MB). ``sendDocument`` takes the multipart upload and records it in
:attr:`TelegramFiles.documents`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

GET_FILE_MAX = 20_000_000  # the Bot API's limit for downloads


class FileApiError(Exception):
    """A Bot API error answer (status and description)."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status, self.description = status, description


@dataclass(kw_only=True)
class SentDocument:
    """A file the bot sent with ``sendDocument``."""

    message_id: int
    chat_id: int
    message_thread_id: int | None
    filename: str
    data: bytes = field(repr=False)
    caption: str = ""


class TelegramFiles:
    """File state of one fake bot.

    Args:
        token: The bot token the download URL must carry.
    """

    def __init__(self, *, token: str) -> None:
        self.token = token
        self.hosted: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, data)
        self.downloads: list[tuple[str, int]] = []
        self.documents: list[SentDocument] = []
        self._ids = itertools.count(1)

    def route(self) -> web.RouteDef:
        return web.get("/file/bot{token}/{path:.+}", self._download)

    def _keep(self, data: bytes, folder: str, ext: str) -> tuple[str, str]:
        n = next(self._ids)
        file_id = f"FILE{n:06d}"
        self.hosted[file_id] = (f"{folder}/file_{n}{ext}", data)
        return file_id, f"U{n:06d}"

    def document(
        self, name: str, data: bytes, *, mime_type: str = "text/plain", size: int | None = None
    ) -> dict[str, Any]:
        """The ``document`` field of a message carrying ``data`` as ``name``."""
        ext = "." + name.rpartition(".")[2] if "." in name else ""
        file_id, unique = self._keep(data, "documents", ext)
        return {
            "file_id": file_id, "file_unique_id": unique, "file_name": name,
            "mime_type": mime_type, "file_size": len(data) if size is None else size,
        }  # fmt: skip

    def photo(self, data: bytes) -> list[dict[str, Any]]:
        """The ``photo`` field: a thumbnail and the full size (the last, largest one)."""
        thumb_id, thumb_unique = self._keep(data[:10], "photos", ".jpg")
        full_id, full_unique = self._keep(data, "photos", ".jpg")
        return [
            {"file_id": thumb_id, "file_unique_id": thumb_unique, "width": 90, "height": 90,
             "file_size": min(len(data), 10)},
            {"file_id": full_id, "file_unique_id": full_unique, "width": 1280, "height": 960,
             "file_size": len(data)},
        ]  # fmt: skip

    def get_file(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = str(params.get("file_id", ""))
        if file_id not in self.hosted:
            raise FileApiError(400, "Bad Request: invalid file_id")
        path, data = self.hosted[file_id]
        if len(data) > GET_FILE_MAX:
            raise FileApiError(400, "Bad Request: file is too big")
        return {
            "file_id": file_id, "file_unique_id": "U" + file_id, "file_size": len(data),
            "file_path": path,
        }  # fmt: skip

    def send_document(
        self, params: dict[str, Any], *, message_id: int, chat_id: int, thread_id: int | None
    ) -> SentDocument:
        upload = params.get("document")
        if not isinstance(upload, web.FileField):
            raise FileApiError(400, "Bad Request: there is no document in the request")
        sent = SentDocument(
            message_id=message_id, chat_id=chat_id, message_thread_id=thread_id,
            filename=upload.filename, data=upload.file.read(),
            caption=str(params.get("caption") or ""),
        )  # fmt: skip
        self.documents.append(sent)
        return sent

    async def _download(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        if request.match_info["token"] != self.token:
            self.downloads.append((path, 401))
            raise web.HTTPUnauthorized()
        found = next((d for p, d in self.hosted.values() if p == path), None)
        if found is None:
            self.downloads.append((path, 404))
            raise web.HTTPNotFound()
        self.downloads.append((path, 200))
        return web.Response(body=found, content_type="application/octet-stream")
