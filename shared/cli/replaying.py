"""Driving the agent loop through a recorded session, one recorded reply at a time.

For every assistant message of the transcript the loop builds the request the agent
would have sent at that point (the stored messages so far, through the whole middleware
chain), the :class:`RecordedReplies` provider records it and answers with the recorded
message, and the loop appends it. User messages are stored as the agent would have
stored them: large tool results go through the same offload as live ones.

The loop's lower-level API does this (``begin_turn`` / ``append`` / ``call_model`` /
``end_turn``), so replay exercises exactly the code a live turn runs, minus the tools.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hango.agent.loop import AgentLoop, TurnResult
from hango.cli.transcripts import Transcript, each_turn
from hango.compaction.record import CompactionRecord
from hango.compaction.summary_prompt import HISTORY_TOOL_NAME
from hango.core.errors import ContextOverflowError, ProviderError
from hango.core.messages import (
    ContentBlock,
    Message,
    Request,
    Response,
    TextBlock,
    ToolResultBlock,
    Usage,
)
from hango.middleware.summarization import SummarizationMiddleware
from hango.providers.base import Capabilities
from hango.tokens import Estimator
from hango.tokens.measure import FixedEstimate, RequestEstimate
from hango.tools.builtin import (
    COMPACT_CONVERSATION,
    EDIT_FILE,
    LS,
    READ_FILE,
    WRITE_FILE,
    Tool,
    ToolOutcome,
    tool_error,
)
from hango.wiring.agent import Agent

BUILTIN_TOOL_NAMES = frozenset(
    (
        *(t.name for t in (READ_FILE, WRITE_FILE, EDIT_FILE, LS, COMPACT_CONVERSATION)),
        HISTORY_TOOL_NAME,
    )
)


class RecordedReplies:
    """A provider whose next answer is the recorded assistant message it was handed.

    It stands in for the API on two counts. It reports prompt caching like the Anthropic
    provider, so the recorded requests carry the breakpoints a deployment would send. And
    it refuses a request over ``window`` (measured with ``estimator``, offline stand-in
    for the API's count) with the API's "prompt is too long" error, so the loop's
    overflow ladder runs as it would live; only the request that was answered is recorded.
    """

    name = "replay"

    def __init__(self, *, window: int, estimator: Estimator) -> None:
        self.capabilities = Capabilities(prompt_caching=True)
        self.window = window
        self.estimator = estimator
        # The running estimate: a call pays for the positions that changed, not the whole
        # request (re-estimating every request made a long replay quadratic).
        self.estimate = RequestEstimate(estimator)
        # Only the last answered request: keeping all of them kept every copy alive.
        self.last: Request | None = None
        # And its estimate, which the replay's figures take rather than estimating it again.
        self.last_tokens = 0
        self.answered = 0
        self._pending: Message | None = None
        self._ids = itertools.count(1)

    def expect(self, message: Message) -> None:
        self._pending = message

    def complete(self, request: Request) -> Response:
        if self._pending is None:
            raise ProviderError("replay: the loop asked for a reply the transcript does not have")
        tokens = self.estimate(request)
        if tokens > self.window:
            raise ContextOverflowError(
                f"prompt is too long: {tokens} tokens > {self.window} maximum",
                tokens=tokens,
                maximum=self.window,
                status=400,
            )
        self.last, self.last_tokens = request, tokens
        self.answered += 1
        blocks = self._pending.blocks()
        self._pending = None
        uses_tools = any(block.type == "tool_use" for block in blocks)
        return Response(
            id=f"msg_replay_{next(self._ids):06d}",
            model=request.model,
            content=blocks,
            stop_reason="tool_use" if uses_tools else "end_turn",
            usage=Usage(),
        )


def transcript_tools(transcript: Transcript) -> tuple[Tool, ...]:
    """The recorded agent's tools (definitions only: replay never runs a tool).

    A tool named like one of the agent's own file tools is the agent's own, so it is left
    to the built-in definition (two tools of one name would make the request invalid).
    """
    return tuple(
        Tool(definition, _not_run)
        for definition in transcript.tools
        if definition.name not in BUILTIN_TOOL_NAMES
    )


def _not_run(arguments: Mapping[str, Any]) -> ToolOutcome:
    return tool_error("replay does not run tools: the recorded result follows")


@dataclass
class TokenFigures:
    """The largest and the mean of one figure over the calls, kept as running sums."""

    largest: int = 0
    total: int = 0

    def add(self, tokens: int) -> None:
        self.largest = max(self.largest, tokens)
        self.total += tokens


@dataclass
class ReplayRun:
    """What the replay produced, as running figures: nothing per call or per turn is kept
    (a transcript of a million short lines is half a million turns)."""

    calls: int = 0
    turns: int = 0
    sent: TokenFigures = field(default_factory=TokenFigures)
    raw: TokenFigures = field(default_factory=TokenFigures)
    compactions: list[CompactionRecord] = field(default_factory=list)

    def called(self, sent_tokens: int, raw_tokens: int) -> None:
        self.calls += 1
        self.sent.add(sent_tokens)
        self.raw.add(raw_tokens)

    def turn_done(self, result: TurnResult) -> None:
        self.turns += 1
        self.compactions.extend(result.compactions)


# Called with each request that was answered and the transcript index of its answer.
CallHook = Callable[[Request, int], None]


class ReplayClock:
    """The replayed session's clock: the recorded time of the answer being asked for.

    A Claude Code transcript records when each message was written; the time between two
    answers is the real time between two model calls, pauses included. Without a recorded
    time (a Messages API JSON, or an entry without one) each call takes ``call_seconds``.
    Seconds from the first call; never backwards (a clock skew in the recording is held).
    """

    def __init__(self, transcript: Transcript, call_seconds: float) -> None:
        self.transcript = transcript
        self.call_seconds = call_seconds
        self.now = 0.0
        self._origin: float | None = None
        self._calls = 0

    def __call__(self) -> float:
        return self.now

    def answer(self, index: int) -> None:
        """The loop is about to ask for the transcript's message ``index``."""
        recorded = self.transcript.time_of(index)
        if recorded is None:
            self.now += self.call_seconds if self._calls else 0.0
        else:
            self._origin = recorded if self._origin is None else self._origin
            self.now = max(self.now, recorded - self._origin)
        self._calls += 1


def replay_transcript(
    agent: Agent,
    replies: RecordedReplies,
    transcript: Transcript,
    *,
    session_id: str,
    estimator: Estimator,
    on_call: CallHook | None = None,
    clock: ReplayClock | None = None,
) -> ReplayRun:
    """Replay every turn of ``transcript`` into ``session_id``."""
    run = ReplayRun()
    raw = _RawTokens(estimator)
    loop = agent.loop
    for turn in each_turn(transcript.each_message()):
        ctx = loop.begin_turn(session_id)
        try:
            for message in turn:
                if message.role == "assistant":
                    replies.expect(message)
                    if clock is not None:
                        clock.answer(raw.count)
                    loop.call_model(ctx)
                    sent = replies.last
                    assert sent is not None
                    run.called(replies.last_tokens, raw.of(sent))
                    if on_call is not None:
                        on_call(sent, raw.count)
                    loop.append(ctx, message)
                else:
                    loop.append(ctx, as_stored(message, loop, ctx.session_id))
                raw.add(message)
        except BaseException as error:
            loop.end_turn(ctx, status="failed", error=f"{type(error).__name__}: {error}")
            raise
        run.turn_done(loop.end_turn(ctx))
    settle_presummaries(loop)
    return run


def settle_presummaries(loop: AgentLoop) -> None:
    """Wait for the pre-summaries still in flight. One dispatched near the end is spent
    money too: its calls are then counted whether or not its thread had finished when the
    run ended (else the same run reports 3 summarizer calls one time, 4 the next)."""
    for middleware in loop.chain:
        if isinstance(middleware, SummarizationMiddleware):
            middleware.presummaries.settle()


class _RawTokens:
    """The uncompacted request's size, kept as a running sum of the messages so far.

    The same figure as estimating the request with every message so far (the estimate of
    a request is its fixed part plus the sum of its messages'), without building that
    request on every call: a long replay stays linear. The fixed part is remembered by
    the identity of the system and tools the loop sends on every call.
    """

    def __init__(self, estimator: Estimator) -> None:
        self.estimator = estimator
        self.fixed = FixedEstimate(estimator)
        self.count = 0
        self.messages_tokens = 0

    def add(self, message: Message) -> None:
        self.count += 1
        self.messages_tokens += self.estimator.estimate_message(message)

    def of(self, sent: Request) -> int:
        return self.fixed(sent) + self.messages_tokens


def as_stored(message: Message, loop: AgentLoop, session_id: str) -> Message:
    """The user message as a live turn stores it: large tool results offloaded."""
    if not any(message.tool_results()):
        return message
    blocks: list[ContentBlock] = []
    for block in message.blocks():
        if isinstance(block, ToolResultBlock) and _is_text_only(block):
            content = loop.stored_result(block.tool_use_id, block.text(), session_id)
            if content != block.text():
                block = block.model_copy(update={"content": content})
        blocks.append(block)
    return Message(role=message.role, content=tuple(blocks))


def _is_text_only(block: ToolResultBlock) -> bool:
    if isinstance(block.content, str):
        return True
    return block.content is not None and all(isinstance(part, TextBlock) for part in block.content)
