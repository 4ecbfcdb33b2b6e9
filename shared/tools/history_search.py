"""Ranked search over a session's stored messages, one document per content block.

A block's searchable text is what the model would look for in it: a text block's text, a
tool call's name and the string values of its input (not their JSON, whose escapes would
hide a path with a backslash or a quote), a tool result's text, a thinking block's text.

Matching is by case-insensitive substring, not by words: the model searches for
identifiers (``shared/core/x.py``, ``retry_12``, ``ECONNREFUSED``, a line of an error
message), which word tokenizers split apart and trigram indexes cannot find when shorter
than three characters. Each whitespace-separated query term is weighted by how rare it is
in the session (BM25's idf and saturation, with lengths in characters); a term found as a
whole token (not inside a longer identifier) counts half again, and a multi-term query
found verbatim doubles the score, so the block that holds the exact string ranks first.
Ties go to the newer message: a file's latest content or an error's latest occurrence is
usually the one wanted.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from hango.core.messages import (
    ContentBlock,
    StoredMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

# BM25's usual constants.
_K1 = 1.2
_B = 0.75
WHOLE_TOKEN_WEIGHT = 1.5
PHRASE_WEIGHT = 2.0
SNIPPET_CHARS = 240
# Characters shown before the match in a snippet; the rest of the window follows it.
_SNIPPET_LEAD = 80
_IDENTIFIER_CHAR = r"[\w]"


@dataclass(frozen=True)
class Document:
    """One content block of one stored message, as search sees it."""

    seq: int
    turn: int
    role: str
    block: int  # 1-based position of the block in its message
    label: str  # what the block is, e.g. "tool_use toolu_01 (Bash)"
    text: str
    folded: str  # ``text`` lowercased once, for matching


@dataclass(frozen=True)
class Hit:
    document: Document
    score: float
    snippet: str


class SessionIndex:
    """One session's searchable blocks up to ``last_seq``, and its tool results by id.

    The store is append-only, so an index is only ever extended: :meth:`catch_up` takes
    the messages after ``last_seq``. The calls of the tool named ``own_name`` and their
    results are not searched (a search would find its own query, and earlier results'
    snippets, first).
    """

    def __init__(self, own_name: str) -> None:
        self.own_name = own_name
        self.last_seq = 0
        self.lock = threading.Lock()  # held by whoever reads and adds what was appended
        self._docs: list[Document] = []
        self._results: dict[str, StoredMessage] = {}
        self._own_calls: set[str] = set()

    def catch_up(self, appended: Iterable[StoredMessage]) -> None:
        for stored in appended:
            uses = stored.message.tool_uses()
            self._own_calls.update(use.id for use in uses if use.name == self.own_name)
            self._docs.extend(documents(stored, skip=self._own_calls))
            for block in stored.message.tool_results():
                # The first result of an id is the one the request answered with (repair
                # drops a duplicate).
                self._results.setdefault(block.tool_use_id, stored)
            self.last_seq = max(self.last_seq, stored.seq)

    def docs(self) -> list[Document]:
        """The blocks indexed so far (a copy: a caller ranks it while others catch up)."""
        return list(self._docs)

    def result_message(self, tool_use_id: str) -> StoredMessage | None:
        """The message holding the (first) result of ``tool_use_id``."""
        return self._results.get(tool_use_id)


def documents(stored: StoredMessage, *, skip: Container[str] = ()) -> Iterator[Document]:
    """The searchable blocks of ``stored``: blocks with no text (images) are left out, and
    so are the tool calls whose id is in ``skip`` and their results."""
    for number, block in enumerate(stored.message.blocks(), start=1):
        call = _call_id(block)
        if call is not None and call in skip:
            continue
        found = _searchable(block)
        if found is None or not found[1]:
            continue
        label, text = found
        yield Document(
            stored.seq, stored.turn, stored.message.role, number, label, text, text.lower()
        )


def _call_id(block: ContentBlock) -> str | None:
    if isinstance(block, ToolUseBlock):
        return block.id
    return block.tool_use_id if isinstance(block, ToolResultBlock) else None


def _searchable(block: ContentBlock) -> tuple[str, str] | None:
    if isinstance(block, TextBlock):
        return "text", block.text
    if isinstance(block, ToolUseBlock):
        return f"tool_use {block.id} ({block.name})", "\n".join([block.name, *_leaves(block.input)])
    if isinstance(block, ToolResultBlock):
        flag = ", error" if block.is_error else ""
        return f"tool_result for {block.tool_use_id}{flag}", block.text()
    if isinstance(block, ThinkingBlock):
        return "thinking", block.thinking
    return None


def _leaves(value: Any) -> Iterator[str]:
    """The scalar values of a JSON value, as text, in order."""
    if isinstance(value, dict):
        for child in value.values():
            yield from _leaves(child)
    elif isinstance(value, list):
        for child in value:
            yield from _leaves(child)
    elif value is not None:
        yield value if isinstance(value, str) else str(value)


def query_terms(query: str) -> list[str]:
    """The distinct lowercased whitespace-separated terms of ``query``, in order."""
    return list(dict.fromkeys(query.lower().split()))


def rank(docs: Sequence[Document], query: str, limit: int) -> tuple[list[Hit], int]:
    """The best ``limit`` hits for ``query`` over ``docs``, and how many blocks matched."""
    terms = query_terms(query)
    phrase = " ".join(query.lower().split()) if len(terms) > 1 else None
    counts = [[doc.folded.count(term) for term in terms] for doc in docs]
    matched = [i for i, row in enumerate(counts) if any(row)]
    idf = _idf(terms, [counts[i] for i in matched], len(docs))
    average = sum(len(doc.folded) for doc in docs) / max(1, len(docs))
    scored = []
    for i in matched:
        doc = docs[i]
        score = _score(doc, terms, counts[i], idf, average)
        if phrase is not None and phrase in _spaced(doc.folded):
            score *= PHRASE_WEIGHT
        scored.append((score, doc.seq, -doc.block, doc))
    scored.sort(key=lambda item: item[:3], reverse=True)
    hits = [Hit(doc, score, snippet(doc, terms, idf)) for score, _, _, doc in scored[:limit]]
    return hits, len(matched)


def _idf(terms: list[str], rows: list[list[int]], total: int) -> list[float]:
    frequencies = [sum(1 for row in rows if row[j]) for j in range(len(terms))]
    return [math.log(1 + (total - df + 0.5) / (df + 0.5)) for df in frequencies]


def _score(
    doc: Document, terms: list[str], counts: list[int], idf: list[float], average: float
) -> float:
    norm = _K1 * (1 - _B + _B * len(doc.folded) / max(1.0, average))
    score = 0.0
    for term, count, weight in zip(terms, counts, idf, strict=True):
        if not count:
            continue
        saturated = count * (_K1 + 1) / (count + norm)
        whole = WHOLE_TOKEN_WEIGHT if _whole_token(term).search(doc.folded) else 1.0
        score += weight * saturated * whole
    return score


def _whole_token(term: str) -> re.Pattern[str]:
    # An identifier boundary on the sides where the term itself has an identifier character.
    before = f"(?<!{_IDENTIFIER_CHAR})" if re.match(_IDENTIFIER_CHAR, term) else ""
    after = f"(?!{_IDENTIFIER_CHAR})" if re.match(_IDENTIFIER_CHAR, term[-1]) else ""
    return re.compile(before + re.escape(term) + after)


def _spaced(text: str) -> str:
    """``text`` with every run of whitespace as one space (a phrase may wrap lines)."""
    return " ".join(text.split())


def snippet(doc: Document, terms: list[str], idf: list[float]) -> str:
    """A window of the block around its best match, on one line, cut marks at the ends."""
    at, length = _anchor(doc, terms, idf)
    start = max(0, at - _SNIPPET_LEAD)
    end = min(len(doc.text), max(start + SNIPPET_CHARS, at + length + _SNIPPET_LEAD))
    window = " ".join(doc.text[start:end].split())
    return ("…" if start > 0 else "") + window + ("…" if end < len(doc.text) else "")


def _anchor(doc: Document, terms: list[str], idf: list[float]) -> tuple[int, int]:
    """Where the snippet centres: the rarest term the block holds (its first occurrence)."""
    present = [
        (weight, term) for term, weight in zip(terms, idf, strict=True) if term in doc.folded
    ]
    if not present:
        return 0, 0
    _, term = max(present, key=lambda item: (item[0], len(item[1])))
    return doc.folded.index(term), len(term)
