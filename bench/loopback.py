"""A loopback Messages API for the whole-call benchmark: a canned reply over real HTTP.

The server runs in its own process, so the benchmark's CPU time (``time.process_time``)
is the client's alone: the SDK, the HTTP client and hango, not the server answering.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = {
    "id": "msg_loopback",
    "type": "message",
    "role": "assistant",
    "model": "loopback",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1000, "output_tokens": 1},
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client's pool reuses the connection

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        json.loads(self.rfile.read(length))  # a body that is not JSON would fail here
        payload = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        return


# A streamed answer as the API sends it: text "ok", the usage in ``message_start``.
_START = {**REPLY, "content": [], "stop_reason": None}
_EVENTS = [
    ("message_start", {"type": "message_start", "message": _START}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]
SSE_REPLY = b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in _EVENTS)


class _StreamHandler(BaseHTTPRequestHandler):
    """Answers a streamed request once its whole body is in, without parsing it: what
    the API spends on the body is the same whichever way it came, so it is left out of a
    comparison of the two ways (where it would only add its own noise)."""

    protocol_version = "HTTP/1.1"
    # The answer's first byte leaves at once (no Nagle wait for the head's ACK), as the
    # API's own stream does; the client's side of the timing sees the same both ways.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(SSE_REPLY)))
        self.end_headers()
        self.wfile.write(SSE_REPLY)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _serve(port: Any, handler: type[BaseHTTPRequestHandler] = _Handler) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port.value = server.server_address[1]
    server.serve_forever()


def _serve_streams(port: Any) -> None:
    _serve(port, _StreamHandler)


def streaming_api() -> AbstractContextManager[str]:
    """The base URL of a loopback API answering every request with one streamed "ok"."""
    return server_process(_serve_streams)


def loopback_api() -> AbstractContextManager[str]:
    """The base URL of a Messages API on 127.0.0.1, for the duration of the block."""
    return server_process(_serve)


@contextmanager
def server_process(serve: Callable[[Any], None]) -> Iterator[str]:
    """The base URL of a server on 127.0.0.1 run by ``serve(port)`` in a process of its
    own (``serve`` sets ``port.value`` once it listens, then serves until terminated)."""
    context = multiprocessing.get_context("spawn")
    port = context.Value("i", 0)
    process = context.Process(target=serve, args=(port,), daemon=True)
    process.start()
    try:
        while port.value == 0:
            process.join(0.01)
            if not process.is_alive():
                raise RuntimeError("the loopback server did not start")
        yield f"http://127.0.0.1:{port.value}"
    finally:
        process.terminate()
        process.join()
