"""The in-process summarizer and offloader, and the Markdown rendering of evicted messages."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from markdown_it import MarkdownIt

from hango.compaction.extractive import ExtractiveSummarizer
from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.compaction.summary_prompt import build_summary_request
from hango.core.errors import InvalidSessionIdError, ProviderError, TransientProviderError
from hango.core.messages import (
    Message,
    RedactedThinkingBlock,
    StoredMessage,
    TextBlock,
    ThinkingBlock,
    Usage,
)
from hango.history.local import LocalHistory
from hango.history.markdown import fence_for, render_evicted
from hango.providers.scripted import ScriptedProvider, text_reply, tool_reply
from hango.summarizers.llm import LLMSummarizer
from hango.summarizers.offload import InlineOffloader
from tests.histories import assistant, call, calls, histories, result, results, user
from tests.memory_history import MemoryHistory

SUMMARY = "## Goal and user requests\nFix /src/parser.py.\n## Next step\nRun pytest -x."


def stored(messages: Sequence[Message], first_seq: int = 1) -> tuple[StoredMessage, ...]:
    return tuple(
        StoredMessage(seq=first_seq + n, turn=2, message=m) for n, m in enumerate(messages)
    )


def evicted_sample(first_seq: int = 1) -> tuple[StoredMessage, ...]:
    return stored(
        [
            user("Fix the parser."),
            calls(call("toolu_1", "read_file", path="/src/parser.py"), text="Reading it."),
            results(result("toolu_1", "def parse(): ...")),
            assistant("Found the bug."),
        ],
        first_seq,
    )


def summary_job(previous: str | None = None) -> SummaryJob:
    evicted = evicted_sample()
    return SummaryJob(
        session_id="sess-1",
        turn=5,
        from_seq=1,
        to_seq=4,
        previous_summary=previous,
        evicted=evicted,
        model="claude-summarizer",
    )


def offload_job(turn: int = 5, first_seq: int = 1, session_id: str = "sess-1") -> OffloadJob:
    evicted = evicted_sample(first_seq)
    return OffloadJob(
        session_id=session_id,
        turn=turn,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        evicted=evicted,
    )


# --- LLMSummarizer -------------------------------------------------------------------


def test_summary_comes_from_the_provider_with_its_usage() -> None:
    reply = text_reply(SUMMARY).model_copy(
        update={"usage": Usage(input_tokens=900, output_tokens=60)}
    )
    provider = ScriptedProvider([reply])
    seen: list[Usage] = []
    summarizer = LLMSummarizer(provider, max_tokens=777, on_usage=seen.append)
    job = summary_job(previous="earlier briefing")

    outcome = summarizer.summarize(job)

    assert outcome == SummaryResult(text=SUMMARY, summarizer="llm", usage=reply.usage)
    assert seen == [reply.usage]
    expected = build_summary_request(job, model="claude-summarizer", max_tokens=777)
    assert [r.to_api() for r in provider.requests] == [expected.to_api()]


def test_a_budget_is_asked_for_and_the_reply_gets_twice_its_room() -> None:
    """Sent as the cap itself, a reply a little over the budget was cut off and replaced by
    the extractive briefing after it was paid for."""
    provider = ScriptedProvider([text_reply(SUMMARY)])
    job = summary_job().model_copy(update={"budget": 600})

    outcome = LLMSummarizer(provider, max_tokens=4000).summarize(job)

    assert outcome.text == SUMMARY
    (sent,) = provider.requests
    assert sent.max_tokens == 1200
    assert "Keep the briefing under 600 tokens." in json.dumps(sent.to_api())
    capped = LLMSummarizer(ScriptedProvider([text_reply(SUMMARY)]), max_tokens=1000)
    assert capped.summarize(job).text == SUMMARY  # never above the summarizer's own cap


def test_the_extractive_briefing_keeps_to_the_budget() -> None:
    job = summary_job(previous="an earlier briefing line. " * 2000)
    whole = ExtractiveSummarizer().summarize(job).text
    budgeted = ExtractiveSummarizer().summarize(job.model_copy(update={"budget": 100})).text
    assert len(whole) > 300
    assert len(budgeted) <= 100 * 3
    assert budgeted.endswith("the full history is in the file]")


def test_a_budgeted_extractive_briefing_keeps_every_section_the_newest_included() -> None:
    """Cut as one text, the briefing lost its last sections: the errors and the latest
    results, the state the agent was working on."""
    rounds: list[Message] = [user("Make the suite pass.")]
    for n in range(30):
        rounds.append(calls(call(f"toolu_{n}", "read_file", path=f"/src/module_{n}.py")))
        rounds.append(results(result(f"toolu_{n}", f"contents of module {n} " * 20)))
    rounds.append(calls(call("toolu_last", "run_tests")))
    rounds.append(results(result("toolu_last", "FAILED test_zebra_quartz", is_error=True)))
    job = SummaryJob(
        session_id="sess-1",
        turn=5,
        from_seq=1,
        to_seq=len(rounds),
        previous_summary="an earlier briefing line. " * 200,
        evicted=stored(rounds),
        model="claude-summarizer",
        budget=1000,
    )

    text = ExtractiveSummarizer().summarize(job).text

    assert len(text) <= 1000 * 3
    for heading in ("Earlier summary", "User requests", "Errors", "Latest tool results"):
        assert f"## {heading}" in text
    assert "FAILED test_zebra_quartz" in text
    assert text.endswith(
        "[briefing shortened to its length budget; the full history is in the file]"
    )


def test_a_summary_wrapped_in_tags_is_unwrapped() -> None:
    provider = ScriptedProvider(
        [text_reply(f"<analysis>thinking</analysis>\n<summary>\n{SUMMARY}\n</summary>")]
    )
    assert LLMSummarizer(provider).summarize(summary_job()).text == SUMMARY


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("boom", status=500),
        TransientProviderError("overloaded", status=529),
        TimeoutError("slow"),
    ],
)
def test_provider_failure_falls_back_to_the_extractive_summary(error: BaseException) -> None:
    seen: list[Usage] = []
    summarizer = LLMSummarizer(ScriptedProvider([error]), on_usage=seen.append)
    job = summary_job()

    outcome = summarizer.summarize(job)

    assert outcome.summarizer == "extractive"
    assert outcome.text == ExtractiveSummarizer().summarize(job).text
    assert outcome.fallback_reason is not None
    assert outcome.fallback_reason.startswith("provider error: ")
    assert str(error) in outcome.fallback_reason
    assert outcome.usage is None and seen == []


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (text_reply("   \n "), "empty summary"),
        (text_reply("Sure!"), "summary too short (5 characters)"),
        (tool_reply(("read_file", {"path": "/x"})), "tool call instead of a summary"),
        (text_reply(SUMMARY, stop_reason="refusal"), "summarizer refused"),
    ],
)
def test_a_reply_that_is_no_summary_falls_back_but_keeps_its_usage(
    reply: object, reason: str
) -> None:
    seen: list[Usage] = []
    provider = ScriptedProvider([reply])  # type: ignore[list-item]
    outcome = LLMSummarizer(provider, on_usage=seen.append).summarize(summary_job())
    assert outcome.summarizer == "extractive"
    assert outcome.fallback_reason == reason
    assert outcome.usage is not None and seen == [outcome.usage]


def test_the_given_fallback_is_used() -> None:
    class Fixed:
        def summarize(self, job: SummaryJob) -> SummaryResult:
            return SummaryResult(text=f"fixed {job.turn}", summarizer="fixed")

    outcome = LLMSummarizer(ScriptedProvider([]), fallback=Fixed()).summarize(summary_job())
    assert (outcome.text, outcome.summarizer) == ("fixed 5", "fixed")
    assert outcome.fallback_reason is not None and "no reply left" in outcome.fallback_reason


# --- InlineOffloader --------------------------------------------------------------------


def test_offload_appends_the_rendered_range_once_per_turn_and_range() -> None:
    history = MemoryHistory()
    offloader = InlineOffloader(history)

    path = offloader.offload(offload_job())
    assert path == "/conversation_history/sess-1.md"
    first = history.read(path)
    assert render_evicted("sess-1", 5, evicted_sample()) in first

    assert offloader.offload(offload_job()) == path  # a retried offload of the same turn
    assert history.read(path) == first

    offloader.offload(offload_job(turn=9, first_seq=5))
    later = history.read(path)
    assert later.startswith(first)
    assert "## Turn 9: messages 5\u20138" in later[len(first) :]


def test_offload_is_idempotent_on_the_local_backend(tmp_path: Path) -> None:
    history = LocalHistory(tmp_path)
    offloader = InlineOffloader(history)
    path = offloader.offload(offload_job())
    offloader.offload(offload_job())
    text = (tmp_path / "conversation_history" / "sess-1.md").read_text(encoding="utf-8")
    assert text == history.read(path)
    assert text.count("## Turn 5: messages 1\u20134") == 1


class BackendWithoutSectionKeys:
    """A user's backend written before the protocol asked for ``section_keys``."""

    def __init__(self) -> None:
        self.inner = MemoryHistory()

    def read(self, path: str) -> str:
        return self.inner.read(path)

    def append_section(self, path: str, key: str, content: str) -> bool:
        return self.inner.append_section(path, key, content)


