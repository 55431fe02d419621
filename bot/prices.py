"""USD for a model's tokens from a maintained price table, so costs show without typing prices.

The table is the ``genai-prices`` package's snapshot (offline: it is never updated over
the network at run time). Configured prices (``FANBOT_PRICES`` / ``[prices.<model>]``) win;
:func:`estimate_cost` asks the table only for a model they do not name. A model
the table does not know has no cost: its announce shows tokens only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from bot.types import Usage

if TYPE_CHECKING:
    from bot.config import Price

log = logging.getLogger(__name__)


def estimate_cost(model: str, usage: Usage, prices: Mapping[str, Price]) -> float | None:
    """USD for ``usage`` at the model's configured per-1M-token prices, else at the price
    table's (:mod:`bot.prices`); None if neither knows the model."""
    price = prices.get(model)
    if price is None:
        return table_cost(
            model, prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens
        )
    return (usage.prompt_tokens * price.input + usage.completion_tokens * price.output) / 1e6


def table_cost(model: str, *, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for the tokens at the table's current price of ``model``; None if unknown.

    A ``provider/model`` name (as routers spell them) is looked up as ``model`` when the
    whole name is not in the table.
    """
    for name in _candidates(model):
        cost = _lookup(name, prompt_tokens, completion_tokens)
        if cost is not None:
            return cost
    return None


def warm(models: Iterable[str]) -> None:
    """Load the price table and look ``models`` up once, so that the first cost a process
    computes does not pay for the load (about 70 ms, 300 ms on a busy host): a worker's
    first run, the gateway's first ``/subagents stop``."""
    for model in models:
        table_cost(model, prompt_tokens=1, completion_tokens=1)


def _candidates(model: str) -> list[str]:
    names = [model] if model else []
    if "/" in model:
        names.append(model.rpartition("/")[2])
    return names


@functools.lru_cache(maxsize=256)
def _known(model: str) -> bool:
    """Whether the table has ``model`` (cached: unknown names are looked up once)."""
    return _lookup_uncached(model, 1, 1) is not None


def _lookup(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    if not _known(model):
        return None
    return _lookup_uncached(model, prompt_tokens, completion_tokens)


def _lookup_uncached(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    from genai_prices import Usage, calc_price  # imported on first use: it loads a big table

    try:
        usage = Usage(input_tokens=prompt_tokens, output_tokens=completion_tokens)
        return float(calc_price(usage, model).total_price)
    except LookupError:
        return None
    except (ArithmeticError, TypeError, ValueError) as exc:  # a table entry we cannot use
        log.warning("no price for %r from the price table: %s", model, exc)
        return None
