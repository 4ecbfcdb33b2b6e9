"""Prompt-cache breakpoints: the stable system prefix and the summary message.

Where the breakpoint goes is decided during assembly, not guessed at call time:
``contribute`` runs at this middleware's position in the chain and records
``stable_system_index = len(assembly.system) - 1`` on the assembly, so blocks contributed
by later middleware (memory, which changes every turn) land after the breakpoint by
construction. The loop hands the finished assembly to the call as ``call.assembly``;
``wrap`` reads the recorded index from there. (The index
travels with the call rather than living on this instance, so one middleware instance
can serve concurrent sessions.)

``wrap`` sets ``cache_control`` on that system block and, when a compacted history opens
with the summary message, on the summary's last block: the summary is the same bytes on
every call until the next compaction, so it caches too. The API allows at most four
breakpoints per request; existing ones (tools, system, messages) are counted and a new
one is skipped rather than exceed the limit. Nothing at all happens when the provider
does not cache prompts. The request is copied, never edited.
"""

from __future__ import annotations

import dataclasses
import logging

from shared.compaction.validate import MAX_BREAKPOINTS, count_breakpoints
from shared.core.messages import (
    CacheControl,
    ContentBlock,
    ImageBlock,
    Message,
    Request,
    Response,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from shared.middleware.base import Assembly, Handler, ModelCall

logger = logging.getLogger(__name__)

EPHEMERAL = CacheControl(type="ephemeral")

_CACHEABLE = (TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock)


class PromptCacheMiddleware:
    """Marks the last stable system block and the summary message as cache breakpoints."""

    def __init__(self, provider_caches: bool) -> None:
        self.provider_caches = provider_caches

    def contribute(self, assembly: Assembly) -> Assembly:
        if not self.provider_caches:
            return assembly
        last = len(assembly.system) - 1
        return dataclasses.replace(assembly, stable_system_index=last if last >= 0 else None)

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        if not self.provider_caches:
            return call_next(call)
        request = place_breakpoints(
            call.request,
            stable_system_index=recorded_index(call),
            summary_message=call.summary_message_present,
        )
        return call_next(call if request is call.request else call.evolve(request=request))


def recorded_index(call: ModelCall) -> int | None:
    """The stable system index ``contribute`` recorded on the call's assembly, if any."""
    if call.assembly is None:
        logger.debug(
            "no assembly on the call for session %s: no system breakpoint", call.session_id
        )
        return None
    return call.assembly.stable_system_index


def place_breakpoints(
    request: Request, *, stable_system_index: int | None, summary_message: bool
) -> Request:
    """A copy of ``request`` with the two breakpoints set, as far as the limit allows."""
    budget = MAX_BREAKPOINTS - count_breakpoints(request)
    update: dict[str, object] = {}
    system = request.system_blocks()
    if stable_system_index is not None and 0 <= stable_system_index < len(system):
        marked = _mark_system(system, stable_system_index, budget)
        if marked is not None:
            update["system"], budget = marked, budget - 1
    if summary_message and request.messages:
        first = _mark_last_block(request.messages[0], budget)
        if first is not None:
            update["messages"] = (first, *request.messages[1:])
    return request.model_copy(update=update) if update else request


def _mark_system(
    system: tuple[TextBlock, ...], index: int, budget: int
) -> tuple[TextBlock, ...] | None:
    block = system[index]
    if block.cache_control is not None or not block.text or budget <= 0:
        return None
    marked = block.model_copy(update={"cache_control": EPHEMERAL})
    return (*system[:index], marked, *system[index + 1 :])


def _mark_last_block(message: Message, budget: int) -> Message | None:
    blocks = message.blocks()
    if not blocks or budget <= 0 or not _can_mark(blocks[-1]):
        return None
    marked = blocks[-1].model_copy(update={"cache_control": EPHEMERAL})
    return message.model_copy(update={"content": (*blocks[:-1], marked)})


def _can_mark(block: ContentBlock) -> bool:
    if not isinstance(block, _CACHEABLE) or block.cache_control is not None:
        return False
    # The API refuses cache_control on an empty text block.
    return not (isinstance(block, TextBlock) and not block.text)
