"""Model profiles: each model's window, when to compact it, its prices and cache minimum.

A profile comes from ``HANGO_MODEL_PROFILES``, else the built-in windows
(:data:`BUILTIN_WINDOWS`, a seed from research note A5), with the settings-level
``HANGO_CONTEXT_*`` fractions and summarizer model (else the model itself) for fields it
leaves unset. A model found nowhere gets the documented fallback (compact at 170,000
tokens, keep the last 6 messages), logged once per unknown model. Dated ids
(``claude-sonnet-4-5-20250929``, ``...@20250929``) resolve to their base id.

Each profile also carries the model's :class:`~hango.core.price.Price` and its minimum
cacheable prefix (an override may set either). Those two tables are looked up by *rate
key*: the id without a snapshot date and without a bracketed variant (``[1m]``), a
stricter form of prefix matching, so ``claude-opus-5-5`` never silently inherits
``claude-opus-5``'s rates. Sources, all prices in USD per million tokens:

- Opus 4 / 4.1 / 4.5 / 4.6 / 4.7 / 4.8 / 5, Sonnet 4 / 3.7, Haiku 3.5 / 3: the model
  pricing table of https://platform.claude.com/docs/en/about-claude/pricing (Haiku 3's
  cache rates are printed rounded there: $0.30 write, $0.03 read);
- Sonnet 4.5 / 4.6 ($3 / $15) and Haiku 4.5 ($1 / $5): the comparison tables of the model
  overview pages; their cache rates follow the standard multipliers;
- Opus 5.5, Sonnet 5, Sonnet 5.5, Haiku 5.5: the model overview pages
  (``platform.claude.com/docs/.../models/<model>/overview``). Opus 5.5 reads the cache at
  0.05x, not 0.1x. Sonnet 5.5's cache read was cut from $0.20 to $0.10 on 2026-10-07 (as
  reported by independent price trackers that follow the pricing page, e.g.
  kurofune/claudit v1.9.2). Haiku 5.5 is priced in two bands; the table holds the band
  for prompts up to 100,000 tokens (above it every token costs 5x: not modelled), with
  the $0.01 cache read taken from the same trackers;
- the minimum cacheable prefix: the prompt-caching docs
  (https://platform.claude.com/docs/en/build-with-claude/prompt-caching) for the current
  models; Sonnet 3.7 and Haiku 3 / 3.5 from the docs' earlier list (quoted in
  anthropics/anthropic-sdk-python#1194). Third-party tables disagree on some (e.g.
  Sonnet 4.6 = 2,048): an override wins.

A model the price table does not know is priced as a Sonnet 4.x (:data:`FALLBACK_PRICE`,
the middle tier) and gets :data:`DEFAULT_MIN_CACHEABLE_TOKENS`; prices change, so the
profile says whether its price is known.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hango.core.price import Price
from hango.core.settings import ProfileOverride, Settings

log = logging.getLogger(__name__)

FALLBACK_MAX_INPUT_TOKENS = 200_000
FALLBACK_TRIGGER_TOKENS = 170_000
FALLBACK_KEEP_LAST = 6

_1M = 1_000_000
_200K = 200_000

# Max input tokens per base model id (research note A5, from the models overview pages).
BUILTIN_WINDOWS: Mapping[str, int] = {
    "claude-opus-4-8": _1M,
    "claude-opus-4-7": _1M,
    "claude-opus-4-6": _1M,
    "claude-opus-4-5": _200K,
    "claude-sonnet-4-6": _1M,
    "claude-sonnet-4-5": _200K,
    "claude-haiku-4-5": _200K,
    "claude-opus-5": _1M,
    "claude-opus-5-5": _1M,
    "claude-sonnet-5": _1M,
    "claude-sonnet-5-5": _1M,
    "claude-haiku-5-5": _1M,
}


def _rates(base_input: float, cache_write_5m: float, cache_read: float, output: float) -> Price:
    return Price(
        base_input=base_input, cache_write_5m=cache_write_5m, cache_read=cache_read, output=output
    )


_OPUS_4_5_PLUS = _rates(5.0, 6.25, 0.50, 25.0)
_OPUS_4 = _rates(15.0, 18.75, 1.50, 75.0)
_SONNET_4 = _rates(3.0, 3.75, 0.30, 15.0)

# USD per million tokens, by rate key (see the module docstring for each row's source).
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

# A model the price table does not know is priced as a Sonnet 4.x (the middle tier).
FALLBACK_PRICE = _SONNET_4

# Minimum cacheable prefix in tokens, by rate key (see the module docstring).
MIN_CACHEABLE_TOKENS: Mapping[str, int] = {
    "claude-opus-5": 512,
    "claude-fable-5": 512,
    "claude-fable-5-1": 512,
    "claude-mythos-5": 512,
    "claude-mythos-5-1": 512,
    "claude-opus-4-8": 1024,
    "claude-sonnet-5": 1024,
    "claude-sonnet-4-6": 1024,
    "claude-sonnet-4-5": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4-0": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4-0": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-opus-4-7": 2048,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
}

# For a model not in that table (e.g. Opus 5.5, Sonnet 5.5, Haiku 5.5, unverified): the
# most common documented value.
DEFAULT_MIN_CACHEABLE_TOKENS = 1024

_DATE_SUFFIX = re.compile(r"[-@]\d{8}$")
_VARIANT_SUFFIX = re.compile(r"\[[^\]]*\]$")


def base_model_id(model: str) -> str:
    """The id without its snapshot date: ``claude-haiku-4-5-20251001`` -> ``claude-haiku-4-5``."""
    return _DATE_SUFFIX.sub("", model.strip())


def rate_key(model: str) -> str:
    """The id prices are looked up by: ``claude-sonnet-4-5-20250929[1m]`` -> ``claude-sonnet-4-5``
    (a bracketed variant changes the window, not the rates or the cache minimum)."""
    return base_model_id(_VARIANT_SUFFIX.sub("", model.strip()))


def known_price(model: str) -> Price | None:
    """The model's rates from the built-in table, or ``None`` when it does not know them."""
    return PRICES.get(rate_key(model))


