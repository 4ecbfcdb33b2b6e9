"""The summarization middleware through the real loop on the embedded SQLite store."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.head import head_message
from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.compaction.validate import Violation
from hango.core.errors import ConfigError, ProviderError
from hango.core.messages import Message, TextBlock
from hango.history.paths import conversation_history_path
from hango.middleware.base import Assembly, PassThrough
from hango.middleware.observer import NullObserver
from hango.middleware.summarization import SummarizationMiddleware
from hango.providers.scripted import ScriptedProvider, text_reply, tool_reply
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from tests.agent_support import build, make_settings
from tests.scripted_counter import ScriptedCounter

FACT = "Remember fact {i}: token key-{i:04d}. " + "detail " * 150


def chat(agent: Any, provider: Any, session: str, turns: int) -> list[Any]:
    out = []
    for i in range(turns):
        provider.push(text_reply(f"ok {i}"))
        out.append(agent.loop.run_turn(session, FACT.format(i=i)))
    return out


class Recording:
    """Ports that record the order of calls and delegate to real implementations."""

    def __init__(self, offloader: Any, *, fail_offload: bool = False) -> None:
        self.events: list[str] = []
        self.offloader = offloader
        self.fail_offload = fail_offload
        self.summaries = 0

    def offload(self, job: OffloadJob) -> str:
        self.events.append("offload")
        if self.fail_offload:
            raise OSError("disk full")
        return str(self.offloader.offload(job))

    def summarize(self, job: SummaryJob) -> SummaryResult:
        self.events.append("summarize")
        self.summaries += 1
        return SummaryResult(text=f"summary of {job.from_seq}-{job.to_seq}", summarizer="test")


def middleware(agent: Any) -> SummarizationMiddleware:
    found = [m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware)]
    return found[0]


def test_under_the_trigger_nothing_changes(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=200_000)
    chat(agent, provider, "s", 4)
    last = provider.requests[-1]
    assert len(last.messages) == 7
    assert agent.store.session("s").compactions == 0  # type: ignore[union-attr]


# The trigger's own path: pre-summaries (made ahead, offloaded when installed) are off;
# tests/unit/middleware/test_presummary.py covers them.
AT_THE_TRIGGER = {"context_presummarize_frac": 1}


def test_offload_comes_before_the_summary_and_the_head_names_the_file(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, **AT_THE_TRIGGER)
    ports = Recording(InlineOffloader(agent.history))
    middleware(agent).offloader = ports
    middleware(agent).summarizer = ports
    results = chat(agent, provider, "s", 14)
    records = [c for r in results for c in r.compactions]
    assert records and ports.events[:2] == ["offload", "summarize"]
    head = provider.requests[-1].messages[0]
    assert conversation_history_path("s") in str(head.content)
    assert records[0].summary is not None and records[0].summary in str(head.content)


def test_a_failed_offload_keeps_every_message(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, **AT_THE_TRIGGER)
    ports = Recording(InlineOffloader(agent.history), fail_offload=True)
    middleware(agent).offloader = ports
    middleware(agent).summarizer = ports
    turns = 0
    while "offload" not in ports.events:
        chat(agent, provider, f"s{turns}", 0)
        provider.push(text_reply(f"ok {turns}"))
        agent.loop.run_turn("s", FACT.format(i=turns))
        turns += 1
    # Over the trigger (so it tried) but inside the window: the compaction is abandoned
    # and every message goes out, none evicted without being offloaded.
    assert ports.summaries == 0
    assert len(provider.requests[-1].messages) == 2 * turns - 1
    assert agent.store.session("s").compactions == 0  # type: ignore[union-attr]


def test_truncation_past_a_failed_offload_says_where_the_messages_are(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    ports = Recording(InlineOffloader(agent.history), fail_offload=True)
    middleware(agent).offloader = ports
    middleware(agent).summarizer = ports
    records = [c for r in chat(agent, provider, "s", 16) for c in r.compactions]
    assert records and all(r.reason == "truncate" for r in records)
    assert records[-1].offloaded_to_seq is None
    head = str(provider.requests[-1].messages[0].content)
    assert "remain in the stored transcript" in head
    assert len(agent.store.messages("s")) == 32


def test_a_failing_summarizer_falls_back_to_the_extractive_summary(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    broken = ScriptedProvider(fallback=lambda r: (_ for _ in ()).throw(ProviderError("503")))
    middleware(agent).summarizer = LLMSummarizer(broken, fallback=ExtractiveSummarizer())
    records = [c for r in chat(agent, provider, "s", 14) for c in r.compactions]
    assert records[0].summarizer == "extractive"
    assert records[0].fallback_reason is not None and "provider error" in records[0].fallback_reason
    assert "key-0000" in (records[0].summary or "")


class Blocked(NullObserver):
    def __init__(self) -> None:
        self.blocked: list[list[str]] = []

    def invalid_request_blocked(self, session_id: str, turn: int, violations: list[str]) -> None:
        self.blocked.append(violations)


def test_an_invalid_compaction_is_abandoned_for_mechanical_truncation(tmp_path: Path) -> None:
    observer = Blocked()
    agent, provider = build(tmp_path, observers=[observer])
    rejected: list[int] = []

    def reject_summaries(messages: Any) -> list[Violation]:
        if "<summary>" in str(messages[0].content):
            rejected.append(len(messages))
            return [Violation("alternation", 0, "messages: rejected for the test")]
        return []

    middleware(agent).validator = reject_summaries
    records = [c for r in chat(agent, provider, "s", 14) for c in r.compactions]
    assert rejected and observer.blocked == [["messages: rejected for the test"]]
    assert records[0].reason == "truncate"
    assert "<summary>" not in str(provider.requests[-1].to_api())


def test_one_summary_per_turn_even_with_several_model_calls(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, **AT_THE_TRIGGER)
    ports = Recording(InlineOffloader(agent.history))
    middleware(agent).offloader = ports
    middleware(agent).summarizer = ports
    chat(agent, provider, "s", 10)
    provider.push(
        tool_reply(("ls", {"path": "/"})), tool_reply(("ls", {"path": "/"})), text_reply("done")
    )
    result = agent.loop.run_turn("s", FACT.format(i=99) * 3)
    assert result.model_calls == 3
    assert len(result.compactions) == 1 and ports.summaries == 1


def test_after_compaction_the_request_lands_well_under_the_trigger(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    records = [c for r in chat(agent, provider, "s", 30) for c in r.compactions]
    assert records
    for record in records:
        assert record.tokens_after <= agent.profile.trigger_tokens * 0.85
    turns = [r.at_turn for r in records]
    assert all(b - a >= 2 for a, b in itertools.pairwise(turns))


def test_the_providers_count_decides_the_trigger_and_the_estimate_backs_it_up(
    tmp_path: Path,
) -> None:
    # Over the trigger (170,000 of 200,000) by the provider's count, far under it by the
    # estimate: the count decides.
    counting = ScriptedCounter(count=lambda request: 180_000)
    agent, _ = build(tmp_path / "a", window=200_000)
    from hango.wiring.agent import build_agent

    counted = build_agent(
        make_settings(tmp_path / "b", window=200_000),
        provider=counting,
        summarizer_provider=ScriptedProvider(fallback=lambda r: text_reply("a summary " * 10)),
    )
    chat(counted, counting, "s", 3)
    assert counting.count_calls > 0
    assert counted.store.session("s").compactions >= 1  # type: ignore[union-attr]

    failing = ScriptedCounter(
        count_error=ProviderError("count_tokens is down"),
    )
    fallback = build_agent(
        make_settings(tmp_path / "c", window=200_000),
        provider=failing,
        summarizer_provider=ScriptedProvider(fallback=lambda r: text_reply("a summary " * 10)),
    )
    chat(fallback, failing, "s", 3)
    assert failing.count_calls > 0
    assert fallback.store.session("s").compactions == 0  # type: ignore[union-attr]
    del agent


def test_stored_messages_are_the_ones_appended(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    chat(agent, provider, "s", 14)
    stored = agent.store.messages("s")
    assert [m.message.role for m in stored] == ["user", "assistant"] * 14
    assert all(isinstance(m.message, Message) for m in stored)
    assert stored[0].message.text() == FACT.format(i=0)


def test_run_state_stays_small_however_many_compactions(tmp_path: Path) -> None:
    agent, provider = build(tmp_path)
    chat(agent, provider, "s", 40)
    runs = agent.store.runs("s")
    records = [r for run in runs for r in run.state.compactions]
    assert len(records) >= 3
    assert agent.store.session("s").compactions == len(records)  # type: ignore[union-attr]
    latest = runs[-1].state
    assert latest.compaction_count == len(records)
    assert len(latest.compactions) <= 2  # this turn's own, not the session's history
    assert len(latest.model_dump_json()) < 3 * len(records[-1].model_dump_json())


# -- the turn's own request stays verbatim (issue 14, defect 2) ---------------------------

TASK = "TASK-7731: fix the off-by-one in /work/src/pager.py and keep `page_size` at 25."


def working_turn(agent: Any, provider: Any, session: str, calls: int) -> Any:
    """One user message, then ``calls`` tool rounds in the same turn (SWE-agent style)."""
    for i in range(calls):
        provider.push(
            tool_reply(("write_file", {"path": f"/work/step_{i}.txt", "content": "x " * 600}))
        )
    provider.push(text_reply("done"))
    return agent.loop.run_turn(session, TASK)


def test_the_turns_request_is_in_every_request_of_a_long_working_turn(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, tool_arg_max_tokens=100_000)
    result = working_turn(agent, provider, "s", 40)
    assert result.tool_calls == 40
    records = agent.loop.store.latest_state("s").compactions
    assert records, "the turn never compacted: the test proves nothing"
    for sent in provider.requests:
        assert TASK in json.dumps(sent.to_api())


def test_the_request_of_an_earlier_turn_may_go_but_the_current_one_stays(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, tool_arg_max_tokens=100_000)
    chat(agent, provider, "s", 10)
    working_turn(agent, provider, "s", 30)
    compacted = [r for r in provider.requests if r.messages[0].role == "user"]
    sent_after = provider.requests[-31:]
    assert compacted and all(TASK in json.dumps(r.to_api()) for r in sent_after)


def test_keep_frac_is_honoured_by_a_summary(tmp_path: Path) -> None:
    # Half the messages kept: more than the post-compaction target holds, and still kept.
    agent, provider = build(tmp_path, tool_arg_max_tokens=100_000, context_keep_frac=0.5)
    sizes: list[tuple[int, int]] = []
    original = middleware(agent)._summarize

    def spy(call: Any, reason: Any, tokens: int, plan: Any) -> Any:
        total = len(call.request.messages) - call.first_real
        sizes.append((total, len(call.request.messages) - plan.boundary))
        return original(call, reason, tokens, plan)

    middleware(agent)._summarize = spy  # type: ignore[method-assign]
    working_turn(agent, provider, "s", 40)
    assert sizes
    keep_frac = agent.profile.keep_frac
    assert keep_frac is not None
    for total, kept in sizes:
        assert kept >= math.ceil(total * keep_frac - 1e-9)


def test_the_post_compaction_target_is_a_setting(tmp_path: Path) -> None:
    assert make_settings(tmp_path).context_target_frac == 0.60
    with pytest.raises(ConfigError, match="HANGO_CONTEXT_TARGET_FRAC"):
        make_settings(tmp_path, context_target_frac=1.5)
    afters: dict[float, list[int]] = {}
    for frac in (0.3, 0.6):
        agent, provider = build(tmp_path / str(frac), context_target_frac=frac)
        assert agent.profile.target_tokens == int(6000 * frac)
        # A failing offload leaves only mechanical truncation, which aims at the target.
        ports = Recording(InlineOffloader(agent.history), fail_offload=True)
        middleware(agent).offloader = ports
        records = [c for r in chat(agent, provider, "s", 16) for c in r.compactions]
        afters[frac] = [r.tokens_after for r in records]
    assert afters[0.3] and all(after <= 1800 for after in afters[0.3])
    assert any(after > 1800 for after in afters[0.6])


def test_a_request_that_cannot_fit_beside_the_newest_group_is_left_to_the_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent, provider = build(tmp_path, tool_arg_max_tokens=100_000)
    big_task = TASK + " Context: " + "requirement " * 800
    for i in range(6):
        provider.push(
            tool_reply(("write_file", {"path": f"/work/big_{i}.txt", "content": "x " * 3000}))
        )
    provider.push(text_reply("done"))
    result = agent.loop.run_turn("s", big_task)
    assert result.tool_calls == 6
    assert "does not fit beside the newest tool group" in caplog.text
    for sent in provider.requests:
        assert middleware(agent).estimator.estimate_request(sent) <= 6000


# -- the memory slot through build_agent (issue 14, defect 7) ------------------------------

MEMORY = "Memory: the user prefers short answers and pytest. " + "remembered detail " * 300


class Memory(PassThrough):
    """A late block: contributed after the prompt cache's stable system block."""

    def contribute(self, assembly: Assembly) -> Assembly:
        return assembly.add(system=(TextBlock(text=MEMORY),))


