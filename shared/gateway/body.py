"""A client's request body, read without parsing what the previous call already sent.

A client re-sends its whole history on every call: the body of a 10,000-message session
is 17 MB, of which only the last messages are new. Each body read is remembered per
client session (a bounded number of the most recently used): its bytes, the byte span of
each message and the message objects parsed from them. The next body of the session is
compared with it byte for byte as it arrives (:class:`Arrival`: a ``memcmp`` per chunk);
the messages whose bytes it repeats are the very objects parsed before, and only the
rest (the new messages, the one whose ``cache_control`` marker the client moved, the
fields after the message list) is parsed. A body that differs earlier (an edit, a
rewind, a field before ``messages`` that changed) is parsed whole, as the first one of a
session is; so is one whose ``"messages": [`` found in the bytes turns out not to be the
top-level list (a sentinel put in its place must come back as the top-level
``messages``). Whichever way, the result is what ``json.loads`` of the body gives.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hango.core.identity import RecentlyUsed
from hango.core.messages import JsonObject

BODIES_REMEMBERED = 256
# Conversations of one group (a tenant) that name no session, remembered per group.
UNNAMED_PER_GROUP = 8
# A body's bytes: built in place as its chunks arrive (a ``bytearray``), never changed after.
Buffer = bytes | bytearray
_MESSAGES_KEY = re.compile(rb'"messages"[ \t\n\r]*:[ \t\n\r]*\[')


class BodyError(ValueError):
    """The body is not a JSON object (the message says what is wrong)."""


@dataclass(frozen=True)
class Body:
    """One request body: the parsed object, and where each message sits in its bytes."""

    data: Buffer
    raw: JsonObject
    # Byte offsets: just after the ``[`` of the message list, each message's (start, end),
    # and the ``]`` that closes the list. ``opening`` is 0 when the body has no list.
    opening: int
    spans: tuple[tuple[int, int], ...]
    closing: int

    def frame(self) -> tuple[Buffer, Buffer] | None:
        """The body's bytes before its messages (up to ``[``) and after them (from ``]``);
        None when the message list was not found."""
        if not self.opening:
            return None
        return self.data[: self.opening], self.data[self.closing :]


class Bodies:
    """Reads request bodies, reusing what the same client session sent last time.

    A session named before its body arrives (a header) has a slot of its own. Bodies
    that name no session (the identity is in the body) are told apart as they arrive:
    each unnamed conversation of a group (a tenant) gets its slot, and a new body is
    compared with the one of the group's :data:`UNNAMED_PER_GROUP` most recent that its
    first chunk starts like (the model and the first message tell conversations apart),
    so two conversations of one key never take turns in one slot.
    """

    def __init__(self, remembered: int = BODIES_REMEMBERED) -> None:
        self._last: RecentlyUsed[list[Body]] = RecentlyUsed(remembered)
        # A group's unnamed conversations: their slots, most recently used first.
        self._unnamed: RecentlyUsed[list[str]] = RecentlyUsed(remembered)
        self._slots = itertools.count(1)
        self._decoder = json.JSONDecoder()

    def arrival(self, key: str, *, unnamed: bool = False) -> Arrival:
        """A body about to arrive in chunks (see :class:`Arrival`): of session ``key``,
        or (``unnamed``) of one of group ``key``'s conversations not named before it."""
        if not unnamed:
            return Arrival(key, self._remembered([key]))
        return Arrival(key, self._remembered(list(self._unnamed.get(key, list))), group=key)

    def _remembered(self, keys: list[str]) -> list[tuple[str, Body]]:
        return [(key, slot[0]) for key in keys if (slot := self._last.get(key, list))]

    def read(self, data: bytes, key: str, *, unnamed: bool = False) -> Body:
        """``data`` as a :class:`Body`; :class:`BodyError` when it is no JSON object."""
        arrival = self.arrival(key, unnamed=unnamed)
        arrival.add(data)
        return self.received(arrival)

    def received(self, arrival: Arrival) -> Body:
        """The body that arrived; :class:`BodyError` when it is no JSON object."""
        data, previous = arrival.data(), arrival.previous
        body = None
        if previous is not None:
            body = self._incremental(data, previous, _repeated(data, previous, arrival.equal))
        continued = body is not None
        if body is None:
            body = self._whole(data)
        self._last.get(self._slot(arrival, continued), list)[:] = [body]
        return body

    def _slot(self, arrival: Arrival, continued: bool) -> str:
        """Where the body is kept: its session's slot; for an unnamed one, the slot of the
        conversation it continues, else a new slot of the group."""
        if arrival.group is None:
            return arrival.key
        slots = self._unnamed.get(arrival.group, list)
        slot = arrival.key if continued else f"{arrival.group}\0#{next(self._slots)}"
        if slot in slots:
            slots.remove(slot)
        slots.insert(0, slot)
        del slots[UNNAMED_PER_GROUP:]
        return slot

    def _whole(self, data: Buffer) -> Body:
        found = _MESSAGES_KEY.search(data)
        scanned = self._scan(data, found.end(), 0) if found is not None else None
        if found is not None and scanned is not None:
            body = self._assembled(data, found.end(), [], (), scanned)
            if body is not None:
                return body
        # No message list found where the key is (or none): the plain parse, no spans.
        try:
            raw: Any = json.loads(data)
        except ValueError:
            raise BodyError("the body is not JSON") from None
        if not isinstance(raw, dict):
            raise BodyError("the body is not an object")
        return Body(data, raw, 0, (), 0)

    def _incremental(self, data: Buffer, previous: Body, same: int) -> Body | None:
        """``data`` read after its first ``same`` messages, those of ``previous``."""
        if same == 0:
            return None
        scanned = self._scan(data, previous.spans[same - 1][1], same)
        if scanned is None:
            return None
        kept = previous.raw["messages"][:same]
        return self._assembled(data, previous.opening, kept, previous.spans[:same], scanned)

    def _assembled(
        self,
        data: Buffer,
        opening: int,
        kept: list[Any],
        spans: tuple[tuple[int, int], ...],
        scanned: tuple[list[tuple[Any, tuple[int, int]]], int],
    ) -> Body | None:
        """The body from its parts; None when the list cut out is not the top-level
        ``messages`` (a sentinel put in its place must come back there)."""
        items, closing = scanned
        try:
            raw: Any = json.loads(data[:opening] + _SENTINEL + data[closing:])
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("messages") != [_SENTINEL_VALUE]:
            return None
        raw["messages"] = kept + [message for message, _ in items]
        spans += tuple(span for _, span in items)
        return Body(data, raw, opening, spans, closing)

    def _scan(
        self, data: Buffer, at: int, count: int
    ) -> tuple[list[tuple[Any, tuple[int, int]]], int] | None:
        """The messages from byte ``at`` to the list's ``]`` (``count`` came before them),
        each with its byte span, and the offset of the ``]``; None: not such a list."""
        cursor = _Cursor(data[at:].decode("utf-8", "surrogatepass"), at)
        text = cursor.text
        items: list[tuple[Any, tuple[int, int]]] = []
        index = _skip(text, 0)
        while not text.startswith("]", index):
            if count + len(items) > 0:
                if not text.startswith(",", index):
                    return None
                index = _skip(text, index + 1)
            try:
                message, end = self._decoder.raw_decode(text, index)
            except ValueError:
                return None
            items.append((message, (cursor.byte(index), cursor.byte(end))))
            index = _skip(text, end)
        return items, cursor.byte(index)


