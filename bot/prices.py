"""USD for a model's tokens, priced as the provider bills them (docs/models.md, "Cost that
matches the bill").

A configured price wins (:func:`bot.models.catalog.price`: the model entry's, else
``FANBOT_PRICES`` under its whole name or its name on the endpoint); otherwise the
``genai-prices`` package's table (offline: it is never updated over the network at run
time) is asked for the model's name on its endpoint (``local/qwen3`` looks up ``qwen3``; a
router's ``openai/gpt-4o`` looks up ``openai/gpt-4o``, then ``gpt-4o``). A model neither
knows has no cost: its announce shows tokens only.

Cached prompt tokens (:attr:`Usage.cached_tokens`, part of the prompt tokens) cost the
cached-input price; reasoning tokens are part of the completion tokens and cost the output
price, so they are never counted twice.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from bot.models import catalog
from bot.types import Usage

if TYPE_CHECKING:
    from bot.config import Price, Settings

log = logging.getLogger(__name__)

PER = 1_000_000
"""Prices are USD per this many tokens."""


def estimate_cost(settings: Settings, model: str, usage: Usage) -> float | None:
    """USD for ``usage`` of ``model`` (any name the catalog resolves) at its configured
    price, else at the price table's; None if neither knows the model."""
    price = catalog.price(settings, model)
    if price is not None:
        return priced(price, usage)
    return table_cost(
        catalog.resolve(settings, model).model,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
    )


def priced(price: Price, usage: Usage) -> float:
    """USD for ``usage`` at ``price``: cached prompt tokens at ``cached_input`` (unset: the
    input price), the rest of the prompt at ``input``, every completion token (reasoning
    included) at ``output``."""
    cached = min(max(usage.cached_tokens, 0), usage.prompt_tokens)
    cached_rate = price.input if price.cached_input is None else price.cached_input
    return (
        (usage.prompt_tokens - cached) * price.input
        + cached * cached_rate
        + usage.completion_tokens * price.output
    ) / PER


def table_cost(
    model: str, *, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> float | None:
    """USD for the tokens at the table's current price of ``model``; None if unknown.

    ``cached_tokens`` (part of ``prompt_tokens``) cost the table's cache-read price. A
    ``provider/model`` name (as routers spell them) is looked up as ``model`` when the
    whole name is not in the table.
    """
    cached = min(max(cached_tokens, 0), prompt_tokens)
    for name in _candidates(model):
        cost = _lookup(name, prompt_tokens, completion_tokens, cached)
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
    return _lookup_uncached(model, 1, 1, 0) is not None


def _lookup(model: str, prompt_tokens: int, completion_tokens: int, cached: int) -> float | None:
    if not _known(model):
        return None
    return _lookup_uncached(model, prompt_tokens, completion_tokens, cached)


def _lookup_uncached(
    model: str, prompt_tokens: int, completion_tokens: int, cached: int
) -> float | None:
    from genai_prices import Usage, calc_price  # imported on first use: it loads a big table

    try:
        # The table's input_tokens include its cache_read_tokens, like our prompt tokens.
        usage = Usage(
            input_tokens=prompt_tokens, cache_read_tokens=cached, output_tokens=completion_tokens
        )
        return float(calc_price(usage, model).total_price)
    except LookupError:
        return None
    except (ArithmeticError, TypeError, ValueError) as exc:  # a table entry we cannot use
        log.warning("no price for %r from the price table: %s", model, exc)
        return None