def min_cacheable_tokens(model: str) -> int:
    """The model's built-in minimum cacheable prefix, or the documented default."""
    return MIN_CACHEABLE_TOKENS.get(rate_key(model), DEFAULT_MIN_CACHEABLE_TOKENS)


@dataclass(frozen=True)
class ModelProfile:
    """When to compact one model's requests, how much to keep, and what a call costs.

    Exactly one of ``keep_frac`` and ``keep_last`` (the unknown-model fallback) is set;
    ``price_known``: ``price`` came from the table or an override, not the fallback.
    """

    model: str
    max_input_tokens: int
    trigger_frac: float
    keep_frac: float | None
    summarizer_model: str
    known: bool
    keep_last: int | None = None
    # Where a mechanical truncation aims, as a share of the window (HANGO_CONTEXT_TARGET_FRAC).
    target_frac: float = 0.60
    price: Price = FALLBACK_PRICE
    price_known: bool = False
    min_cacheable_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS

    def __post_init__(self) -> None:
        if self.max_input_tokens <= 0:
            raise ValueError(f"{self.model}: max_input_tokens must be positive")
        if not 0 < self.trigger_frac <= 1:
            raise ValueError(f"{self.model}: trigger_frac must be in (0, 1]")
        if (self.keep_frac is None) == (self.keep_last is None):
            raise ValueError(f"{self.model}: set exactly one of keep_frac and keep_last")
        if self.keep_frac is not None and not 0 < self.keep_frac < 1:
            raise ValueError(f"{self.model}: keep_frac must be in (0, 1)")
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"{self.model}: keep_last must be at least 1")
        if not 0 < self.target_frac < 1:
            raise ValueError(f"{self.model}: target_frac must be in (0, 1)")
        if self.min_cacheable_tokens < 0:
            raise ValueError(f"{self.model}: min_cacheable_tokens must not be negative")

    @property
    def trigger_tokens(self) -> int:
        """Input tokens above which the request is compacted."""
        # The epsilon keeps e.g. 200,000 x 0.85 from flooring to 169,999 on float error.
        return int(self.max_input_tokens * self.trigger_frac + 1e-6)

    @property
    def target_tokens(self) -> int:
        """Where a truncation aims: well under the trigger, so the next calls fit as they are
        (never above it: the request would compact again on the next call)."""
        return min(int(self.max_input_tokens * self.target_frac + 1e-6), self.trigger_tokens)

    def kept_from(self, n_messages: int, first_real: int, ahead: int = 0) -> int:
        """Where the raw keep window starts among ``n_messages`` (the first ``first_real``
        a summary head), ``ahead`` more still to come and kept in its share: a compaction's
        keep boundary is there or, moved back to a group start, before it."""
        return n_messages - max(0, self.keep_count(n_messages - first_real + ahead) - ahead)

    def keep_count(self, n_messages: int) -> int:
        """How many of the latest ``n_messages`` to keep verbatim (at least one, if any)."""
        if n_messages <= 0:
            return 0
        if self.keep_frac is not None:
            # The epsilon keeps 30 x 0.1 = 3.0000000000000004 from rounding up to 4.
            return min(n_messages, max(1, math.ceil(n_messages * self.keep_frac - 1e-9)))
        return min(n_messages, self.keep_last or 1)