# Put in place of the message list to prove the list cut out was the top-level one.
_SENTINEL_VALUE = "hango: the message list"
_SENTINEL = json.dumps(_SENTINEL_VALUE).encode()


class _Cursor:
    """Byte offsets of characters of ``text`` (which starts at byte ``at`` of a body),
    asked for in increasing order: counted as the text goes, not from its start."""

    def __init__(self, text: str, at: int) -> None:
        self.text = text
        self._ascii = text.isascii()
        self._at = at
        self._index, self._offset = 0, at

    def byte(self, index: int) -> int:
        if self._ascii:
            return self._at + index
        piece = self.text[self._index : index]
        self._offset += len(piece.encode("utf-8", "surrogatepass"))
        self._index = index
        return self._offset


class Arrival:
    """A body arriving in chunks, compared with the session's previous body as it comes.

    Each chunk is compared (one ``memcmp``) with the previous body's bytes at the same
    offset while the rest is still on its way, until one differs: by the end, what is
    known equal needs no second look, and only the chunk that differs is searched for
    the last message it repeats.
    """

    def __init__(
        self, key: str, candidates: list[tuple[str, Body]], group: str | None = None
    ) -> None:
        self.key = key  # the slot of the body compared with (unnamed: once chosen)
        self.group = group
        self._candidates = candidates
        self.previous: Body | None = None
        self.equal = 0  # leading bytes known to be the previous body's
        # Each chunk copied in as it comes, while the next is on its way: no join at the end.
        self._data = bytearray()
        self._size = 0
        self._view: memoryview | None = None

    def _choose(self, chunk: bytes) -> None:
        """The previous body to compare with: the one that starts most like ``chunk``."""
        if self._candidates:
            self.key, self.previous = max(
                self._candidates, key=lambda item: _common_prefix(chunk, item[1].data)
            )
            self._view = memoryview(self.previous.data)
            self._candidates = []

    def add(self, chunk: bytes) -> None:
        if not self._size:
            self._choose(chunk)
        if self._view is not None and self.equal == self._size:
            theirs = self._view[self._size : self._size + len(chunk)]
            if chunk.startswith(theirs):
                self.equal += len(theirs)  # all of it, or all the previous body had left
            if len(theirs) < len(chunk) or self.equal < self._size + len(chunk):
                self._view = None  # past the previous body or differing: compare no more
        self._data += chunk
        self._size += len(chunk)

    def data(self) -> Buffer:
        return self._data


def _repeated(data: Buffer, previous: Body, equal: int) -> int:
    """How many leading messages of ``data`` are byte for byte those of ``previous``,
    given that its first ``equal`` bytes are (only the bytes after them are compared)."""
    spans = previous.spans
    view = memoryview(previous.data)

    def repeats(count: int) -> bool:
        end = spans[count - 1][1] if count else 0
        start = min(equal, end)
        return end <= equal or data.startswith(view[start:end], start)

    # The usual cases first: all of them, or all but the last one or two (whose
    # ``cache_control`` markers the client moved); each a single memcmp.
    for count in range(len(spans), max(len(spans) - 3, -1), -1):
        if repeats(count):
            return count
    return _last_true(repeats, len(spans) - 3)


def _common_prefix(chunk: bytes, data: Buffer) -> int:
    """How many leading bytes ``chunk`` and ``data`` share (a memcmp per halving)."""
    view = memoryview(data)
    return _last_true(lambda n: chunk.startswith(view[:n]), min(len(chunk), len(data)))


def _last_true(holds: Callable[[int], bool], high: int) -> int:
    """The largest count in ``0..high`` that ``holds`` (true up to some count, then false)."""
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if holds(middle) else (low, middle - 1)
    return low


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\n\r":
        index += 1
    return index
