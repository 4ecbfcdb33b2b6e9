"""The file system as the model sees it: its tools, their system block, large results.

``contribute`` adds the tool definitions of the agent's ``ToolRegistry`` (the file tools,
``compact_conversation`` and any extra tools) and one stable system block that explains
the files and the two history directories. One registry feeds both the definitions the
model sees and the tools the loop executes, so the two cannot drift apart.

``tool_result`` (the loop's tool-result hook) offloads a large result before it is
stored, so the transcript holds the preview from the start: every later request is
smaller and stays byte-identical (nothing is rewritten later, which keeps the prompt
cache valid). ``fit_batch`` does the same for a parallel batch too large together (a model
reading 18 files at once): a tool group is never split, so no compaction could bring
such a batch back under the window.
"""

from __future__ import annotations

import logging

from hango.core.errors import HangoError
from hango.core.messages import TextBlock, ToolResultBlock
from hango.history.base import HistoryBackend
from hango.history.paths import large_tool_result_path
from hango.middleware.base import Assembly, PassThrough
from hango.tokens.base import Estimator
from hango.tools.builtin import ToolRegistry

logger = logging.getLogger(__name__)

PREVIEW_LINES = 10
PREVIEW_CHARS = 2_000
# The previews of a batch's offloaded results are short: there may be dozens of them.
BATCH_PREVIEW_LINES = 3
BATCH_PREVIEW_CHARS = 300
PREVIEW_OPENING = "[This tool result is too large to show in full:"

FILES_PROMPT = (
    "## Files\n"
    "You have a file system with the tools read_file, write_file, edit_file and ls. Paths "
    "are absolute (for example /notes/plan.md).\n"
    "- /conversation_history/ holds the full transcript of earlier messages that were "
    "summarized to free context space. When the summary lacks a detail (an exact path, "
    "command, output or error), read it there instead of guessing.\n"
    "- /large_tool_results/ holds tool results too large to show in full; the preview you "
    "were shown names the file.\n"
    "Both directories are read-only. read_file returns a page at a time: use offset and "
    "limit to read long files.\n"
    "Call compact_conversation when the context is filled with material you no longer "
    "need in full; the earlier conversation is then summarized and saved."
)


class FilesystemMiddleware(PassThrough):
    """Contributes the tools and their system block; offloads large tool results."""

    def __init__(
        self,
        history: HistoryBackend,
        *,
        max_result_tokens: int,
        estimator: Estimator,
        tools: ToolRegistry | None = None,
        max_batch_tokens: int | None = None,
    ) -> None:
        if max_result_tokens <= 0:
            raise ValueError(f"max_result_tokens must be positive, not {max_result_tokens}")
        if max_batch_tokens is not None and max_batch_tokens <= 0:
            raise ValueError(f"max_batch_tokens must be positive, not {max_batch_tokens}")
        self.history = history
        self.max_result_tokens = max_result_tokens
        # None: a batch is only bounded by its results' own limit.
        self.max_batch_tokens = max_batch_tokens
        self.estimator = estimator
        self.tools = tools if tools is not None else ToolRegistry(history)

    def contribute(self, assembly: Assembly) -> Assembly:
        return assembly.add(system=(TextBlock(text=FILES_PROMPT),), tools=self.tools.definitions())

    def tool_result(self, tool_use_id: str, content: str, *, session_id: str) -> str:
        """``content`` itself, or a head/tail preview naming the file that now holds it in
        full (``/large_tool_results/{session}/{id}``; an id the session already used for
        another result gets a suffix, so no preview names a file that was overwritten)."""
        tokens = self.estimator.estimate(content)
        if tokens <= self.max_result_tokens:
            return content
        try:
            path = self._free_path(session_id, tool_use_id, content)
            self.history.write(path, content)
        except (HangoError, OSError) as error:
            # Keeping the full result is safe (truncation and compaction still bound the
            # request); a preview pointing at a file that does not exist is not.
            logger.warning("could not offload large result of %s: %s", tool_use_id, error)
            return content
        return large_result_preview(content, path=path, tokens=tokens)

    def fit_batch(
        self, results: tuple[ToolResultBlock, ...], *, session_id: str
    ) -> tuple[ToolResultBlock, ...]:
        """The batch's results, its largest ones offloaded until together they fit.

        Each offloaded result becomes a short preview naming its file; a result that
        cannot be written stays whole (the summarization middleware then shortens it in
        the outgoing copy as a last resort). Pairing and order are unchanged.
        """
        budget = self.max_batch_tokens
        sizes = [self.estimator.estimate(r.text()) for r in results]
        if budget is None or sum(sizes) <= budget:
            return results
        fitted = list(results)
        total = sum(sizes)
        for index in sorted(range(len(results)), key=lambda i: -sizes[i]):
            if total <= budget:
                break
            shorter = self._offloaded(fitted[index], session_id, sizes[index])
            if shorter is not None:
                fitted[index] = shorter
                total += self.estimator.estimate(shorter.text()) - sizes[index]
        return tuple(fitted)

    def _offloaded(
        self, result: ToolResultBlock, session_id: str, tokens: int
    ) -> ToolResultBlock | None:
        """The result as a short preview of the file now holding it; None if it cannot be."""
        content = result.content
        if not isinstance(content, str) or content.startswith(PREVIEW_OPENING):
            return None
        try:
            path = self._free_path(session_id, result.tool_use_id, content)
            preview = large_result_preview(
                content,
                path=path,
                tokens=tokens,
                lines=BATCH_PREVIEW_LINES,
                chars=BATCH_PREVIEW_CHARS,
            )
            if self.estimator.estimate(preview) >= tokens:
                return None  # a short result: its preview would be no smaller
            self.history.write(path, content)
        except (HangoError, OSError) as error:
            logger.warning("could not offload result %s: %s", result.tool_use_id, error)
            return None
        return result.model_copy(update={"content": preview})

    def _free_path(self, session_id: str, tool_use_id: str, content: str) -> str:
        path = base = large_tool_result_path(session_id, tool_use_id)
        n = 2
        while self.history.exists(path) and self.history.read(path) != content:
            path, n = f"{base}_{n}", n + 1
        return path


def large_result_preview(
    content: str,
    *,
    path: str,
    tokens: int,
    lines: int = PREVIEW_LINES,
    chars: int = PREVIEW_CHARS,
) -> str:
    """The first and last ``lines`` lines (each part at most ``chars``), the path, the size."""
    head, tail = _head_and_tail(content, lines, chars)
    line_count = len(content.splitlines())
    parts = [
        f"{PREVIEW_OPENING} about {tokens} tokens, "
        f"{len(content)} characters, {line_count} lines. The full text is saved at {path}; "
        "read it with read_file, using offset and limit to page through it.]",
        f"--- start ---\n{head}",
    ]
    if tail:
        parts.append(f"--- end ---\n{tail}")
    return "\n".join(parts)


def _head_and_tail(content: str, lines: int, chars: int) -> tuple[str, str]:
    all_lines = content.splitlines()
    if len(all_lines) > 2 * lines:
        head = "\n".join(all_lines[:lines])
        tail = "\n".join(all_lines[-lines:])
    else:
        # Few but long lines (minified JSON, one huge line): cut by characters instead.
        head = content[:chars]
        tail = content[max(chars, len(content) - chars) :]
    head = head if len(head) <= chars else head[:chars] + " [...]"
    tail = tail if len(tail) <= chars else "[...] " + tail[-chars:]
    return head, tail
