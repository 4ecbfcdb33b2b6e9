"""A summarizer that needs no model: a briefing extracted from the evicted messages.

It is the last rung of the summary ladder (cache, queue, inline LLM, extractive): when no
model summary can be had, the turn still completes with a summary that keeps what a
fresh agent needs most — the user's requests verbatim, the files touched, the errors,
the latest results — and points at the history file for the rest. It is deterministic
and bounded: every list and every quoted text has a cap, so repeated compactions (each
folding the previous summary) cannot grow the summary without limit.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from hango.compaction.jobs import SummaryJob, SummaryResult
from hango.compaction.summary_prompt import artifact_index
from hango.core.messages import StoredMessage, ToolResultBlock

SUMMARIZER_NAME = "extractive"

MAX_USER_REQUESTS = 20  # the first 5 and the last 15 when there are more
USER_REQUEST_CHARS = 2_000
MAX_STATEMENTS = 15  # the last ones
STATEMENT_CHARS = 300
MAX_RESULTS = 5  # the last ones
RESULT_CHARS = 400
MAX_ERRORS = 10  # the last ones
MAX_ARTIFACTS = 100
PREVIOUS_SUMMARY_CHARS = 8_000
# Characters per token assumed when a briefing is cut to a budget (errs on the short side).
CHARS_PER_TOKEN = 3
BUDGET_NOTE = "\n\n[briefing shortened to its length budget; the full history is in the file]"
CUT_MARK = " [...]"
WINDOW_NOTE = "\n[briefing cut to fit the context window; the full history is in the file]"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WHITESPACE = re.compile(r"\s+")


class ExtractiveSummarizer:
    """``Summarizer`` without a model: deterministic, instant, never fails."""

    name = SUMMARIZER_NAME

    def summarize(self, job: SummaryJob) -> SummaryResult:
        """The briefing: fixed sections, each bounded, empty sections left out, the whole
        kept to the length the job asks for (what a model is asked to write)."""
        earlier, length = PREVIOUS_SUMMARY_CHARS, job.asked_length()
        if length:  # the earlier summary takes half of it at most
            earlier = min(earlier, length * CHARS_PER_TOKEN // 2)
        # The earlier summary carries what every compaction before kept (bounded above): whole.
        previous = _section("Earlier summary", [bounded(job.previous_summary or "", earlier)])
        header = (
            f"_Extractive summary of messages {job.from_seq} to {job.to_seq}, assembled without "
            "a model; the history file holds every message verbatim._"
        )
        kept = [s for s in (header, previous) if s]
        sections = _sections(job.evicted)
        if length:
            room = length * CHARS_PER_TOKEN - len(BUDGET_NOTE) - sum(len(s) + 2 for s in kept)
            sections = _shared_out(sections, room)
        text = "\n\n".join([*kept, *sections])
        # A budget too small for even the kept part: one cut, as at the hard room.
        text = cut_to_tokens(text, length, BUDGET_NOTE) if length else text
        return SummaryResult(text=text, summarizer=SUMMARIZER_NAME)


def cut_to_tokens(text: str, tokens: int, note: str = WINDOW_NOTE) -> str:
    """``text`` cut to about ``tokens`` tokens (erring on the short side), the cut noted."""
    return _cut(text, tokens * CHARS_PER_TOKEN, note)


def _cut(text: str, chars: int, note: str = CUT_MARK) -> str:
    """``text`` cut to at most ``chars`` characters, ``note`` ending the cut."""
    return text if len(text) <= chars else text[: max(0, chars - len(note))] + note


def _shared_out(sections: list[str], chars: int) -> list[str]:
    """``sections`` in about ``chars`` characters: the short ones whole, the others an equal
    share of what those leave, each keeping its start (its heading first). Cut as one text,
    the briefing lost its last sections, which hold the newest state (errors, latest
    results)."""
    separators = 2 * len(sections)
    if sum(map(len, sections)) + separators <= chars:
        return sections
    shares = _fair_shares([len(section) for section in sections], chars - separators)
    return [*map(_cut, sections, shares), BUDGET_NOTE.strip()]


def _fair_shares(sizes: Sequence[int], total: int) -> list[int]:
    """How much of ``total`` each of ``sizes`` gets: the smallest whole while they fit
    their equal share, the rest split equally among the larger."""
    shares = [0] * len(sizes)
    left = max(0, total)
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    for done, index in enumerate(order):
        shares[index] = min(sizes[index], left // (len(order) - done))
        left -= shares[index]
    return shares


def _sections(evicted: Sequence[StoredMessage]) -> list[str]:
    """The evicted range's sections, oldest facts first, newest state last."""
    sections = [
        _section("User requests", _user_requests(evicted)),
        _section("Assistant statements", _statements(evicted)),
        _section(
            "Files and artifacts", [f"- {a}" for a in artifact_index(evicted)[:MAX_ARTIFACTS]]
        ),
        _section("Tool calls", _tool_counts(evicted)),
        _section("Errors", _results(evicted, errors_only=True)[-MAX_ERRORS:]),
        _section("Latest tool results", _results(evicted, errors_only=False)[-MAX_RESULTS:]),
    ]
    return [section for section in sections if section]


