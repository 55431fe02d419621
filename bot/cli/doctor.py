"""``fanbot doctor``: check configuration, Redis, the workers, the model endpoint and each
platform.

Platform checks use plain HTTP (the core imports no platform SDK). Every check says what
is wrong in one line; secrets are never printed.

Messages the gateway could not deliver within its retry budget wait in the dead-letter
stream; the check names how many, the newest one and its reason, and how to look at them
and to put them back into the outbox (:func:`replay`) once the cause is fixed.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import redis

from bot.agent import policy, skills
from bot.agent.session_tools import SESSION_TOOLS_LIST
from bot.agent.subagent_types import available_tools, subagent_types, tools_for_type
from bot.agent.tools.mcp import McpPool
from bot.agent.tools.sandbox import sandbox_status
from bot.agent.tools.sandbox_skills import skill_mounts
from bot.cli.check import Check
from bot.cli.model_probe import probe_all
from bot.config import Settings, config_path, env_warnings
from bot.config_check import public_url
from bot.deps import Deps
from bot.keys import Keys
from bot.redis.connect import connect
from bot.store.dead_letters import DeadLetters
from bot.store.jobs import SUBAGENTS_QUEUE, TURNS_QUEUE, WorkerInfo
from bot.text.units import duration


def _deps(settings: Settings) -> Deps:
    """Fail fast: a doctor reports an unreachable Redis instead of retrying for a minute."""
    return Deps.build(settings, client=connect(settings.redis_url, socket_timeout=10, retries=0))


def check_redis(settings: Settings) -> list[Check]:
    try:
        deps = _deps(settings)
        deps.connection.ping()
    except (redis.RedisError, OSError) as exc:
        return [
            Check(
                name="redis",
                ok=False,
                detail=f"cannot reach {public_url(settings.redis_url)}: {exc}",
            )
        ]
    checks = [Check(name="redis", ok=True, detail=f"reachable at {public_url(settings.redis_url)}")]
    try:
        conf = deps.connection.config("appendonly", "maxmemory-policy")
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
    checks.append(check_dead_letters(deps.dead_letters))
    checks.append(check_workers(deps.jobs.workers()))
    deps.close()
    return checks


REPLAY_HINT = "fanbot doctor --replay-dead-letters"


FED_QUEUES = (TURNS_QUEUE, SUBAGENTS_QUEUE)
"""The RQ queues the gateway (turns) and spawns (subagents) feed."""


def check_workers(workers: list[WorkerInfo]) -> Check:
    """Whether a registered RQ worker listens on each queue the gateway feeds; without one,
    messages wait unanswered and nothing says why."""
    idle = [q for q in FED_QUEUES if not any(q in w.queues for w in workers)]
    if idle:
        detail = (f"no worker listens on {', '.join(idle)}: start `fanbot worker` "
                  "(messages wait unanswered until one does)")  # fmt: skip
        return Check(name="workers", ok=True, warn=True, detail=detail)
    serving = [w for w in workers if set(FED_QUEUES) & set(w.queues)]
    hosts = sorted({w.host.rpartition(":")[0] for w in serving})
    detail = f"{len(serving)} worker(s) on {', '.join(FED_QUEUES)} (hosts {', '.join(hosts)})"
    return Check(name="workers", ok=True, detail=detail)


def check_env() -> Check | None:
    """A warning naming each ``FANBOT_*`` variable that sets nothing (a typo, as a rule)."""
    unknown = env_warnings()
    if not unknown:
        return None
    return Check(name="environment", ok=True, warn=True, detail="; ".join(unknown))


def check_dead_letters(letters: DeadLetters) -> Check:
    """How many messages ran out of delivery attempts; the newest one and why."""
    count = letters.count()
    newest = letters.newest()
    if not count or newest is None:
        return Check(name="dead letters", ok=True, detail="none")
    fields = newest.fields
    detail = (
        f"{count} message(s) ran out of delivery attempts; newest {_age(newest.entry_id)} ago, "
        f"{_describe(fields)}: {fields.get('reason') or '(no reason recorded)'}. "
        f"Inspect: redis-cli XREVRANGE {letters.key} + - COUNT 10; "
        f"once the cause is fixed: {REPLAY_HINT}"
    )
    return Check(name="dead letters", ok=False, detail=detail)


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
    return duration(time.time() - millis / 1000, style="coarse")


def check_config() -> Check:
    """Which file the settings came from (they are valid: the doctor got this far)."""
    path = config_path()
    if path is not None and path.is_file():
        return Check(name="config", ok=True, detail=f"read {path.resolve()}")
    if path is None:
        where = "no file (FANBOT_CONFIG is empty)"
    else:
        where = f"no {path}" if not path.exists() else f"no file ({path})"
    return Check(name="config", ok=True, detail=f"{where}; environment and defaults only")


def check_models(settings: Settings) -> list[Check]:
    """Each model endpoint's lines (:mod:`bot.cli.model_probe`)."""
    return probe_all(settings)


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


