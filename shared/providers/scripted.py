"""A scripted provider for tests and offline runs.

It answers from a queue of replies and errors and records every request it received, so
tests assert on what was actually sent rather than on mocked internals. A reply may also
be a function of the request (used by the offline simulation to answer summary requests).
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hango.core.errors import ProviderError
from hango.core.messages import ContentBlock, Request, Response, TextBlock, ToolUseBlock, Usage
from hango.providers.base import Capabilities

Reply = Response | BaseException | Callable[[Request], Response]

_ids = itertools.count(1)


def text_reply(text: str, *, stop_reason: str = "end_turn", model: str = "scripted") -> Response:
    """A plain text answer."""
    return _reply((TextBlock(text=text),), stop_reason, model, max(1, len(text) // 4))


def tool_reply(
    *calls: tuple[str, dict[str, object]], text: str = "", model: str = "scripted"
) -> Response:
    """An answer that calls tools: each call is ``(name, input)``; ids are generated."""
    said = (TextBlock(text=text),) if text else ()
    uses = [
        ToolUseBlock(id=f"toolu_scripted_{next(_ids):06d}", name=n, input=dict(a)) for n, a in calls
    ]
    return _reply((*said, *uses), "tool_use", model, 10)


def _reply(
    content: tuple[ContentBlock, ...], stop_reason: str, model: str, output: int
) -> Response:
    return Response(
        id=f"msg_scripted_{next(_ids)}",
        model=model,
        content=content,
        stop_reason=stop_reason,
        usage=Usage(input_tokens=0, output_tokens=output),
    )


@dataclass
class ScriptedProvider:
    """Answers from ``replies`` in order; raises when the script runs out."""

    replies: Iterable[Reply] = ()
    capabilities: Capabilities = field(default_factory=Capabilities)
    name: str = "scripted"
    requests: list[Request] = field(default_factory=list)
    fallback: Callable[[Request], Response] | None = None

    def __post_init__(self) -> None:
        self._queue: deque[Reply] = deque(self.replies)
        self._lock = threading.Lock()

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def complete(self, request: Request) -> Response:
        with self._lock:
            self.requests.append(request)
            reply = self._queue.popleft() if self._queue else self.fallback
        if reply is None:
            raise ProviderError(
                f"scripted provider has no reply left for request #{len(self.requests)}"
            )
        if isinstance(reply, BaseException):
            raise reply
        return reply if isinstance(reply, Response) else reply(request)
