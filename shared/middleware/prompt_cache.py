"""Prompt-cache breakpoints that roll with the conversation.

Every call re-sends the whole conversation; the provider bills a prompt token read from
its prefix cache at a tenth of the base price, so the breakpoints decide most of a long
session's input cost. They go, in order of value, on:

1. **the newest message's last block** (the rolling breakpoint): the call writes the
   whole conversation, and the next call, which is this one plus a reply and a tool
   result, reads it back;
2. **a bridge**, only when needed: the last block of the message the previous call ended
   with, when it sits 20 or more blocks before the newest one (a parallel tool batch adds
   many blocks at once). The provider looks for a hit at most 20 blocks before a
   breakpoint, so without the bridge consecutive calls would never meet;
3. **the last stable system block**: tools and system are the same bytes on every call
   (the assembly is fixed when the loop is built), so after a compaction, when every
   message changed, this prefix is still read;
4. **an anchor before a truncation step**, on the call where the truncation middleware
   changed early history (``ModelCall.changed_from``): the last block before the first
   changed message, so the unchanged part is read and only the rest is written again;
5. **the summary (head) message**, when a compacted history opens with one: it is the
   same bytes on every call until the next compaction.

Where the system breakpoint goes is decided during assembly, not guessed at call time:
``contribute`` records ``stable_system_index = len(assembly.system) - 1`` at this
middleware's position in the chain, so blocks contributed by later middleware (memory,
which changes every turn) land after it by construction. The index travels with the call
(``call.assembly``), so one instance can serve concurrent sessions.

The API allows at most four breakpoints, counting the caller's own markers and top-level
automatic caching; a breakpoint that does not fit is skipped, lowest value first. A
breakpoint whose prefix is estimated under the model's minimum cacheable length is
skipped too: the provider would neither read nor write it. Nothing happens at all when
the provider does not cache prompts. The request is copied, never edited.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hango.compaction.validate import MAX_BREAKPOINTS, count_breakpoints
from hango.core.identity import HeldMemo
from hango.core.messages import (
    CacheControl,
    ContentBlock,
    ImageBlock,
    Message,
    Request,
    Response,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    WireModel,
    message_json,
)
from hango.core.sent import live_view
from hango.middleware.base import Assembly, Handler, ModelCall
from hango.tokens.base import Estimator
from hango.tokens.measure import FixedEstimate

EPHEMERAL = CacheControl(type="ephemeral")
# EPHEMERAL's key and JSON as a block carries them, after the block's other keys.
_MARKER = b',"cache_control":{"type":"ephemeral"}'

# The provider checks for a hit at a breakpoint and at most this many blocks before it.
# Counted here block by block (a run of tool blocks is not collapsed), which can only
# place a bridge where the provider would not strictly need one.
LOOKBACK_BLOCKS = 20

_CACHEABLE = (TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock)


@dataclass(frozen=True)
class CachePolicy:
    """What the breakpoints need to know of the model: its minimum cacheable prefix, checked
    only when an ``estimator`` sizes the prefixes."""

    min_tokens: int = 0
    estimator: Estimator | None = None
    # The marked system blocks, per system tuple and marks: the loop sends the same system
    # on every call, so the marked copy, and the JSON made from it, are made once.
    marked_systems: HeldMemo[tuple[TextBlock, ...]] = field(
        default_factory=HeldMemo, init=False, compare=False, repr=False
    )

    @functools.cached_property
    def fixed(self) -> FixedEstimate | None:
        """The fixed part's estimate, remembered across calls (with an estimator)."""
        return None if self.estimator is None else FixedEstimate(self.estimator)


class PromptCacheMiddleware:
    """Places the rolling, bridge, system and summary breakpoints on each request."""

    def __init__(self, provider_caches: bool, policy: CachePolicy | None = None) -> None:
        self.provider_caches = provider_caches
        self.policy = policy or CachePolicy()

    def contribute(self, assembly: Assembly) -> Assembly:
        if not self.provider_caches:
            return assembly
        last = len(assembly.system) - 1
        return dataclasses.replace(assembly, stable_system_index=last if last >= 0 else None)

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        if not self.provider_caches:
            return call_next(call)
        assembly = call.assembly  # where ``contribute`` recorded the stable system index
        request = place_breakpoints(
            call.request,
            # No assembly (a caller that builds its calls itself): no system breakpoint.
            stable_system_index=None if assembly is None else assembly.stable_system_index,
            summary_message=call.first_real > 0,
            policy=self.policy,
            changed_from=call.changed_from,
        )
        return call_next(call if request is call.request else call.evolve(request=request))


# A breakpoint target: ("system", index) or (message index, block index).
_Target = tuple[str, int] | tuple[int, int]


def place_breakpoints(
    request: Request,
    *,
    stable_system_index: int | None,
    summary_message: bool,
    policy: CachePolicy | None = None,
    changed_from: int | None = None,
) -> Request:
    """A copy of ``request`` with the breakpoints set, as far as the limit allows."""
    policy = policy or CachePolicy()
    # Top-level automatic caching takes one of the four slots.
    automatic = (request.model_extra or {}).get("cache_control") is not None
    budget = MAX_BREAKPOINTS - count_breakpoints(request) - automatic
    chosen: list[_Target] = []
    for target in _targets(request, stable_system_index, summary_message, changed_from):
        if len(chosen) >= budget:
            break
        if target in chosen or _already_marked(request, target):
            continue
        if _reaches(request, target, policy):
            chosen.append(target)
    return _marked(request, chosen, policy) if chosen else request


