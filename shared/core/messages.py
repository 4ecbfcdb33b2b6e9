"""Wire types mirroring the Anthropic Messages API.

Every type is a frozen pydantic model, so middleware cannot edit a request in place (it
builds a new one with ``model_copy``): "stored messages are never rewritten" is structural.

Parsing then dumping gives back the same JSON: ``to_api()`` emits exactly the keys given,
unknown keys are kept, and unknown block types survive as :class:`OtherBlock` (documents,
search results, server tool blocks, ...). A message with the role ``system`` (the API's
mid-conversation system messages) is opaque content to the pipeline.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Tag,
    ValidatorFunctionWrapHandler,
    WrapSerializer,
    WrapValidator,
)

from hango.core.collection import Positions, Prefix
from hango.core.identity import HeldMemo
from hango.core.sent import live_view

JsonObject = dict[str, Any]


class WireModel(BaseModel):
    """Base of every wire type: frozen, keeps unknown keys, dumps only the keys it was given."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    def to_api(self) -> JsonObject:
        """The JSON object the API expects, with the keys this object was built with."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class TypedModel(WireModel):
    """A wire type whose ``_always_dumped`` keys are emitted even when left at their default
    (``TextBlock(text=...)`` dumps its ``"type"``). Not :class:`Message`'s base: pydantic
    calls the hook for every object it parses, a restarted session every stored message."""

    _always_dumped: ClassVar[tuple[str, ...]] = ("type",)

    def model_post_init(self, context: Any, /) -> None:
        self.__pydantic_fields_set__.update(self._always_dumped)


class CacheControl(TypedModel):
    type: Literal["ephemeral"] = "ephemeral"
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(TypedModel):
    type: Literal["text"] = "text"
    text: str
    cache_control: CacheControl | None = None


class ImageBlock(TypedModel):
    type: Literal["image"] = "image"
    source: JsonObject
    cache_control: CacheControl | None = None


class ToolUseBlock(TypedModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: JsonObject
    cache_control: CacheControl | None = None


def _tagged(known: frozenset[str]) -> Discriminator:
    """The union member of a block: its ``type`` if ``known``, else ``other``."""

    def tag(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        return kind if kind in known else "other"

    return Discriminator(tag)


ResultContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated["OtherBlock", Tag("other")],
    _tagged(frozenset({"text", "image"})),
]


class ToolResultBlock(TypedModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | tuple[ResultContentBlock, ...] | None = None
    is_error: bool | None = None
    cache_control: CacheControl | None = None

    def text(self) -> str:
        """The textual content of the result (images contribute nothing)."""
        if isinstance(self.content, str | None):
            return self.content or ""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


class ThinkingBlock(TypedModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(TypedModel):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class OtherBlock(TypedModel):
    """A block type this version does not model (documents, server tools, ...): kept as is."""

    type: str
    cache_control: CacheControl | None = None


_KNOWN_BLOCKS = frozenset(
    {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"}
)
ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[OtherBlock, Tag("other")],
    _tagged(_KNOWN_BLOCKS),
]

# ``system``: a mid-conversation system message, which some clients send in ``messages``.
Role = Literal["user", "assistant", "system"]


class Message(WireModel):
    role: Role
    content: str | tuple[ContentBlock, ...]

    def blocks(self) -> tuple[ContentBlock, ...]:
        """The content as blocks (a plain string is one text block)."""
        return (TextBlock(text=self.content),) if isinstance(self.content, str) else self.content

    def tool_uses(self) -> Iterator[ToolUseBlock]:
        # A plain string holds neither calls nor results: no text block made to look.
        content = () if isinstance(self.content, str) else self.content
        return (b for b in content if isinstance(b, ToolUseBlock))

    def tool_results(self) -> Iterator[ToolResultBlock]:
        content = () if isinstance(self.content, str) else self.content
        return (b for b in content if isinstance(b, ToolResultBlock))

    def text(self) -> str:
        return "\n".join(b.text for b in self.blocks() if isinstance(b, TextBlock))


def message_json(message: Message) -> bytes:
    """The message's compact API JSON after a comma: its part of a body's message list.

    Pydantic's serializer writes it straight to bytes, about 2.5 times as fast as dumping
    :meth:`WireModel.to_api` with :mod:`json`: a restarted session serializes every message.
    """
    return b"," + _SERIALIZE(message, by_alias=True, exclude_unset=True)


_SERIALIZE = Message.__pydantic_serializer__.to_json


class ToolDefinition(TypedModel):
    name: str
    description: str | None = None
    input_schema: JsonObject = Field(default_factory=lambda: {"type": "object", "properties": {}})
    cache_control: CacheControl | None = None
    _always_dumped = ("input_schema",)

    def model_post_init(self, context: Any, /) -> None:
        # A server tool (``{"type": "web_search_20250305", "name": ...}``) has no schema:
        # one must not appear in its JSON.
        kind = (self.model_extra or {}).get("type")
        if kind is None or kind == "custom":
            super().model_post_init(context)


def _fixed(value: Any, validate: ValidatorFunctionWrapHandler) -> Sequence[Message]:
    if isinstance(value, Prefix):  # a copy's view: messages it made, as fixed as a tuple
        return value
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping | list):
        value = tuple(value)  # pydantic would rebuild another sequence type by calling it
    messages = validate(value)
    return messages if isinstance(messages, tuple) else tuple(messages)


def _as_tuple(messages: Sequence[Message], serialize: SerializerFunctionWrapHandler) -> Any:
    return serialize(messages if isinstance(messages, tuple) else tuple(messages))


Messages = Annotated[
    Sequence[Message], WrapValidator(_fixed), WrapSerializer(_as_tuple, when_used="always")
]
"""A request's messages: a tuple, or a view an outgoing copy made that never changes
(:class:`~hango.core.sent.SentMessages`, a :class:`~hango.core.collection.Prefix` of its list)."""


class MarkedMessages(Positions[Message]):
    """Messages read with a few positions in another form (:attr:`Request.marks`)."""

    def __init__(self, messages: Sequence[Message], marks: Mapping[int, Message]) -> None:
        self._messages, self._marks, self._length = messages, marks, len(messages)

    def _at(self, position: int) -> Message:
        return self._marks.get(position, self._messages[position])


class Request(WireModel):
    """The body of ``POST /v1/messages``.

    ``marks`` overlays ``messages``: a few positions sent in another form (the same
    message with ``cache_control`` on some blocks, :meth:`with_marks`). The messages
    themselves are shared with the request that was marked, not copied: a long session's
    request holds tens of thousands of them, and the prompt cache marks at most four.
    Everything that reads the request as it is sent (its body, :meth:`to_api`,
    :meth:`sent_messages`, validation, the cache meter) applies the overlay.
    """

    model: str
    max_tokens: int
    messages: Messages
    system: str | tuple[TextBlock, ...] | None = None
    tools: tuple[ToolDefinition, ...] | None = None
    _marks: Mapping[int, Message] = PrivateAttr(default_factory=dict)

    @property
    def marks(self) -> Mapping[int, Message]:
        """The positions of ``messages`` sent in another form, and those forms."""
        # Read (and set, in with_marks) where pydantic keeps it: ``self._marks`` passes through
        # BaseModel.__getattr__ (two Python frames and a caught AttributeError), ten per call.
        return self.__pydantic_private__["_marks"]  # type: ignore[index,no-any-return]

    def with_marks(
        self, marked: Mapping[int, Message], update: Mapping[str, Any] | None = None
    ) -> Request:
        """This request with the messages at ``marked``'s positions sent as given (and the
        fields in ``update`` changed, as :meth:`model_copy` does; not the messages)."""
        made = self.model_copy(update=update)
        made.__pydantic_private__["_marks"] = {**self.marks, **marked}  # type: ignore[index]
        return made

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        made = super().model_copy(update=update, deep=deep)
        if update is not None and "messages" in update and self.marks:
            made._marks = {}  # positions in messages that are no longer these
        return made

    def sent_messages(self) -> Sequence[Message]:
        """The messages as sent: ``messages`` read through the marks, without a copy."""
        return MarkedMessages(self.messages, self.marks) if self.marks else self.messages

    def to_api(self) -> JsonObject:
        data = super().to_api()
        for index, marked in self.marks.items():
            data["messages"][index] = marked.to_api()
        return data

    def system_blocks(self) -> tuple[TextBlock, ...]:
        return (TextBlock(text=self.system),) if isinstance(self.system, str) else self.system or ()

    def tool_definitions(self) -> tuple[ToolDefinition, ...]:
        return self.tools or ()

    def api_bytes(
        self, drop: frozenset[str] = frozenset(), fixed: HeldMemo[bytes] | None = None
    ) -> bytes:
        """The body of ``POST /v1/messages`` as the provider sends it, without the keys
        named in ``drop`` (the count endpoint refuses the generation-only ones)."""
        return b"".join(self.api_parts(drop, fixed))

    def api_parts(
        self, drop: frozenset[str] = frozenset(), fixed: HeldMemo[bytes] | None = None
    ) -> list[bytes]:
        """:meth:`api_bytes` in parts, a fresh list: one per message, then the fixed part.

        The session's outgoing copy (:mod:`hango.core.sent`) keeps each message's JSON, so
        a call serializes only the messages that changed. The last part, ``],`` and the fixed
        part, is made once per system and tools in the caller's ``fixed`` memo (else per call).
        """
        parts = self.messages_parts()
        parts[0] = b'{"messages":' + parts[0]
        parts[-1] = self._closing(drop, fixed)
        return parts

    def messages_parts(self) -> list[bytes]:
        """The JSON array of the messages in parts, a fresh list: ``[`` and the first
        message's kept serialized JSON, one part per further message, then ``]``."""
        view = live_view(self.messages)
        parts = None if view is None else view.source.json_parts(view.version, self.marks)
        if parts is None:
            parts = [message_json(message) for message in self.sent_messages()]
        if parts:
            parts[0] = b"[" + parts[0][1:]
        else:
            parts.append(b"[")
        parts.append(b"]")
        return parts

    def _closing(self, drop: frozenset[str], memo: HeldMemo[bytes] | None) -> bytes:
        def dump() -> bytes:
            fixed = self.model_dump(
                mode="json", by_alias=True, exclude_unset=True, exclude={"messages", *drop}
            )
            return b"]," + json.dumps(fixed, separators=(",", ":")).encode()[1:] if fixed else b"]}"

        if memo is None or self.model_extra:
            return dump()
        key = (self.model, self.max_tokens, frozenset(self.model_fields_set), drop)
        return memo.get((self.system, self.tools), key, dump)


StopReason = Literal[
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]


class Usage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    def split(self) -> tuple[int, int, int]:
        """The prompt as cache reads, cache writes and uncached input (an unset field is 0)."""
        return (
            self.cache_read_input_tokens or 0,
            self.cache_creation_input_tokens or 0,
            self.input_tokens,
        )

    def total_input_tokens(self) -> int:
        """Everything the model read: uncached input plus cache reads and writes."""
        return sum(self.split())

    def plus(self, other: Usage) -> Usage:
        """Two calls' usage as one figure (a cache field stays unset when both are)."""

        def both(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        fields = Usage.model_fields
        return Usage.model_validate({f: both(getattr(self, f), getattr(other, f)) for f in fields})


def summed_usage(*usages: Usage | None) -> Usage | None:
    """The usages given as one figure (``None`` when none is given)."""
    given = [usage for usage in usages if usage is not None]
    return functools.reduce(Usage.plus, given) if given else None


class Response(TypedModel):
    """A ``message`` object returned by ``POST /v1/messages``."""

    _always_dumped = ("type", "role")
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: tuple[ContentBlock, ...]
    stop_reason: StopReason | str | None = None
    stop_sequence: str | None = None
    usage: Usage = Field(default_factory=Usage)

    def as_message(self) -> Message:
        """The assistant message to append to the transcript."""
        return Message(role="assistant", content=self.content)

    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))