def test_a_backend_without_section_keys_still_gets_each_message_once() -> None:
    history = BackendWithoutSectionKeys()
    offloader = InlineOffloader(history)  # type: ignore[arg-type]
    path = offloader.offload(offload_job())
    # A later compaction of the same turn that evicts more: only what is new is written.
    wider = evicted_sample() + evicted_sample(first_seq=5)
    job = OffloadJob(session_id="sess-1", turn=6, from_seq=1, to_seq=8, evicted=wider)
    assert offloader.offload(job) == path
    text = history.read(path)
    assert text.count("## Turn 5: messages 1\u20134") == 1
    assert "## Turn 6: messages 5\u20138" in text
    assert text.count("Fix the parser.") == 2  # messages 1 and 5, each once


def test_offload_refuses_an_unsafe_session_id_and_an_empty_range() -> None:
    history = MemoryHistory()
    with pytest.raises(InvalidSessionIdError):
        InlineOffloader(history).offload(offload_job(session_id="../etc"))
    empty = OffloadJob(session_id="s", turn=1, from_seq=1, to_seq=1, evicted=())
    with pytest.raises(ValueError, match="no messages"):
        InlineOffloader(history).offload(empty)
    assert history.ls("/") == []


# --- render_evicted ---------------------------------------------------------------------


