"""A loopback fake of the Anthropic Messages API, for tests that go through the real SDK.

``FakeAnthropicAPI`` is a stdlib HTTP server on 127.0.0.1 (a free port) in a daemon
thread. It answers ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` the way
the API does, including the API's own 400 texts for the mistakes this product must never
make (orphan tool_use / tool_result, duplicate ids, broken alternation, over the window).

Token count (deterministic, documented so tests can compute expectations): the prompt is
cut into units -- each tool definition, each system block (a string system is one text
block), each content block of each message (a string content is one text block, tagged
with its role). With ``cache_control`` keys removed, a unit costs
``ceil(len(json.dumps(unit, sort_keys=True, separators=(",", ":"))) / 4)`` tokens and the
prompt costs the sum. ``count_input_tokens(body)`` computes it.

Prompt caching is simulated on those units: a breakpoint is a unit carrying
``cache_control`` (or the last unit when the body has a top-level ``cache_control``). At
each breakpoint of a served request the prefix up to it is written to the cache (per
model). A later request *reads* the longest cached prefix that ends at or before its last
breakpoint; the rest up to that breakpoint is *created*; ``input_tokens`` is what is left.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Body = dict[str, Any]

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
CHARS_PER_TOKEN = 4

# Keys the count endpoint refuses because they only steer generation.
_GENERATION_ONLY = ("max_tokens", "stream", "stop_sequences", "temperature", "top_p", "top_k")

_ERROR_TYPES = {
    400: ("invalid_request_error", "Invalid request"),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
    500: ("api_error", "Internal server error"),
    503: ("api_error", "Service unavailable"),
    529: ("overloaded_error", "Overloaded"),
}


@dataclass(frozen=True)
class ScriptedError:
    """An error answer: ``status`` with the API's error body of ``type``/``message``."""

    status: int
    type: str | None = None
    message: str | None = None

    def body(self, request_id: str) -> Body:
        default_type, default_message = _ERROR_TYPES.get(self.status, ("api_error", "Error"))
        error = {"type": self.type or default_type, "message": self.message or default_message}
        return {"type": "error", "error": error, "request_id": request_id}


@dataclass(frozen=True)
class EchoingError(ScriptedError):
    """An error whose message quotes the request's credential headers, as some proxies do.

    ``form``: ``verbatim``, ``upper`` (upper-cased, as some gateways log them) or
    ``prefix`` (the first 20 characters of the value, as others "mask" them).
    """

    form: str = "verbatim"

    def _shown(self, value: str) -> str:
        if self.form == "upper":
            return value.upper()
        if self.form == "prefix":
            return value.removeprefix("Bearer ")[:20] + "..."
        return value

    def echoed(self, request_id: str, headers: dict[str, str]) -> Body:
        quoted = {
            k: self._shown(v) for k, v in headers.items() if k in ("x-api-key", "authorization")
        }
        body = self.body(request_id)
        body["error"]["message"] += f" (request headers: {quoted})"
        return body


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it (headers with lower-case names)."""

    path: str
    headers: dict[str, str]
    body: Body


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(v) for v in value]
    return value


def _canonical(value: Any) -> str:
    return json.dumps(_strip_cache_control(value), sort_keys=True, separators=(",", ":"))


def tokens_of(value: Any) -> int:
    """The fake's token cost of one JSON value (``cache_control`` is free)."""
    return math.ceil(len(_canonical(value)) / CHARS_PER_TOKEN)


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else [content]


def prompt_units(body: Body) -> list[Any]:
    """The prompt in cache order (tools, system, messages), one unit per block."""
    units: list[Any] = list(body.get("tools") or [])
    if body.get("system") is not None:
        units.extend(_as_blocks(body["system"]))
    for message in body.get("messages") or []:
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else message
        units.extend({"role": role, "block": block} for block in _as_blocks(content))
    return units


def count_input_tokens(body: Body) -> int:
    """The input tokens of a request body, as both endpoints of the fake report them."""
    return sum(tokens_of(unit) for unit in prompt_units(body))


def _has_cache_control(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_has_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_cache_control(v) for v in value)
    return False


