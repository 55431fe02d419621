"""Costs without typing prices: configured prices win, the price table fills in the rest."""

from __future__ import annotations

import pytest

from bot.config import Price
from bot.prices import estimate_cost, table_cost
from bot.types import Usage

MILLION = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)


def test_a_configured_price_wins_over_the_table() -> None:
    prices = {"gpt-4o-mini": Price(input=1.0, output=2.0)}
    assert estimate_cost("gpt-4o-mini", MILLION, prices) == pytest.approx(3.0)


def test_a_known_model_gets_its_cost_from_the_table() -> None:
    cost = estimate_cost("gpt-4o-mini", MILLION, {})
    assert cost is not None and 0 < cost < 10  # the table's current price, whatever it is
    half = estimate_cost("gpt-4o-mini", Usage(prompt_tokens=500_000, completion_tokens=0), {})
    assert half is not None and 0 < half < cost


def test_a_router_style_name_falls_back_to_the_model_part() -> None:
    assert table_cost("openai/gpt-4o-mini", prompt_tokens=1000, completion_tokens=1000) == (
        table_cost("gpt-4o-mini", prompt_tokens=1000, completion_tokens=1000)
    )


@pytest.mark.parametrize("model", ["fake-model", "my-local-llama", ""])
def test_an_unknown_model_has_no_cost(model: str) -> None:
    assert estimate_cost(model, MILLION, {"other": Price(input=1, output=1)}) is None


def test_warm_loads_the_table_and_caches_each_model_looked_up() -> None:
    from bot import prices

    prices.warm(["gpt-4o-mini", "fake-model", ""])
    cached = prices._known.cache_info().currsize
    prices.warm(["gpt-4o-mini", "fake-model"])
    assert prices._known.cache_info().currsize == cached  # looked up once, then cached
    assert estimate_cost("gpt-4o-mini", MILLION, {}) is not None
