"""``ScriptedCodingModel``: a deterministic, offline stand-in for a coding model.

It is a :class:`~hango.providers.base.Provider` like the Anthropic adapter, so the
simulation drives the real loop and middleware through the same path a deployment uses:

* a request whose last message is a new user task starts a plan (:mod:`.plan`): look
  around, write a module and its tests (large ``write_file`` inputs), run them through
  ``run_command`` (long logs), read the module back, fix it with ``edit_file``, build,
  report, sometimes with a follow-up question;
* a request ending in tool results gets the plan's next step;
* a summarizer request (no tools) gets a summary in the prompt's sections
  (:mod:`.summary`).

Like the real API it counts tokens (``TokenCounter``) and refuses a request over its
window with the API's own "prompt is too long" error, so the overflow ladder is real too.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hango.compaction.prefix import prefix_instruction_of
from hango.core.errors import ContextOverflowError
from hango.core.messages import (
    Message,
    Request,
    Response,
    TextBlock,
    ToolDefinition,
    ToolUseBlock,
    Usage,
)
from hango.core.settings import Settings
from hango.providers.base import Capabilities
from hango.simulate.plan import Call, Step, plan_task
from hango.simulate.summary import is_summary_request, scripted_summary

# Real Claude tokenizers yield more tokens than the local estimators for the same text
# (measured on real sessions: docs/benchmarks.md); this counter errs the same way.
CHARS_PER_TOKEN = 3.5
FRAMING_TOKENS = 3

TOOL_FOR_ROLE = {
    "write": "write_file",
    "read": "read_file",
    "edit": "edit_file",
    "ls": "ls",
    "run": "run_command",
    "compact": "compact_conversation",
}

# Argument roles of the plan and the names tools commonly give them, first match wins.
_ARGUMENT_NAMES = {
    "path": ("path", "file_path", "filename"),
    "content": ("content", "text"),
    "old": ("old_string", "old_str", "old"),
    "new": ("new_string", "new_str", "new"),
    "command": ("command", "cmd"),
}


def count_request_tokens(request: Request) -> int:
    """The scripted model's token count: each tool, system block and content block."""
    body = request.to_api()
    units: list[Any] = [*(body.get("tools") or []), *_system_units(body.get("system"))]
    for message in body["messages"]:
        content = message["content"]
        units.extend([content] if isinstance(content, str) else content)
    return sum(_unit_tokens(unit) for unit in units)


def _system_units(system: Any) -> list[Any]:
    if system is None:
        return []
    return [system] if isinstance(system, str) else list(system)