def _targets(
    request: Request,
    stable_system_index: int | None,
    summary_message: bool,
    changed_from: int | None,
) -> list[_Target]:
    """Every breakpoint worth placing, most valuable first."""
    messages = request.messages
    newest = _last_markable(messages, len(messages) - 1)
    bridge = None if newest is None else _bridge(messages, newest)
    blocks = request.system_blocks()
    system: _Target | None = None
    index = stable_system_index
    if index is not None and 0 <= index < len(blocks) and _cacheable(blocks[index]):
        system = ("system", index)
    anchor = None
    if changed_from is not None:
        anchor = _last_markable(messages, min(changed_from, len(messages)) - 1)
    head = _last_markable(messages, 0) if summary_message and messages else None
    return [t for t in (newest, bridge, system, anchor, head) if t is not None]


def _last_markable(messages: Sequence[Message], index: int) -> tuple[int, int] | None:
    """The last block of ``messages[index]`` that may carry a marker (marked or not)."""
    if index < 0:
        return None
    blocks = messages[index].blocks()
    for position in range(len(blocks) - 1, -1, -1):
        if _cacheable(blocks[position]):
            return (index, position)
    return None


def _bridge(messages: Sequence[Message], newest: tuple[int, int]) -> tuple[int, int] | None:
    """The end of the previous call's conversation, when the newest breakpoint cannot see it.

    The previous call ended with the newest message before the latest assistant reply
    (the reply and what answered it are what this call adds).
    """
    reply = next((i for i in range(newest[0], -1, -1) if messages[i].role == "assistant"), None)
    previous = None if reply is None else _last_markable(messages, reply - 1)
    if previous is None:
        return None
    return previous if _blocks_between(messages, previous, newest) >= LOOKBACK_BLOCKS else None


def _blocks_between(
    messages: Sequence[Message], start: tuple[int, int], end: tuple[int, int]
) -> int:
    """How many blocks ``end`` lies after ``start`` in the flat block sequence."""
    if start[0] == end[0]:
        return end[1] - start[1]
    between = sum(len(messages[i].blocks()) for i in range(start[0] + 1, end[0]))
    return len(messages[start[0]].blocks()) - start[1] + between + end[1]


def _reaches(request: Request, target: _Target, policy: CachePolicy) -> bool:
    """Whether the prefix through ``target`` is estimated at the minimum cacheable length
    or more (always, without an estimator); messages are added from the start only until
    the minimum is reached, a handful however long the history."""
    minimum, fixed = policy.min_tokens, policy.fixed
    if fixed is None or minimum <= 0:
        return True
    total = fixed(request)
    where = target[0]
    if not isinstance(where, int) or total >= minimum:
        return total >= minimum
    estimate = fixed.estimator.estimate_message
    messages = request.messages
    for index in range(min(where + 1, len(messages))):  # no slice: no copy of the history
        total += estimate(messages[index])
        if total >= minimum:
            return True
    return False


def _marked(request: Request, chosen: Sequence[_Target], policy: CachePolicy) -> Request:
    update: dict[str, object] = {}
    system_marks = frozenset(index for where, index in chosen if where == "system")
    if system_marks:
        system = request.system_blocks()
        update["system"] = policy.marked_systems.get(
            (system,), (system_marks,), lambda: _with_markers(system, system_marks)
        )
    by_message: dict[int, set[int]] = {}
    for where, index in chosen:
        if isinstance(where, int):
            by_message.setdefault(where, set()).add(index)
    view, marks = live_view(request.messages), None
    if view is not None and not request.marks:  # the session's copy keeps the marks' JSON
        marks = view.source.marked(by_message, _marked_with_json, view.version)
    sent = request.sent_messages()
    marks = marks or {n: _mark_blocks(sent[n], at) for n, at in by_message.items()}
    return request.with_marks(marks, update)


def _mark_blocks(message: Message, positions: Collection[int]) -> Message:
    return message.model_copy(update={"content": _with_markers(message.blocks(), positions)})


def _marked_with_json(message: Message, at: Collection[int], part: bytes) -> tuple[Message, bytes]:
    """``message`` marked at ``at``, and the form's JSON: at its last block alone, ``part``
    (the message's) with the marker written into that block, as pydantic writes the field
    last and no unknown key follows it (nor one set already); else the form serialized."""
    marked, content = _mark_blocks(message, at), message.content
    last = content[-1] if isinstance(content, tuple) and content else None
    if last is None or set(at) != {len(content) - 1} or message.model_extra or last.model_extra:
        return marked, message_json(marked)
    if "cache_control" in last.model_fields_set:  # even to null: the key is in ``part``
        return marked, message_json(marked)
    return marked, part[:-3] + _MARKER + part[-3:]


BlockT = TypeVar("BlockT", bound=WireModel)


def _with_markers(blocks: Sequence[BlockT], at: Collection[int]) -> tuple[BlockT, ...]:
    """``blocks`` with a breakpoint on those at the positions ``at``."""
    marked = {"cache_control": EPHEMERAL}
    return tuple(
        block.model_copy(update=marked) if n in at else block for n, block in enumerate(blocks)
    )


def _cacheable(block: ContentBlock) -> bool:
    # The API refuses cache_control on an empty text block.
    return isinstance(block, _CACHEABLE) and not (isinstance(block, TextBlock) and not block.text)


def _already_marked(request: Request, target: _Target) -> bool:
    """A target the caller marked already: it is served without a slot of ours."""
    where, index = target
    if isinstance(where, int):
        block: ContentBlock = request.sent_messages()[where].blocks()[index]
    else:
        block = request.system_blocks()[index]
    return getattr(block, "cache_control", None) is not None
