"""A pure simulator of Anthropic's prompt cache, and a ledger of what caching saved.

This module owns the flat block sequence the cache sees (:class:`CacheBlock`, built from
a wire :class:`Request` by :func:`blocks_from_request`), the simulated cache
(:class:`PrefixCache`), one call's split of the prompt (:class:`CacheUsage`) and the sums
over many calls, recorded or simulated (:class:`CacheLedger`, :class:`CacheReport`). It
does no I/O and counts no tokens: block sizes come from the caller.

Modelled after Anthropic's prompt caching documentation,
https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching (also served at
https://platform.claude.com/docs/en/build-with-claude/prompt-caching), "[docs]" below;
each fact is a statement of that page:

- The prefix is ordered tools -> system -> messages [docs]; it is cut into one block per
  tool definition, system block and message content block (plain-string content is one
  block).
- A ``cache_control`` marker makes its block a breakpoint; at most 4 per request, and
  top-level automatic caching takes one slot, on the last cacheable block [docs]. More
  than 4 raise :class:`TooManyBreakpointsError` (the API answers 400).
- A hit needs the content "100% identical" through the block [docs]. Entries are keyed by
  a chain hash over the block keys, so a change in any block invalidates every entry
  after it. A block's key is its exact JSON (key order included: "unstable JSON key
  order in tool_use inputs breaks hits" [docs]) *without* its ``cache_control`` markers,
  plus its section, and for a message block its role and whether it opens the message.
- Writes happen only at breakpoints [docs]: each breakpoint whose prefix reaches the
  minimum is recorded. Each breakpoint looks for a hit at its own position and at most
  20 positions before it, a run of consecutive ``tool_use`` or ``tool_result`` blocks
  counting as one position [docs]; the longest hit over all breakpoints is read.
- A prefix shorter than the model's minimum cacheable length is neither read nor
  written, and raises no error [docs] (the minimum is in the model's profile:
  ``ModelProfile.min_cacheable_tokens``).
- Usage [docs]: ``cache_read`` = the hit's prefix; ``cache_creation`` = from the end of the
  hit to the last breakpoint; ``input_tokens`` = everything after the last breakpoint.
- The 5-minute TTL, refreshed by each hit [docs], when the caller passes timestamps. An
  entry used at ``t`` is dead from ``t + ttl`` on. A (re)written breakpoint is stamped
  too; entries recorded without a timestamp never expire.

Not modelled: the 1-hour TTL (all writes are priced and expired as 5-minute ones) and
the TTL ordering rules; invalidation by anything outside the blocks (model,
``tool_choice``, thinking settings, ``speed``...): use one :class:`PrefixCache` per model
and settings; concurrency (an entry is readable only once the first response began),
eviction before the TTL and per-workspace isolation; tokens the API adds outside the
blocks (tool-use system prompt, message framing) unless the size function counts them;
earlier-turn thinking blocks the API drops. Whether a run of tool blocks inside the
look-back can be hit in its middle is not documented: here it can.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from hango.core.messages import (
    ContentBlock,
    RedactedThinkingBlock,
    Request,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    Usage,
)
from hango.core.price import Price
from hango.core.profiles import DEFAULT_MIN_CACHEABLE_TOKENS, ModelProfile

MAX_BREAKPOINTS = 4  # [docs]
LOOKBACK_POSITIONS = 20  # [docs]
DEFAULT_TTL_SECONDS = 300.0  # 5 minutes [docs]

# What the caller's size function measures: a tool definition or a content block
# (system blocks are text blocks).
WireBlock = ToolDefinition | ContentBlock
SizeOf = Callable[[WireBlock], int]

_RUN_KINDS = frozenset({"tool_use", "tool_result"})


class TooManyBreakpointsError(ValueError):
    """More than :data:`MAX_BREAKPOINTS` breakpoints: the API rejects the request (400)."""


@dataclass(frozen=True)
class CacheBlock:
    """One block of the prefix as the cache sees it.

    ``key`` is the block's content identity (markers excluded), ``tokens`` its size,
    ``marked`` whether it carries a breakpoint, and ``run`` the kind (``"tool_use"`` or
    ``"tool_result"``) whose consecutive blocks count as one look-back position.
    """

    key: str
    tokens: int
    marked: bool = False
    run: str | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"a block cannot have {self.tokens} tokens")


@dataclass(frozen=True)
class CacheUsage:
    """One call's prompt split three ways, as the API's ``usage`` reports it."""

    read: int
    write: int
    uncached: int

    @property
    def prompt(self) -> int:
        """Every input token of the call: the sum of the three."""
        return self.read + self.write + self.uncached

    @classmethod
    def from_usage(cls, usage: Usage) -> CacheUsage:
        """A recorded ``usage``; absent cache fields count as 0."""
        return cls(*usage.split())


# --- Block identity -----------------------------------------------------------------


def content_key(payload: object) -> str:
    """A hash of the payload's JSON, key order kept (the API sees the same bytes)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def prefix_keys(blocks: Sequence[CacheBlock]) -> list[str]:
    """The chain hash of every prefix: ``h[i] = hash(h[i-1], key[i])``, as the cache keys
    its entries (:class:`BlockTrail`), in hex."""
    return [BlockTrail.of(blocks).chain(i).hex() for i in range(len(blocks))]