def _unit_tokens(unit: Any) -> int:
    text = json.dumps(unit, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return FRAMING_TOKENS + math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass
class ScriptedCodingModel:
    """A seeded coding agent that answers both agent and summarizer requests."""

    seed: int = 0
    max_input_tokens: int | None = None
    # Seconds a summary takes, as a real summarizer model's would (the agent's own calls
    # answer at once): what pre-summarization hides from the turn.
    summary_latency: float = 0.0
    # Seconds each of the agent's own calls takes (0: at once). Real turns take time
    # between calls; without it nothing can be ready ahead of the trigger.
    model_latency: float = 0.0
    name: str = "scripted"
    capabilities: Capabilities = field(default_factory=lambda: Capabilities(prompt_caching=True))
    calls: int = 0
    summary_calls: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(f"model-{self.seed}")
        self._plan: deque[Step] = deque()
        self._ids = 0
        self._lock = threading.Lock()

    def count_tokens(self, request: Request, *, timeout: float) -> int:
        return count_request_tokens(request)

    def complete(self, request: Request) -> Response:
        tokens = count_request_tokens(request)
        if is_summary_request(request) and self.summary_latency > 0:
            time.sleep(self.summary_latency)
        elif not is_summary_request(request) and self.model_latency > 0:
            time.sleep(self.model_latency)
        with self._lock:
            if is_summary_request(request):
                # The summarizer model's window is a real model's, not the small simulated
                # one: the evicted range it reads is larger than the agent's window.
                self.summary_calls += 1
                return self._response(request, (TextBlock(text=scripted_summary(request)),), tokens)
            self._refuse_overflow(tokens)
            self.calls += 1
            step = self._next_step(request)
            blocks = self._blocks(step, request.tool_definitions())
        return self._response(request, blocks, tokens)

    def _refuse_overflow(self, tokens: int) -> None:
        if self.max_input_tokens is not None and tokens > self.max_input_tokens:
            raise ContextOverflowError(
                f"prompt is too long: {tokens} tokens > {self.max_input_tokens} maximum",
                tokens=tokens,
                maximum=self.max_input_tokens,
                status=400,
            )

    def _next_step(self, request: Request) -> Step:
        last = request.messages[-1]
        if _is_new_task(last):
            self._plan = deque(plan_task(last.text(), self._rng))
        while self._plan:
            step = self._plan.popleft()
            if not step.calls or self._offered(step, request.tool_definitions()):
                return step
        return Step("Done. What should I work on next?")

    @staticmethod
    def _offered(step: Step, tools: tuple[ToolDefinition, ...]) -> bool:
        names = {tool.name for tool in tools}
        return all(TOOL_FOR_ROLE[call.role] in names for call in step.calls)

    def _blocks(
        self, step: Step, tools: tuple[ToolDefinition, ...]
    ) -> tuple[TextBlock | ToolUseBlock, ...]:
        by_name = {tool.name: tool for tool in tools}
        blocks: list[TextBlock | ToolUseBlock] = [TextBlock(text=step.text)]
        for call in step.calls:
            tool = by_name[TOOL_FOR_ROLE[call.role]]
            blocks.append(
                ToolUseBlock(
                    id=self._next_id("toolu"), name=tool.name, input=_arguments(call, tool)
                )
            )
        return tuple(blocks)

    def _response(self, request: Request, blocks: tuple[Any, ...], tokens: int) -> Response:
        uses_tools = any(isinstance(block, ToolUseBlock) for block in blocks)
        text = "".join(block.text for block in blocks if isinstance(block, TextBlock))
        return Response(
            id=self._next_id("msg"),
            model=request.model,
            content=blocks,
            stop_reason="tool_use" if uses_tools else "end_turn",
            usage=_usage(request, tokens, max(1, len(text) // 4)),
        )

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_sim{self.seed}_{self._ids:05d}"


def _is_new_task(message: Message) -> bool:
    return message.role == "user" and not any(message.tool_results()) and bool(message.text())


def _arguments(call: Call, tool: ToolDefinition) -> dict[str, Any]:
    """The call's arguments under the names the tool's schema uses."""
    properties = tool.input_schema.get("properties", {})
    arguments: dict[str, Any] = {}
    for role, value in call.arguments.items():
        candidates = _ARGUMENT_NAMES.get(role, (role,))
        name = next((c for c in candidates if c in properties), candidates[0])
        arguments[name] = value
    return arguments


def summary_provider(settings: Settings) -> ScriptedCodingModel:
    """The scripted model for Celery workers (``HANGO_WORKER_SUMMARIZER=`` this function).

    With it, the queued summaries of ``hango simulate --queue`` come from the same
    scripted model as the in-process ones, and the worker needs no API key. Each summary
    takes ``HANGO_SIMULATED_SUMMARIZER_LATENCY`` seconds.
    """
    return ScriptedCodingModel(summary_latency=settings.simulated_summarizer_latency)


def _usage(request: Request, tokens: int, output: int) -> Usage:
    """A prefix summary request reads all but its instruction from the cache, as the
    provider would right after the call it repeats; every other call is reported uncached
    (the simulation's cache report meters those itself)."""
    instruction = prefix_instruction_of(request)
    if instruction is None:
        return Usage(input_tokens=tokens, output_tokens=output)
    fresh = min(tokens, _unit_tokens({"type": "text", "text": instruction}))
    return Usage(input_tokens=fresh, cache_read_input_tokens=tokens - fresh, output_tokens=output)