@dataclasses.dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message as the store holds it: anchored to its per-session sequence number (what
    boundaries are expressed in: a rebuilt list cannot shift one onto the wrong message).
    Not a model: one object for the cyclic collector where a model is three, and a
    restarted session reads every message at once."""

    seq: int
    turn: int
    message: Message
    # The message's part of a request body (:func:`message_json`) when the store already
    # held it in that form: the outgoing copy sends it instead of serializing the message
    # again. Not part of what the message is (equality), nor of a job's payload, nor of a
    # ``dataclasses.replace`` copy (whose message may be another): see :meth:`as_stored`.
    json_part: Annotated[bytes | None, Field(exclude=True)] = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )
    # The token estimate stored with the message, as (the estimator's signature, tokens):
    # the outgoing copy counts with it when its estimator has that signature. Kept as
    # ``json_part`` is, and for the same reason: a restart counts and serializes nothing.
    estimate: Annotated[tuple[str, int] | None, Field(exclude=True)] = dataclasses.field(
        default=None, init=False, compare=False, repr=False
    )

    @classmethod
    def as_stored(
        cls,
        seq: int,
        turn: int,
        message: Message,
        part: bytes | None,
        estimate: tuple[str, int] | None = None,
    ) -> StoredMessage:
        """The stored message with ``part``, which must be ``message_json(message)`` (or
        ``None``: not known), and the ``estimate`` stored with it."""
        stored = cls(seq, turn, message)
        object.__setattr__(stored, "json_part", part)  # frozen: set once, at birth
        object.__setattr__(stored, "estimate", estimate)
        return stored