def prefix_tokens(blocks: Sequence[CacheBlock]) -> list[int]:
    """The token length of every prefix (through block ``i`` inclusive)."""
    ends: list[int] = []
    total = 0
    for block in blocks:
        total += block.tokens
        ends.append(total)
    return ends


# --- Breakpoints and look-back ------------------------------------------------------


def checked_breakpoints(
    blocks: Sequence[CacheBlock], breakpoints: Sequence[int] | None = None
) -> tuple[int, ...]:
    """The sorted breakpoint positions (the marked blocks when none are given).

    Raises ``ValueError`` for a position outside the blocks and
    :class:`TooManyBreakpointsError` for more than :data:`MAX_BREAKPOINTS`.
    """
    if breakpoints is None:
        breakpoints = [i for i, block in enumerate(blocks) if block.marked]
    return _checked(breakpoints, len(blocks))


def _checked(breakpoints: Sequence[int], size: int) -> tuple[int, ...]:
    for position in breakpoints:
        if not 0 <= position < size:
            raise ValueError(f"breakpoint {position} is outside the {size} blocks")
    unique = tuple(sorted(set(breakpoints)))
    if len(unique) > MAX_BREAKPOINTS:
        raise TooManyBreakpointsError(
            f"{len(unique)} cache breakpoints; the API allows at most {MAX_BREAKPOINTS}"
        )
    return unique


def lookback_positions(
    blocks: Sequence[CacheBlock], end: int, limit: int = LOOKBACK_POSITIONS
) -> Iterator[int]:
    """The positions a breakpoint at ``end`` checks for a hit, latest first.

    ``end`` itself and at most ``limit`` positions before it; a step inside a run of
    blocks of the same ``run`` kind does not count.
    """
    return _lookback(lambda position: blocks[position].run, end, limit)


def _lookback(run_at: Callable[[int], str | None], end: int, limit: int) -> Iterator[int]:
    steps = 0
    position = end
    while True:
        yield position
        if position == 0:
            return
        earlier = run_at(position - 1)
        if earlier is None or earlier != run_at(position):
            steps += 1
        if steps > limit:
            return
        position -= 1


# --- A request's blocks, followed from one request to the next ---------------------


# A group's blocks and the offset of its last block that may carry a marker.
GroupBlocks = tuple[Sequence[CacheBlock], int | None]


