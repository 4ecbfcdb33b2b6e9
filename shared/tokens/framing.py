"""What a request costs beyond its raw text, shared by every estimator.

An estimator here is a *text counter* (tokens of a piece of text, as a float) plus the
framing of the Messages API: a fixed cost per request, per message and per block, ~90
tokens per tool call, the serialized tool definitions with the tool-use preamble, images
at a flat rate. The constants come from real Claude sessions (docs/benchmarks.md has the
method): text counters are calibrated to the content (about 1.11 x cl100k of it), the
constants carry the rest. The two estimators differ only in their text counter.

Estimates are cached per object (message, system block, tool definition) while the
object is alive, so estimating a request that grew by k messages costs O(k) when the
caller keeps its message objects, which the loop does within a turn. The cache is keyed by
identity, never by content: messages read back from storage come with the figure stored
beside them, which the outgoing copy counts with instead (``StoredMessage.estimate``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence

from hango.core.identity import IdentityCache
from hango.core.messages import (
    ContentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    Request,
    TextBlock,
    ThinkingBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)

TextCounter = Callable[[str], float]
"""Tokens of a piece of text, before framing (a float: rounding happens per message)."""

# Framing, in tokens. The tool-call pair costs ~90 in total on real sessions; most of it
# sits on the tool_use (id, name, input framing), the rest on the tool_result.
REQUEST_OVERHEAD = 10
MESSAGE_OVERHEAD = 4
BLOCK_OVERHEAD = 3
TOOL_USE_OVERHEAD = 65
TOOL_RESULT_OVERHEAD = 25
TOOL_DEFINITION_OVERHEAD = 10
# The tool-use system prompt the API adds whenever tools are defined (346 tokens for
# tool_choice auto/none on Claude 4.x, per Anthropic's tool-use pricing page).
TOOLS_PREAMBLE = 346
# Images are charged at the documented ceiling (~1,600 tokens for an image at the 1.15
# megapixel resize limit): pixel sizes are not known here, and undercounting is what
# overflows. Opus 4.7+ reads larger images and can charge more.
IMAGE_TOKENS = 1_600
# System strings (``system="..."``) are not objects the identity cache can hold, so they
# are memoized by value; a session has very few distinct ones.
_SYSTEM_STRINGS_CACHED = 16
# The version of the rules above: bump it when a constant or the per-message arithmetic
# changes, so figures stored with messages by the previous rules are not reused.
FRAMING_VERSION = 1


class FramedEstimator:
    """An :class:`~hango.tokens.base.Estimator` made of a text counter plus API framing.

    A message's estimate counts every text of its blocks in full (a tool input as its
    :func:`compact_json`), so it is at least :meth:`estimate` of any one of them.
    """

    def __init__(self, name: str, count_text: TextCounter, calibration: str = "") -> None:
        self.name = name
        # What a stored per-message figure must match to be reused (see KeepsEstimates).
        parts = (name, calibration, f"framing-{FRAMING_VERSION}")
        self.signature = "/".join(part for part in parts if part)
        self._count_text = count_text
        self._messages: IdentityCache[Message, int] = IdentityCache()
        self._system_blocks: IdentityCache[TextBlock, int] = IdentityCache()
        self._tools: IdentityCache[ToolDefinition, int] = IdentityCache()
        self._system_string = functools.lru_cache(maxsize=_SYSTEM_STRINGS_CACHED)(
            self._text_block_tokens
        )

    def estimate(self, text: str) -> int:
        return _round_up(self._count_text(text)) if text else 0

    def estimate_message(self, message: Message) -> int:
        return self._messages.get(message, self._message_tokens)

    def estimate_request(self, request: Request) -> int:
        return (
            REQUEST_OVERHEAD
            + self._system_tokens(request)
            + self._tools_tokens(request.tool_definitions())
            + sum(self.estimate_message(message) for message in request.messages)
        )

    def _system_tokens(self, request: Request) -> int:
        if isinstance(request.system, str):
            return self._system_string(request.system)
        return sum(
            self._system_blocks.get(block, lambda block: self._text_block_tokens(block.text))
            for block in request.system_blocks()
        )

    def _tools_tokens(self, tools: tuple[ToolDefinition, ...]) -> int:
        if not tools:
            return 0
        return TOOLS_PREAMBLE + sum(self._tools.get(tool, self._tool_tokens) for tool in tools)

    def _tool_tokens(self, tool: ToolDefinition) -> int:
        # Cache markers are instructions to the API, not text the model reads.
        definition = {k: v for k, v in tool.to_api().items() if k != "cache_control"}
        serialized = json.dumps(definition, sort_keys=True, separators=(",", ":"))
        return TOOL_DEFINITION_OVERHEAD + self.estimate(serialized)

    def _text_block_tokens(self, text: str) -> int:
        return BLOCK_OVERHEAD + self.estimate(text)

    def _message_tokens(self, message: Message) -> int:
        content, framing = self._blocks_cost(message.blocks())
        return _round_up(content) + MESSAGE_OVERHEAD + framing

    def _blocks_cost(self, blocks: Sequence[ContentBlock]) -> tuple[float, int]:
        """(text tokens, framing tokens) of ``blocks``, added up."""
        costs = [self._block_cost(block) for block in blocks]
        return sum(content for content, _ in costs), sum(framing for _, framing in costs)

    def _block_cost(self, block: ContentBlock) -> tuple[float, int]:
        """(text tokens, framing tokens) of one content block."""
        if isinstance(block, TextBlock):
            return self._text(block.text), BLOCK_OVERHEAD
        if isinstance(block, ToolUseBlock):
            return self._text(compact_json(block.input)), TOOL_USE_OVERHEAD
        if isinstance(block, ToolResultBlock):
            return self._tool_result_cost(block)
        if isinstance(block, ImageBlock):
            return 0.0, IMAGE_TOKENS
        if isinstance(block, ThinkingBlock):
            return self._text(block.thinking), BLOCK_OVERHEAD
        if isinstance(block, RedactedThinkingBlock):
            return self._text(block.data), BLOCK_OVERHEAD
        # Unmodelled blocks (documents, server tools, ...) are counted as their JSON.
        return self._text(compact_json(block.to_api())), BLOCK_OVERHEAD

    def _tool_result_cost(self, block: ToolResultBlock) -> tuple[float, int]:
        if block.content is None or isinstance(block.content, str):
            return self._text(block.content or ""), TOOL_RESULT_OVERHEAD
        # Its parts (text, images, unmodelled blocks) cost what they cost in a message.
        content, framing = self._blocks_cost(block.content)
        return content, TOOL_RESULT_OVERHEAD + framing

    def _text(self, text: str) -> float:
        return self._count_text(text) if text else 0.0


def _round_up(tokens: float) -> int:
    # The epsilon keeps float noise (100 x 1.11 = 111.00000000000001) from adding a token.
    return math.ceil(tokens - 1e-9)


def compact_json(value: object) -> str:
    """The JSON text of ``value`` as a request carries it (no spaces, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