_SLACK_AUTH_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked"})


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
    if status == 200 and body.get("error") in _SLACK_AUTH_ERRORS:
        detail = f"Slack refused FANBOT_SLACK__BOT_TOKEN (auth.test: {body.get('error')})"
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
    if not (body.get("ok") and isinstance(result, dict)):
        if status == 401:
            detail = "Telegram refused FANBOT_TELEGRAM__BOT_TOKEN (getMe: HTTP 401)"
        else:
            detail = f"getMe failed: HTTP {status} {body.get('description', '')}".strip()
        return Check(name="telegram", ok=False, detail=detail)
    detail = f"bot @{result.get('username')}"
    privacy = telegram_privacy_problem(settings, result)
    if privacy:
        return Check(name="telegram", ok=True, warn=True, detail=f"{detail}; {privacy}")
    return Check(name="telegram", ok=True, detail=detail)


def telegram_privacy_problem(settings: Settings, me: Mapping[str, Any]) -> str | None:
    """Why privacy mode (getMe's ``can_read_all_group_messages`` false) defeats the settings:
    in groups such a bot sees only commands, mentions and replies to it."""
    if me.get("can_read_all_group_messages", True):
        return None
    wanted = []
    if not settings.gateway.require_mention:
        wanted.append("FANBOT_GATEWAY__REQUIRE_MENTION is off")
    if settings.telegram.continue_threads:
        wanted.append("FANBOT_TELEGRAM__CONTINUE_THREADS is on")
    if not wanted:
        return None
    return (
        f"privacy mode is on (getMe can_read_all_group_messages=false), so in groups and "
        f"topics the bot sees only commands, mentions and replies, but {' and '.join(wanted)}; "
        "turn privacy off with @BotFather /setprivacy, then remove and re-add the bot"
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


def check_matrix_invites(settings: Settings) -> Check | None:
    """A warning when the Matrix bot accepts no invite at all (it then joins no new room)."""
    s = settings.matrix
    if s.join_any_invite or s.allow_users:
        return None
    return Check(
        name="matrix invites",
        ok=True,
        warn=True,
        detail="the bot accepts no invite: FANBOT_MATRIX__ALLOW_USERS is empty and "
        "FANBOT_MATRIX__JOIN_ANY_INVITE is off; set either (rooms it already joined still work)",
    )


def check_platforms_configured(settings: Settings) -> Check | None:
    """A warning when no platform is configured: the gateway has nothing to serve."""
    if any(getattr(settings, name).configured for name in PLATFORMS):
        return None
    return Check(
        name="platforms",
        ok=True,
        warn=True,
        detail="none configured (set e.g. FANBOT_SLACK__BOT_TOKEN and FANBOT_SLACK__APP_TOKEN, "
        "or FANBOT_TELEGRAM__BOT_TOKEN); `fanbot gateway` needs one, `fanbot console` none",
    )


PLATFORM_CHECKS: dict[str, Callable[[Settings], Awaitable[Check]]] = {
    "slack": check_slack,
    "telegram": check_telegram,
    "matrix": check_matrix,
}


PLATFORMS = tuple(PLATFORM_CHECKS)


async def _platforms(settings: Settings) -> list[Check]:
    checks = []
    for name, fn in PLATFORM_CHECKS.items():
        if not getattr(settings, name).configured:
            continue
        try:
            checks.append(await fn(settings))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            url = platform_url(settings, name)
            detail = f"cannot reach {url} ({type(exc).__name__})"
            checks.append(Check(name=name, ok=False, detail=detail))
    return checks


def platform_url(settings: Settings, platform: str) -> str:
    """The base URL fanbot talks to for ``platform`` (no token in it)."""
    section = getattr(settings, platform)
    url = getattr(section, "api_url", None) or getattr(section, "homeserver", None) or ""
    return public_url(str(url))


def check_tools(settings: Settings) -> list[Check]:
    """The effective tool list of each agent's main turns and of each subagent type (MCP
    servers are asked for their tools once, and their connections closed after)."""
    mcp = McpPool()
    try:
        return _tool_checks(settings, mcp)
    finally:
        mcp.close()


def _tool_checks(settings: Settings, mcp: McpPool) -> list[Check]:
    available = available_tools(settings, mcp=mcp)
    pool = [*SESSION_TOOLS_LIST, *available]
    checks = []
    for agent_id in sorted({settings.agent_id, *settings.agents}):
        names = [t.name for t in policy.main_agent_tools(settings, agent_id, pool)]
        spawns = "sessions_spawn" in names
        detail = ", ".join(names) or "(none)"
        if not spawns:
            detail += " (no sessions_spawn: this agent cannot fan out)"
        checks.append(Check(name=f"tools {agent_id}", ok=True, warn=not spawns, detail=detail))
    for name, sub_type in subagent_types(settings).items():
        names = [t.name for t in tools_for_type(sub_type, settings, available)]
        checks.append(
            Check(name=f"tools type {name}", ok=True, detail=", ".join(names) or "(none)")
        )
    return checks


def check_skills(settings: Settings) -> list[Check]:
    """The skills each agent's main turns and each subagent type see (docs/skills.md), as
    start-up loads them; or the one line naming the file of a skill that cannot load."""
    try:
        seen = skills.check_skills(settings)
    except skills.SkillError as exc:
        return [Check(name="skills", ok=False, detail=str(exc))]
    checks = [
        Check(name=f"skills {who.removeprefix('agent ')}", ok=True,
              detail=", ".join(s.name for s in found) or "(none)")
        for who, found in seen.items()
    ]  # fmt: skip
    unmountable = _unmountable(settings, [s for found in seen.values() for s in found])
    return checks + ([unmountable] if unmountable else [])


def _unmountable(settings: Settings, seen: list[skills.Skill]) -> Check | None:
    """A warning for skills ``execute`` would leave out: a root worker starts the sandbox
    as ``sandbox.uid``, which needs a way through to each folder (the doctor runs as the
    worker does, as a rule)."""
    if os.geteuid() != 0 or settings.sandbox.mode != "bwrap":
        return None
    unique = {s.name: s for s in seen}.values()
    left_out = skill_mounts(unique, uid=settings.sandbox.uid).left_out
    if not left_out:
        return None
    detail = (f"execute would not mount {'; '.join(left_out)}: make the skill directories "
              "readable by others (chmod -R o+rX), or run the worker as a user")  # fmt: skip
    return Check(name="skills in the sandbox", ok=True, warn=True, detail=detail)


def check_sandbox(settings: Settings) -> Check:
    """Whether ``execute`` is offered, and why not (a warning when bwrap was wanted)."""
    status = sandbox_status(settings.sandbox)
    offered = "execute offered" if status.available else "execute not offered"
    wanted = settings.sandbox.mode != "off"
    warn = status.unsafe or (wanted and not status.available)
    return Check(name="sandbox", ok=True, warn=warn, detail=f"{offered}: {status.detail}")


def check_search(settings: Settings) -> Check:
    """Whether ``web_search`` is offered (a missing provider is the common surprise)."""
    search = settings.search
    if not search.configured:
        detail = "web_search not offered: set FANBOT_SEARCH__PROVIDER (searxng, brave, tavily)"
        return Check(name="search", ok=True, warn=True, detail=detail)
    where = public_url(search.url) if search.url else "its public API"
    return Check(name="search", ok=True, detail=f"web_search offered: {search.provider} at {where}")


def run_checks(settings: Settings) -> list[Check]:
    """Every check, in report order."""
    env = check_env()
    checks = [check_config(), *([env] if env else []), *check_redis(settings)]
    checks.extend(check_models(settings))
    checks.extend(check_tools(settings))
    checks.extend(check_skills(settings))
    checks.extend([check_sandbox(settings), check_search(settings)])
    warnings = [check_platforms_configured(settings)]
    if settings.matrix.configured:
        warnings.append(check_matrix_invites(settings))
    checks.extend(asyncio.run(_platforms(settings)))
    checks.extend(w for w in warnings if w is not None)
    return checks


def replay(settings: Settings) -> tuple[int, str]:
    """``fanbot doctor --replay-dead-letters``: exit code and what to print."""
    keys = Keys(prefix=settings.key_prefix)
    try:
        deps = _deps(settings)
        try:
            replayed, kept = deps.dead_letters.replay()
        finally:
            deps.close()
    except (redis.RedisError, OSError) as exc:
        return 2, f"fanbot doctor: cannot reach Redis at {public_url(settings.redis_url)}: {exc}"
    text = f"replayed {replayed} dead letter(s) into the outbox"
    if kept:
        text += f"; kept {kept} without a message body in {keys.dead_letter}"
    return 0, text