class BlockTrail:
    """The blocks of a session's latest request: per block the chain hash and the token
    length of the prefix through it, and its ``run`` kind; the marked blocks.

    The blocks come in groups: the fixed part (tools, system), then one group per message.
    A session's next request is the previous one with a few messages changed near its end
    (the markers moved) and new ones appended, or after a compaction a new start:
    :meth:`update` keeps the blocks of the groups before the first change and hashes only
    the groups from there on, so a call costs what changed, not the length of the
    history. Only what the cache looks up is kept (flat lists, a digest per block).
    """

    def __init__(self) -> None:
        self._chains: list[bytes] = []
        self._ends: list[int] = []
        self._runs: list[str | None] = []
        self._marked: list[int] = []  # ascending
        self._starts: list[int] = []  # per group: the position of its first block
        self._cacheable: list[int | None] = []  # per group: its last cacheable position

    @classmethod
    def of(cls, blocks: Sequence[CacheBlock]) -> BlockTrail:
        """A trail of ``blocks`` as one group."""
        trail = cls()
        trail.update(0, [(blocks, None)])
        return trail

    def __len__(self) -> int:
        return len(self._chains)

    @property
    def groups(self) -> int:
        return len(self._starts)

    @property
    def total(self) -> int:
        """The tokens of every block."""
        return self._ends[-1] if self._ends else 0

    def chain(self, position: int) -> bytes:
        """The chain hash of the prefix through ``position``."""
        return self._chains[position]

    def end(self, position: int) -> int:
        """The token length of the prefix through ``position``."""
        return self._ends[position]

    def run(self, position: int) -> str | None:
        return self._runs[position]

    def marked(self) -> list[int]:
        """The positions of the marked blocks, in order."""
        return list(self._marked)

    def last_cacheable(self) -> int | None:
        """The position of the last block that may carry a marker."""
        return next((p for p in reversed(self._cacheable) if p is not None), None)

    def update(self, keep: int, groups: Iterable[GroupBlocks]) -> None:
        """Keep the first ``keep`` groups; ``groups`` follow them."""
        if not 0 <= keep <= len(self._starts):
            raise ValueError(f"cannot keep {keep} of {len(self._starts)} groups")
        cut = self._starts[keep] if keep < len(self._starts) else len(self._chains)
        del self._chains[cut:], self._ends[cut:], self._runs[cut:]
        del self._starts[keep:], self._cacheable[keep:]
        self._marked = [position for position in self._marked if position < cut]
        for blocks, cacheable in groups:
            self._append(blocks, cacheable)

    def _append(self, blocks: Sequence[CacheBlock], cacheable: int | None) -> None:
        start = len(self._chains)
        chain = self._chains[-1] if self._chains else b""
        end = self._ends[-1] if self._ends else 0
        for block in blocks:
            chain = hashlib.sha256(chain + b":" + block.key.encode()).digest()
            end += block.tokens
            self._chains.append(chain)
            self._ends.append(end)
            self._runs.append(block.run)
        self._marked += [start + i for i, block in enumerate(blocks) if block.marked]
        self._starts.append(start)
        self._cacheable.append(None if cacheable is None else start + cacheable)


def trail_breakpoints(trail: BlockTrail, *, automatic: bool) -> tuple[int, ...]:
    """The trail's breakpoints: its marked blocks, and with ``automatic`` (top-level
    ``cache_control``) the last cacheable block, which needs a free slot [docs]."""
    marks = trail.marked()
    last = trail.last_cacheable() if automatic else None
    if last is not None and len(marks) >= MAX_BREAKPOINTS:
        raise TooManyBreakpointsError(
            f"automatic caching needs a free slot; {len(marks)} explicit breakpoints"
        )
    return _checked(marks if last is None else [*marks, last], len(trail))


# --- The cache ----------------------------------------------------------------------


class PrefixCache:
    """The prefixes written so far, and what a new request reads and writes.

    One instance stands for one model's cache in one workspace. ``simulate`` is the only
    method that changes it; it is deterministic given its inputs.
    """

    def __init__(
        self,
        *,
        min_tokens: int = DEFAULT_MIN_CACHEABLE_TOKENS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        lookback: int = LOOKBACK_POSITIONS,
    ) -> None:
        if min_tokens < 0 or ttl_seconds <= 0 or lookback < 0:
            raise ValueError("min_tokens, lookback must be >= 0 and ttl_seconds > 0")
        self.min_tokens = min_tokens
        self.ttl_seconds = ttl_seconds
        self.lookback = lookback
        # Chain hash of a written prefix -> when it was last written or read (None: unknown).
        self._last_used: dict[bytes, float | None] = {}

    @classmethod
    def for_profile(
        cls, profile: ModelProfile, *, ttl_seconds: float = DEFAULT_TTL_SECONDS
    ) -> PrefixCache:
        """A cache with the minimum cacheable length of the model's profile."""
        return cls(min_tokens=profile.min_cacheable_tokens, ttl_seconds=ttl_seconds)

    def __len__(self) -> int:
        """How many prefixes are held (expired ones included until next looked up)."""
        return len(self._last_used)

    def simulate(
        self,
        blocks: Sequence[CacheBlock],
        breakpoints: Sequence[int] | None = None,
        *,
        now: float | None = None,
    ) -> CacheUsage:
        """Send one request: what it reads, writes and pays uncached; record its writes.

        ``breakpoints`` are block positions (default: the marked blocks); ``now`` is the
        request time in seconds, needed only for TTL expiry.
        """
        marks = checked_breakpoints(blocks, breakpoints)
        return self.send(BlockTrail.of(blocks), marks, now=now)

    def send(
        self, trail: BlockTrail, marks: Sequence[int], *, now: float | None = None
    ) -> CacheUsage:
        """:meth:`simulate` for a trail and its checked breakpoints (sorted positions)."""
        total = trail.total
        if not marks or trail.end(marks[-1]) < self.min_tokens:
            return CacheUsage(read=0, write=0, uncached=total)
        hits = [self._latest_hit(trail, mark, now) for mark in marks]
        hit = max((h for h in hits if h is not None), default=None)
        read = 0 if hit is None else trail.end(hit)
        written = [mark for mark in marks if trail.end(mark) >= self.min_tokens]
        for position in written if hit is None else [hit, *written]:
            self._last_used[trail.chain(position)] = now
        last = trail.end(marks[-1])
        return CacheUsage(read=read, write=last - read, uncached=total - last)

    def _latest_hit(self, trail: BlockTrail, mark: int, now: float | None) -> int | None:
        for position in _lookback(trail.run, mark, self.lookback):
            if self._alive(trail.chain(position), now):
                return position
        return None

    def _alive(self, key: bytes, now: float | None) -> bool:
        if key not in self._last_used:
            return False
        used = self._last_used[key]
        if now is not None and used is not None and now - used >= self.ttl_seconds:
            del self._last_used[key]
            return False
        return True


