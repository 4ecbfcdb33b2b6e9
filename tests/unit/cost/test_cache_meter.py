"""The cache meter follows a session's requests: the figures of simulating each request
whole, for the work of what changed since the previous one (issue 26, replay in linear
time)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hango.core.messages import Message, Request, ToolDefinition
from hango.core.profiles import Profiles
from hango.cost.cache_model import (
    PrefixCache,
    TooManyBreakpointsError,
    WireBlock,
    blocks_from_request,
)
from hango.cost.meter import CacheMeter, copy_difference, estimated_sizes, first_difference
from hango.providers.scripted import text_reply
from hango.tokens import make_estimator
from tests.agent_support import build
from tests.properties import examples
from tests.unit.agent.test_cache_sessions import run_session

PROFILE = Profiles().resolve("claude-sonnet-4-5-20250929")
MARK = {"cache_control": {"type": "ephemeral"}}


def whole_and_followed(requests: list[Request]) -> None:
    """Each request through the meter and through a fresh simulation of its whole blocks:
    the same usage, call by call."""
    sizes = estimated_sizes(make_estimator("heuristic"))
    meter = CacheMeter(PROFILE, sizes)
    whole = PrefixCache.for_profile(PROFILE)
    for number, request in enumerate(requests):
        expected = whole.simulate(blocks_from_request(request, sizes))
        assert meter.add(request) == expected, f"request {number}"


def test_a_session_with_compactions_and_truncation_gets_the_figures_of_whole_requests(
    tmp_path: Path,
) -> None:
    agent, requests = run_session(tmp_path, window=60_000, turns=40)
    assert agent.store.session("cache").compactions >= 1  # type: ignore[union-attr]
    assert agent.store.latest_state("cache").truncated_before_seq > 0
    whole_and_followed(requests)


def say(text: str, role: str = "user", *, marked: bool = False) -> Message:
    block = {"type": "text", "text": text, **(MARK if marked else {})}
    return Message.model_validate({"role": role, "content": [block]})


def request(*messages: Message, tools: tuple[ToolDefinition, ...] = (), **extra: object) -> Request:
    body = Request(
        model="m", max_tokens=1, system="Be careful. " * 400, messages=messages, tools=tools
    )
    return Request.model_validate({**body.to_api(), **extra}) if extra else body


def test_edits_anywhere_shrinking_and_new_tools_get_the_figures_of_whole_requests() -> None:
    history = [say(f"message {n} " * 50, "user" if n % 2 == 0 else "assistant") for n in range(12)]
    grep = ToolDefinition(name="grep", input_schema={"type": "object"})
    edited = [*history[:3], say("an edited middle " * 50, "assistant"), *history[4:]]
    requests = [
        request(*history[:6], say("q", marked=True)),
        request(*history[:8], say("q2", marked=True)),
        request(*edited[:8], say("q2", marked=True)),  # a middle message replaced
        request(*edited[:10], say("q3", marked=True)),
        request(*edited[:4], say("q4", marked=True)),  # shorter: a new start of sorts
        request(*edited[:4], say("q4", marked=True), tools=(grep,)),  # new fixed part
        request(*edited[:12], say("q5"), cache_control={"type": "ephemeral"}),  # automatic
        request(say("summary", marked=True), *edited[8:12], say("q6", marked=True)),
    ]
    whole_and_followed(requests)


def test_automatic_caching_with_four_markers_is_refused_by_the_meter_too() -> None:
    marked = tuple(say(f"m{n}", marked=True) for n in range(4))
    meter = CacheMeter(PROFILE, estimated_sizes(make_estimator("heuristic")))
    with pytest.raises(TooManyBreakpointsError, match="free slot"):
        meter.add(request(*marked, cache_control={"type": "ephemeral"}))


def test_a_growing_session_sizes_only_what_changed_since_the_previous_call(
    tmp_path: Path,
) -> None:
    """Before the meter followed the session, every block of every request was sized and
    hashed again: 300 calls of a growing session sized ~90,000 blocks."""
    agent, provider = build(tmp_path, window=2_000_000, caching=True)
    for turn in range(300):
        provider.push(text_reply(f"Done {turn}."))
        agent.loop.run_turn("grow", f"Step {turn}.")
    agent.store.engine.dispose()
    estimate = estimated_sizes(make_estimator("heuristic"))
    sized: list[WireBlock] = []

    def counting(block: WireBlock) -> int:
        sized.append(block)
        return estimate(block)

    meter = CacheMeter(agent.profile, counting)
    first = provider.requests[0]
    for sent in provider.requests:
        meter.add(sent)
    fixed = len(first.tool_definitions()) + len(first.system_blocks())
    assert len(provider.requests) == 300
    # Per call: the previous call's marked messages again (markers moved) and the new ones.
    assert len(sized) <= fixed + 6 * len(provider.requests), len(sized)
    assert meter.report.read_ratio > 0.9


def linear_difference(old: Sequence[Message], new: Sequence[Message]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )


def test_successive_requests_of_a_session_say_where_they_differ_without_a_comparison(
    tmp_path: Path,
) -> None:
    """The outgoing copy that made both requests knows what changed between them: the
    meter no longer compares the two requests' messages (up to a window's worth each)."""
    agent, provider = build(tmp_path, window=2_000_000, caching=True)
    for turn in range(30):
        provider.push(text_reply(f"Done {turn}."))
        agent.loop.run_turn("grow", f"Step {turn}.")
    agent.store.engine.dispose()
    requests = provider.requests
    for old, new in itertools.pairwise(requests):
        real = linear_difference(old.sent_messages(), new.sent_messages())
        assert copy_difference(old, new) == real > len(old.messages) - 3
    # Plain tuples (or another copy's) are compared.
    plain = [r.model_copy(update={"messages": tuple(r.sent_messages())}) for r in requests]
    assert copy_difference(plain[3], plain[4]) is None
    expected = linear_difference(plain[3].messages, plain[4].messages)
    assert first_difference(plain[3].messages, plain[4].messages) == expected


@settings(deadline=None, max_examples=examples(200))
@given(
    st.lists(st.integers(0, 3), max_size=40),
    st.lists(st.integers(0, 3), max_size=40),
)
def test_the_first_difference_is_the_linear_scans(old: list[int], new: list[int]) -> None:
    pool = [Message(role="user", content=f"m{n}") for n in range(4)]
    before, after = [pool[n] for n in old], [pool[n] for n in new]
    assert first_difference(before, after) == linear_difference(before, after)
