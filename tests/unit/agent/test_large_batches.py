"""A parallel tool batch larger than the window (issue 26, item 1).

Each result is under the large-result threshold, together they exceed the window: the
model fans out reads. Every turn must complete, the calls keep their results, and the
session stays usable afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hango.compaction.validate import validate_request
from hango.core.messages import Message, Request, StoredMessage, TextBlock, ToolResultBlock
from hango.providers.scripted import text_reply, tool_reply
from hango.tokens.heuristic import HeuristicEstimator
from tests.agent_support import build

ESTIMATE = HeuristicEstimator()


def _file(i: int, lines: int) -> str:
    return "".join(
        f"file {i} line {n}: " + "lorem ipsum dolor sit amet " * 3 + "\n" for n in range(lines)
    )


def _fan_out(agent: Any, files: int, lines: int) -> int:
    """Writes ``files`` files; the tokens of their texts together."""
    total = 0
    for i in range(files):
        text = _file(i, lines)
        agent.history.write(f"/work/f{i}.txt", text)
        total += ESTIMATE.estimate(text)
    return total


def _reads(files: int, lines: int) -> Any:
    calls = [("read_file", {"path": f"/work/f{i}.txt", "limit": lines}) for i in range(files)]
    return tool_reply(*calls)


def _results(stored: list[StoredMessage]) -> list[ToolResultBlock]:
    return [r for m in stored for r in m.message.tool_results()]


def _assert_sent_within(requests: list[Request], window: int) -> None:
    for request in requests:
        assert validate_request(request) == []
        assert ESTIMATE.estimate_request(request) <= window


@pytest.mark.parametrize(
    ("window", "files", "lines"),
    [(20_000, 18, 50), (200_000, 20, 420)],
    ids=["18-files-20k-window", "20-pages-200k-window"],
)
def test_a_batch_larger_than_the_window_completes_and_the_session_lives_on(
    tmp_path: Path, window: int, files: int, lines: int
) -> None:
    agent, provider = build(tmp_path, window=window, tool_result_offload_tokens=20_000)
    together = _fan_out(agent, files, lines)
    (filesystem,) = agent.loop.tool_result_hooks
    single = filesystem.max_result_tokens  # type: ignore[attr-defined]
    assert together > window, "the batch must exceed the window for this test to mean anything"
    provider.push(_reads(files, lines), text_reply("read them all"))
    agent.loop.run_turn("s", "read every file")
    for turn in range(3):
        provider.push(text_reply(f"answer {turn}"))
        result = agent.loop.run_turn("s", f"next question {turn}")
        assert (
            result.response is not None and result.response.as_message().text() == f"answer {turn}"
        )
    _assert_sent_within(provider.requests, window)
    results = _results(agent.store.messages("s"))
    assert len(results) == files  # every call kept its result
    offloaded = [r for r in results if "/large_tool_results/s/" in r.text()]
    assert offloaded, "the largest results are offloaded"
    assert all(ESTIMATE.estimate(r.text()) <= single for r in results)
    for result in offloaded:  # the full text is one read away
        path = result.text().split("saved at ")[1].split(";")[0]
        assert "\tfile " in agent.history.read(path)


def test_a_session_stored_with_an_oversized_batch_is_usable_again(tmp_path: Path) -> None:
    """A session bricked before the fix: the batch is in the store in full, and a failed
    turn left the next user message right after it. The copy shortens the batch."""
    window = 20_000
    agent, provider = build(tmp_path, window=window)
    ctx = agent.loop.begin_turn("s")
    agent.loop.append(ctx, Message(role="user", content="read every file"))
    reads = _reads(18, 60)
    agent.loop.append(ctx, reads.as_message())
    blocks = tuple(
        ToolResultBlock(tool_use_id=use.id, content=_file(i, 60))
        for i, use in enumerate(reads.tool_uses())
    )
    agent.loop.append(ctx, Message(role="user", content=blocks))
    agent.loop.end_turn(ctx, status="failed", error="CannotFitError: ...")
    ctx = agent.loop.begin_turn("s")
    agent.loop.append(ctx, Message(role="user", content=(TextBlock(text="are you there?"),)))
    agent.loop.end_turn(ctx, status="failed", error="CannotFitError: ...")
    for turn in range(2):
        provider.push(text_reply(f"answer {turn}"))
        result = agent.loop.run_turn("s", f"question {turn}")
        assert (
            result.response is not None and result.response.as_message().text() == f"answer {turn}"
        )
    _assert_sent_within(provider.requests, window)
    assert _results(agent.store.messages("s"))[0].content == _file(0, 60)  # store untouched


def test_a_new_user_message_is_never_joined_onto_a_tool_group(tmp_path: Path) -> None:
    """A turn that failed after its tool results: the next turn opens after a closing
    assistant message, so the new question is a group of its own."""
    agent, provider = build(tmp_path)
    provider.push(tool_reply(("ls", {"path": "/"})), RuntimeError("provider down"))
    with pytest.raises(RuntimeError):
        agent.loop.run_turn("s", "list the files")
    provider.push(text_reply("here"))
    agent.loop.run_turn("s", "try again")
    sent = provider.requests[-1].messages
    last = sent[-1]
    assert last.role == "user" and not list(last.tool_results())
    assert sent[-2].role == "assistant" and not list(sent[-2].tool_uses())


def test_a_first_turn_refused_without_figures_reports_true_figures(tmp_path: Path) -> None:
    """Nothing can be evicted on a first turn: the error says the request measured under
    the window, rather than blaming a tool group for "1326 tokens, over 8000"."""
    from hango.core.errors import CannotFitError, ContextOverflowError

    agent, provider = build(tmp_path, window=8000)
    refused = ContextOverflowError("prompt is too long")
    provider.push(refused, refused, refused)
    with pytest.raises(CannotFitError) as caught:
        agent.loop.run_turn("s", "hello there")
    error = caught.value
    assert error.tokens is not None and 0 < error.tokens <= 8000 and error.limit == 8000
    assert "under the profile's window of 8000" in str(error)
    assert "tool group" not in str(error)