class PromptCache:
    """Prefixes written at breakpoints, keyed by model and a hash of the prefix."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._written: set[tuple[str, str]] = set()

    def usage(self, body: Body) -> Body:
        """Usage of ``body`` (input split into read / created / uncached); then writes it."""
        units = prompt_units(body)
        tokens = list(itertools.accumulate(tokens_of(u) for u in units))
        total = tokens[-1] if tokens else 0
        model = str(body.get("model"))
        hashes = _prefix_hashes(units)
        marks = [i for i, unit in enumerate(units) if _has_cache_control(unit)]
        if units and "cache_control" in body:
            marks.append(len(units) - 1)
        read = created = 0
        if marks:
            last = max(marks)
            hits = [i for i in range(last + 1) if (model, hashes[i]) in self._written]
            read = tokens[hits[-1]] if hits else 0
            created = tokens[last] - read if tokens[last] >= self.min_tokens else 0
        for mark in marks:
            if tokens[mark] >= self.min_tokens:
                self._written.add((model, hashes[mark]))
        return {
            "input_tokens": total - read - created,
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }


def _prefix_hashes(units: list[Any]) -> list[str]:
    digest = hashlib.sha256()
    hashes = []
    for unit in units:
        digest.update(_canonical(unit).encode())
        hashes.append(digest.copy().hexdigest())
    return hashes


def text_reply(text: str, **fields: Any) -> Body:
    """A scripted reply with one text block (other fields override the defaults)."""
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn", **fields}


def tool_use_reply(*calls: tuple[str, str, Body], text: str = "") -> Body:
    """A scripted reply calling tools; each call is ``(id, name, input)``."""
    blocks: list[Body] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {"content": blocks, "stop_reason": "tool_use"}


@dataclass
class FakeAnthropicAPI:
    """The Messages API on a loopback port. See the module docstring for the token rules.

    ``window`` is the largest accepted input; ``push`` queues replies (a partial message
    dict, a ``ScriptedError`` or a function of the request body); ``responder`` answers
    when the queue is empty; ``fail_next`` makes the next requests fail with a status;
    ``message_delay`` / ``count_delay`` hold each answer back (for deadline tests).
    """

    window: int = 200_000
    min_cache_tokens: int = 0
    # Sent on every error so the SDK's retries wait 1 ms instead of 0.5-8 s of backoff.
    retry_after_ms: int | None = 1
    message_delay: float = 0.0
    count_delay: float = 0.0
    # Held between the streamed events of one answer (streaming tests of cancellation).
    event_delay: float = 0.0
    # Streams whose reader disconnected before the last event.
    streams_cut: int = 0
    # The events of every streamed answer, as the bytes sent.
    streamed: list[list[bytes]] = field(default_factory=list)
    # The usage of every message answered, in order.
    usages: list[Body] = field(default_factory=list)
    responder: Callable[[Body], Body] = field(default=lambda body: text_reply("ok"))
    # Another tokenizer: the prompt's size for both endpoints and the window, with usage
    # reporting it all as uncached input. ``None``: ``count_input_tokens`` and the cache.
    tokenizer: Callable[[Body], int] | None = None
    requests: list[RecordedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache = PromptCache(self.min_cache_tokens)
        self._replies: deque[Any] = deque()
        self._failures: deque[tuple[ScriptedError, str | None]] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeAnthropicAPI:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAnthropicAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeAnthropicAPI is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- scripting -----------------------------------------------------------------------

    def push(self, *replies: Body | ScriptedError | Callable[[Body], Body]) -> None:
        with self._lock:
            self._replies.extend(replies)

    def fail_next(self, count: int, status: int = 529, *, endpoint: str | None = None) -> None:
        """Answer the next ``count`` requests (to ``endpoint`` path, or any) with ``status``."""
        with self._lock:
            self._failures.extend([(ScriptedError(status), endpoint)] * count)

    def echo_credentials_next(
        self, count: int, status: int = 401, *, endpoint: str | None = None, form: str = "verbatim"
    ) -> None:
        """Answer the next ``count`` requests with an error quoting the credential headers."""
        with self._lock:
            self._failures.extend([(EchoingError(status, form=form), endpoint)] * count)

    def forget_failures(self) -> None:
        """Drop the scripted failures not answered yet."""
        with self._lock:
            self._failures.clear()

    def count_tokens(self, body: Body) -> int:
        return count_input_tokens(body)

    def message_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == MESSAGES_PATH]

    def count_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == COUNT_TOKENS_PATH]

    # -- answering (called from handler threads) -----------------------------------------

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Body, str]:
        """Status, JSON body and request id of the answer to one POST."""
        request_id = f"req_fake_{next(self._ids):06d}"
        status, payload = self._answer(path, headers, raw, request_id)
        return status, payload, request_id

    def _answer(
        self, path: str, headers: dict[str, str], raw: bytes, request_id: str
    ) -> tuple[int, Body]:
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            return 400, _invalid(request_id, "There was an issue with your request JSON")
        with self._lock:
            self.requests.append(RecordedRequest(path, headers, body))
            failure = self._take_failure(path)
        self._stopping.wait(self.count_delay if path == COUNT_TOKENS_PATH else self.message_delay)
        if isinstance(failure, EchoingError):
            return failure.status, failure.echoed(request_id, headers)
        if failure is not None:
            return failure.status, failure.body(request_id)
        if path not in (MESSAGES_PATH, COUNT_TOKENS_PATH):
            return 404, ScriptedError(404).body(request_id)
        problem = _request_problem(body, counting=path == COUNT_TOKENS_PATH)
        if problem is not None:
            return 400, _invalid(request_id, problem)
        if path == COUNT_TOKENS_PATH:
            return 200, {"input_tokens": self._prompt_tokens(body)}
        return self._create(body, request_id)

    def _take_failure(self, path: str) -> ScriptedError | None:
        for index, (error, endpoint) in enumerate(self._failures):
            if endpoint is None or endpoint == path:
                del self._failures[index]
                return error
        return None

    def _create(self, body: Body, request_id: str) -> tuple[int, Body]:
        total = self._prompt_tokens(body)
        if total > self.window:
            return 400, _invalid(
                request_id, f"prompt is too long: {total} tokens > {self.window} maximum"
            )
        with self._lock:
            reply = self._replies.popleft() if self._replies else self.responder
        if isinstance(reply, ScriptedError):
            return reply.status, reply.body(request_id)
        scripted = reply(body) if callable(reply) else reply
        with self._lock:
            usage = self.cache.usage(body) if self.tokenizer is None else {"input_tokens": total}
            self.usages.append(usage)
        return 200, self._message(body, scripted, usage)

    def _prompt_tokens(self, body: Body) -> int:
        return count_input_tokens(body) if self.tokenizer is None else self.tokenizer(body)

    def _message(self, body: Body, scripted: Body, usage: Body) -> Body:
        content = scripted.get("content", [{"type": "text", "text": "ok"}])
        usage = {**usage, "output_tokens": tokens_of(content), **scripted.get("usage", {})}
        return {
            "id": f"msg_fake_{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            **scripted,
            "usage": usage,
        }


def pairing_error(messages: list[Any]) -> str | None:
    """The API's 400 text for broken alternation or tool pairing, or ``None``.

    Texts are the API's own (see the research note, section A3); ``N`` is the message
    index and ``M`` the block index, as the API reports them.
    """
    seen_ids: set[str] = set()
    previous_uses: list[str] = []
    for index, message in enumerate(messages):
        problem = _role_problem(messages, index)
        if problem is not None:
            return problem
        if message["role"] == "system":
            continue  # a mid-conversation system message: no tool blocks, no turn of its own
        blocks = _as_blocks(message.get("content"))
        if message["role"] == "user":
            problem = _orphan_result(blocks, previous_uses, index)
            previous_uses = []
        else:
            previous_uses = [b.get("id") for b in blocks if _is_block(b, "tool_use")]
            following = messages[index + 1] if index + 1 < len(messages) else None
            problem = _duplicate_use(blocks, seen_ids, index) or _unanswered_uses(
                previous_uses, following, index
            )
        if problem is not None:
            return problem
    return None


def _is_block(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def _role_problem(messages: list[Any], index: int) -> str | None:
    message = messages[index]
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant", "system"):
        return f"messages.{index}.role: Input should be 'user', 'assistant' or 'system'"
    if "content" not in message:
        return f"messages.{index}.content: Field required"
    if index == 0 and message["role"] != "user":
        return 'messages: first message must use the "user" role'
    if index > 0 and messages[index - 1].get("role") == message["role"]:
        role = message["role"]
        return (
            'messages: roles must alternate between "user" and "assistant", '
            f'but found multiple "{role}" roles in a row'
        )
    final_assistant = index == len(messages) - 1 and message["role"] == "assistant"
    if not message["content"] and not final_assistant:
        return (
            f"messages.{index}: all messages must have non-empty content except for the "
            "optional final assistant message"
        )
    return None


def _orphan_result(blocks: list[Any], previous_uses: list[str], index: int) -> str | None:
    for position, block in enumerate(blocks):
        if not _is_block(block, "tool_result"):
            continue
        if block.get("tool_use_id") not in previous_uses:
            return (
                f"messages.{index}.content.{position}: unexpected `tool_use_id` found in "
                f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` block "
                "must have a corresponding `tool_use` block in the previous message."
            )
    return None


def _duplicate_use(blocks: list[Any], seen_ids: set[str], index: int) -> str | None:
    for position, block in enumerate(blocks):
        if not _is_block(block, "tool_use"):
            continue
        if block.get("id") in seen_ids:
            return f"messages.{index}.content.{position}: `tool_use` ids must be unique"
        seen_ids.add(block.get("id"))
    return None


def _unanswered_uses(uses: list[str], following: Any, index: int) -> str | None:
    answered: set[Any] = set()
    if isinstance(following, dict):
        answered = {
            b.get("tool_use_id")
            for b in _as_blocks(following.get("content"))
            if _is_block(b, "tool_result")
        }
    missing = [use for use in uses if use not in answered]
    if not missing:
        return None
    return (
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message."
    )


def _wants_stream(raw: bytes) -> bool:
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("stream") is True


def _invalid(request_id: str, message: str) -> Body:
    return ScriptedError(400, "invalid_request_error", message).body(request_id)


def _request_problem(body: Any, *, counting: bool) -> str | None:
    """The API's 400 text for a malformed body, or ``None`` when it is acceptable."""
    if not isinstance(body, dict):
        return "Input should be a valid dictionary or object to extract fields from"
    required = ("model", "messages") if counting else ("model", "max_tokens", "messages")
    for key in required:
        if key not in body:
            return f"{key}: Field required"
    if counting:
        for key in _GENERATION_ONLY:
            if key in body:
                return f"{key}: Extra inputs are not permitted"
    if not isinstance(body["messages"], list):
        return "messages: Input should be a valid list"
    return pairing_error(body["messages"])


