"""``fanbot doctor``: check configuration, Redis, the model endpoint and each platform.

Platform checks use plain HTTP (the core imports no platform SDK). Every check says what
is wrong in one line; secrets are never printed.

Messages the gateway could not deliver within its retry budget wait in the dead-letter
stream; the check names how many, the newest one and its reason, and how to look at them
and to put them back into the outbox (:func:`replay_dead_letters`) once the cause is fixed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import redis

from bot.agent.llm import ChatModel
from bot.config import Settings
from bot.keys import Keys


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str


def _client(settings: Settings) -> redis.Redis:
    """Fail fast: a doctor reports an unreachable Redis instead of retrying for a minute."""
    return redis.Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=10)


def check_redis(settings: Settings) -> list[Check]:
    try:
        client = _client(settings)
        client.ping()
    except (redis.RedisError, OSError) as exc:
        return [
            Check(name="redis", ok=False, detail=f"cannot reach {_safe(settings.redis_url)}: {exc}")
        ]
    checks = [Check(name="redis", ok=True, detail=f"reachable at {_safe(settings.redis_url)}")]
    try:
        conf = {**client.config_get("appendonly"), **client.config_get("maxmemory-policy")}
        aof_ok = conf.get("appendonly") == "yes"
        evict_ok = conf.get("maxmemory-policy") == "noeviction"
        checks.append(Check(name="redis durability", ok=aof_ok and evict_ok,
                            detail=f"appendonly={conf.get('appendonly')} "
                            f"maxmemory-policy={conf.get('maxmemory-policy')}"
                            + ("" if aof_ok and evict_ok else " (want yes / noeviction)")))  # fmt: skip
    except redis.ResponseError:
        checks.append(
            Check(name="redis durability", ok=True, detail="CONFIG not allowed; not checked")
        )
    checks.append(check_dead_letters(client, Keys(prefix=settings.key_prefix)))
    client.close()
    return checks


REPLAY_HINT = "fanbot doctor --replay-dead-letters"


def check_dead_letters(client: redis.Redis, keys: Keys) -> Check:
    """How many messages ran out of delivery attempts; the newest one and why."""
    count = int(client.xlen(keys.dead_letter))
    if not count:
        return Check(name="dead letters", ok=True, detail="none")
    newest: Any = client.xrevrange(keys.dead_letter, count=1)
    entry_id, fields = newest[0]
    fields = {_str(k): _str(v) for k, v in fields.items()}
    detail = (
        f"{count} message(s) ran out of delivery attempts; newest {_age(_str(entry_id))} ago, "
        f"{_describe(fields)}: {fields.get('reason') or '(no reason recorded)'}. "
        f"Inspect: redis-cli XREVRANGE {keys.dead_letter} + - COUNT 10; "
        f"once the cause is fixed: {REPLAY_HINT}"
    )
    return Check(name="dead letters", ok=False, detail=detail)


# XDEL first: a dead letter is put back at most once, even with two operators replaying.
_REPLAY = """
if redis.call('XDEL', KEYS[1], ARGV[1]) == 1 then
  return redis.call('XADD', KEYS[2], '*', 'data', ARGV[2])
