"""Property: every request the whole pipeline sends is valid, whatever the history.

Random histories (parallel tool batches, errored results, images, thinking blocks) are
driven through the real agent loop and middleware chain on a window small enough that
truncation, summaries and mechanical truncation all happen, with overflows injected at
random and restarts at random turn starts (a new agent on the same store and history).
The providers record every request they received: each must pass the validator, and the
store must still hold every message, in order, untouched.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango.compaction.validate import validate_request
from hango.core.errors import CannotFitError, ContextOverflowError
from hango.core.messages import Message, Response
from hango.providers.scripted import ScriptedProvider
from hango.tokens import make_estimator
from tests.agent_support import build
from tests.histories import histories, request_of
from tests.properties import examples


def recorded(message: Message, overflow: bool) -> list[object]:
    reply = Response(id="msg_recorded", model="test-model", content=message.blocks())
    error = ContextOverflowError("prompt is too long: 9999 tokens > 9000 maximum", tokens=9999)
    return [error, reply] if overflow else [reply]


def replay(
    messages: tuple[Message, ...], window: int, overflows: list[bool], restarts: list[bool]
) -> list[ScriptedProvider]:
    """Drive the history through the loop; at some turn starts the process "restarts":
    a new agent on the same store and history directory picks the session up."""
    providers: list[ScriptedProvider] = []
    with tempfile.TemporaryDirectory() as scratch:
        agent, provider = build(Path(scratch), window=window, tool_arg_max_tokens=60)
        providers.append(provider)
        loop = agent.loop
        ctx = loop.begin_turn("prop")
        turns = 0
        for index, message in enumerate(messages):
            if message.role == "user":
                if (
                    index
                    and messages[index - 1].role == "assistant"
                    and not any(messages[index - 1].tool_uses())
                ):
                    loop.end_turn(ctx)
                    turns += 1
                    if restarts[turns % len(restarts)]:
                        agent.store.engine.dispose()
                        agent, provider = build(
                            Path(scratch), window=window, tool_arg_max_tokens=60
                        )
                        providers.append(provider)
                        loop = agent.loop
                    ctx = loop.begin_turn("prop")
                loop.append(ctx, message)
                continue
            provider.push(*recorded(message, overflows[index % len(overflows)]))
            # A single tool group larger than the window is refused, never sent.
            with contextlib.suppress(CannotFitError):
                loop.call_model(ctx)
            loop.append(ctx, message)
        loop.end_turn(ctx)
        stored = [m.message for m in agent.store.messages("prop")]
        assert stored == list(messages)
        agent.store.engine.dispose()
    return providers


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    histories(min_steps=6, max_steps=30, max_batch=4),
    st.floats(min_value=0.2, max_value=0.9),
    st.lists(st.booleans(), min_size=1, max_size=5),
    st.lists(st.booleans(), min_size=1, max_size=4),
)
def test_every_request_the_pipeline_sends_is_valid(
    messages: tuple[Message, ...], share: float, overflows: list[bool], restarts: list[bool]
) -> None:
    total = make_estimator("heuristic").estimate_request(request_of(messages))
    providers = replay(messages, max(2_500, int(total * share)), overflows, restarts)
    for request in (r for provider in providers for r in provider.requests):
        assert validate_request(request) == [], request.to_api()


def test_the_property_run_really_compacts() -> None:
    """The same driver on a fixed long history does compact (so the property has teeth)."""
    builder_messages: list[Message] = [Message(role="user", content="start")]
    for i in range(40):
        builder_messages.append(Message(role="assistant", content=f"step {i}: " + "w " * 400))
        builder_messages.append(Message(role="user", content=f"go on {i}"))
    providers = replay(tuple(builder_messages[:-1]), 6_000, [False, False, True], [False, True])
    assert len(providers) > 1, "the run restarted"
    requests = [r for provider in providers for r in provider.requests]
    heads = [r for r in requests if "<summary>" in str(r.messages[0].content)]
    assert heads, "no request carried a summary"