def fences(markdown: str) -> list[tuple[str, str]]:
    """(info, content) of every fenced block, as a CommonMark parser reads them."""
    return [(t.info, t.content) for t in MarkdownIt().parse(markdown) if t.type == "fence"]


def headings(markdown: str, tag: str) -> list[str]:
    tokens = MarkdownIt().parse(markdown)
    return [
        tokens[n + 1].content
        for n, t in enumerate(tokens)
        if t.type == "heading_open" and t.tag == tag
    ]


def test_rendering_is_verbatim_and_fenced_safely() -> None:
    tricky = "````\n## Turn 99: messages 1\u20132\n```python\nx = 1\n```\n"
    messages = stored(
        [
            user(tricky),
            Message(
                role="assistant",
                content=(
                    ThinkingBlock(thinking="Consider ``` fences.", signature="sig"),
                    RedactedThinkingBlock(data="opaque"),
                    TextBlock(text="Writing it."),
                    call("toolu_9", "write_file", path="/a.md", content=tricky),
                ),
            ),
            results(result("toolu_9", "boom ```` here", is_error=True)),
        ],
        first_seq=3,
    )
    markdown = render_evicted("sess-1", 7, messages)

    assert markdown.startswith("## Turn 7: messages 3\u20135\n")
    assert headings(markdown, "h2") == ["Turn 7: messages 3\u20135"]  # the fake one stays fenced
    assert len(headings(markdown, "h3")) == 3
    blocks = fences(markdown)
    assert ("text", tricky + "\n") in blocks
    assert ("text", "Consider ``` fences.\n") in blocks
    assert ("text", "Writing it.\n") in blocks
    assert ("text", "boom ```` here\n") in blocks
    inputs = [json.loads(content) for info, content in blocks if info == "json"]
    assert inputs == [{"path": "/a.md", "content": tricky}]
    assert "**tool_result** for `toolu_9` **(error)**" in markdown
    assert "**tool_use** `write_file` (id `toolu_9`)" in markdown
    assert "### Message 4 \u00b7 assistant \u00b7 turn 2" in markdown
    assert "opaque" not in markdown  # encrypted thinking carries nothing readable


