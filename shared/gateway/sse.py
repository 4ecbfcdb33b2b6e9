"""Server-sent events of the Messages API, as whole events.

The upstream stream is cut into events at blank lines (the SSE framing), each event kept
as the bytes upstream sent (line ends as ``\n``), so the gateway re-emits the very same
sequence, event for event, and never a partial one (a proxy that flushes at byte
offsets interleaves or truncates events). :class:`MessageBuilder` folds the events into
the ``message`` object a non-streaming call would have returned: the loop stores nothing
from it (the client sends the reply back with its next request) but reads its usage and
stop reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from hango.core.messages import JsonObject, Response


@dataclass(frozen=True)
class Event:
    """One whole event: its raw bytes (blank line included), its name and decoded data."""

    raw: bytes
    name: str
    data: JsonObject | None


def parse_event(raw: bytes) -> Event:
    """The event in ``raw`` (one event's lines); data that is not JSON is kept as ``None``."""
    name = "message"
    data_lines: list[bytes] = []
    for line in raw.splitlines():
        if line.startswith(b"event:"):
            name = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data_lines.append(line[5:].removeprefix(b" "))
    data: JsonObject | None = None
    if data_lines:
        try:
            decoded = json.loads(b"\n".join(data_lines))
        except ValueError:
            decoded = None
        data = decoded if isinstance(decoded, dict) else None
    return Event(raw=raw, name=name, data=data)


async def events(chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
    """The whole events in a byte stream, each as soon as its blank line arrives."""
    buffer = b""
    carried = b""  # a "\r" that ended a chunk: its "\n" may start the next one
    async for chunk in chunks:
        data = carried + chunk
        carried = b"\r" if data.endswith(b"\r") else b""
        buffer += data[: len(data) - len(carried)].replace(b"\r\n", b"\n")
        while (end := buffer.find(b"\n\n")) >= 0:
            raw, buffer = buffer[: end + 2], buffer[end + 2 :]
            if raw.strip():
                yield parse_event(raw)
    buffer += carried
    if buffer.strip():
        # A stream cut mid-event: the part is still one event for the client to judge.
        yield parse_event(buffer + b"\n\n")


def encode(name: str, data: JsonObject) -> bytes:
    """One event in the API's framing (for events the gateway itself emits: errors)."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


@dataclass
class MessageBuilder:
    """Folds ``message_start`` / block / ``message_delta`` events into the message object."""

    message: JsonObject | None = None
    blocks: dict[int, JsonObject] = field(default_factory=dict)
    partial_json: dict[int, str] = field(default_factory=dict)
    error: JsonObject | None = None

    def add(self, event: Event) -> None:
        data = event.data or {}
        kind = data.get("type", event.name)
        if kind == "message_start":
            self.message = dict(data.get("message") or {})
        elif kind == "content_block_start":
            self.blocks[int(data["index"])] = dict(data.get("content_block") or {})
        elif kind == "content_block_delta":
            self._delta(int(data["index"]), data.get("delta") or {})
        elif kind == "message_delta":
            self._message_delta(data)
        elif kind == "error":
            self.error = data.get("error") or data

    def _delta(self, index: int, delta: JsonObject) -> None:
        block = self.blocks.setdefault(index, {})
        kind = delta.get("type")
        if kind == "input_json_delta":
            self.partial_json[index] = self.partial_json.get(index, "") + delta["partial_json"]
            return
        for key in ("text", "thinking", "signature"):
            if kind == f"{key}_delta":
                block[key] = block.get(key, "") + delta[key]

    def _message_delta(self, data: JsonObject) -> None:
        if self.message is None:
            return
        self.message.update(data.get("delta") or {})
        usage = dict(self.message.get("usage") or {})
        usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        self.message["usage"] = usage

    def response(self) -> Response | None:
        """The folded message, or ``None`` when the stream carried none."""
        if self.message is None:
            return None
        for index, text in self.partial_json.items():
            self.blocks[index]["input"] = _json_or_empty(text)
        content = [self.blocks[i] for i in sorted(self.blocks)]
        return Response.model_validate({**self.message, "content": content})


def _json_or_empty(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}
