"""What makes a Messages API event stream valid, and whether a tool leaked into it.

Used by the gateway's history-tool tests and by ``bench/bench_history_gateway.py`` (the
stress command): an answer the client receives must be one message, in the API's order:
``message_start``; for each block, in index order 0, 1, 2, … with no gap or reuse, its
``content_block_start``, deltas of its own kind, and ``content_block_stop`` (blocks do not
interleave); ``message_delta`` once, after every block stopped; ``message_stop`` last.
``ping`` may come anywhere after ``message_start``; an ``error`` event ends the stream.
"""

from __future__ import annotations

import json
from typing import Any

Event = tuple[str, dict[str, Any]]

_DELTA_KINDS = {
    "text": ("text_delta", "citations_delta"),
    "thinking": ("thinking_delta", "signature_delta"),
    "tool_use": ("input_json_delta",),
    "server_tool_use": ("input_json_delta",),
}


def parse_sse(raw: bytes) -> list[Event]:
    """The events of a whole SSE body, as ``(name, data)``."""
    events = []
    for chunk in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not chunk.strip():
            continue
        name, data = "message", []
        for line in chunk.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
        events.append((name, json.loads(b"\n".join(data))))
    return events


def sequence_problems(events: list[Event]) -> list[str]:
    """Why ``events`` is not one valid message stream (empty: it is)."""
    problems: list[str] = []
    state = _State()
    for position, (name, data) in enumerate(events):
        problem = state.take(name, data)
        if problem is not None:
            problems.append(f"event {position} ({name}): {problem}")
    if not problems and not state.stopped:
        problems.append("the stream ends without message_stop")
    return problems


class _State:
    def __init__(self) -> None:
        self.started = False
        self.next_index = 0
        self.open: tuple[int, str] | None = None
        self.delta_seen = False
        self.stopped = False

    def take(self, name: str, data: dict[str, Any]) -> str | None:
        kind = data.get("type")
        if kind != name:
            return f"event name {name!r} but data type {kind!r}"
        if self.stopped:
            return "after message_stop"
        if name == "message_start":
            return self._start()
        if not self.started and name != "error":
            return "before message_start"
        handler = getattr(self, "_" + name, None)
        return handler(data) if handler is not None else f"unknown event {name!r}"

    def _start(self) -> str | None:
        if self.started:
            return "a second message_start"
        self.started = True
        return None

    def _ping(self, data: dict[str, Any]) -> str | None:
        return None

    def _error(self, data: dict[str, Any]) -> str | None:
        self.stopped = True
        return None

    def _content_block_start(self, data: dict[str, Any]) -> str | None:
        if self.open is not None or self.delta_seen:
            return "a block starts while another is open or after message_delta"
        if data.get("index") != self.next_index:
            return f"index {data.get('index')}, expected {self.next_index}"
        self.open = (self.next_index, data["content_block"]["type"])
        self.next_index += 1
        return None

    def _content_block_delta(self, data: dict[str, Any]) -> str | None:
        if self.open is None or data.get("index") != self.open[0]:
            return f"a delta for index {data.get('index')}, which is not open"
        allowed = _DELTA_KINDS.get(self.open[1])
        if allowed is not None and data["delta"]["type"] not in allowed:
            return f"a {data['delta']['type']} in a {self.open[1]} block"
        return None

    def _content_block_stop(self, data: dict[str, Any]) -> str | None:
        if self.open is None or data.get("index") != self.open[0]:
            return f"a stop for index {data.get('index')}, which is not open"
        self.open = None
        return None

    def _message_delta(self, data: dict[str, Any]) -> str | None:
        if self.open is not None or self.delta_seen:
            return "message_delta with a block open, or twice"
        self.delta_seen = True
        return None

    def _message_stop(self, data: dict[str, Any]) -> str | None:
        if not self.delta_seen:
            return "message_stop before message_delta"
        self.stopped = True
        return None


def leaked_blocks(events: list[Event], names: tuple[str, ...]) -> int:
    """How many blocks of ``events`` call a tool named one of ``names``."""
    return sum(
        1
        for name, data in events
        if name == "content_block_start"
        and data["content_block"].get("type") == "tool_use"
        and data["content_block"].get("name") in names
    )
