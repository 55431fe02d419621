"""Checks a command makes before it starts serving, so a mistake is one clear line.

``fanbot gateway``, ``fanbot worker`` and ``fanbot console --external-redis`` ping Redis
first: without it they could only fail later with a traceback (or, for workers, restart
forever). Every serving command (and the worker launcher, :mod:`workers.launcher`) also
loads every skill the agents and subagent types see (:func:`require_skills`): a malformed
``SKILL.md``, a duplicate name or an oversized skill is one line naming the file.
"""

from __future__ import annotations

import redis

from bot.agent.skills import check_skills
from bot.config import Settings
from bot.config_check import public_url
from bot.errors import RedisUnavailable
from bot.redis.connect import Connection, connect


def require_redis(url: str, *, timeout: float = 5.0) -> None:
    """Return once Redis at ``url`` answers PING.

    Raises:
        RedisUnavailable: It does not, within ``timeout`` seconds; the message names the URL
            (without its password) and the setting.
    """
    try:
        client = connect(url, socket_timeout=timeout, connect_timeout=timeout, retries=0)
        connection = Connection(redis=client)
    except ValueError as exc:  # a URL redis-py cannot parse
        raise RedisUnavailable(f"FANBOT_REDIS_URL {public_url(url)!r}: {exc}") from None
    try:
        connection.ping()
    except (redis.RedisError, OSError) as exc:
        raise RedisUnavailable(redis_unreachable(url, exc)) from None
    finally:
        connection.close()


def require_skills(settings: Settings) -> None:
    """Return once every skill each agent and subagent type sees loads (docs/skills.md).

    Raises:
        SkillError: One does not (a :class:`~bot.errors.ConfigError`: one line naming the
            file).
    """
    check_skills(settings)


def redis_unreachable(url: str, exc: BaseException) -> str:
    """``cannot reach Redis at <url> (FANBOT_REDIS_URL): <why>``, on one line."""
    why = " ".join(str(exc).split()) or type(exc).__name__
    return f"cannot reach Redis at {public_url(url)} (FANBOT_REDIS_URL): {why}"