end
return false
"""


def replay_dead_letters(client: redis.Redis, keys: Keys) -> tuple[int, int]:
    """Move every dead letter back into the outbox, oldest first; the gateway redelivers.

    Idempotency keys are kept, so a message that did arrive after all is not posted twice.
    Returns ``(replayed, kept)``; entries without a message body are kept for inspection.
    """
    replayed = kept = 0
    entries: Any = client.xrange(keys.dead_letter)
    for entry_id, fields in entries:
        data = fields.get(b"data", fields.get("data"))
        if data is None:
            kept += 1
            continue
        if client.eval(_REPLAY, 2, keys.dead_letter, keys.outbox, entry_id, data):
            replayed += 1
    return replayed, kept


def _describe(fields: Mapping[str, str]) -> str:
    try:
        data = json.loads(fields["data"])
        thread = data["thread"]
        where = f"{thread['platform']} {thread['chat']}" + (
            f"/{thread['thread']}" if thread.get("thread") else ""
        )
        key = data.get("idempotency_key") or f"entry {fields.get('entry_id', '?')}"
        return f"{data.get('kind', 'message')} {key} to {where}"
    except (KeyError, TypeError, ValueError):
        return f"malformed entry {fields.get('entry_id', '?')}"


def _age(entry_id: str) -> str:
    millis = int(entry_id.partition("-")[0] or 0)
    seconds = max(0, int(time.time() - millis / 1000))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_model(settings: Settings) -> Check:
    if not settings.openai.configured:
        return Check(name="model", ok=False,
                     detail="no endpoint (set FANBOT_OPENAI__BASE_URL or OPENAI_API_KEY); "
                     "`fanbot console` falls back to the offline demo model")  # fmt: skip
    model = ChatModel(settings=settings.openai)
    try:
        listed = model.known_models()
    finally:
        model.close()
    if listed is None:
        return Check(
            name="model",
            ok=False,
            detail=f"{settings.openai.base_url or 'api.openai.com'} did not answer /models",
        )
    known = settings.openai.model in listed
    return Check(name="model", ok=known, detail=f"endpoint lists {len(listed)} model(s); "
                 f"{settings.openai.model!r} {'listed' if known else 'NOT listed'}")  # fmt: skip


async def _http(method: str, url: str, **kwargs: object) -> tuple[int, dict[str, object]]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, url, **kwargs) as resp,  # type: ignore[arg-type]
    ):
        try:
            body = await resp.json(content_type=None)
        except ValueError:
            body = {}
        return resp.status, body if isinstance(body, dict) else {}


async def check_slack(settings: Settings) -> Check:
    s = settings.slack
    assert s.bot_token is not None
    url = s.api_url.rstrip("/") + "/auth.test"
    status, body = await _http(
        "POST", url, headers={"Authorization": f"Bearer {s.bot_token.get_secret_value()}"}
    )
    ok = bool(body.get("ok"))
    detail = (
        f"bot {body.get('user')} in team {body.get('team')}"
        if ok
        else f"auth.test failed: HTTP {status} {body.get('error', '')}"
    )
    if ok and s.mode == "socket" and s.app_token is None:
        return Check(name="slack", ok=False, detail="socket mode needs FANBOT_SLACK__APP_TOKEN")
    if ok and s.mode == "http" and s.signing_secret is None:
        return Check(name="slack", ok=False, detail="HTTP mode needs FANBOT_SLACK__SIGNING_SECRET")
    return Check(name="slack", ok=ok, detail=detail)


async def check_telegram(settings: Settings) -> Check:
    s = settings.telegram
    assert s.bot_token is not None
    status, body = await _http("GET", f"{s.api_url}{s.bot_token.get_secret_value()}/getMe")
    result = body.get("result")
    if body.get("ok") and isinstance(result, dict):
        return Check(name="telegram", ok=True, detail=f"bot @{result.get('username')}")
    return Check(
        name="telegram",
        ok=False,
        detail=f"getMe failed: HTTP {status} {body.get('description', '')}",
    )


async def check_matrix(settings: Settings) -> Check:
    s = settings.matrix
    base = (s.homeserver or "").rstrip("/")
    status, _ = await _http("GET", f"{base}/_matrix/client/versions")
    if status != 200:
        return Check(
            name="matrix", ok=False, detail=f"{base} did not answer /versions (HTTP {status})"
        )
    return Check(name="matrix", ok=True, detail=f"homeserver {base} reachable; user {s.user_id}")


PLATFORM_CHECKS: dict[str, Callable[[Settings], Awaitable[Check]]] = {
    "slack": check_slack,
    "telegram": check_telegram,
    "matrix": check_matrix,
}


async def _platforms(settings: Settings) -> list[Check]:
    checks = []
    for name, fn in PLATFORM_CHECKS.items():
        if not getattr(settings, name).configured:
            continue
        try:
            checks.append(await fn(settings))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            checks.append(
                Check(name=name, ok=False, detail=f"unreachable: {type(exc).__name__}: {exc}")
            )
    return checks


def run_checks(settings: Settings) -> list[Check]:
    checks = check_redis(settings)
    checks.append(check_model(settings))
    checks.extend(asyncio.run(_platforms(settings)))
    return checks


def _safe(url: str) -> str:
    """Hide a password in a Redis URL."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def replay(settings: Settings) -> tuple[int, str]:
    """``fanbot doctor --replay-dead-letters``: exit code and what to print."""
    keys = Keys(prefix=settings.key_prefix)
    try:
        client = _client(settings)
        try:
            replayed, kept = replay_dead_letters(client, keys)
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        return 2, f"fanbot doctor: cannot reach Redis at {_safe(settings.redis_url)}: {exc}"
    text = f"replayed {replayed} dead letter(s) into the outbox"
    if kept:
        text += f"; kept {kept} without a message body in {keys.dead_letter}"
    return 0, text
