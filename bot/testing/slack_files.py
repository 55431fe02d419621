"""The files half of the fake Slack: private file downloads and the external-upload flow.

Downloads: :meth:`SlackFiles.host` keeps bytes and returns the ``files`` entry of a message
event, whose ``url_private_download`` this fake serves only with the bot token as a Bearer
header (as Slack does). Uploads: ``files.getUploadURLExternal`` hands out an upload URL on
this server, the client POSTs the bytes there, and ``files.completeUploadExternal`` shares
the file into ``channel_id`` / ``thread_ts``; :attr:`SlackFiles.uploads` records each.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(kw_only=True)
class Uploaded:
    """A file the app shared (``channel`` and ``thread_ts`` as completeUploadExternal got)."""

    file_id: str
    filename: str
    data: bytes = field(repr=False)
    title: str = ""
    channel: str | None = None
    thread_ts: str | None = None


class SlackFiles:
    """File state and routes of one fake workspace.

    Args:
        bot_token: The Bearer token downloads must carry.
        base_url: The fake's ``http://host:port`` (known once it listens).
    """

    def __init__(self, *, bot_token: str, base_url: Callable[[], str]) -> None:
        self.bot_token, self.base_url = bot_token, base_url
        self.hosted: dict[str, tuple[str, bytes]] = {}
        self.downloads: list[tuple[str, int]] = []
        self.uploads: list[Uploaded] = []
        self._pending: dict[str, Uploaded] = {}
        self._ids = itertools.count(1)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/files-pri/{file_id}/{name}", self._download),
            web.post("/upload/v1/{file_id}", self._upload),
        ]

    def methods(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        return {
            "files.getUploadURLExternal": self._get_upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }

    def host(
        self, name: str, data: bytes, *, mimetype: str = "text/plain", size: int | None = None
    ) -> dict[str, Any]:
        """Keep ``data`` and return the ``files`` entry a message event carries for it.

        ``size`` overrides the announced size (a file Slack says is bigger than it is).
        """
        file_id = f"F{next(self._ids):08d}"
        self.hosted[file_id] = (name, data)
        url = f"{self.base_url()}/files-pri/{file_id}/{name}"
        return {
            "id": file_id, "name": name, "title": name, "mimetype": mimetype,
            "filetype": name.rpartition(".")[2], "size": len(data) if size is None else size,
            "mode": "hosted", "url_private": url, "url_private_download": url + "?download=1",
        }  # fmt: skip

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file_id"]
        auth = request.headers.get("Authorization", "")
        if auth != f"Bearer {self.bot_token}":
            self.downloads.append((file_id, 302))
            # Slack answers an unauthenticated download with its login page, not the file.
            raise web.HTTPFound("/signin")
        if file_id not in self.hosted:
            self.downloads.append((file_id, 404))
            raise web.HTTPNotFound()
        self.downloads.append((file_id, 200))
        return web.Response(body=self.hosted[file_id][1], content_type="application/octet-stream")

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        pending = self._pending.get(request.match_info["file_id"])
        if pending is None:
            return web.Response(status=404, text="unknown upload")
        pending.data = await request.read()
        return web.Response(text=f"OK - {len(pending.data)}")

    def _get_upload_url(self, args: dict[str, Any]) -> dict[str, Any]:
        filename, length = args.get("filename"), args.get("length")
        if not filename or length is None:
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._ids):08d}"
        self._pending[file_id] = Uploaded(file_id=file_id, filename=str(filename), data=b"")
        url = f"{self.base_url()}/upload/v1/{file_id}"
        return {"ok": True, "upload_url": url, "file_id": file_id}

    def _complete_upload(self, args: dict[str, Any]) -> dict[str, Any]:
        files = args.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        done = []
        for item in files:
            pending = self._pending.pop(str(item.get("id")), None)
            if pending is None:
                return {"ok": False, "error": "file_not_found"}
            pending.title = str(item.get("title") or pending.filename)
            pending.channel = args.get("channel_id")
            pending.thread_ts = args.get("thread_ts") or None
            self.uploads.append(pending)
            done.append({"id": pending.file_id, "name": pending.filename, "title": pending.title})
        return {"ok": True, "files": done}
