"""The client re-sends its whole history on every call; the store gets only what is new.

A client session maps to one or more *branches* in the store: ``gw-…`` (the first) and
``gw-…-b2``, ``gw-…-b3``, … A request continues the first branch whose stored messages
are a prefix of the request's messages (compared as :func:`comparable` says: role and
content, without the ``cache_control`` markers clients move from call to call), and only
the suffix after that prefix is appended; the prefix goes upstream as stored. When no
branch is a prefix (the client edited or rewound its history, or compacted it itself), the
request starts the next branch with its whole history: nothing stored is ever rewritten,
and the divergence is logged with both branches and the first message that differs.

What each branch holds is remembered as the client's JSON for the most recently used
branches, topped up from the store (a message another process appended is read once).
"""

from __future__ import annotations

import itertools
import logging
import operator
from dataclasses import dataclass, field

from hango.core.identity import RecentlyUsed
from hango.core.messages import JsonObject
from hango.gateway.identity import without_cache_control
from hango.store import Store

log = logging.getLogger(__name__)

BRANCHES_REMEMBERED = 256


@dataclass
class Placement:
    """Where a request's history goes: the branch, and what must be appended to it."""

    session_id: str
    new: list[JsonObject]
    # How many messages the branch held when the request was placed on it.
    held: int = 0
    # The branch this one diverged from, when the request starts a branch.
    diverged_from: str | None = None
    diverged_at: int | None = None
    # Whether the branch is in the store already (else the request starts it).
    stored: bool = False


@dataclass
class _Known:
    messages: list[JsonObject] = field(default_factory=list)
    # Once in the store, a branch stays there (nothing is deleted): asked until it is.
    stored: bool = False


def branch_id(base: str, number: int) -> str:
    return base if number == 1 else f"{base}-b{number}"


def common_prefix(known: list[JsonObject], sent: list[JsonObject]) -> int:
    """How many leading messages agree, ``cache_control`` markers aside."""
    return _prefix(known, sent)[1]


def _prefix(known: list[JsonObject], sent: list[JsonObject]) -> tuple[int, int]:
    """How many leading messages are equal (``==``), and how many agree (markers aside)."""
    length = min(len(known), len(sent))
    # The usual request repeats the stored messages as the very objects read from its
    # previous body (:mod:`hango.gateway.body`), but for the last one or two, whose
    # markers moved: a list comparison (identity first, in C) settles all but those.
    for start in range(length, max(length - 3, -1), -1):
        if known[:start] == sent[:start]:
            return start, _agreeing(known, sent, start, length)
    return 0, _agreeing(known, sent, 0, length)


def _agreeing(known: list[JsonObject], sent: list[JsonObject], start: int, length: int) -> int:
    """``common_prefix`` given that the first ``start`` messages agree."""
    while start < length:
        # Equal messages compare in C; only the few that differ are compared without markers.
        same = sum(
            1
            for _ in itertools.takewhile(
                bool, map(operator.eq, known[start:length], sent[start:length])
            )
        )
        start += same
        if start == length:
            break
        if comparable(known[start]) != comparable(sent[start]):
            return start
        start += 1
    return length


def comparable(message: JsonObject) -> JsonObject:
    """What makes two messages the same message, whatever the client's serialization.

    Its role and content; a string content is the one text block it stands for, and
    ``cache_control`` markers are left out. Claude Code sends its mid-conversation system
    message first as a list of blocks, then as a string with an ``output_config`` beside
    it: the same message, kept (and sent on) as it was first stored.
    """
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {"role": message.get("role"), "content": without_cache_control(content)}


class Branches:
    """Places requests on branches; remembers what each recent branch holds."""

    def __init__(self, store: Store, remembered: int = BRANCHES_REMEMBERED) -> None:
        self.store = store
        self._known: RecentlyUsed[_Known] = RecentlyUsed(remembered)
        # Per session, the branch its latest request continued.
        self._latest: RecentlyUsed[list[str]] = RecentlyUsed(remembered)

    def place(self, base: str, sent: list[JsonObject]) -> Placement:
        """The branch ``sent`` continues, or the new branch it starts."""
        longest: tuple[int, str] | None = None
        for number in itertools.count(1):
            session_id = branch_id(base, number)
            if not self._stored(session_id):
                return self._new_branch(session_id, sent, longest)
            known = self.known(session_id)
            equal, agreed = _prefix(known, sent)
            if agreed == len(known):
                # Equal objects, so the next request (whose repeated messages are these
                # very objects, see hango.gateway.body) compares by identity, not deeply:
                # else a branch read from the store, or placed after a body parsed whole,
                # would compare its whole history value by value on every request.
                known[:equal] = sent[:equal]
                self._latest.get(base, list)[:] = [session_id]
                return Placement(session_id, sent[agreed:], held=agreed, stored=True)
            if longest is None or agreed > longest[0]:
                longest = (agreed, session_id)
        raise AssertionError("unreachable")

    def latest(self, base: str) -> str | None:
        """The stored branch the session's latest request here continued (no query)."""
        return next(iter(self._latest.get(base, list)), None)

    def _new_branch(
        self, session_id: str, sent: list[JsonObject], longest: tuple[int, str] | None
    ) -> Placement:
        if longest is None:
            return Placement(session_id, sent)
        at, parent = longest
        log.info(
            "session %s diverged from %s at message %d (an edit, a rewind or the client's "
            "own compaction): continuing as branch %s",
            parent,
            parent,
            at,
            session_id,
        )
        return Placement(session_id, sent, diverged_from=parent, diverged_at=at)

    def _stored(self, session_id: str) -> bool:
        known = self._known.get(session_id, _Known)
        if not known.stored:
            known.stored = self.store.session(session_id) is not None
        return known.stored

    def still_holds(self, placement: Placement) -> bool:
        """Whether the branch holds what it held when ``placement`` was made (nobody else
        appended since): one query for what is newer, no comparison."""
        return len(self.known(placement.session_id)) == placement.held

    def known(self, session_id: str) -> list[JsonObject]:
        """The branch's messages as JSON, brought up to date with the store."""
        known = self._known.get(session_id, _Known).messages
        stored = self.store.messages(session_id, from_seq=len(known) + 1)
        known.extend(item.message.to_api() for item in stored)
        return known

    def appended(self, session_id: str, batch: list[JsonObject]) -> None:
        self._known.get(session_id, _Known).messages.extend(batch)
