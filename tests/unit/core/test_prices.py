"""Price table and cost arithmetic: lookups by rate key, the fallback, overrides, exact costs."""

from __future__ import annotations

import pytest

from hango.core.price import Price
from hango.core.profiles import (
    BUILTIN_WINDOWS,
    DEFAULT_MIN_CACHEABLE_TOKENS,
    FALLBACK_PRICE,
    PRICES,
    Profiles,
    known_price,
    min_cacheable_tokens,
    rate_key,
)
from hango.core.settings import ProfileOverride, Settings


def price_for(model: str) -> Price:
    return Profiles().resolve(model).price


# Rows whose cache rates are not base x 1.25 / x 0.1 (see the prices module docstring).
NON_STANDARD_CACHE_RATES = {"claude-opus-5-5", "claude-sonnet-5-5", "claude-3-haiku"}
# The published multipliers of a 5-minute cache write and a cache read (hango.core.price).
CACHE_WRITE_5M_MULTIPLIER = 1.25
CACHE_READ_MULTIPLIER = 0.1


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5[1m]", "claude-sonnet-4-5"),
        (" claude-opus-4-20250514 ", "claude-opus-4"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),
    ],
)
def test_rate_key_drops_date_and_variant(model: str, key: str) -> None:
    assert rate_key(model) == key


@pytest.mark.parametrize(
    ("model", "base_input", "output"),
    [
        ("claude-sonnet-4-5-20250929", 3.0, 15.0),
        ("claude-sonnet-4-6", 3.0, 15.0),
        ("claude-opus-4-5-20251101", 5.0, 25.0),
        ("claude-opus-4-1", 15.0, 75.0),
        ("claude-opus-4-20250514", 15.0, 75.0),
        ("claude-opus-5", 5.0, 25.0),
        ("claude-opus-5-5", 4.0, 20.0),
        ("claude-sonnet-5", 2.0, 10.0),
        ("claude-haiku-4-5-20251001", 1.0, 5.0),
        ("claude-3-5-haiku-20241022", 0.8, 4.0),
        ("claude-3-haiku-20240307", 0.25, 1.25),
    ],
)
def test_published_base_and_output_prices(model: str, base_input: float, output: float) -> None:
    price = price_for(model)
    assert (price.base_input, price.output) == (base_input, output)


def test_a_newer_minor_version_does_not_inherit_its_family_price() -> None:
    assert price_for("claude-opus-5-5") != price_for("claude-opus-5")
    assert known_price("claude-opus-5-6") is None


def test_unknown_model_gets_the_documented_fallback() -> None:
    assert known_price("gpt-4o") is None
    assert price_for("gpt-4o") == FALLBACK_PRICE == PRICES["claude-sonnet-4-5"]
    assert Profiles().resolve("gpt-4o").price_known is False
    assert Profiles().resolve("claude-opus-4-6").price_known is True


def test_an_override_sets_the_price_and_the_cache_minimum() -> None:
    settings = Settings.model_validate(
        {
            "model_profiles": {
                "local-llm": {
                    "max_input_tokens": 32_000,
                    "price": {
                        "base_input": 1.0,
                        "cache_write_5m": 2.0,
                        "cache_read": 0.5,
                        "output": 4.0,
                    },
                    "min_cacheable_tokens": 256,
                },
                "claude-opus-4-6": {"max_input_tokens": 50_000},
            }
        }
    )
    profiles = Profiles.from_settings(settings)
    local = profiles.resolve("local-llm")
    assert (local.price.cache_write_5m, local.price_known, local.min_cacheable_tokens) == (
        2.0,
        True,
        256,
    )
    # An override of the window alone keeps the table's rates and minimum.
    opus = profiles.resolve("claude-opus-4-6")
    assert (opus.price, opus.min_cacheable_tokens) == (PRICES["claude-opus-4-6"], 4096)


def test_a_bad_price_in_an_override_is_refused() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        ProfileOverride.model_validate(
            {
                "max_input_tokens": 1000,
                "price": {"base_input": -1, "cache_write_5m": 0, "cache_read": 0, "output": 0},
            }
        )


@pytest.mark.parametrize(
    ("model", "minimum"),
    [
        ("claude-sonnet-4-5-20250929", 1024),
        ("claude-opus-4-8", 1024),
        ("claude-opus-4-7", 2048),
        ("claude-opus-4-6", 4096),
        ("claude-opus-4-5-20251101", 4096),
        ("claude-haiku-4-5-20251001", 4096),
        ("claude-opus-5", 512),
        ("claude-3-5-haiku-20241022", 2048),
        ("claude-haiku-5-5", DEFAULT_MIN_CACHEABLE_TOKENS),
    ],
)
def test_minimum_cacheable_length_per_model(model: str, minimum: int) -> None:
    assert min_cacheable_tokens(model) == minimum
    assert Profiles().resolve(model).min_cacheable_tokens == minimum


def test_every_model_of_the_profile_table_has_a_price() -> None:
    assert [model for model in BUILTIN_WINDOWS if known_price(model) is None] == []


@pytest.mark.parametrize("model", sorted(set(PRICES) - NON_STANDARD_CACHE_RATES))
def test_cache_rates_follow_the_published_multipliers(model: str) -> None:
    price = PRICES[model]
    assert price.cache_write_5m == pytest.approx(price.base_input * CACHE_WRITE_5M_MULTIPLIER)
    assert price.cache_read == pytest.approx(price.base_input * CACHE_READ_MULTIPLIER)


def test_cheaper_cache_reads_where_published() -> None:
    assert PRICES["claude-opus-5-5"].cache_read == pytest.approx(0.05 * 4.0)
    assert PRICES["claude-sonnet-5-5"].cache_read == pytest.approx(0.05 * 2.0)


def test_input_and_output_cost_exact_on_round_figures() -> None:
    price = Price(base_input=4.0, cache_write_5m=5.0, cache_read=0.5, output=20.0)
    assert price.input_cost(read=2_000_000, write=1_000_000, uncached=500_000) == 8.0
    assert price.input_cost(read=0, write=0, uncached=0) == 0.0
    assert price.output_cost(250_000) == 5.0


def test_negative_rates_are_rejected() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Price(base_input=1.0, cache_write_5m=-1.0, cache_read=0.1, output=5.0)