def test_a_late_memory_block_is_sent_and_counted_by_summarization(tmp_path: Path) -> None:
    first_compaction: dict[str, int] = {}
    for name, late in (("without", ()), ("with", (Memory(),))):
        agent, provider = build(tmp_path / name, late=late, caching=True)
        for i, result in enumerate(chat(agent, provider, "s", 16)):
            if result.compactions and name not in first_compaction:
                first_compaction[name] = i
                record = result.compactions[0]
                sent = provider.requests[-1]
        if name == "with":
            blocks = sent.system_blocks()
            assert blocks[-1].text == MEMORY  # sent, and last of the system blocks
            marked = [index for index, block in enumerate(blocks) if block.cache_control]
            assert marked and marked[-1] < len(blocks) - 1  # after the system breakpoint
            assert record.tokens_before > agent.profile.trigger_tokens
    # The memory block costs ~1,300 tokens of a 6,000-token window: counted, it brings the
    # first compaction forward.
    assert first_compaction["with"] < first_compaction["without"]


def test_the_summarys_room_is_measured_beside_the_head_it_will_have(tmp_path: Path) -> None:
    """The head a compaction installs carries the summary's frame and the artifact index;
    the room left for the summary is measured with that head, not the short notice a head
    without a summary becomes (which would leave the index out and the room too large)."""
    # Pre-summaries only at the trigger itself: the summary is made by the call that compacts.
    agent, provider = build(tmp_path, tool_arg_max_tokens=100_000, context_presummarize_frac=1.0)
    compacting = middleware(agent)
    rooms = compacting._summary_rooms
    heads: list[str] = []

    def noted(call: Any, measured: Any, plan: Any, tokens: int) -> tuple[int, int]:
        heads.append(head_message(measured).text())
        return rooms(call, measured, plan, tokens)

    compacting._summary_rooms = noted  # type: ignore[method-assign]
    working_turn(agent, provider, "s", 40)
    records = [r for r in agent.loop.store.latest_state("s").compactions if r.artifacts]
    assert heads and records, "no summary with an artifact index was made"
    index = "Files and artifacts the earlier messages referred to"
    assert all(index in head for head in heads)
    assert records[0].artifacts[0] in heads[0]
