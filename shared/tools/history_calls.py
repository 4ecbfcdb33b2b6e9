"""Which calls of an upstream response are the history tool's, and which are the client's.

For a gateway that answers the history tool itself: given the content blocks of a model
response (the wire models, or the API's JSON objects as they arrived) and the name under
which the tool was offered, :func:`split_history_calls` returns the history tool's calls,
the client's own calls, and the blocks the client may see (every block but the history
tool's calls, in order, the very objects given). Pure: no I/O, nothing changed in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hango.core.messages import ToolUseBlock

Block = TypeVar("Block")


@dataclass(frozen=True)
class SplitCalls(Generic[Block]):
    """A response's blocks split by whose tool they call."""

    history: tuple[Block, ...]  # calls of the history tool, in order
    client: tuple[Block, ...]  # calls of the client's own tools, in order
    client_blocks: tuple[Block, ...]  # every block but the history tool's calls

    @property
    def only_history(self) -> bool:
        """The response calls the history tool and nothing else: the gateway answers it all."""
        return bool(self.history) and not self.client


def split_history_calls(blocks: Sequence[Block], tool_name: str) -> SplitCalls[Block]:
    """Split ``blocks`` (content block models or API JSON objects) for ``tool_name``."""
    history: list[Block] = []
    client: list[Block] = []
    visible: list[Block] = []
    for block in blocks:
        name = called_tool(block)
        if name == tool_name:
            history.append(block)
            continue
        if name is not None:
            client.append(block)
        visible.append(block)
    return SplitCalls(tuple(history), tuple(client), tuple(visible))


def called_tool(block: object) -> str | None:
    """The tool a ``tool_use`` block calls (model or JSON object); ``None`` for other blocks."""
    if isinstance(block, ToolUseBlock):
        return block.name
    if isinstance(block, Mapping) and block.get("type") == "tool_use":
        name: Any = block.get("name")
        return name if isinstance(name, str) else None
    return None
