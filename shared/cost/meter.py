"""The cache report of a run: simulated from the requests sent, or summed from real usage.

:class:`CacheMeter` runs every request a session sent through one :class:`PrefixCache`
(the model's minimum from its profile) and keeps the :class:`CacheLedger`; block sizes
come from the configured estimator (:func:`estimated_sizes`). :func:`cache_json` is the
``"cache"`` object the commands print (``hango replay --json``, ``hango simulate
--json``), priced with the profile's :class:`~shared.core.price.Price`.
"""

from __future__ import annotations

import json
from typing import Any

from shared.core.messages import Request, Usage
from shared.core.price import Price
from shared.core.profiles import ModelProfile
from shared.cost.cache_model import (
    DEFAULT_TTL_SECONDS,
    CacheLedger,
    CacheReport,
    CacheUsage,
    PrefixCache,
    SizeOf,
    WireBlock,
    blocks_from_request,
)
from shared.tokens.base import Estimator


def estimated_sizes(estimator: Estimator) -> SizeOf:
    """A block's tokens as the estimator counts its JSON (the same text is counted once)."""
    known: dict[str, int] = {}

    def size_of(block: WireBlock) -> int:
        data = {k: v for k, v in block.to_api().items() if k != "cache_control"}
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        tokens = known.get(text)
        if tokens is None:
            tokens = known[text] = estimator.estimate(text)
        return tokens

    return size_of


class CacheMeter:
    """One session's requests through one simulated cache, and the running totals."""

    def __init__(
        self,
        profile: ModelProfile,
        sizes: SizeOf,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> None:
        self.profile = profile
        self.sizes = sizes
        self.cache = PrefixCache.for_profile(profile, ttl_seconds=ttl_seconds)
        self.ledger = CacheLedger()

    @property
    def report(self) -> CacheReport:
        return self.ledger.report

    def add(self, request: Request, *, now: float | None = None) -> CacheUsage:
        """What ``request`` reads, writes and pays uncached, sent at ``now`` (seconds)."""
        usage = self.cache.simulate(blocks_from_request(request, self.sizes), now=now)
        self.ledger.add(usage)
        return usage


def recorded_report(usages: list[Usage]) -> CacheReport:
    """The sums of real ``usage`` figures (a provider's, or a transcript's)."""
    ledger = CacheLedger()
    for usage in usages:
        ledger.add_usage(usage)
    return ledger.report


def cache_json(report: CacheReport, price: Price) -> dict[str, Any]:
    """The ``"cache"`` object of a command's JSON report: tokens, shares and input cost."""
    return {
        "requests": report.requests,
        "prompt_tokens": report.prompt_tokens,
        "read_tokens": report.read_tokens,
        "write_tokens": report.write_tokens,
        "uncached_tokens": report.uncached_tokens,
        "read_ratio": round(report.read_ratio, 4),
        "write_ratio": round(report.write_ratio, 4),
        "uncached_ratio": round(report.uncached_ratio, 4),
        "input_cost_usd": round(report.input_cost_usd(price), 6),
        "uncached_cost_usd": round(report.uncached_cost_usd(price), 6),
        "relative_input_cost": round(report.relative_input_cost(price), 4),
    }