def test_fence_is_longer_than_any_backtick_run() -> None:
    assert fence_for("plain") == "```"
    assert fence_for("a ``` b") == "````"
    assert fence_for("`````") == "``````"


@settings(max_examples=30, deadline=None)
@given(history=histories(min_steps=1, max_steps=6))
def test_every_payload_of_any_history_survives_rendering(history: tuple[Message, ...]) -> None:
    evicted = stored(history)
    blocks = fences(render_evicted("s", 1, evicted))
    texts = {content for info, content in blocks if info == "text"}
    inputs = [json.loads(content) for info, content in blocks if info == "json"]
    for item in evicted:
        for block in item.message.blocks():
            if isinstance(block, TextBlock):
                assert block.text + "\n" in texts
            elif isinstance(block, ThinkingBlock):
                assert block.thinking + "\n" in texts
        for use in item.message.tool_uses():
            assert use.input in inputs
        for answer in item.message.tool_results():
            assert answer.text() + "\n" in texts
    assert render_evicted("s", 1, evicted) == render_evicted("s", 1, evicted)


# --- a summary cut off at max_tokens (issue 14, defect 4) --------------------------------


def _cut_off(text: str, output: int) -> object:
    return text_reply(text, stop_reason="max_tokens").model_copy(
        update={"usage": Usage(input_tokens=1000, output_tokens=output)}
    )


def test_a_summary_cut_off_at_max_tokens_is_asked_again_with_room() -> None:
    whole = text_reply(SUMMARY).model_copy(
        update={"usage": Usage(input_tokens=1000, output_tokens=300)}
    )
    provider = ScriptedProvider([_cut_off(SUMMARY[:60], 100), whole])  # type: ignore[list-item]
    seen: list[Usage] = []
    outcome = LLMSummarizer(provider, max_tokens=100, on_usage=seen.append).summarize(summary_job())
    assert (outcome.text, outcome.summarizer, outcome.fallback_reason) == (SUMMARY, "llm", None)
    assert [r.max_tokens for r in provider.requests] == [100, 200]
    assert outcome.usage == Usage(input_tokens=2000, output_tokens=400)
    assert len(seen) == 2


def test_a_summary_cut_off_twice_falls_back_and_says_why() -> None:
    provider = ScriptedProvider(
        [_cut_off(SUMMARY[:60], 100), _cut_off(SUMMARY[:90], 200)]  # type: ignore[list-item]
    )
    outcome = LLMSummarizer(provider, max_tokens=100).summarize(summary_job())
    assert outcome.summarizer == "extractive"
    assert outcome.fallback_reason is not None
    assert "cut off at max_tokens" in outcome.fallback_reason and "200" in outcome.fallback_reason
    assert outcome.usage == Usage(input_tokens=2000, output_tokens=300)