def stream_events(message: Body) -> list[tuple[str, Body]]:
    """The SSE events the API sends for ``message`` (``stream: true``), in order.

    ``message_start`` carries the input usage and empty content; each block is a start, its
    deltas (text, JSON input in two halves, thinking, signature) and a stop; a ``ping``
    follows the start; ``message_delta`` carries the stop reason and the output tokens.
    """
    usage = dict(message["usage"])
    start_usage = {**usage, "output_tokens": 1}
    started = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[tuple[str, Body]] = [
        ("message_start", {"type": "message_start", "message": {**started, "usage": start_usage}}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block))
    delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": None}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": delta,
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(index: int, block: Body) -> list[tuple[str, Body]]:
    kind = block.get("type")
    deltas: list[Body] = []
    if kind == "text":
        empty, text = {**block, "text": ""}, block["text"]
        half = len(text) // 2
        deltas = [{"type": "text_delta", "text": part} for part in (text[:half], text[half:])]
    elif kind == "tool_use":
        empty, encoded = {**block, "input": {}}, json.dumps(block["input"])
        half = len(encoded) // 2
        deltas = [
            {"type": "input_json_delta", "partial_json": part}
            for part in (encoded[:half], encoded[half:])
        ]
    elif kind == "thinking":
        empty = {**block, "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": block["thinking"]}]
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
    else:
        empty = block
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": empty},
        ),
        *(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def sse_bytes(events: list[tuple[str, Body]]) -> list[bytes]:
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]