class Profiles:
    """Resolves a model name to its :class:`ModelProfile` (cached per model)."""

    def __init__(
        self,
        *,
        overrides: Mapping[str, ProfileOverride] | None = None,
        trigger_frac: float = 0.85,
        keep_frac: float = 0.10,
        target_frac: float = 0.60,
        summarizer_model: str | None = None,
        warned: set[str] | None = None,
    ) -> None:
        given = dict(overrides or {})
        # Exact keys first, then their base ids, so a dated key also covers its alias.
        self._overrides = {base_model_id(k): v for k, v in given.items()} | given
        self._trigger_frac = trigger_frac
        self._keep_frac = keep_frac
        self._target_frac = target_frac
        self._summarizer_model = summarizer_model
        self._resolved: dict[str, ModelProfile] = {}
        self._lock = threading.Lock()
        # Unknown models warned about; shared by every Profiles made from one Settings.
        self._warned = set() if warned is None else warned

    @classmethod
    def from_settings(cls, settings: Settings) -> Profiles:
        return cls(
            overrides=settings.model_profiles,
            trigger_frac=settings.context_trigger_frac,
            keep_frac=settings.context_keep_frac,
            target_frac=settings.context_target_frac,
            summarizer_model=settings.summarizer_model,
            warned=settings._unknown_models_warned,
        )

    def resolve(self, model: str) -> ModelProfile:
        with self._lock:
            profile = self._resolved.get(model)
            if profile is None:
                profile = self._build(model)
                self._resolved[model] = profile
                if not profile.known and model not in self._warned:
                    self._warned.add(model)
                    _warn_unknown(model)
            return profile

    def price(self, model: str) -> Price:
        """``model``'s price alone: no window is resolved, so none is warned about."""
        price: Price = _rates_of(model, self._override(model))["price"]
        return price

    def _override(self, model: str) -> ProfileOverride | None:
        return self._overrides.get(model) or self._overrides.get(base_model_id(model))

    def _build(self, model: str) -> ModelProfile:
        override = self._override(model)
        window = (
            override.max_input_tokens if override else BUILTIN_WINDOWS.get(base_model_id(model))
        )
        if window is None:
            return self._fallback(model)
        # The override's fields win; its fractions are never 0, so ``or`` falls back on None.
        given = override or ProfileOverride(max_input_tokens=window)
        return ModelProfile(
            model=model,
            max_input_tokens=window,
            trigger_frac=given.trigger_frac or self._trigger_frac,
            keep_frac=given.keep_frac or self._keep_frac,
            summarizer_model=given.summarizer_model or self._summarizer_model or model,
            known=True,
            target_frac=self._target_frac,
            **_rates_of(model, override),
        )

    def _fallback(self, model: str) -> ModelProfile:
        return ModelProfile(
            model=model,
            max_input_tokens=FALLBACK_MAX_INPUT_TOKENS,
            trigger_frac=FALLBACK_TRIGGER_TOKENS / FALLBACK_MAX_INPUT_TOKENS,
            keep_frac=None,
            keep_last=FALLBACK_KEEP_LAST,
            summarizer_model=self._summarizer_model or model,
            known=False,
            target_frac=self._target_frac,
            **_rates_of(model, None),
        )


def _rates_of(model: str, override: ProfileOverride | None) -> dict[str, Any]:
    """The profile's price and cache minimum: the override's, else the built-in tables'."""
    price = override.price if override is not None else None
    minimum = override.min_cacheable_tokens if override is not None else None
    table_price = known_price(model)
    return {
        "price": price or table_price or FALLBACK_PRICE,
        "price_known": price is not None or table_price is not None,
        "min_cacheable_tokens": min_cacheable_tokens(model) if minimum is None else minimum,
    }


def _warn_unknown(model: str) -> None:
    log.warning(
        "model %r has no profile: compacting at %d tokens and keeping the "
        "last %d messages; describe it in HANGO_MODEL_PROFILES",
        model,
        FALLBACK_TRIGGER_TOKENS,
        FALLBACK_KEEP_LAST,
    )
