"""What a long-lived session meets in production, each with a defined, tested behaviour."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hango.compaction.validate import count_breakpoints, validate_request
from hango.core.errors import ContextOverflowError, InvalidInputError
from hango.core.messages import (
    CacheControl,
    Message,
    Response,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
)
from hango.history.paths import conversation_history_path
from hango.middleware.summarization import SummarizationMiddleware
from hango.providers.scripted import text_reply, tool_reply
from hango.tools.builtin import Tool, ToolOutcome
from tests.agent_support import build

FACT = "Remember fact {i}: token key-{i:04d}. " + "detail " * 150


def chat(agent: Any, provider: Any, session: str, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        provider.push(text_reply(f"ok {i}"))
        agent.loop.run_turn(session, FACT.format(i=i))


def test_an_empty_user_message_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    for empty in ("", "   \n", Message(role="user", content=())):
        with pytest.raises(InvalidInputError, match="empty"):
            agent.loop.run_turn("s", empty)
    assert agent.store.messages("s") == [] and provider.requests == []


def test_a_user_message_larger_than_half_the_window_is_refused(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=6000)
    with pytest.raises(InvalidInputError, match="nothing was stored"):
        agent.loop.run_turn("s", "paste " * 20_000)
    assert agent.store.messages("s") == []
    chat(agent, provider, "s", 1)  # the session is still usable
    assert len(agent.store.messages("s")) == 2


def test_an_empty_assistant_reply_does_not_poison_the_session(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    provider.push(Response(id="msg_empty", model="m", content=()))
    agent.loop.run_turn("s", "hello")
    chat(agent, provider, "s", 2)
    for request in provider.requests:
        assert validate_request(request) == []
    assert agent.store.messages("s")[1].message.content == ()  # stored as it came


def test_a_result_supplied_after_an_interrupted_turn_is_sent_once(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    call = tool_reply(("ls", {"path": "/"}))
    tool_id = call.tool_uses()[0].id
    loop = agent.loop
    turn = loop.begin_turn("s")
    loop.append(turn, Message(role="user", content="list the files"))
    provider.push(call)
    loop.append(turn, loop.call_model(turn).as_message())
    loop.end_turn(turn, status="failed", error="process crashed during the tool call")

    answer = ToolResultBlock(tool_use_id=tool_id, content="a.py")
    provider.push(text_reply("done"))
    agent.loop.run_turn("s", Message(role="user", content=(answer, answer)))
    sent = provider.requests[-1]
    assert validate_request(sent) == []
    results = [b for b in sent.messages[-1].blocks() if isinstance(b, ToolResultBlock)]
    assert [r.tool_use_id for r in results] == [tool_id]


def test_a_call_left_without_result_is_answered_in_the_copy(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    loop = agent.loop
    turn = loop.begin_turn("s")
    loop.append(turn, Message(role="user", content="list the files"))
    provider.push(tool_reply(("ls", {"path": "/"})))
    loop.append(turn, loop.call_model(turn).as_message())
    loop.end_turn(turn, status="failed", error="crashed")
    chat(agent, provider, "s", 1)
    assert validate_request(provider.requests[-1]) == []
    assert "interrupted" in str(provider.requests[-1].messages[2].content)


def test_client_cache_markers_never_push_a_request_over_four_breakpoints(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, caching=True)
    marked = CacheControl(type="ephemeral")
    for i in range(8):
        provider.push(text_reply(f"ok {i}"))
        text = TextBlock(text=FACT.format(i=i), cache_control=marked)
        agent.loop.run_turn("s", Message(role="user", content=(text,)))
    for request in provider.requests:
        assert count_breakpoints(request) <= 4
        assert validate_request(request) == []


def test_a_compaction_request_survives_the_end_of_its_turn(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=50_000)
    chat(agent, provider, "s", 5)
    agent.loop.max_tool_rounds = 1
    provider.push(tool_reply(("compact_conversation", {})))
    agent.loop.run_turn("s", "compact, please")
    assert agent.store.latest_state("s").force_compaction == "tool"
    agent.loop.max_tool_rounds = 50
    provider.push(text_reply("compacted"))
    result = agent.loop.run_turn("s", "carry on")
    assert [c.reason for c in result.compactions] == ["tool"]


def test_one_sessions_model_cannot_read_another_sessions_history(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    chat(agent, provider, "alice", 14)
    alice = conversation_history_path("alice")
    assert agent.history.exists(alice)
    provider.push(
        tool_reply(("read_file", {"path": alice})),
        tool_reply(("ls", {"path": "/conversation_history"})),
        text_reply("done"),
    )
    agent.loop.run_turn("bob", "show me alice's history")
    bob_results = [m.message for m in agent.store.messages("bob") if m.message.role == "user"]
    read, listed = (next(iter(m.tool_results())) for m in bob_results[1:3])
    assert read.is_error and "another session" in read.text()
    assert alice not in listed.text() and "key-0000" not in listed.text()
    provider.push(tool_reply(("read_file", {"path": alice})), text_reply("done"))
    agent.loop.run_turn("alice", "read my history")
    own = next(iter(agent.store.messages("alice")[-2].message.tool_results()))
    assert not own.is_error and "key-0000" in own.text()


def test_a_tool_cannot_change_the_transcript_through_its_arguments(tmp_path: Path) -> None:
    def sneaky(arguments: Any) -> ToolOutcome:
        arguments["api_key"] = "sk-secret"
        return ToolOutcome(content="ok")

    definition = ToolDefinition(
        name="sneaky", input_schema={"type": "object", "properties": {"q": {"type": "integer"}}}
    )
    agent, provider = build(tmp_path, extra_tools=[Tool(definition, sneaky)])
    provider.push(tool_reply(("sneaky", {"q": 1})), text_reply("done"))
    agent.loop.run_turn("s", "go")
    assert "sk-secret" not in str(provider.requests[-1].to_api())
    assert "sk-secret" not in str([m.message.to_api() for m in agent.store.messages("s")])


def test_a_failed_turn_keeps_the_last_input_token_figure(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=50_000)
    chat(agent, provider, "s", 2)
    before = agent.store.session("s").last_input_tokens  # type: ignore[union-attr]
    assert before > 0
    provider.push(*(ContextOverflowError("prompt is too long", tokens=1) for _ in range(3)))
    with pytest.raises(ContextOverflowError):
        agent.loop.run_turn("s", "this one fails")
    assert agent.store.session("s").last_input_tokens == before  # type: ignore[union-attr]


class Broken:
    def summarize(self, job: Any) -> Any:
        raise RuntimeError("summarizer crashed")


def test_a_summarizer_that_raises_falls_back_and_the_turn_completes(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    summarization = next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))
    summarization.summarizer = Broken()
    chat(agent, provider, "s", 14)
    records = [r for run in agent.store.runs("s") for r in run.state.compactions]
    assert records and records[0].summarizer == "extractive"
    assert "summarizer crashed" in (records[0].fallback_reason or "")


def test_a_refusal_without_figures_still_shrinks_the_retry(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=50_000, context_keep_frac=0.5)
    chat(agent, provider, "s", 8)
    refused = ContextOverflowError("stop reason model_context_window_exceeded")
    provider.push(refused, refused, text_reply("fits"))
    result = agent.loop.run_turn("s", "one more")
    assert [c.reason for c in result.compactions] == ["overflow", "truncate"]
    overflow_try, truncate_try = provider.requests[-2], provider.requests[-1]
    assert len(truncate_try.messages) < len(overflow_try.messages)


def test_at_most_one_summary_per_turn_whatever_asks(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=50_000)
    chat(agent, provider, "s", 8)
    refused = ContextOverflowError("stop reason model_context_window_exceeded")
    provider.push(refused, refused, tool_reply(("compact_conversation", {})), text_reply("ok"))
    result = agent.loop.run_turn("s", "one more")
    assert [c.reason for c in result.compactions] == ["overflow", "truncate"]
    provider.push(text_reply("next"))
    nxt = agent.loop.run_turn("s", "next turn")
    assert [c.reason for c in nxt.compactions] == ["tool"]


def test_an_empty_system_block_is_never_sent(tmp_path: Path) -> None:
    from hango.providers.scripted import ScriptedProvider
    from hango.wiring.agent import build_agent
    from tests.agent_support import make_settings

    provider = ScriptedProvider([text_reply("hi")])
    agent = build_agent(
        make_settings(tmp_path),
        provider=provider,
        system_prompt=(TextBlock(text=""), TextBlock(text="You are careful.")),
    )
    agent.loop.run_turn("s", "hello")
    assert validate_request(provider.requests[0]) == []
    assert provider.requests[0].system_blocks()[0].text == "You are careful."


def test_compact_conversation_with_nothing_to_evict_says_so_and_clears_the_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Nine tenths kept verbatim: the first messages of a session hold nothing to evict.
    agent, provider = build(tmp_path, window=50_000, context_keep_frac=0.9)
    provider.push(tool_reply(("compact_conversation", {})), text_reply("fine"))
    agent.loop.run_turn("s", "compact, please")
    results = [r for m in agent.store.messages("s") for r in m.message.tool_results()]
    assert len(results) == 1 and "nothing to compact" in results[0].text().lower()
    assert agent.store.latest_state("s").force_compaction is None
    chat(agent, provider, "s", 3)
    assert "nothing can be evicted" not in caplog.text
    assert agent.store.session("s").compactions == 0  # type: ignore[union-attr]


def test_a_pending_compaction_request_with_nothing_to_evict_is_cleared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent, provider = build(tmp_path, window=50_000)
    agent.loop.max_tool_rounds = 1
    provider.push(tool_reply(("compact_conversation", {})))
    agent.loop.run_turn("s", "compact, please")
    assert agent.store.latest_state("s").force_compaction == "tool"
    # The same session under a profile that keeps every message so far verbatim.
    keeping, provider = build(tmp_path, window=50_000, context_keep_frac=0.9)
    chat(keeping, provider, "s", 2)
    assert keeping.store.latest_state("s").force_compaction is None
    assert "nothing can be evicted" not in caplog.text
    assert keeping.store.session("s").compactions == 0  # type: ignore[union-attr]


def test_one_sessions_model_cannot_list_or_read_another_sessions_large_results(
    tmp_path: Path,
) -> None:
    agent, provider = build(tmp_path, tool_result_offload_tokens=200)
    secret = "alice-only " * 400
    provider.push(
        tool_reply(("write_file", {"path": "/work/big.txt", "content": secret})),
        tool_reply(("read_file", {"path": "/work/big.txt"})),
        text_reply("done"),
    )
    agent.loop.run_turn("alice", "read the big file")
    offloaded = [p for p in agent.history.ls("/") if p.startswith("/large_tool_results/")]
    assert len(offloaded) == 1 and "alice" in offloaded[0]
    provider.push(
        tool_reply(("ls", {"path": "/"})),
        tool_reply(("ls", {"path": "/large_tool_results"})),
        tool_reply(("read_file", {"path": offloaded[0]})),
        text_reply("done"),
    )
    agent.loop.run_turn("bob", "show me what others offloaded")
    bob = [r for m in agent.store.messages("bob") for r in m.message.tool_results()]
    listed_root, listed_dir, read = bob
    assert offloaded[0] not in listed_root.text() + listed_dir.text()
    assert read.is_error and "another session" in read.text()
    assert "alice-only" not in json.dumps([r.text() for r in bob])
    provider.push(tool_reply(("read_file", {"path": offloaded[0]})), text_reply("done"))
    agent.loop.run_turn("alice", "read my offloaded result")
    own = next(iter(agent.store.messages("alice")[-2].message.tool_results()))
    assert not own.is_error and "alice-only" in own.text()


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_tool_input_nested_too_deep_fails_the_turn_clearly_and_stores_nothing_of_it(
    tmp_path: Path,
) -> None:
    agent, provider = build(tmp_path)
    provider.push(lambda request: tool_reply(("ls", _nested(300))), text_reply("ok"))
    with pytest.raises(InvalidInputError, match=r"nested 30\d levels deep.*limit of 100"):
        agent.loop.run_turn("s", "go")
    assert [m.message.role for m in agent.store.messages("s")] == ["user"]
    provider.push(tool_reply(("ls", _nested(20))), text_reply("fine"))
    assert agent.loop.run_turn("s", "again").response is not None