def _section(title: str, lines: Sequence[str]) -> str:
    body = [line for line in lines if line]
    return f"## {title}\n" + "\n".join(body) if body else ""


def bounded(text: str, limit: int) -> str:
    """``text`` stripped, cut to its first ``limit`` characters with the cut marked."""
    text = text.strip()
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters]"


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace collapsed), bounded."""
    return bounded(_WHITESPACE.sub(" ", text), limit)


def _user_requests(evicted: Sequence[StoredMessage]) -> list[str]:
    # Continuation lines are indented: a multi-line quote stays inside its bullet.
    requests = [
        f"- [seq {stored.seq}] "
        + bounded(stored.message.text(), USER_REQUEST_CHARS).replace("\n", "\n  ")
        for stored in evicted
        if stored.message.role == "user" and stored.message.text().strip()
    ]
    if len(requests) <= MAX_USER_REQUESTS:
        return requests
    head, tail = 5, MAX_USER_REQUESTS - 5
    skipped = len(requests) - head - tail
    return [*requests[:head], f"- ... {skipped} more requests ...", *requests[-tail:]]


def _statements(evicted: Sequence[StoredMessage]) -> list[str]:
    statements = [
        f"- [seq {stored.seq}] {first_sentences(stored.message.text())}"
        for stored in evicted
        if stored.message.role == "assistant" and stored.message.text().strip()
    ]
    return statements[-MAX_STATEMENTS:]


def first_sentences(text: str, count: int = 2) -> str:
    """The first ``count`` sentences of ``text`` on one line, bounded."""
    sentences = _SENTENCE_END.split(_WHITESPACE.sub(" ", text.strip()))
    return one_line(" ".join(sentences[:count]), STATEMENT_CHARS)


def _tool_counts(evicted: Sequence[StoredMessage]) -> list[str]:
    counts = Counter(use.name for stored in evicted for use in stored.message.tool_uses())
    return [f"- {name} \u00d7{count}" for name, count in sorted(counts.items())]


def _results(evicted: Sequence[StoredMessage], *, errors_only: bool) -> list[str]:
    names = {use.id: use.name for stored in evicted for use in stored.message.tool_uses()}
    return [
        _result_line(stored.seq, result, names)
        for stored in evicted
        for result in stored.message.tool_results()
        if result.is_error or not errors_only
    ]


def _result_line(seq: int, result: ToolResultBlock, names: dict[str, str]) -> str:
    name = names.get(result.tool_use_id, "unknown tool")
    flag = " error" if result.is_error else ""
    preview = one_line(result.text(), RESULT_CHARS) or "(no text)"
    return f"- [seq {seq}] {name} ({result.tool_use_id}){flag}: {preview}"
