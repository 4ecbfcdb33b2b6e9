"""The context pipeline end to end against PostgreSQL (SPEC §8 criteria 2-10)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from hango.compaction.validate import validate_request
from hango.core.errors import ContextOverflowError
from hango.core.messages import Message, TextBlock, ToolUseBlock
from hango.history.paths import conversation_history_path
from hango.providers.scripted import text_reply, tool_reply
from hango.store import Store
from hango.tokens import make_estimator
from tests.agent_support import build, writer_reply
from tests.outgoing_reference import merge_consecutive

pytestmark = pytest.mark.integration

FACT = "Please remember fact {i}: the deploy key id is key-{i:04d}. " + "context " * 180


def overflow() -> ContextOverflowError:
    return ContextOverflowError(
        "prompt is too long: 7000 tokens > 6000 maximum", tokens=7000, maximum=6000, status=400
    )


def chat(agent: Any, provider: Any, session: str, turns: int, start: int = 0) -> list[Any]:
    results = []
    for i in range(start, start + turns):
        provider.push(text_reply(f"noted {i}"))
        results.append(agent.loop.run_turn(session, FACT.format(i=i)))
    return results


def test_compacted_request_while_store_keeps_full_transcript(
    tmp_path: Path, pg_store: Store
) -> None:
    agent, provider = build(tmp_path, store=pg_store)
    results = chat(agent, provider, "s-compact", 16)

    compactions = [c for r in results for c in r.compactions]
    assert compactions, "a session over the trigger must compact"
    first = compactions[0]
    assert first.reason == "threshold"
    last_sent = provider.requests[-1]
    head = last_sent.messages[0]
    path = conversation_history_path("s-compact")
    assert path in head.text() or path in str(head.content)
    assert len(last_sent.messages) < 32
    assert not validate_request(last_sent)

    stored = pg_store.messages("s-compact")
    assert len(stored) == 32
    assert [m.seq for m in stored] == list(range(1, 33))
    assert stored[0].message.text() == FACT.format(i=0)

    history = agent.history.read(path)
    for m in stored:
        if m.seq < compactions[-1].kept_from_seq:
            assert m.message.text() in history


def test_truncation_alone_keeps_a_borderline_session_under_the_trigger(
    tmp_path: Path, pg_store: Store
) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=9000)
    estimator = make_estimator("heuristic")
    trigger = agent.profile.trigger_tokens
    raw_tokens = 0
    for i in range(40):
        provider.push(writer_reply(i), text_reply(f"wrote file {i}"))
        result = agent.loop.run_turn("s-trunc", f"write file {i}")
        assert result.compactions == ()
        messages, _ = merge_consecutive(pg_store.messages("s-trunc"))
        raw = provider.requests[-1].model_copy(update={"messages": messages})
        raw_tokens = estimator.estimate_request(raw)
        if raw_tokens > trigger:
            break
    assert raw_tokens > trigger, "the untruncated session must be over the trigger"
    sent = provider.requests[-1]
    assert estimator.estimate_request(sent) < trigger
    assert "truncated" in str(sent.to_api())
    assert pg_store.session("s-trunc").compactions == 0  # type: ignore[union-attr]


def test_overflow_forces_compaction_and_one_retry(tmp_path: Path, pg_store: Store) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=50_000)
    chat(agent, provider, "s-ovf", 6)
    provider.push(overflow(), text_reply("after compaction"))
    result = agent.loop.run_turn("s-ovf", "one more")
    assert [c.reason for c in result.compactions] == ["overflow"]
    assert result.model_calls == 2
    assert result.response is not None and result.response.content[0] == TextBlock(
        text="after compaction"
    )


def test_second_overflow_degrades_to_mechanical_truncation(tmp_path: Path, pg_store: Store) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=50_000)
    chat(agent, provider, "s-ovf2", 6)
    provider.push(overflow(), overflow(), text_reply("fits now"))
    result = agent.loop.run_turn("s-ovf2", "one more")
    assert [c.reason for c in result.compactions] == ["overflow", "truncate"]
    assert result.model_calls == 3
    for request in provider.requests[-3:]:
        assert not validate_request(request)


def test_third_overflow_fails_the_run_clearly(tmp_path: Path, pg_store: Store) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=50_000)
    chat(agent, provider, "s-ovf3", 6)
    provider.push(overflow(), overflow(), overflow())
    with pytest.raises(ContextOverflowError, match="after compaction and mechanical truncation"):
        agent.loop.run_turn("s-ovf3", "one more")
    run = pg_store.run("s-ovf3", 7)
    assert run is not None and run.status == "failed"
    assert len(pg_store.messages("s-ovf3")) == 13  # the user's message is kept


def test_session_counters_written_once_per_turn(tmp_path: Path, pg_store: Store) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=50_000)
    chat(agent, provider, "s-count", 4)
    updates: list[str] = []

    @event.listens_for(pg_store.engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if re.match(r"\s*UPDATE\s+sessions\b", statement, re.I):
            updates.append(statement)

    provider.push(overflow(), text_reply("retried"))  # turn 1 of 2: one retried call
    agent.loop.run_turn("s-count", "first")
    provider.push(text_reply("plain"))
    agent.loop.run_turn("s-count", "second")
    event.remove(pg_store.engine, "before_cursor_execute", count)

    assert len(updates) == 2
    info = pg_store.session("s-count")
    assert info is not None and info.compactions == 1 and info.last_input_tokens > 0


def test_compact_conversation_tool_forces_compaction_on_next_call(
    tmp_path: Path, pg_store: Store
) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=50_000)
    chat(agent, provider, "s-tool", 5)
    provider.push(tool_reply(("compact_conversation", {})), text_reply("compacted"))
    result = agent.loop.run_turn("s-tool", "please compact")
    assert [c.reason for c in result.compactions] == ["tool"]
    before, after = provider.requests[-2], provider.requests[-1]
    assert len(after.messages) < len(before.messages)


def test_cache_breakpoints_on_sent_requests(tmp_path: Path, pg_store: Store) -> None:
    agent, provider = build(tmp_path, store=pg_store, caching=True)
    chat(agent, provider, "s-cache", 16)
    sent = provider.requests[-1]
    system = sent.system_blocks()
    marked = [i for i, b in enumerate(system) if b.cache_control is not None]
    assert marked == [len(system) - 1]
    head_blocks = sent.sent_messages()[0].blocks()
    assert head_blocks[-1].cache_control is not None  # type: ignore[union-attr]

    plain, plain_provider = build(tmp_path / "off", store=pg_store, caching=False)
    chat(plain, plain_provider, "s-nocache", 16)
    assert "cache_control" not in str(plain_provider.requests[-1].to_api())


def test_two_hundred_turns_with_large_tool_results_do_not_thrash(
    tmp_path: Path, pg_store: Store
) -> None:
    agent, provider = build(tmp_path, store=pg_store, window=12_000, tool_arg_max_tokens=150)
    agent.history.write("/work/big.log", "".join(f"log line {n}: all good\n" for n in range(120)))
    compacted_turns: list[int] = []
    for i in range(200):
        provider.push(tool_reply(("read_file", {"path": "/work/big.log"})), text_reply(f"read {i}"))
        result = agent.loop.run_turn("s-200", f"read the log again ({i})")
        compacted_turns.extend(c.at_turn for c in result.compactions)
        for c in result.compactions:
            assert c.tokens_after <= agent.profile.trigger_tokens
    assert compacted_turns, "200 turns of large results must compact at least once"
    gaps = [b - a for a, b in itertools.pairwise(compacted_turns)]
    assert all(g >= 3 for g in gaps), f"compactions too close together: {compacted_turns}"
    assert len(compacted_turns) <= 40
    for request in provider.requests:
        assert not validate_request(request)
    assert isinstance(provider.requests[-1].messages[1].blocks()[0], ToolUseBlock | TextBlock)
    assert isinstance(pg_store.messages("s-200")[0].message, Message)
