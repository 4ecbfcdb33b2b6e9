"""The Messages API's rules for ids, names and numbers, checked where input comes in.

Stored, a tool id or name outside the API's patterns (below) or a number JSON cannot
carry would make every later request of the session a 400; so a transcript, a user
message and a model reply are checked before anything of them is stored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from hango.core.messages import Message, ToolResultBlock, ToolUseBlock

TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
# How deep a tool input may nest. Real tool schemas nest a handful of levels; past a few
# hundred, serializers and parsers give up with their own errors (pydantic's "Maximum
# serialization depth exceeded", Python's RecursionError), so the limit is checked first.
MAX_TOOL_INPUT_DEPTH = 100


def message_problem(message: Message) -> str | None:
    """Why the API would refuse ``message``'s tool blocks, or ``None``."""
    for block in message.blocks():
        if isinstance(block, ToolUseBlock):
            problem = tool_use_problem(block)
        elif isinstance(block, ToolResultBlock):
            problem = _id_problem("tool_result's tool_use_id", block.tool_use_id)
        else:
            continue
        if problem is not None:
            return problem
    return None


def tool_use_problem(use: ToolUseBlock) -> str | None:
    """Why the API would refuse ``use``: its id, its name, its input's depth or numbers."""
    problem = _id_problem("tool call id", use.id)
    if problem is None and not TOOL_NAME.fullmatch(use.name):
        problem = f"tool call {use.id} has the name {_shown(use.name)}; {_NAME_RULE}"
    depth = max((depth for _, depth in _json_containers(use.input)), default=0)
    if problem is None and depth > MAX_TOOL_INPUT_DEPTH:
        problem = (
            f"tool call {use.id} ({use.name}) has an input nested {depth} levels deep, over "
            f"the limit of {MAX_TOOL_INPUT_DEPTH}"
        )
    if problem is None and _non_finite(use.input):
        problem = (
            f"tool call {use.id} ({use.name}) has a number JSON cannot carry (NaN or infinity) "
            "in its input"
        )
    return problem


_NAME_RULE = "tool names are 1 to 128 letters, digits, '_' or '-'"


def _id_problem(what: str, value: str) -> str | None:
    if TOOL_ID.fullmatch(value):
        return None
    return f"{what} {_shown(value)} is not allowed: ids are letters, digits, '_' or '-'"


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "...")


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity is anywhere in ``value``."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return any(
        isinstance(item, float) and not math.isfinite(item)
        for children, _ in _json_containers(value)
        for item in children
    )


def _json_containers(value: Any) -> Iterator[tuple[Any, int]]:
    """Every object and array in ``value`` with its depth from 1 (iteratively: any depth)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list | tuple):
            yield children, depth
            pending.extend((child, depth + 1) for child in children)
