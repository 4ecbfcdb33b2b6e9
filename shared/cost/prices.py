"""Claude prices in USD per million tokens, and what a call's tokens cost.

This module owns the price table (:data:`PRICES`), its fallback (:data:`FALLBACK_PRICE`),
the model-id normalisation used to look it up (:func:`model_key`) and the arithmetic of
:class:`Price`. It knows nothing about caching mechanics (see ``cache_model``).

Sources, all USD per million tokens ("MTok"):

- the cache multipliers: a 5-minute cache write costs 1.25x the base input price and a
  cache read 0.1x "on most models" (Anthropic prompt-caching docs, via research note
  ``research/anthropic-api-and-condensers.md`` section A2);
- Opus 4 / 4.1 / 4.5 / 4.6 / 4.7 / 4.8 / 5, Sonnet 4 / 3.7, Haiku 3.5 / 3: the model
  pricing table of https://platform.claude.com/docs/en/about-claude/pricing (Haiku 3's
  cache rates are printed rounded there: $0.30 write, $0.03 read);
- Sonnet 4.5 / 4.6 ($3 / $15) and Haiku 4.5 ($1 / $5): the comparison tables of the model
  overview pages; their cache rates follow the standard multipliers;
- Opus 5.5, Sonnet 5, Sonnet 5.5, Haiku 5.5: the model overview pages
  (``platform.claude.com/docs/.../models/<model>/overview``). Opus 5.5 reads the cache at
  0.05x, not 0.1x. Sonnet 5.5's cache read was cut from $0.20 to $0.10 on 2026-10-07 (as
  reported by independent price trackers that follow the pricing page, e.g.
  kurofune/claudit v1.9.2; the overview page copy we could read still said $0.20). Haiku
  5.5 is priced in two bands; the table holds the band for prompts up to 100,000 tokens
  (prompts above it pay 5x on every token, output included: not modelled here), with the
  $0.01 cache read taken from the same trackers.

None of these prices is in our research notes, which cover only the multipliers. Prices
change: this table is a seed that will move into the profile table.

Lookup is by *base model id*: the id without a snapshot date (``-20250929`` or
``@20250929``) or a bracketed variant (``[1m]``). That is a stricter form of prefix
matching: ``claude-opus-5-5`` never silently inherits ``claude-opus-5``'s rates. A model
the table does not know gets :data:`FALLBACK_PRICE` (the Sonnet 4.x rates, the middle
tier); use :func:`known_price` to tell the difference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

TOKENS_PER_MTOK = 1_000_000

# Anthropic prompt-caching docs, via research note A2 ("on most models").
CACHE_WRITE_5M_MULTIPLIER = 1.25
CACHE_READ_MULTIPLIER = 0.1


@dataclass(frozen=True)
class Price:
    """One model's rates in USD per million tokens."""

    base_input: float
    cache_write_5m: float
    cache_read: float
    output: float

    def __post_init__(self) -> None:
        rates = (self.base_input, self.cache_write_5m, self.cache_read, self.output)
        if any(rate < 0 for rate in rates):
            raise ValueError(f"prices must not be negative: {self}")

    @classmethod
    def from_base(
        cls,
        base_input: float,
        output: float,
        *,
        write_multiplier: float = CACHE_WRITE_5M_MULTIPLIER,
        read_multiplier: float = CACHE_READ_MULTIPLIER,
    ) -> Price:
        """The rates of a model that follows the published cache multipliers."""
        return cls(
            base_input=base_input,
            cache_write_5m=base_input * write_multiplier,
            cache_read=base_input * read_multiplier,
            output=output,
        )

    def input_cost(self, read: int, write: int, uncached: int) -> float:
        """USD for a prompt split into cache reads, 5-minute cache writes and uncached tokens."""
        per_mtok = read * self.cache_read + write * self.cache_write_5m + uncached * self.base_input
        return per_mtok / TOKENS_PER_MTOK

    def output_cost(self, output_tokens: int) -> float:
        """USD for the generated tokens."""
        return output_tokens * self.output / TOKENS_PER_MTOK


def _rates(base_input: float, cache_write_5m: float, cache_read: float, output: float) -> Price:
    return Price(base_input, cache_write_5m, cache_read, output)


_OPUS_4_5_PLUS = _rates(5.0, 6.25, 0.50, 25.0)
_OPUS_4 = _rates(15.0, 18.75, 1.50, 75.0)
_SONNET_4 = _rates(3.0, 3.75, 0.30, 15.0)

# Keyed by base model id (see the module docstring for the source of each row).
PRICES: Mapping[str, Price] = {
    "claude-opus-5-5": _rates(4.0, 5.0, 0.20, 20.0),
    "claude-opus-5": _OPUS_4_5_PLUS,
    "claude-opus-4-8": _OPUS_4_5_PLUS,
    "claude-opus-4-7": _OPUS_4_5_PLUS,
    "claude-opus-4-6": _OPUS_4_5_PLUS,
    "claude-opus-4-5": _OPUS_4_5_PLUS,
    "claude-opus-4-1": _OPUS_4,
    "claude-opus-4-0": _OPUS_4,
    "claude-opus-4": _OPUS_4,
    "claude-sonnet-5-5": _rates(2.0, 2.50, 0.10, 10.0),
    "claude-sonnet-5": _rates(2.0, 2.50, 0.20, 10.0),
    "claude-sonnet-4-6": _SONNET_4,
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4-0": _SONNET_4,
    "claude-sonnet-4": _SONNET_4,
    "claude-3-7-sonnet": _SONNET_4,
    "claude-haiku-5-5": _rates(0.10, 0.125, 0.01, 0.50),
    "claude-haiku-4-5": _rates(1.0, 1.25, 0.10, 5.0),
    "claude-3-5-haiku": _rates(0.80, 1.0, 0.08, 4.0),
    "claude-3-haiku": _rates(0.25, 0.30, 0.03, 1.25),
}

# A model the table does not know is priced as a Sonnet 4.x (the middle tier).
FALLBACK_PRICE = _SONNET_4

_VARIANT_SUFFIX = re.compile(r"\[[^\]]*\]$")
_DATE_SUFFIX = re.compile(r"[-@]\d{8}$")


def model_key(model: str) -> str:
    """The base model id: ``claude-sonnet-4-5-20250929[1m]`` -> ``claude-sonnet-4-5``."""
    return _DATE_SUFFIX.sub("", _VARIANT_SUFFIX.sub("", model.strip()))


def known_price(model: str) -> Price | None:
    """The model's rates, or ``None`` when the table does not know it."""
    return PRICES.get(model_key(model))


def price_for(model: str) -> Price:
    """The model's rates, or :data:`FALLBACK_PRICE` when the table does not know it."""
    price = known_price(model)
    return FALLBACK_PRICE if price is None else price
