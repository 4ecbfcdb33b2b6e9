"""The filesystem middleware: tool definitions, its system block, large-result offload."""

from __future__ import annotations

import pytest

from hango.core.messages import TextBlock, ToolDefinition, ToolResultBlock, ToolUseBlock
from hango.middleware.base import Assembly
from hango.middleware.filesystem import (
    FILES_PROMPT,
    PREVIEW_CHARS,
    PREVIEW_LINES,
    FilesystemMiddleware,
)
from hango.tools.builtin import Tool, ToolOutcome, ToolRegistry
from tests.histories import CharEstimator
from tests.memory_history import MemoryHistory

LIMIT = 100  # tokens; CharEstimator counts 4 characters a token


def middleware(
    history: MemoryHistory | None = None, tools: ToolRegistry | None = None
) -> FilesystemMiddleware:
    return FilesystemMiddleware(
        history or MemoryHistory(), max_result_tokens=LIMIT, estimator=CharEstimator(), tools=tools
    )


def numbered(count: int) -> str:
    return "".join(f"row {n:03d} of the output\n" for n in range(1, count + 1))


# --- contribute -------------------------------------------------------------------------


def test_contributes_the_tools_and_one_system_block_after_earlier_ones() -> None:
    earlier = Assembly(system=(TextBlock(text="You are an agent."),))
    assembly = middleware().contribute(earlier)
    assert [b.text for b in assembly.system] == ["You are an agent.", FILES_PROMPT]
    assert [t.name for t in assembly.tools] == [
        "read_file",
        "write_file",
        "edit_file",
        "ls",
        "compact_conversation",
    ]
    for phrase in ("/conversation_history/", "/large_tool_results/", "read_file", "offset"):
        assert phrase in FILES_PROMPT


def test_contributes_the_registry_it_is_given_so_extra_tools_are_visible() -> None:
    history = MemoryHistory()
    extra = Tool(ToolDefinition(name="run_command"), lambda arguments: ToolOutcome(content="ok"))
    registry = ToolRegistry(history, [extra])
    fs = middleware(history, tools=registry)
    assert fs.tools is registry
    assert fs.contribute(Assembly()).tools == registry.definitions()


def test_refuses_a_non_positive_limit() -> None:
    with pytest.raises(ValueError, match="max_result_tokens must be positive, not 0"):
        FilesystemMiddleware(MemoryHistory(), max_result_tokens=0, estimator=CharEstimator())


# --- tool_result ---------------------------------------------------------------


def test_small_results_pass_unchanged_and_write_nothing() -> None:
    history = MemoryHistory()
    content = "x" * (LIMIT * 4)  # exactly at the limit
    assert middleware(history).tool_result("toolu_1", content, session_id="s") == content
    assert history.ls("/") == []


def test_large_results_are_saved_in_full_and_previewed() -> None:
    history = MemoryHistory()
    content = numbered(200)
    preview = middleware(history).tool_result("toolu_big", content, session_id="s")

    assert history.read("/large_tool_results/s/toolu_big") == content
    assert "saved at /large_tool_results/s/toolu_big" in preview
    assert f"about {CharEstimator().estimate(content)} tokens" in preview
    assert f"{len(content)} characters, 200 lines" in preview
    for n in (*range(1, PREVIEW_LINES + 1), *range(201 - PREVIEW_LINES, 201)):
        assert f"row {n:03d} " in preview
    assert f"row {PREVIEW_LINES + 1:03d} " not in preview
    assert f"row {200 - PREVIEW_LINES:03d} " not in preview
    assert len(preview) < len(content) // 3


def test_one_huge_line_is_previewed_by_characters() -> None:
    history = MemoryHistory()
    content = "<" + "j" * 50_000 + ">"
    preview = middleware(history).tool_result("toolu_json", content, session_id="s")
    assert history.read("/large_tool_results/s/toolu_json") == content
    assert "<" + "j" * (PREVIEW_CHARS - 1) in preview and "j" * (PREVIEW_CHARS - 1) + ">" in preview
    assert len(preview) < 3 * PREVIEW_CHARS + 500


def test_the_offloaded_result_reads_back_through_the_tools() -> None:
    history = MemoryHistory()
    fs = middleware(history)
    fs.tool_result("toolu_r", numbered(30), session_id="s")
    page = fs.tools.execute(
        ToolUseBlock(
            id="toolu_x",
            name="read_file",
            input={"path": "/large_tool_results/s/toolu_r", "offset": 14, "limit": 2},
        )
    )
    assert page.content.startswith("    15\trow 015 of the output\n    16\trow 016 of the output")


class FailingHistory(MemoryHistory):
    def write(self, path: str, content: str) -> None:
        raise OSError("read-only file system")


@pytest.mark.parametrize(
    ("history", "tool_use_id"),
    [(MemoryHistory(), "../../etc/passwd"), (FailingHistory(), "toolu_ok")],
)
def test_when_the_offload_fails_the_full_result_is_kept(
    history: MemoryHistory, tool_use_id: str
) -> None:
    content = numbered(200)
    assert middleware(history).tool_result(tool_use_id, content, session_id="s") == content
    assert history.ls("/") == []


def test_a_reused_id_never_overwrites_an_earlier_result() -> None:
    history = MemoryHistory()
    fs = middleware(history)
    first = fs.tool_result("toolu_1", numbered(200), session_id="s")
    second = fs.tool_result("toolu_1", numbered(300), session_id="s")
    assert "saved at /large_tool_results/s/toolu_1;" in first
    assert "/large_tool_results/s/toolu_1_2" in second
    assert history.read("/large_tool_results/s/toolu_1") == numbered(200)
    assert history.read("/large_tool_results/s/toolu_1_2") == numbered(300)


# --- fit_batch: a parallel batch over its budget (issue 26, item 1) ----------------------


def _results(sizes: list[int]) -> tuple[ToolResultBlock, ...]:
    return tuple(
        ToolResultBlock(tool_use_id=f"toolu_{i}", content=numbered(rows))
        for i, rows in enumerate(sizes)
    )


def test_a_batch_over_its_budget_offloads_its_largest_results_first() -> None:
    history = MemoryHistory()
    fs = FilesystemMiddleware(
        history, max_result_tokens=1000, estimator=CharEstimator(), max_batch_tokens=1000
    )
    batch = _results([10, 120, 30, 120])  # each under 1000 tokens; together about 1600
    fitted = fs.fit_batch(batch, session_id="s")
    assert [r.tool_use_id for r in fitted] == [r.tool_use_id for r in batch]  # pairing kept
    offloaded = [i for i, r in enumerate(fitted) if r.text() != batch[i].text()]
    assert offloaded and set(offloaded) <= {1, 3}  # the largest went first
    assert sum(CharEstimator().estimate(r.text()) for r in fitted) <= 1000
    for i in offloaded:
        assert history.read(f"/large_tool_results/s/toolu_{i}") == batch[i].text()


class RefusingHistory(MemoryHistory):
    def write(self, path: str, content: str) -> None:
        raise OSError("disk full")


def test_a_batch_whose_results_cannot_be_written_stays_whole() -> None:
    fs = FilesystemMiddleware(
        RefusingHistory(), max_result_tokens=1000, estimator=CharEstimator(), max_batch_tokens=300
    )
    batch = _results([120, 120, 120])
    assert fs.fit_batch(batch, session_id="s") == batch


def test_without_a_batch_budget_nothing_changes() -> None:
    batch = _results([120, 120, 120, 120, 120])
    assert middleware().fit_batch(batch, session_id="s") is batch
