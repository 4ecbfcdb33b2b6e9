"""Cost model: a pure simulator of Anthropic's prompt cache, and what caching saved.

``cache_model`` owns the cache simulator and the ledger of recorded or simulated cache
usage. Prices and each model's minimum cacheable prefix are facts of the model's profile
(:mod:`hango.core.profiles`, overridable through ``HANGO_MODEL_PROFILES``); this
package reads them from there.
"""

from hango.cost.cache_model import (
    DEFAULT_TTL_SECONDS,
    LOOKBACK_POSITIONS,
    MAX_BREAKPOINTS,
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
    prefix_keys,
    prefix_tokens,
)

__all__ = [
    "DEFAULT_TTL_SECONDS",
    "LOOKBACK_POSITIONS",
    "MAX_BREAKPOINTS",
    "CacheBlock",
    "CacheLedger",
    "CacheReport",
    "CacheUsage",
    "PrefixCache",
    "SizeOf",
    "TooManyBreakpointsError",
    "WireBlock",
    "blocks_from_request",
    "checked_breakpoints",
    "content_key",
    "format_reports",
    "lookback_positions",
    "prefix_keys",
    "prefix_tokens",
]
