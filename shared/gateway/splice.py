"""One client answer made of several upstream answers, with the gateway's tool taken out.

When the gateway answers the history tool itself (:mod:`hango.gateway.history_rounds`),
one client request costs several upstream calls ("rounds"), and the client must see one
valid message with no trace of the tool. :class:`Splice` stands between the upstream
answers and the client (:attr:`Exchange.splice <hango.gateway.upstream.Exchange>`):

- streaming: the first round's ``message_start`` goes on at once, later ones are dropped;
  every block that calls the tool is dropped (its start, deltas and stop); the other
  blocks go on as they arrive, their ``index`` renumbered to follow the blocks the client
  already has; each round's ``message_delta`` and ``message_stop`` are held until the
  round's end, and only the last round's go on (:meth:`finish`), with the final stop
  reason and usage. An event that needs no change goes on as the very bytes upstream sent,
  so an answer without a call of the tool is relayed byte for byte;
- not streaming: the head and body are held; :meth:`finish` sends the head and the
  message made of every round's visible blocks (the body as upstream sent it when nothing
  was taken out);
- a refusal (an HTTP error) of a later round, after the client's answer has begun, is
  not relayed: the turn ends with an error of its own (an ``error`` event).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hango.core.messages import JsonObject
from hango.gateway.sse import Event, encode
from hango.gateway.upstream import Head, Item
from hango.tools.history_calls import called_tool, split_history_calls

_HELD = ("message_delta", "message_stop")


@dataclass(frozen=True)
class Ending:
    """How the client's message ends: its stop reason and usage."""

    stop_reason: str | None
    usage: JsonObject


@dataclass
class Splice:
    """Relays the rounds of one client request as one message (see the module docstring)."""

    tool_name: str
    streaming: bool
    put: Callable[[Item], None]
    # Whether the client has had the head already (the exchange knows).
    head_sent: Callable[[], bool]
    round: int = 0
    next_index: int = 0
    hidden_blocks: int = 0
    _indexes: dict[int, int | None] = field(default_factory=dict)
    _held: list[Event] = field(default_factory=list)
    # The round before's ending: the message ends with it when a round brings none (a
    # round refused for overflow ends the answer with what the client has).
    _held_before: list[Event] = field(default_factory=list)
    _held_head: Head | None = None
    _bodies: list[JsonObject] = field(default_factory=list)
    _raw_body: bytes = b""
    _refused: bool = False
    _refusal_relayed: bool = False

    # -- relaying ----------------------------------------------------------------------

    def relay(self, item: Item, event: Event | None) -> None:
        if isinstance(item, Head):
            self._head(item)
        elif event is not None:
            self._event(event)
        elif self._refused:
            if self._refusal_relayed:
                self.put(item)
        elif not self.streaming:
            self._raw_body = item
            body = json.loads(item)
            self._bodies.append(body)
            calls = split_history_calls(body.get("content") or [], self.tool_name).history
            self.hidden_blocks += len(calls)

    def _head(self, head: Head) -> None:
        if head.status >= 400:
            # A refusal reaches the client only while nothing of the answer has.
            self._refused = True
            self._refusal_relayed = not self.head_sent()
            if self._refusal_relayed:
                self.put(head)
            return
        if not self.streaming:
            self._held_head = self._held_head or head
        elif not self.head_sent():
            self.put(head)

    def _event(self, event: Event) -> None:
        data = event.data
        kind = data.get("type", event.name) if data is not None else event.name
        if kind in _HELD:
            self._held.append(event)
        elif kind == "message_start":
            if self.round == 0:
                self.put(event.raw)
        elif kind == "content_block_start" and data is not None:
            self._block_start(event, data)
        elif kind in ("content_block_delta", "content_block_stop") and data is not None:
            self._block_event(event, data)
        else:
            self.put(event.raw)  # ping, error, and whatever the API adds later

    def _block_start(self, event: Event, data: JsonObject) -> None:
        index = data.get("index")
        if not isinstance(index, int):
            self.put(event.raw)
            return
        if called_tool(data.get("content_block")) == self.tool_name:
            self._indexes[index] = None
            self.hidden_blocks += 1
            return
        self._indexes[index] = self.next_index
        self.next_index += 1
        self._block_event(event, data)

    def _block_event(self, event: Event, data: JsonObject) -> None:
        index = data.get("index")
        mapped = self._indexes.get(index, index) if isinstance(index, int) else index
        if mapped is None:
            return  # a part of a call of the gateway's tool
        if mapped == index:
            self.put(event.raw)
        else:
            self.put(encode(event.name, {**data, "index": mapped}))

    # -- rounds ------------------------------------------------------------------------

    def next_round(self) -> None:
        """The next upstream answer continues the client's message."""
        self.round += 1
        self._indexes = {}
        self._held_before, self._held = self._held, []
        self._refused = False

    @property
    def untouched(self) -> bool:
        """One round and nothing taken out: the client gets exactly what upstream sent."""
        return self.round == 0 and self.hidden_blocks == 0

    def finish(self, ending: Ending) -> None:
        """End the client's message: the last round's ending, with ``ending``'s figures."""
        if self.streaming:
            self._finish_stream(ending)
        else:
            self._finish_body(ending)

    def _finish_stream(self, ending: Ending) -> None:
        for event in self._held or self._held_before:
            data = event.data
            if self.untouched or data is None or data.get("type") != "message_delta":
                self.put(event.raw)
                continue
            delta = {**(data.get("delta") or {}), "stop_reason": ending.stop_reason}
            usage = {**(data.get("usage") or {}), **ending.usage}
            self.put(encode(event.name, {**data, "delta": delta, "usage": usage}))

    def _finish_body(self, ending: Ending) -> None:
        if self._held_head is not None:
            self.put(self._held_head)
        if self.untouched:
            self.put(self._raw_body)
            return
        self.put(json.dumps(merged_body(self._bodies, self.tool_name, ending)).encode())


def merged_body(bodies: list[JsonObject], tool_name: str, ending: Ending) -> JsonObject:
    """The message the rounds' JSON bodies make for the client: the first one's fields,
    every round's blocks but the tool's calls, the last one's stop sequence."""
    content: list[Any] = []
    for body in bodies:
        content.extend(split_history_calls(body.get("content") or [], tool_name).client_blocks)
    last = bodies[-1]
    usage = {**(last.get("usage") or {}), **ending.usage}
    return {
        **bodies[0],
        "content": content,
        "stop_reason": ending.stop_reason,
        "stop_sequence": last.get("stop_sequence"),
        "usage": usage,
    }
