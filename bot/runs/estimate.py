"""Cost known before spending: a spawn's estimate from the recent runs of its type and
model (pure; see docs/architecture.md, *Cost known before spending*).

The finalize script keeps each finished run's tokens and cost (:mod:`bot.store.estimates`,
the last 50 per type and model); a spawn reads them once and :func:`estimate` takes their
p50 and p90 (nearest rank: always a value some run really spent). With fewer than
:data:`MIN_SAMPLES` runs there is no estimate ("no estimate yet"), never an invented one.
The estimate travels on the run record (``RunRecord.estimate``, :meth:`Estimate.to_json`):
the spawn's acknowledgement, the model's tool result, the status card and the approval
request (``FANBOT_BUDGETS__APPROVE_ABOVE_USD``, :mod:`bot.runs.spawn_approval`) all read it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from bot.runs.naming import Icon
from bot.store.estimates import Sample
from bot.text.units import tokens as token_text
from bot.types import RunRecord

MIN_SAMPLES = 3
"""Fewer finished runs than this: no estimate."""
NO_ESTIMATE = "no estimate yet"


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What a run of a type and model is expected to spend.

    Attributes:
        runs: The finished runs it is based on.
        tokens_p50: Median tokens (None: too few runs).
        tokens_p90: 90th percentile of tokens.
        cost_p50: Median USD (None: too few runs with a known cost).
        cost_p90: 90th percentile of USD.
    """

    runs: int = 0
    tokens_p50: int | None = None
    tokens_p90: int | None = None
    cost_p50: float | None = None
    cost_p90: float | None = None

    @property
    def known(self) -> bool:
        return self.tokens_p50 is not None

    def to_json(self) -> str:
        """As kept on the run record ("" for no estimate)."""
        if not self.known:
            return ""
        data = {
            "runs": self.runs,
            "tokens": [self.tokens_p50, self.tokens_p90],
            "usd": None if self.cost_p50 is None else [self.cost_p50, self.cost_p90],
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> Estimate:
        """The estimate kept on a run record (none for "" or anything unreadable)."""
        try:
            data = json.loads(raw) if raw else {}
            t50, t90 = data["tokens"]
            usd = data.get("usd") or (None, None)
            return cls(
                runs=int(data["runs"]),
                tokens_p50=int(t50),
                tokens_p90=int(t90),
                cost_p50=None if usd[0] is None else float(usd[0]),
                cost_p90=None if usd[1] is None else float(usd[1]),
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return cls()


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank ``pct``-th percentile of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def estimate(samples: Sequence[Sample], *, min_samples: int = MIN_SAMPLES) -> Estimate:
    """p50/p90 tokens and cost of ``samples``; nothing below ``min_samples`` runs (cost
    only from the samples whose cost is known, with the same minimum)."""
    if len(samples) < min_samples:
        return Estimate(runs=len(samples))
    spent = [s.tokens for s in samples]
    costs = [s.cost_usd for s in samples if s.cost_usd is not None]
    priced = len(costs) >= min_samples
    return Estimate(
        runs=len(samples),
        tokens_p50=int(percentile(spent, 50)),
        tokens_p90=int(percentile(spent, 90)),
        cost_p50=percentile(costs, 50) if priced else None,
        cost_p90=percentile(costs, 90) if priced else None,
    )


def usd(value: float) -> str:
    """``$0.04``, ``$1.20``; below a cent two significant digits (``$0.0012``)."""
    if value >= 0.01 or value == 0:
        return f"${value:.2f}"
    return f"${value:.2g}"


def estimate_text(est: Estimate) -> str:
    """``est. ~$0.04 (p90 $0.09)``; tokens when no price is known
    (``est. ~3.1k tokens (p90 5.2k)``); ``no estimate yet`` below the minimum."""
    if est.cost_p50 is not None and est.cost_p90 is not None:
        return f"est. ~{usd(est.cost_p50)} (p90 {usd(est.cost_p90)})"
    if est.tokens_p50 is not None and est.tokens_p90 is not None:
        return f"est. ~{token_text(est.tokens_p50)} tokens (p90 {token_text(est.tokens_p90)})"
    return NO_ESTIMATE


def text_of(record: RunRecord) -> str:
    """The estimate its spawn made for ``record``, as :func:`estimate_text` says it."""
    return estimate_text(Estimate.from_json(record.estimate))


def card_note(record: RunRecord) -> str:
    """The estimate as its status card shows it while the run works ("" = none)."""
    return f"{Icon.ESTIMATE} {text_of(record)}" if record.estimate else ""


def above(est: Estimate, limit_usd: float | None) -> bool:
    """Whether the estimate's p90 cost is above ``limit_usd`` (None: no limit). Without a
    cost estimate nothing is above it."""
    return limit_usd is not None and est.cost_p90 is not None and est.cost_p90 > limit_usd


def tool_answer(est: Estimate) -> dict[str, object]:
    """The estimate in the spawn tool's answer to the model."""
    answer: dict[str, object] = {"text": estimate_text(est), "basedOnRuns": est.runs}
    if est.known:
        answer |= {"tokensP50": est.tokens_p50, "tokensP90": est.tokens_p90}
    if est.cost_p50 is not None:
        answer |= {"costUsdP50": round(est.cost_p50, 6), "costUsdP90": round(est.cost_p90 or 0, 6)}
    return answer


def sample_of(record: RunRecord) -> Sample | None:
    """What a run that just ended adds to the estimates of its type and model: its
    tokens and cost if it started and spent any (``record`` with its final usage)."""
    if record.started_at is None or record.usage.total <= 0:
        return None
    return Sample(tokens=record.usage.total, cost_usd=record.cost_usd)