class _Handler(BaseHTTPRequestHandler):
    server_version = "FakeAnthropicAPI/1"

    def do_POST(self) -> None:
        fake: FakeAnthropicAPI = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, payload, request_id = fake.answer(self.path.split("?")[0], headers, raw)
        if status == 200 and _wants_stream(raw) and payload.get("type") == "message":
            self._stream(fake, payload, request_id)
            return
        self._send(fake, status, payload, request_id)

    def _stream(self, fake: FakeAnthropicAPI, message: Body, request_id: str) -> None:
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("request-id", request_id)
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            events = sse_bytes(stream_events(message))
            fake.streamed.append(events)
            for event in events:
                self.wfile.write(event)
                self.wfile.flush()
                fake._stopping.wait(fake.event_delay)
        except (BrokenPipeError, ConnectionResetError):
            fake.streams_cut += 1  # the reader went away mid-stream

    def _send(self, fake: FakeAnthropicAPI, status: int, payload: Body, request_id: str) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", request_id)
            if status >= 400 and fake.retry_after_ms is not None:
                self.send_header("retry-after-ms", str(fake.retry_after_ms))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout fired); nothing left to tell it

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean


@pytest.fixture
def fake_api() -> Iterator[FakeAnthropicAPI]:
    """A started ``FakeAnthropicAPI`` for one test."""
    with FakeAnthropicAPI() as api:
        yield api
