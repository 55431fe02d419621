"""``fanbot doctor``: check configuration, Redis, the model endpoint and each platform.

Platform checks use plain HTTP (the core imports no platform SDK). Every check says what
is wrong in one line; secrets are never printed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import redis

from bot.agent.llm import ChatModel
from bot.config import Settings
from bot.deps import connect
from bot.keys import Keys


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str


def check_redis(settings: Settings) -> list[Check]:
    try:
        client = connect(settings.redis_url)
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
    dead = client.xlen(Keys(prefix=settings.key_prefix).dead_letter) if client.exists(
        Keys(prefix=settings.key_prefix).dead_letter) else 0  # fmt: skip
    checks.append(Check(name="dead letters", ok=dead == 0,
                        detail=f"{dead} undeliverable message(s) in the dead-letter stream"))  # fmt: skip
    client.close()
    return checks


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
