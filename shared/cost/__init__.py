"""Cost model: Claude prices and a pure simulator of Anthropic's prompt cache.

``prices`` owns the price table and the cost arithmetic; ``cache_model`` owns the cache
simulator and the ledger of recorded or simulated cache usage. See each module for the
source of every fact.
"""

from shared.cost.cache_model import (
    DEFAULT_MIN_CACHEABLE_TOKENS,
    DEFAULT_TTL_SECONDS,
    LOOKBACK_POSITIONS,
    MAX_BREAKPOINTS,
    MIN_CACHEABLE_TOKENS,
    CacheBlock,
    CacheLedger,
    CacheReport,
    CacheUsage,
    PrefixCache,
    SizeOf,
    TooManyBreakpointsError,
    WireBlock,
    blocks_from_request,
    checked_breakpoints,
    content_key,
    format_reports,
    lookback_positions,
    min_cacheable_tokens,
    prefix_keys,
    prefix_tokens,
)
from shared.cost.prices import (
    CACHE_READ_MULTIPLIER,
    CACHE_WRITE_5M_MULTIPLIER,
    FALLBACK_PRICE,
    PRICES,
    Price,
    known_price,
    model_key,
    price_for,
)

__all__ = [
    "CACHE_READ_MULTIPLIER",
    "CACHE_WRITE_5M_MULTIPLIER",
    "DEFAULT_MIN_CACHEABLE_TOKENS",
    "DEFAULT_TTL_SECONDS",
    "FALLBACK_PRICE",
    "LOOKBACK_POSITIONS",
    "MAX_BREAKPOINTS",
    "MIN_CACHEABLE_TOKENS",
    "PRICES",
    "CacheBlock",
    "CacheLedger",
    "CacheReport",
    "CacheUsage",
    "PrefixCache",
    "Price",
    "SizeOf",
    "TooManyBreakpointsError",
    "WireBlock",
    "blocks_from_request",
    "checked_breakpoints",
    "content_key",
    "format_reports",
    "known_price",
    "lookback_positions",
    "min_cacheable_tokens",
    "model_key",
    "prefix_keys",
    "prefix_tokens",
    "price_for",
]
