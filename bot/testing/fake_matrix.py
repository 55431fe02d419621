"""A protocol-level fake Matrix homeserver: the client-server API calls a bot's nio client makes.

Unlike :class:`bot.testing.Synapse`, it serves whatever events a test hands it, sent by
anyone (another server's users, clients fanbot does not have, payloads copied from other
projects' fixtures), in the timelines of the rooms the bot is joined to::

    async with FakeMatrix() as hs:
        hs.add_room("!r:example.org", members=["@alice:example.org"])
        hs.deliver("!r:example.org", [event])   # in the next /sync batch
        ...                                      # the adapter syncs from hs.url
        assert hs.sent_to("!r:example.org") == []

Sync tokens are ``s<N>``: batch ``N`` is what :meth:`deliver` queued ``N``-th; a sync
``since`` the newest token waits (up to its ``timeout``) for a new batch. A sync without
``since`` (a first start) returns the rooms' state and the current token, no timeline, so
events queued before the bot's first start are its history. What the bot sends is kept in
:attr:`FakeMatrix.sent` (typing in :attr:`typing`); every request's method and path in
:attr:`requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.testing.netutil import FakeServer, bind_loopback

CLIENT = "/_matrix/client/v3"
PUBLIC = ("/_matrix/client/versions", f"{CLIENT}/login")
MAX_WAIT_MS = 30_000


@dataclass
class Room:
    """A room the bot is joined to: its members (the bot included) and state."""

    room_id: str
    members: list[str]
    name: str = ""

    def state(self) -> list[dict[str, Any]]:
        creator = self.members[0]
        events: list[dict[str, Any]] = [
            _state(self.room_id, creator, "m.room.create", "", {"room_version": "10"}),
        ]
        if self.name:
            events.append(_state(self.room_id, creator, "m.room.name", "", {"name": self.name}))
        for user in self.members:
            content = {"membership": "join", "displayname": user[1:].split(":")[0]}
            events.append(_state(self.room_id, user, "m.room.member", user, content))
        return events


@dataclass(frozen=True)
class Sent:
    """One event the bot sent: its room, type, content and transaction id."""

    room_id: str
    type: str
    content: dict[str, Any]
    txn_id: str
    event_id: str


@dataclass
class _Batch:
    rooms: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _state(
    room_id: str, sender: str, type_: str, key: str, content: dict[str, Any]
) -> dict[str, Any]:
    digest = hashlib.sha256(f"{room_id}|{type_}|{key}".encode()).hexdigest()[:20]
    return {
        "type": type_,
        "state_key": key,
        "sender": sender,
        "content": content,
        "event_id": f"${digest}",
        "origin_server_ts": 1_700_000_000_000,
        "unsigned": {},
    }


def _error(status: int, errcode: str, error: str) -> web.Response:
    return web.json_response({"errcode": errcode, "error": error}, status=status)


class FakeMatrix(FakeServer):
    """The homeserver of one bot account on a loopback port.

    Args:
        user_id: The bot's Matrix id.
        password: What a password login must present.
        access_token: The token a login returns and every other call must carry.
        device_id: The device a login creates (or the one it asks for).
        display_name: The bot's profile name.
    """

    def __init__(
        self,
        *,
        user_id: str = "@fanbot:example.org",
        password: str = "fanbot-password",
        access_token: str = "fake-matrix-token",
        device_id: str = "FAKEDEVICE",
        display_name: str = "fanbot",
    ) -> None:
        self.user_id = user_id
        self.password = password
        self.access_token = access_token
        self.device_id = device_id
        self.display_name = display_name
        self.rooms: dict[str, Room] = {}
        self.sent: list[Sent] = []
        self.typing: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.syncs: list[str | None] = []
        """The ``since`` of every /sync, in order (None: a first sync)."""
        self._batches: list[_Batch] = []
        self._announced: set[str] = set()
        self._new = asyncio.Event()
        self._ids = itertools.count(1)
        self._closing = False

    # -- what a test does ---------------------------------------------------------------

    def add_room(self, room_id: str, *, members: list[str], name: str = "") -> Room:
        """Join the bot to ``room_id`` with ``members`` (the bot is added if missing)."""
        people = [m for m in members if m != self.user_id]
        room = self.rooms[room_id] = Room(
            room_id=room_id, members=[*people, self.user_id], name=name
        )
        return room

    def deliver(self, room_id: str, events: list[dict[str, Any]]) -> int:
        """Queue ``events`` for ``room_id``'s timeline in a new sync batch; its number."""
        return self.deliver_batch({room_id: events})

    def deliver_batch(self, rooms: dict[str, list[dict[str, Any]]]) -> int:
        """Queue one sync batch with a timeline per room; its number (its token is
        ``s<number+1>``, the one a client holds once it synced it)."""
        unknown = sorted(set(rooms) - set(self.rooms))
        if unknown:
            raise KeyError(f"rooms not added: {unknown}")
        self._batches.append(_Batch(rooms={k: list(v) for k, v in rooms.items()}))
        self._new.set()
        return len(self._batches) - 1

    @property
    def synced_to(self) -> int:
        """How many batches the client has asked past (its newest ``since``)."""
        tokens = [int(s[1:]) for s in self.syncs if s and s[1:].isdigit()]
        return max(tokens, default=0)

    def sent_to(self, room_id: str, type_: str | None = None) -> list[Sent]:
        return [s for s in self.sent if s.room_id == room_id and type_ in (None, s.type)]

    # -- the server -------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        app.add_routes(
            [
                web.get("/_matrix/client/versions", self._versions),
                web.get(f"{CLIENT}/login", self._login_flows),
                web.post(f"{CLIENT}/login", self._login),
                web.get(f"{CLIENT}/account/whoami", self._whoami),
                web.get(f"{CLIENT}/profile/{{user}}/displayname", self._displayname),
                web.get(f"{CLIENT}/profile/{{user}}", self._displayname),
                web.get(f"{CLIENT}/joined_rooms", self._joined_rooms),
                web.get(f"{CLIENT}/sync", self._sync),
                web.post(f"{CLIENT}/user/{{user}}/filter", self._filter),
                web.put(f"{CLIENT}/rooms/{{room}}/send/{{type}}/{{txn}}", self._send),
                web.put(f"{CLIENT}/rooms/{{room}}/typing/{{user}}", self._typing),
                web.post(f"{CLIENT}/rooms/{{room}}/receipt/{{rtype}}/{{event}}", self._empty),
                web.post(f"{CLIENT}/rooms/{{room}}/read_markers", self._empty),
                web.put(f"{CLIENT}/rooms/{{room}}/redact/{{event}}/{{txn}}", self._redact),
                web.get(f"{CLIENT}/rooms/{{room}}/event/{{event}}", self._event),
                web.get(f"{CLIENT}/rooms/{{room}}/state", self._room_state),
                web.get(f"{CLIENT}/rooms/{{room}}/joined_members", self._joined_members),
                web.post(f"{CLIENT}/join/{{room}}", self._join),
                web.post(f"{CLIENT}/rooms/{{room}}/join", self._join),
                web.get("/_matrix/client/v1/media/download/{server}/{media}", self._download),
                web.get(
                    "/_matrix/client/v1/media/download/{server}/{media}/{name}", self._download
                ),
                web.get("/_matrix/media/v3/download/{server}/{media}", self._download),
                web.post("/_matrix/media/v3/upload", self._upload),
            ]
        )
        runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        sock = bind_loopback(port=self._port)
        await web.SockSite(runner, sock).start()
        self._port, self._runner = sock.getsockname()[1], runner
        self._closing = False

    async def stop(self) -> None:
        self._closing = True
        self._new.set()
        await self._close_port()

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if request.path in PUBLIC:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ") if header else request.query.get("access_token")
        if not token:
            return _error(401, "M_MISSING_TOKEN", "Missing access token")
        if token != self.access_token:
            return _error(401, "M_UNKNOWN_TOKEN", "Unknown access token")
        return await handler(request)

    async def _versions(self, _request: web.Request) -> web.Response:
        return web.json_response({"versions": ["v1.1", "v1.5", "v1.11"], "unstable_features": {}})

    async def _login_flows(self, _request: web.Request) -> web.Response:
        return web.json_response({"flows": [{"type": "m.login.password"}]})

    async def _login(self, request: web.Request) -> web.Response:
        body = await request.json()
        ident = body.get("identifier") or {}
        user = ident.get("user") or body.get("user")
        if body.get("password") != self.password or user not in (
            self.user_id,
            self.user_id[1:].split(":")[0],
        ):
            return _error(403, "M_FORBIDDEN", "Invalid username or password")
        device = body.get("device_id") or self.device_id
        return web.json_response(
            {"user_id": self.user_id, "access_token": self.access_token, "device_id": device}
        )

    async def _whoami(self, _request: web.Request) -> web.Response:
        return web.json_response({"user_id": self.user_id, "device_id": self.device_id})

    async def _displayname(self, request: web.Request) -> web.Response:
        if request.match_info["user"] != self.user_id:
            return web.json_response({})
        return web.json_response({"displayname": self.display_name})

    async def _joined_rooms(self, _request: web.Request) -> web.Response:
        return web.json_response({"joined_rooms": sorted(self.rooms)})

    async def _filter(self, _request: web.Request) -> web.Response:
        return web.json_response({"filter_id": "0"})

    def _room_json(
        self, room: Room, events: list[dict[str, Any]], *, state: bool
    ) -> dict[str, Any]:
        joined = len(room.members)
        return {
            "summary": {
                "m.joined_member_count": joined,
                "m.invited_member_count": 0,
                "m.heroes": [m for m in room.members if m != self.user_id][:5],
            },
            "state": {"events": room.state() if state else []},
            "timeline": {"events": events, "limited": False, "prev_batch": "p0"},
            "ephemeral": {"events": []},
            "account_data": {"events": []},
            "unread_notifications": {"highlight_count": 0, "notification_count": 0},
        }

    async def _sync(self, request: web.Request) -> web.Response:
        since = request.query.get("since")
        self.syncs.append(since)
        full_state = request.query.get("full_state") == "true"
        if since is None:
            rooms = {r.room_id: self._room_json(r, [], state=True) for r in self.rooms.values()}
            self._announced.update(rooms)
            return self._sync_response(rooms, len(self._batches))
        position = int(since[1:]) if since[1:].isdigit() else 0
        if position >= len(self._batches):
            wait_ms = min(int(request.query.get("timeout") or 0), MAX_WAIT_MS)
            self._new.clear()
            if wait_ms and not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._new.wait(), wait_ms / 1000)
        if position >= len(self._batches):
            rooms = {}
            for room in self.rooms.values():
                if full_state or room.room_id not in self._announced:
                    rooms[room.room_id] = self._room_json(room, [], state=True)
            self._announced.update(rooms)
            return self._sync_response(rooms, position)
        batch = self._batches[position]
        rooms = {}
        for room_id, events in batch.rooms.items():
            room = self.rooms[room_id]
            state = full_state or room_id not in self._announced
            rooms[room_id] = self._room_json(room, events, state=state)
        self._announced.update(rooms)
        return self._sync_response(rooms, position + 1)

    def _sync_response(self, joined: dict[str, Any], token: int) -> web.Response:
        return web.json_response(
            {
                "next_batch": f"s{token}",
                "rooms": {"join": joined, "invite": {}, "leave": {}},
                "presence": {"events": []},
                "account_data": {"events": []},
                "to_device": {"events": []},
                "device_lists": {"changed": [], "left": []},
                "device_one_time_keys_count": {},
            }
        )

    def _event_id(self, txn: str) -> str:
        return "$fake-" + hashlib.sha256(txn.encode()).hexdigest()[:24]

    async def _send(self, request: web.Request) -> web.Response:
        room_id, txn = request.match_info["room"], request.match_info["txn"]
        if room_id not in self.rooms:
            return _error(403, "M_FORBIDDEN", "You are not in this room")
        event_id = self._event_id(f"{room_id}|{txn}")
        if not any(s.event_id == event_id for s in self.sent):
            content = await request.json()
            self.sent.append(Sent(room_id, request.match_info["type"], content, txn, event_id))
        return web.json_response({"event_id": event_id})

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(request.match_info["room"])
        return web.json_response({})

    async def _empty(self, _request: web.Request) -> web.Response:
        return web.json_response({})

    async def _redact(self, request: web.Request) -> web.Response:
        txn = f"redact|{request.match_info['room']}|{request.match_info['txn']}"
        return web.json_response({"event_id": self._event_id(txn)})

    async def _event(self, request: web.Request) -> web.Response:
        room_id, event_id = request.match_info["room"], request.match_info["event"]
        for s in self.sent:
            if s.room_id == room_id and s.event_id == event_id:
                event = {
                    "type": s.type,
                    "content": s.content,
                    "sender": self.user_id,
                    "event_id": s.event_id,
                    "room_id": room_id,
                    "origin_server_ts": 1_700_000_000_000,
                }
                return web.json_response(event)
        return _error(404, "M_NOT_FOUND", "Event not found")

    async def _room_state(self, request: web.Request) -> web.Response:
        room = self.rooms.get(request.match_info["room"])
        if room is None:
            return _error(403, "M_FORBIDDEN", "You are not in this room")
        return web.json_response(room.state())

    async def _joined_members(self, request: web.Request) -> web.Response:
        room = self.rooms.get(request.match_info["room"])
        if room is None:
            return _error(403, "M_FORBIDDEN", "You are not in this room")
        return web.json_response({"joined": {m: {"display_name": m} for m in room.members}})

    async def _join(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]
        if room_id not in self.rooms:
            return _error(404, "M_NOT_FOUND", "No such room")
        return web.json_response({"room_id": room_id})

    async def _download(self, request: web.Request) -> web.Response:
        media = request.match_info["media"]
        body = f"fake media {media}\n".encode()
        return web.Response(body=body, content_type="application/octet-stream")

    async def _upload(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"content_uri": f"mxc://fake/{next(self._ids)}"})
