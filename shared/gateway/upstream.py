"""One client request's way upstream, and the channel its answer takes back.

An :class:`Exchange` belongs to one client request. The turn runs in a worker thread
(the pipeline is synchronous); when the chain reaches the provider, the thread hands the
upstream call to the event loop (:meth:`Exchange.forward`), which sends it through the
shared, pooled async client and passes the answer to the client as it arrives: the status
and headers first, then each whole SSE event (or the JSON body). A 400 "prompt is too
long" is held back: the thread raises the overflow and the loop's ladder compacts and
retries before the client sees anything. A client that goes away cancels the upstream
call.

The client's credential headers are forwarded on its own upstream request and kept
nowhere else: not in the store, not in a log line, not in a span, not in a task.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hango.core.errors import ContextOverflowError, ProviderError
from hango.core.messages import JsonObject, Request, Response
from hango.gateway.sse import Event, MessageBuilder, events
from hango.providers.anthropic import bad_request_error

# Request headers the API reads; everything else the client sent stays here.
FORWARDED = ("x-api-key", "authorization", "user-agent", "x-app", "x-claude-code-session-id")
FORWARDED_PREFIXES = ("anthropic-",)
# Hop-by-hop headers and those the server sets itself: never copied onto the answer.
_NOT_COPIED = frozenset(
    {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
)


def forwarded_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers the upstream API uses (credentials, version, betas).

    The answer is asked for uncompressed: it is relayed as it comes, event by event.
    """
    kept = {
        name: value
        for name, value in headers.items()
        if name in FORWARDED or name.startswith(FORWARDED_PREFIXES)
    }
    return {**kept, "accept-encoding": "identity"}


def answer_header_map(headers: httpx2.Headers) -> dict[str, str]:
    """The upstream answer's headers worth relaying (not hop-by-hop, not framing)."""
    return {k: v for k, v in headers.items() if k.lower() not in _NOT_COPIED}


def answer_headers(headers: httpx2.Headers) -> list[tuple[bytes, bytes]]:
    return [
        (k.encode("latin-1"), v.encode("latin-1"))
        for k, v in headers.multi_items()
        if k.lower() not in _NOT_COPIED
    ]


def error_body(status: int, kind: str, message: str) -> bytes:
    """An error in the API's own format."""
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


@dataclass(frozen=True)
class Head:
    status: int
    headers: list[tuple[bytes, bytes]]


# What travels to the client: the head once, then body chunks; closing the channel ends it.
Item = Head | bytes
# A body's bytes up to its message list's ``[`` and from its ``]``.
Frame = tuple[bytes | bytearray, bytes | bytearray]


class Splice(Protocol):
    """Edits upstream's answer on its way to the client (:mod:`hango.gateway.splice`)."""

    def relay(self, item: Item, event: Event | None) -> None: ...


class ClientGoneError(ProviderError):
    """The client disconnected: the upstream call was cancelled, nothing more is sent."""


