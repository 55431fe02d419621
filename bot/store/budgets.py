"""Spend counters and their holds: the one owner of the ``budget:*`` keys.

Each :class:`SpendScope` (a run, a run tree, a thread's day, a user's day) is one hash: the
settled spend (``tokens``, ``usd``) and one ``h:<holdId>`` field per model call in flight
(``"<tokens> <usd> <expires_at>"``). Before a call, :meth:`Budgets.reserve` checks every
scope the call counts toward and, only if all admit it, holds the call's estimate in each,
in one Lua script: all or nothing. After the call :meth:`Budgets.settle` swaps the hold for
the real usage.

A scope admits a call while its settled spend plus its holds is below its limit, so however
many processes share it, its spend passes the limit by at most the one reservation admitted
last (as long as no call uses more than its estimate). A hold whose process died expires
(``expires_at``) and stops counting at the next reservation.

A counter gets its expiry at its first spend (a reservation renews it), and a daily scope
is named in ``budget:day:{day}`` by its first settled call, so :meth:`Budgets.day_usage`
can list a day's totals without a scan; later calls only add to the counters.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bot.keys import Keys
from bot.store import as_text
from bot.store.owner import Lua, RedisOwner

DAILY_KINDS = frozenset({"thread", "user"})

_RESERVE = """
local now = tonumber(ARGV[1])
local spent = {}
for i, key in ipairs(KEYS) do
  local st, su, ht, hu = 0, 0, 0, 0
  local h = redis.call('HGETALL', key)
  for j = 1, #h, 2 do
    local f, v = h[j], h[j + 1]
    if f == 'tokens' then st = tonumber(v)
    elseif f == 'usd' then su = tonumber(v)
    elseif string.sub(f, 1, 2) == 'h:' then
      local t, u, exp = string.match(v, '^(%S+) (%S+) (%S+)$')
      if tonumber(exp) < now then
        redis.call('HDEL', key, f)
      else
        ht = ht + tonumber(t)
        hu = hu + tonumber(u)
      end
    end
  end
  local mt, mu = tonumber(ARGV[4 + 2 * i]), tonumber(ARGV[5 + 2 * i])
  if mt and st >= mt then return {0, i, 'tokens', tostring(st), tostring(su), '0'} end
  if mu and su >= mu then return {0, i, 'usd', tostring(st), tostring(su), '0'} end
  if mt and st + ht >= mt then return {0, i, 'tokens', tostring(st), tostring(su), '1'} end
  if mu and su + hu >= mu then return {0, i, 'usd', tostring(st), tostring(su), '1'} end
  spent[#spent + 1] = tostring(st)
  spent[#spent + 1] = tostring(su)
end
local hold = ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[2]
for _, key in ipairs(KEYS) do
  redis.call('HSET', key, 'h:' .. ARGV[6 + 2 * #KEYS], hold)
  redis.call('EXPIRE', key, ARGV[5])
end
table.insert(spent, 1, 1)
return spent
"""
"""KEYS: scope hashes. ARGV: now, expires_at, tokens, usd, ttl, then (max_tokens, max_usd)
per scope ("" = no limit), then the hold id. Returns ``{1, tokens, usd, ...}`` per scope, or
``{0, index, 'tokens'|'usd', tokens, usd, held_only}`` naming the scope that refused."""

_SETTLE = """
local n = tonumber(ARGV[4])
local out = {}
local added = 0
for i = 1, n do
  local key = KEYS[i]
  if ARGV[1] ~= '' then redis.call('HDEL', key, 'h:' .. ARGV[1]) end
  local tokens = redis.call('HINCRBY', key, 'tokens', ARGV[2])
  out[#out + 1] = tokens
  out[#out + 1] = redis.call('HINCRBYFLOAT', key, 'usd', ARGV[3])
  if tokens == tonumber(ARGV[2]) then
    -- its first spend: its expiry, and a daily scope joins its day's index
    redis.call('EXPIRE', key, ARGV[5])
    if ARGV[5 + i] ~= '' then added = added + redis.call('SADD', KEYS[n + 1], ARGV[5 + i]) end
  end
end
if added > 0 then redis.call('EXPIRE', KEYS[n + 1], ARGV[5]) end
return out
"""
"""KEYS: scope hashes, then the day index. ARGV: hold id ("" = nothing held), tokens, usd,
#scopes, ttl, then per scope its day index member (``kind|ident``; "" for a scope that is
not daily). A scope whose ``tokens`` were 0 before (a new counter) gets its expiry and, if
daily, its place in the day's index; the others have both already (one command each less
per call and scope)."""


@dataclass(frozen=True, kw_only=True)
class SpendScope:
    """One spend counter and its limits.

    Attributes:
        kind: ``run``, ``tree``, ``thread`` or ``user``.
        ident: The run id, the root run id, the requester session key or the user.
        day: ``YYYY-MM-DD`` (UTC) for the daily kinds, else "".
        max_tokens: Token limit (None: none).
        max_usd: USD limit (None: none).
    """

    kind: str
    ident: str
    day: str = ""
    max_tokens: int | None = None
    max_usd: float | None = None

    @property
    def limited(self) -> bool:
        return self.max_tokens is not None or self.max_usd is not None


@dataclass(frozen=True, kw_only=True)
class Spend:
    """Settled spend of a scope."""

    tokens: int = 0
    usd: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """What :meth:`Budgets.reserve` decided.

    Attributes:
        hold_id: Settle with it (only when ``ok``).
        scopes: The scopes asked, in order.
        ok: Every scope admitted the call and holds its estimate.
        spent: Settled spend per scope when admitted (empty when refused).
        refused: The scope that refused, and its spend; the unit that is over
            (``tokens`` or ``usd``).
        held_only: The refusal came from other calls' holds, not from settled spend.
    """

    hold_id: str
    scopes: tuple[SpendScope, ...]
    ok: bool
    spent: tuple[Spend, ...] = ()
    refused: SpendScope | None = None
    refused_spend: Spend = Spend()
    unit: str = ""
    held_only: bool = False


class Budgets(RedisOwner):
    """Owner of ``budget:{kind}:…`` hashes and ``budget:day:{day}`` sets.

    Args:
        redis: Sync client.
        keys: Key builder.
        ttl_seconds: Every counter expires this long after its first spend (a reservation
            renews it).
    """

    _reserve = Lua(_RESERVE)
    _settle = Lua(_SETTLE)

    def __init__(self, *, redis: redis.Redis, keys: Keys, ttl_seconds: float) -> None:
        super().__init__(redis=redis, keys=keys)
        self.ttl = max(int(ttl_seconds), 2 * 86_400)

    def key(self, scope: SpendScope) -> str:
        return self.keys.budget(scope.kind, scope.ident, scope.day)

    def reserve(
        self, scopes: Sequence[SpendScope], *, tokens: int, usd: float, hold_seconds: float
    ) -> Reservation:
        """Hold ``tokens``/``usd`` in every scope, or in none when one is spent."""
        hold_id = uuid.uuid4().hex
        now = time.time()
        args: list[Any] = [repr(now), repr(now + hold_seconds), tokens, repr(usd), self.ttl]
        for scope in scopes:
            args += [_limit(scope.max_tokens), _limit(scope.max_usd)]
        args.append(hold_id)
        raw: list[Any] = self._reserve(keys=[self.key(s) for s in scopes], args=args)
        if int(raw[0]) == 1:
            pairs = [as_text(v) for v in raw[1:]]
            spent = tuple(_spend(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))
            return Reservation(hold_id=hold_id, scopes=tuple(scopes), ok=True, spent=spent)
        return Reservation(
            hold_id=hold_id,
            scopes=tuple(scopes),
            ok=False,
            refused=scopes[int(raw[1]) - 1],
            unit=as_text(raw[2]),
            refused_spend=_spend(as_text(raw[3]), as_text(raw[4])),
            held_only=as_text(raw[5]) == "1",
        )

    def settle(self, reservation: Reservation, *, tokens: int, usd: float) -> tuple[Spend, ...]:
        """Replace the reservation's hold by the real use; returns each scope's new spend."""
        scopes = reservation.scopes
        daily = sorted({s.day for s in scopes if s.kind in DAILY_KINDS})
        keys = [self.key(s) for s in scopes]
        members = [f"{s.kind}|{s.ident}" if s.kind in DAILY_KINDS else "" for s in scopes]
        keys.append(self.keys.budget_day(daily[0] if daily else ""))
        args: list[Any] = [reservation.hold_id, tokens, repr(usd), len(scopes), self.ttl]
        raw: list[Any] = self._settle(keys=keys, args=args + members)
        return tuple(_spend(as_text(raw[i]), as_text(raw[i + 1])) for i in range(0, len(raw), 2))

    def spent(self, scope: SpendScope) -> Spend:
        """The scope's settled spend (holds not counted)."""
        tokens, usd = self.redis.hmget(self.key(scope), ["tokens", "usd"])
        return _spend(as_text(tokens or "0"), as_text(usd or "0"))

    def spent_each(self, scopes: Sequence[SpendScope]) -> list[Spend]:
        """Each scope's settled spend, in one round trip (``/usage``'s days of a thread)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for scope in scopes:
                pipe.hmget(self.key(scope), ["tokens", "usd"])
            raw: list[Any] = pipe.execute()
        return [_spend(as_text(t or "0"), as_text(u or "0")) for t, u in raw]

    def day_usage(self, day: str) -> list[tuple[str, str, Spend]]:
        """``(kind, ident, spend)`` of every thread and user that spent on ``day``."""
        raw: Any = self.redis.smembers(self.keys.budget_day(day))
        found = []
        for member in sorted(as_text(m) for m in raw):
            kind, _, ident = member.partition("|")
            found.append((kind, ident, self.spent(SpendScope(kind=kind, ident=ident, day=day))))
        return found


def _limit(value: float | None) -> str:
    return "" if value is None else repr(value)


def _spend(tokens: str, usd: str) -> Spend:
    return Spend(tokens=int(float(tokens)), usd=float(usd))
