"""Fleet-wide model limits: the one owner of the ``model_limit:*`` keys (docs/architecture.md,
"Fleet-wide model limits").

Every process that calls a model endpoint asks :meth:`ModelLimits.acquire` before each HTTP
attempt. One endpoint (its base URL, see :func:`endpoint_id`) has three keys, shared by every
worker on every host:

- ``model_limit:{id}:requests``: a sliding-window log (a sorted set: one member per request
  granted, scored by Redis's own clock in ms), so at most ``max_requests`` are granted in any
  window;
- ``model_limit:{id}:tokens``: each granted request's tokens (its estimate until
  :meth:`ModelLimits.settle` swaps in the real use) and their ``_sum``;
- ``model_limit:{id}:paused``: when a 429 said to come back (ms on Redis's clock): nobody is
  granted anything before it (:meth:`ModelLimits.pause`).

Both scripts read ``TIME`` in Redis, so hosts whose clocks differ still share one window. A
grant counts for the window plus a margin (:func:`margin_ms`): the request reaches the
endpoint a moment after it was granted, and the endpoint's clock is not ours. The window is
a minute; ``openai.limit_window_seconds`` shortens it (the limits scaled to it) for
benchmarks and tests.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from bot.store.owner import Lua, RedisOwner

WINDOW_MS = 60_000
"""The limits are per minute."""
MARGIN_MS = 1_000
"""A grant counts up to this much longer than the window (the trip to the endpoint, clocks
apart)."""


def margin_ms(window_ms: int) -> int:
    """The margin of a window: :data:`MARGIN_MS`, at most a tenth of a short window."""
    return min(MARGIN_MS, window_ms // 10)


_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local paused = tonumber(redis.call('GET', KEYS[3]) or '0')
if paused > now then return {0, paused - now, 'paused'} end
local window, max_req, max_tok = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local want = tonumber(ARGV[5])
if max_req <= 0 and max_tok <= 0 then return {1, 0, 'free'} end
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #old > 0 then
  local freed = 0
  for _, id in ipairs(old) do
    freed = freed + tonumber(redis.call('HGET', KEYS[2], id) or '0')
    redis.call('HDEL', KEYS[2], id)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  redis.call('HINCRBY', KEYS[2], '_sum', -freed)
end
local count = redis.call('ZCARD', KEYS[1])
if max_req > 0 and count >= max_req then
  local first = redis.call('ZRANGE', KEYS[1], count - max_req, count - max_req, 'WITHSCORES')
  return {0, math.max(1, tonumber(first[2]) + window - now), 'requests'}
end
local used = tonumber(redis.call('HGET', KEYS[2], '_sum') or '0')
if max_tok > 0 and count > 0 and used + want > max_tok then
  local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  local left = used
  for i = 1, #entries, 2 do
    left = left - tonumber(redis.call('HGET', KEYS[2], entries[i]) or '0')
    if left + want <= max_tok then
      return {0, math.max(1, tonumber(entries[i + 1]) + window - now), 'tokens'}
    end
  end
  return {0, math.max(1, tonumber(entries[#entries]) + window - now), 'tokens'}
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('HSET', KEYS[2], ARGV[4], want)
redis.call('HINCRBY', KEYS[2], '_sum', want)
redis.call('PEXPIRE', KEYS[1], window * 2)
redis.call('PEXPIRE', KEYS[2], window * 2)
return {1, 0, ''}
"""
"""KEYS: requests log, tokens hash, paused key. ARGV: window ms (margin included), max
requests, max tokens (0: no limit), grant id, tokens wanted. Returns ``{1, 0, ''}`` (granted),
``{1, 0, 'free'}`` (no limit: nothing logged, nothing to settle) or ``{0, wait_ms, why}`` (``paused``, ``requests`` or ``tokens``). A request alone in the
window is granted whatever its tokens, so one call larger than the limit still goes."""

_SETTLE = """
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[1], '_sum', tonumber(ARGV[2]) - tonumber(held))
return 1
"""
"""KEYS: tokens hash. ARGV: grant id, tokens used. A grant already out of the window is left."""

_PAUSE = """
local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local was = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > was then redis.call('SET', KEYS[1], until_ms, 'PX', tonumber(ARGV[1]) + 1000) end
return math.max(until_ms, was)
"""
"""KEYS: paused key. ARGV: ms to pause. Never shortens a longer pause already set."""


def _scaled(per_minute: int | None, window_ms: int) -> int:
    """A per-minute limit over ``window_ms`` (0: none; never below 1 when there is one)."""
    if not per_minute:
        return 0
    return max(1, per_minute * window_ms // WINDOW_MS)


def endpoint_id(base_url: str) -> str:
    """The limiter's name for an endpoint: a digest of its base URL (a key never holds the
    URL, which may carry a password). Keyed by endpoint, not by model: one limit per
    endpoint is what the settings say, and a 429 pauses the whole endpoint."""
    return hashlib.sha256(base_url.rstrip("/").encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class Grant:
    """The answer of one :meth:`ModelLimits.acquire`.

    Attributes:
        granted: The request may go now.
        wait: Seconds to wait before asking again (0 when granted).
        why: ``paused`` (a 429 said so), ``requests`` or ``tokens`` (the window is full).
        grant_id: Settle the tokens under this id.
    """

    granted: bool
    wait: float = 0.0
    why: str = ""
    grant_id: str = ""


class ModelLimits(RedisOwner):
    """Requests and tokens per minute per model endpoint, shared by every process."""

    _acquire = Lua(_ACQUIRE)
    _settle = Lua(_SETTLE)
    _pause = Lua(_PAUSE)

    def _key(self, endpoint: str, part: str) -> str:
        return self.keys.model_limit(endpoint, part)

    def acquire(
        self,
        endpoint: str,
        *,
        max_requests: int | None,
        max_tokens: int | None,
        tokens: int,
        window_seconds: float = 60.0,
    ) -> Grant:
        """Try once to take a request of ``tokens`` (an estimate) in ``endpoint``'s window
        (``max_*``: per minute, None or 0: no such limit; a pause holds either way).
        A ``window_seconds`` under a minute scales the limits to it."""
        grant_id = uuid.uuid4().hex
        keys = [self._key(endpoint, p) for p in ("requests", "tokens", "paused")]
        window = round(window_seconds * 1000)
        args = [
            window + margin_ms(window),
            _scaled(max_requests, window),
            _scaled(max_tokens, window),
            grant_id,
            tokens,
        ]
        ok, wait_ms, why = self._acquire(keys=keys, args=args)
        reason = why.decode() if isinstance(why, bytes) else str(why)
        if int(ok):  # with no limit nothing was logged: no grant to settle
            return Grant(granted=True, grant_id="" if reason == "free" else grant_id)
        return Grant(granted=False, wait=int(wait_ms) / 1000, why=reason)

    def settle(self, endpoint: str, grant_id: str, *, tokens: int) -> None:
        """Count ``tokens`` (the real use; 0 for a call that failed) for the grant instead of
        its estimate."""
        if grant_id:
            self._settle(keys=[self._key(endpoint, "tokens")], args=[grant_id, max(0, tokens)])

    def pause(self, endpoint: str, seconds: float) -> None:
        """Grant nothing for ``endpoint`` for ``seconds`` (a 429's ``Retry-After``), to every
        caller on every host."""
        self._pause(keys=[self._key(endpoint, "paused")], args=[max(1, round(seconds * 1000))])