@dataclass
class Exchange:
    """One client request: what to forward, and the channel back to the client."""

    client: httpx2.AsyncClient
    url: str
    raw: JsonObject
    headers: dict[str, str]
    streaming: bool
    # The client's body around its message list (see :func:`upstream_body`); None: unknown.
    frame: Frame | None = None
    head_sent: bool = False
    gone: bool = False
    # Set while the gateway answers its own tool in this request: the answer passes through it.
    splice: Splice | None = None
    # Awaited once upstream answers, before any of the answer goes to the client: the
    # turn's store work that ran beside the call (it raises when that failed).
    ready: Callable[[], Awaitable[None]] | None = None
    _scope: anyio.CancelScope | None = None
    _out: MemoryObjectSendStream[Item] = field(init=False)
    answers: MemoryObjectReceiveStream[Item] = field(init=False)

    def __post_init__(self) -> None:
        self._out, self.answers = anyio.create_memory_object_stream[Item](math.inf)

    # -- called on the event loop ----------------------------------------------------------

    def disconnected(self) -> None:
        """The client went away: cancel the upstream call in flight, forward nothing more."""
        self.gone = True
        if self._scope is not None:
            self._scope.cancel()

    def put(self, item: Item) -> None:
        if isinstance(item, Head):
            self.head_sent = True
        self._out.send_nowait(item)

    def _pass(self, item: Item, event: Event | None = None) -> None:
        """A part of upstream's answer for the client: as it is, or through the splice."""
        if self.splice is None:
            self.put(item)
        else:
            self.splice.relay(item, event)

    async def forward(self, body: bytes) -> Response | ProviderError:
        """Send ``body`` upstream and pass the answer on; the message for the loop, or why not."""
        if self.gone:
            return ClientGoneError("the client disconnected before the upstream call")
        with anyio.CancelScope() as scope:
            self._scope = scope
            return await self._forward(body)
        return ClientGoneError("the client disconnected; the upstream call was cancelled")

    async def _forward(self, body: bytes) -> Response | ProviderError:
        request = self.client.build_request("POST", self.url, content=body, headers=self.headers)
        answer = await self.client.send(request, stream=True)
        try:
            if self.ready is not None:
                await self.ready()
            if answer.status_code >= 400:
                return await self._refused(answer)
            self._pass(Head(answer.status_code, answer_headers(answer.headers)))
            if self.streaming:
                return await self._relay_events(answer)
            raw = await answer.aread()
            self._pass(raw)
            return Response.model_validate_json(raw)
        finally:
            # Shielded: a cancelled call (the client went away) still closes its connection.
            with anyio.CancelScope(shield=True):
                await answer.aclose()

    async def _relay_events(self, answer: httpx2.Response) -> Response | ProviderError:
        builder = MessageBuilder()
        async for event in events(answer.aiter_raw()):
            self._pass(event.raw, event)
            builder.add(event)
        if builder.error is not None:
            return ProviderError(f"upstream stream error: {builder.error.get('type', 'error')}")
        response = builder.response()
        if response is None:
            return ProviderError("upstream stream carried no message")
        return response

    async def _refused(self, answer: httpx2.Response) -> ProviderError:
        raw = await answer.aread()
        problem = _refusal(answer.status_code, raw, self._credentials())
        if not isinstance(problem, ContextOverflowError):
            # The client gets the API's own answer, as if it had called directly.
            self._pass(Head(answer.status_code, answer_headers(answer.headers)))
            self._pass(raw)
        return problem

    def _credentials(self) -> list[str]:
        """The client's secrets, to scrub from anything the gateway itself keeps or logs."""
        values = [self.headers.get("x-api-key", ""), self.headers.get("authorization", "")]
        values += [v.partition(" ")[2] for v in values if " " in v]
        return [v for v in values if v]

    def end(self) -> None:
        self._out.close()


def _refusal(status: int, raw: bytes, secrets: list[str]) -> ProviderError:
    # The client gets upstream's answer as it is; the error the gateway keeps (the turn's
    # record, a log line, a span) never quotes a credential, even one upstream echoed.
    text = _error_message(raw)
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    message = f"upstream {status}: {text}"
    if status == 400:
        return bad_request_error(text, message)
    if status == 413:
        return ContextOverflowError(message, status=status)
    return ProviderError(message, status=status)


def _error_message(raw: bytes) -> str:
    try:
        parsed: Any = json.loads(raw)
        return str(parsed["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode("utf-8", "replace")


def upstream_body(raw: JsonObject, request: Request, frame: Frame | None = None) -> bytes:
    """The client's body with the messages the pipeline built; every other field as sent.

    Each message's JSON is kept along the lineage of the loop's outgoing copies
    (:meth:`Request.messages_parts`, the parts the provider sends): a call serializes only
    the messages that changed since the previous one, not the history. With the ``frame``
    of the client's body (its bytes up to its message list's ``[`` and from its ``]``)
    every other field goes as the very bytes the client sent; without it (a body whose
    list was not found) they are serialized again (:func:`fields_frame`).
    """
    return framed(frame or fields_frame(raw), request.messages_parts())


def fields_frame(raw: JsonObject) -> Frame:
    """``raw``'s fields serialized around an empty message list, put last (the order of
    an object's keys means nothing to the API)."""
    rest = json.dumps({key: value for key, value in raw.items() if key != "messages"}).encode()
    return (rest[:-1] + b', "messages": [' if len(rest) > 2 else b'{"messages": [', b"]}")


def framed(frame: Frame, parts: list[bytes]) -> bytes:
    """The body: ``parts`` (``[``, the messages' JSON, ``]``) in the frame's place for them."""
    return b"".join([frame[0][:-1], *parts, frame[1][1:]])
