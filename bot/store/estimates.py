"""Samples behind spawn estimates: what recent runs of one subagent type and model spent
(the owner of ``{p}estimates:{type}:{model}``).

Each key is a capped list, newest first, of the last :data:`SAMPLE_CAP` finished runs'
tokens and cost (trimmed every :data:`TRIM_SLACK` runs past the cap); it expires :data:`SAMPLE_TTL_SECONDS` after its last write, so a model
nobody uses any more leaves nothing behind. A run's sample is written by the finalize
script (:data:`RECORD_SAMPLE`, its last step), in the same round trip as its terminal
transition, so it is written once. :mod:`bot.runs.estimate` turns the samples into the
estimate a spawn shows (see docs/architecture.md, *Cost known before spending*).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from bot.keys import Keys
from bot.store import as_text
from bot.store.lua_parts import Fragment, Part
from bot.store.owner import RedisOwner

SAMPLE_CAP = 50
"""Finished runs kept per type and model."""
SAMPLE_TTL_SECONDS = 30 * 86_400


@dataclass(frozen=True, kw_only=True)
class Sample:
    """What one finished run spent.

    Attributes:
        tokens: Prompt + completion tokens, every attempt counted.
        cost_usd: Their USD cost (None: no price known for the model).
    """

    tokens: int
    cost_usd: float | None = None

    def to_json(self) -> str:
        return json.dumps({"t": self.tokens, "c": self.cost_usd}, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> Sample | None:
        """A stored sample; None for one that cannot be read."""
        try:
            data = json.loads(raw)
            cost = data.get("c")
            return cls(tokens=int(data["t"]), cost_usd=None if cost is None else float(cost))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


TRIM_SLACK = 10
"""The list may grow this far past the cap before it is trimmed (one ``LTRIM`` every ten
runs instead of one per run; readers take the first :data:`SAMPLE_CAP`)."""

_RECORD_SAMPLE = f"""
local function record_sample(k, a)
  if k[1] == '' then return end
  local cap = tonumber(a[2])
  if redis.call('LPUSH', k[1], a[1]) > cap + {TRIM_SLACK} then
    redis.call('LTRIM', k[1], 0, cap - 1)
  end
  redis.call('EXPIRE', k[1], a[3])
end
"""
RECORD_SAMPLE = Fragment(name="record_sample", lua=_RECORD_SAMPLE, keys=1, args=3)
"""The finalize script's step that keeps the run's sample (``k[1]`` "" = none to keep).
ARGV: the sample's JSON, the cap, the TTL (seconds)."""


def sample_part(keys: Keys, *, subagent_type: str, model: str, sample: Sample | None) -> Part:
    """:data:`RECORD_SAMPLE`'s part for one run's end (``sample`` None: keep nothing)."""
    if sample is None:
        return Part(fragment=RECORD_SAMPLE, keys=("",), args=("", SAMPLE_CAP, SAMPLE_TTL_SECONDS))
    key = keys.estimate_samples(subagent_type, model)
    return Part(
        fragment=RECORD_SAMPLE, keys=(key,), args=(sample.to_json(), SAMPLE_CAP, SAMPLE_TTL_SECONDS)
    )


class Estimates(RedisOwner):
    """Reads the samples (the finalize script writes them)."""

    def samples(self, subagent_type: str, model: str) -> list[Sample]:
        """The recent samples of ``subagent_type`` on ``model``, newest first."""
        raw = self.redis.lrange(self.keys.estimate_samples(subagent_type, model), 0, SAMPLE_CAP - 1)
        found = (Sample.from_json(as_text(item)) for item in raw)
        return [s for s in found if s is not None]
