"""Costs that match the bill: configured prices win, the price table fills in the rest;
cached prompt tokens at the cached price, reasoning tokens inside the output price."""

from __future__ import annotations

import pytest

from bot.config import ModelEntry, ModelsSettings, OpenAISettings, Price, Settings
from bot.prices import estimate_cost, priced, table_cost
from bot.types import Usage

MILLION = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
PLAIN = Settings()


def with_prices(**prices: Price) -> Settings:
    return Settings(prices=prices)


def test_a_configured_price_wins_over_the_table() -> None:
    settings = with_prices(**{"gpt-4o-mini": Price(input=1.0, output=2.0)})
    assert estimate_cost(settings, "gpt-4o-mini", MILLION) == pytest.approx(3.0)


def test_cached_tokens_cost_the_cached_price_and_the_rest_the_input_price() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5)
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=800_000, completion_tokens=100_000)
    # 200k at $2 + 800k at $0.50 + 100k at $8 = 0.4 + 0.4 + 0.8
    assert priced(price, usage) == pytest.approx(1.6)


def test_cached_tokens_without_a_cached_price_cost_the_input_price() -> None:
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=800_000, completion_tokens=0)
    assert priced(Price(input=2.0, output=8.0), usage) == pytest.approx(2.0)


def test_reasoning_tokens_are_output_tokens_counted_once() -> None:
    price = Price(input=1.0, output=10.0)
    with_reasoning = Usage(prompt_tokens=0, completion_tokens=1_000_000, reasoning_tokens=900_000)
    assert priced(price, with_reasoning) == pytest.approx(10.0)


@pytest.mark.parametrize("cached", [-5, 2_000_000])
def test_a_cached_count_outside_the_prompt_is_clamped(cached: int) -> None:
    price = Price(input=2.0, output=0.0, cached_input=1.0)
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=cached)
    expected = 2.0 if cached < 0 else 1.0
    assert priced(price, usage) == pytest.approx(expected)


def test_a_model_entry_price_wins_and_names_on_an_endpoint_resolve() -> None:
    settings = Settings(
        models=ModelsSettings(
            endpoints={"local": OpenAISettings(base_url="http://localhost:1/v1", model="qwen3")},
            models={"local/qwen3": ModelEntry(price=Price(input=1.0, output=1.0, cached_input=0))},
        ),
        prices={"qwen3": Price(input=50.0, output=50.0)},
    )
    usage = Usage(prompt_tokens=1_000_000, cached_tokens=1_000_000, completion_tokens=1_000_000)
    assert estimate_cost(settings, "local/qwen3", usage) == pytest.approx(1.0)


def test_fanbot_prices_by_the_name_on_the_endpoint() -> None:
    settings = Settings(
        models=ModelsSettings(
            endpoints={"local": OpenAISettings(base_url="http://localhost:1/v1", model="x")}
        ),
        prices={"qwen3": Price(input=1.0, output=3.0)},
    )
    assert estimate_cost(settings, "local/qwen3", MILLION) == pytest.approx(4.0)


def test_a_known_model_gets_its_cost_from_the_table() -> None:
    cost = estimate_cost(PLAIN, "gpt-4o-mini", MILLION)
    assert cost is not None and 0 < cost < 10  # the table's current price, whatever it is
    half = estimate_cost(PLAIN, "gpt-4o-mini", Usage(prompt_tokens=500_000))
    assert half is not None and 0 < half < cost


def test_the_table_prices_cached_tokens_below_fresh_ones() -> None:
    fresh = Usage(prompt_tokens=1_000_000)
    cached = Usage(prompt_tokens=1_000_000, cached_tokens=1_000_000)
    full, cheap = (
        estimate_cost(PLAIN, "gpt-4o-mini", fresh),
        estimate_cost(PLAIN, "gpt-4o-mini", cached),
    )
    assert full is not None and cheap is not None and 0 < cheap < full


def test_the_table_is_asked_for_the_model_part_of_an_endpoint_name() -> None:
    settings = Settings(
        models=ModelsSettings(
            endpoints={"local": OpenAISettings(base_url="http://localhost:1/v1", model="x")}
        )
    )
    assert estimate_cost(settings, "local/gpt-4o-mini", MILLION) == estimate_cost(
        PLAIN, "gpt-4o-mini", MILLION
    )


def test_a_router_style_name_falls_back_to_the_model_part() -> None:
    assert table_cost("openai/gpt-4o-mini", prompt_tokens=1000, completion_tokens=1000) == (
        table_cost("gpt-4o-mini", prompt_tokens=1000, completion_tokens=1000)
    )


@pytest.mark.parametrize("model", ["fake-model", "my-local-llama", "nowhere/fake-model"])
def test_an_unknown_model_has_no_cost(model: str) -> None:
    assert estimate_cost(with_prices(other=Price(input=1, output=1)), model, MILLION) is None


def test_warm_loads_the_table_and_caches_each_model_looked_up() -> None:
    from bot import prices

    prices.warm(["gpt-4o-mini", "fake-model", ""])
    cached = prices._known.cache_info().currsize
    prices.warm(["gpt-4o-mini", "fake-model"])
    assert prices._known.cache_info().currsize == cached  # looked up once, then cached
    assert estimate_cost(PLAIN, "gpt-4o-mini", MILLION) is not None


def test_adding_usages_keeps_every_part_and_the_estimated_mark() -> None:
    reported = Usage(prompt_tokens=100, completion_tokens=50, cached_tokens=80, reasoning_tokens=20)
    counted = Usage(prompt_tokens=10, completion_tokens=5, estimated=True)
    total = reported + counted
    assert total == Usage(
        prompt_tokens=110,
        completion_tokens=55,
        cached_tokens=80,
        reasoning_tokens=20,
        estimated=True,
    )
    assert not (reported + reported).estimated
    assert sum((reported, counted), Usage()).estimated
