"""The cache report of a run: simulated from the requests sent, or summed from real usage.

:class:`CacheMeter` runs every request a session sent through one :class:`PrefixCache`
(the model's minimum from its profile) and keeps the :class:`CacheLedger`; block sizes
come from the configured estimator (:func:`estimated_sizes`). :func:`cache_json` is the
``"cache"`` object the commands print (``hango replay --json``, ``hango simulate
--json``), priced with the profile's :class:`~hango.core.price.Price`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hango.core.messages import Message, Request, Usage
from hango.core.price import Price
from hango.core.profiles import ModelProfile
from hango.core.sent import SentMessages
from hango.cost.cache_model import (
    DEFAULT_TTL_SECONDS,
    BlockTrail,
    CacheLedger,
    CacheReport,
    CacheUsage,
    PrefixCache,
    SizeOf,
    WireBlock,
    automatic_caching,
    request_groups,
    trail_breakpoints,
)
from hango.tokens.base import Estimator


def estimated_sizes(estimator: Estimator) -> SizeOf:
    """A block's tokens as the estimator counts its JSON (markers left out).

    Nothing is remembered: the meter sizes only the blocks of the messages that changed
    since the previous request (:class:`CacheMeter`).
    """

    def size_of(block: WireBlock) -> int:
        data = {k: v for k, v in block.to_api().items() if k != "cache_control"}
        return estimator.estimate(json.dumps(data, ensure_ascii=False, separators=(",", ":")))

    return size_of


class CacheMeter:
    """One session's requests through one simulated cache, and the running totals.

    The blocks of the latest request are kept as a :class:`BlockTrail`. The next request
    keeps the trail's groups up to the first message that differs from the previous
    request's (:func:`first_difference`, a comparison at C speed of shared objects), and
    only the messages from there on are sized and hashed: in a session's steady state a
    few at its end, after a compaction all of them once.
    """

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
        self.trail = BlockTrail()
        self._previous: Request | None = None

    @property
    def report(self) -> CacheReport:
        return self.ledger.report

    def add(self, request: Request, *, now: float | None = None) -> CacheUsage:
        """What ``request`` reads, writes and pays uncached, sent at ``now`` (seconds)."""
        keep = self._groups_kept(request)
        self._previous = None  # until the trail is whole again
        self.trail.update(keep, request_groups(request, self.sizes, first=keep))
        self._previous = request
        marks = trail_breakpoints(self.trail, automatic=automatic_caching(request))
        usage = self.cache.send(self.trail, marks, now=now)
        self.ledger.add(usage)
        return usage

    def _groups_kept(self, request: Request) -> int:
        """How many of the trail's groups ``request`` shares with the previous request."""
        previous = self._previous
        if previous is None or not _same_fixed_part(previous, request):
            return 0
        first = copy_difference(previous, request)
        if first is None:
            first = first_difference(previous.sent_messages(), request.sent_messages())
        return 1 + min(first, len(request.messages))


def first_difference(old: Sequence[Message], new: Sequence[Message]) -> int:
    """The first position where ``new`` differs from ``old`` (their common length if none).

    Successive requests of a session share their message objects, so slices compare at C
    speed (identical objects are equal without a look inside); the difference is found by
    halving, never by a Python loop over the history.
    """
    common = min(len(old), len(new))
    if tuple(old[:common]) == tuple(new[:common]):
        return common
    low, high = 0, common  # old[:low] == new[:low]; the first difference is below high
    while high - low > 1:
        middle = (low + high) // 2
        if tuple(old[low:middle]) == tuple(new[low:middle]):
            low = middle
        else:
            high = middle
    return low


def copy_difference(old: Request, new: Request) -> int | None:
    """Where ``new`` may first differ from ``old``, from what the copy that made both
    requests' messages knows changed between their versions (``None``: not made by one
    copy, or it does not know). Below that position they differ only where one of them is
    marked for the cache.

    Without comparing the history: a request holds up to the window's worth of messages
    (~70,000 short ones), and comparing them on every call made a long replay quadratic.
    The answer is at or below the first real difference (a position redone into an equal
    message counts as changed); the meter then re-sizes a little more, same figures.
    """
    before, after = old.messages, new.messages
    if not (isinstance(before, SentMessages) and isinstance(after, SentMessages)):
        return None
    if before.source is not after.source:
        return None
    changed = after.source.changed_since(before.version, after.version)
    if changed is None:
        return None
    common = min(len(before), len(after), changed)
    old_sent, new_sent = old.sent_messages(), new.sent_messages()
    for index in sorted({*old.marks, *new.marks}):
        if index >= common:
            break
        if old_sent[index] is not new_sent[index] and old_sent[index] != new_sent[index]:
            return index
    return common


def _same_fixed_part(one: Request, other: Request) -> bool:
    return (one.tools is other.tools or one.tools == other.tools) and (
        one.system is other.system or one.system == other.system
    )


def recorded_report(usages: list[Usage]) -> CacheReport:
    """The sums of real ``usage`` figures (a provider's, or a transcript's)."""
    ledger = CacheLedger()
    for usage in usages:
        ledger.add_usage(usage)
    return ledger.report


@dataclass(frozen=True)
class UsageTotals:
    """Real ``usage`` summed over calls, priced call by call: what a session has paid.

    The cost is added per call with the price in effect then, so a later change of the
    price table does not rewrite what past calls cost.
    """

    calls: int = 0
    read_tokens: int = 0
    write_tokens: int = 0
    uncached_tokens: int = 0
    output_tokens: int = 0
    input_cost_usd: float = 0.0

    def plus(self, usage: Usage, price: Price) -> UsageTotals:
        """These totals with one more call's ``usage`` (absent cache fields count as 0)."""
        read, write, uncached = usage.split()
        return UsageTotals(
            calls=self.calls + 1,
            read_tokens=self.read_tokens + read,
            write_tokens=self.write_tokens + write,
            uncached_tokens=self.uncached_tokens + uncached,
            output_tokens=self.output_tokens + usage.output_tokens,
            input_cost_usd=self.input_cost_usd + price.input_cost(read, write, uncached),
        )

    @property
    def prompt_tokens(self) -> int:
        return self.read_tokens + self.write_tokens + self.uncached_tokens

    @property
    def read_ratio(self) -> float | None:
        """Share of the prompt tokens read from the cache; ``None`` before any token."""
        return self.read_tokens / self.prompt_tokens if self.prompt_tokens else None


def totals_json(totals: UsageTotals) -> dict[str, Any]:
    """Real usage totals as a JSON object (``hango sessions show --json``, ``simulate``)."""
    ratio = totals.read_ratio
    return {
        "read_tokens": totals.read_tokens,
        "write_tokens": totals.write_tokens,
        "uncached_tokens": totals.uncached_tokens,
        "output_tokens": totals.output_tokens,
        "read_ratio": None if ratio is None else round(ratio, 4),
        "input_cost_usd": round(totals.input_cost_usd, 6),
    }


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