# --- From a wire Request ------------------------------------------------------------


@dataclass(frozen=True)
class _Placed:
    """A wire block and where it sits: ``tools``, ``system`` or a message role."""

    section: str
    opens_message: bool
    block: WireBlock

    def key(self) -> str:
        return content_key(
            {"at": self.section, "opens": self.opens_message, "block": _unmarked(self.block)}
        )

    def marked(self) -> bool:
        if getattr(self.block, "cache_control", None) is not None:
            return True
        if isinstance(self.block, ToolResultBlock) and isinstance(self.block.content, tuple):
            return any(inner.cache_control is not None for inner in self.block.content)
        return False

    def run(self) -> str | None:
        kind = getattr(self.block, "type", None)
        return kind if kind in _RUN_KINDS else None

    def cacheable(self) -> bool:
        """Whether the block may carry a marker: not thinking, not empty text [docs]."""
        if isinstance(self.block, ThinkingBlock | RedactedThinkingBlock):
            return False
        return not (isinstance(self.block, TextBlock) and not self.block.text)


def _unmarked(block: WireBlock) -> object:
    """The block's JSON without ``cache_control``, also inside a tool result's content."""
    data = {k: v for k, v in block.to_api().items() if k != "cache_control"}
    content = data.get("content")
    if isinstance(content, list):
        data["content"] = [
            {k: v for k, v in item.items() if k != "cache_control"}
            if isinstance(item, dict)
            else item
            for item in content
        ]
    return data


def _placed_groups(request: Request, first: int = 0) -> Iterator[list[_Placed]]:
    """The request's blocks by group: the fixed part (group 0), then one per message; from
    group ``first`` on."""
    if first == 0:
        yield [
            *(_Placed("tools", False, tool) for tool in request.tool_definitions()),
            *(_Placed("system", False, block) for block in request.system_blocks()),
        ]
    for message in request.sent_messages()[max(first - 1, 0) :]:
        yield [_Placed(message.role, i == 0, block) for i, block in enumerate(message.blocks())]


def request_groups(request: Request, sizes: SizeOf, first: int = 0) -> Iterator[GroupBlocks]:
    """The blocks of the request's groups from ``first`` on, for :meth:`BlockTrail.update`.

    Each block's marker is its own ``cache_control``; top-level automatic caching is the
    trail's to place (:func:`trail_breakpoints`).
    """
    for placed in _placed_groups(request, first):
        blocks = [
            CacheBlock(key=p.key(), tokens=sizes(p.block), marked=p.marked(), run=p.run())
            for p in placed
        ]
        cacheable = [i for i, p in enumerate(placed) if p.cacheable()]
        yield blocks, cacheable[-1] if cacheable else None


def automatic_caching(request: Request) -> bool:
    """Whether the request asks for automatic caching (top-level ``cache_control``)."""
    return (request.model_extra or {}).get("cache_control") is not None


def _automatic_breakpoint(request: Request, placed: Sequence[_Placed]) -> int | None:
    """Where top-level ``cache_control`` puts its breakpoint: the last cacheable block."""
    if not automatic_caching(request):
        return None
    cacheable = [i for i, p in enumerate(placed) if p.cacheable()]
    return cacheable[-1] if cacheable else None


def _sizes(placed: Sequence[_Placed], sizes: SizeOf | Sequence[int]) -> list[int]:
    if callable(sizes):
        return [sizes(p.block) for p in placed]
    if len(sizes) != len(placed):
        raise ValueError(f"{len(sizes)} sizes for {len(placed)} blocks")
    return list(sizes)


def blocks_from_request(request: Request, sizes: SizeOf | Sequence[int]) -> tuple[CacheBlock, ...]:
    """The request's blocks in prefix order, sized by ``sizes`` (a function or a list).

    Marked blocks are its ``cache_control`` markers, plus the last cacheable block when
    the request asks for automatic caching (top-level ``cache_control``, kept as an
    extra key). Automatic caching with 4 explicit markers raises
    :class:`TooManyBreakpointsError` [docs].
    """
    placed = [p for group in _placed_groups(request) for p in group]
    counts = _sizes(placed, sizes)
    automatic = _automatic_breakpoint(request, placed)
    explicit = sum(p.marked() for p in placed)
    if automatic is not None and explicit >= MAX_BREAKPOINTS:
        raise TooManyBreakpointsError(
            f"automatic caching needs a free slot; {explicit} explicit breakpoints"
        )
    return tuple(
        CacheBlock(key=p.key(), tokens=n, marked=p.marked() or i == automatic, run=p.run())
        for i, (p, n) in enumerate(zip(placed, counts, strict=True))
    )


# --- Sums over many calls -----------------------------------------------------------


@dataclass(frozen=True)
class CacheReport:
    """Token sums over many calls and what they cost.

    ``unreported`` counts recorded calls whose usage carried neither cache field (a
    provider that does not report caching): their whole prompt is counted uncached.
    """

    requests: int = 0
    read_tokens: int = 0
    write_tokens: int = 0
    uncached_tokens: int = 0
    unreported: int = 0

    @property
    def prompt_tokens(self) -> int:
        return self.read_tokens + self.write_tokens + self.uncached_tokens

    @property
    def read_ratio(self) -> float:
        """Share of all prompt tokens read from the cache (0 with no tokens)."""
        return self._share(self.read_tokens)

    @property
    def write_ratio(self) -> float:
        return self._share(self.write_tokens)

    @property
    def uncached_ratio(self) -> float:
        return self._share(self.uncached_tokens)

    def _share(self, tokens: int) -> float:
        return tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def input_cost_usd(self, price: Price) -> float:
        return price.input_cost(self.read_tokens, self.write_tokens, self.uncached_tokens)

    def uncached_cost_usd(self, price: Price) -> float:
        """What the same prompts would cost with no caching at all."""
        return price.input_cost(0, 0, self.prompt_tokens)

    def relative_input_cost(self, price: Price) -> float:
        """Input cost as a fraction of the all-uncached cost (1.0 with no tokens)."""
        baseline = self.uncached_cost_usd(price)
        return self.input_cost_usd(price) / baseline if baseline else 1.0

    def plus(self, usage: CacheUsage, *, reported: bool = True) -> CacheReport:
        return replace(
            self,
            requests=self.requests + 1,
            read_tokens=self.read_tokens + usage.read,
            write_tokens=self.write_tokens + usage.write,
            uncached_tokens=self.uncached_tokens + usage.uncached,
            unreported=self.unreported + (0 if reported else 1),
        )


class CacheLedger:
    """Accumulates calls, simulated (:class:`CacheUsage`) or recorded (:class:`Usage`)."""

    def __init__(self) -> None:
        self._report = CacheReport()

    @property
    def report(self) -> CacheReport:
        return self._report

    def add(self, usage: CacheUsage) -> None:
        self._report = self._report.plus(usage)

    def add_usage(self, usage: Usage) -> None:
        """A real ``Response.usage``; one with no cache field at all is counted unreported."""
        reported = (
            usage.cache_read_input_tokens is not None
            or usage.cache_creation_input_tokens is not None
        )
        self._report = self._report.plus(CacheUsage.from_usage(usage), reported=reported)


def format_reports(reports: Mapping[str, CacheReport], price: Price) -> str:
    """A plain-text table, one row per labelled report (e.g. recorded vs simulated)."""
    width = max([len(label) for label in reports] + [5])
    header = (
        f"{'':<{width}} {'calls':>6} {'prompt':>12} {'read':>6} {'write':>6} "
        f"{'uncached':>8} {'input $':>10} {'relative':>8}"
    )
    rows = [
        f"{label:<{width}} {r.requests:>6} {r.prompt_tokens:>12,} {r.read_ratio:>6.3f} "
        f"{r.write_ratio:>6.3f} {r.uncached_ratio:>8.4f} {r.input_cost_usd(price):>10.4f} "
        f"{r.relative_input_cost(price):>8.3f}"
        for label, r in reports.items()
    ]
    return "\n".join([header, *rows])
