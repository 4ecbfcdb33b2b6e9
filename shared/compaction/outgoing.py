"""One session's outgoing copy: what is sent for each stored message, and what is known of it.

The copy is ``[head]`` and the stored messages from ``start``, same-role neighbours joined
and each repaired by the rules of ``repair.py`` (the one-pass definition the tests hold it
equal to is ``tests/outgoing_reference.py``), with the messages below the truncation cut
sent in their truncated forms (``tool_args.py``).
Per position it holds the stored message behind it, the form that is sent, its API JSON,
its token estimate (with running sums) and the facts validation needs. It knows what
changed because it made every change, and only three things change it:

* **growth** (:meth:`OutgoingCopy.update`): messages appended to the store extend the copy
  at its tail (the last message is redone when a new one of the same role joins it);
* **a truncation step** (:meth:`OutgoingCopy.truncate_below`): the cut moves over a range;
* **a restart** (a new compaction record, another start or head, a store that no longer
  begins with what was seen): everything is redone from the stored messages.

What the copy hands out is a :class:`~hango.core.sent.SentMessages` made at its current
version, a view that never changes (copy on write: see there). Validation runs the rule
functions of ``validate.py`` at the changed positions and their neighbours (everything
after a restart or after any check that failed), never a second copy of the rules.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

from hango.compaction.repair import UsedIds, joined, repair_message
from hango.compaction.tool_args import Truncation
from hango.compaction.validate import (
    MAX_BREAKPOINTS,
    Violation,
    fixed_facts,
    marked_breakpoints,
    message_breakpoints,
    position_violations,
    validate_request,
)
from hango.core.collection import Prefix
from hango.core.messages import MarkedMessages, Message, Request, StoredMessage, message_json
from hango.core.sent import Mark, SentMessages, live_view
from hango.tokens.base import Estimator

# How many of its latest versions a copy can say what changed since (a meter asks about
# the previous call's, a few versions back).
VERSIONS_REMEMBERED = 64


class Sums:
    """Integers by position with sums of any prefix, kept as running totals.

    A copy changes at its tail (growth) or over a range once in a while (a truncation
    step), so the totals are redone from the first changed position, lazily.
    """

    def __init__(self) -> None:
        self.values: list[int] = []
        self._prefix = [0]  # _prefix[k] == sum(values[:k]), for k up to len(_prefix) - 1

    def put(self, index: int, value: int) -> None:
        if index == len(self.values):
            self.values.append(value)
        else:
            self.values[index] = value
        del self._prefix[index + 1 :]

    def cut(self, length: int) -> None:
        del self.values[length:]
        del self._prefix[length + 1 :]

    def upto(self, end: int) -> int:
        """``sum(values[:end])``."""
        end = min(end, len(self.values))
        known = len(self._prefix) - 1
        if end > known:
            sums = itertools.accumulate(self.values[known:end], initial=self._prefix[-1])
            self._prefix.extend(itertools.islice(sums, 1, None))
        return self._prefix[end]

    def between(self, start: int, end: int) -> int:
        return self.upto(end) - self.upto(start) if end > start else 0


class _Checks:
    """The two request-wide facts (unique tool ids, breakpoints), kept as running counts."""

    def __init__(self) -> None:
        # Per position, its tool_use ids and its breakpoints, in two lists: no object per
        # position beyond the ids' tuple (the empty one for most messages).
        self.use_ids: list[tuple[str, ...]] = []
        self.marks: list[int] = []
        self.breakpoints = 0
        self.use_counts: Counter[str] = Counter()
        self.duplicated: set[str] = set()

    def put(self, index: int, message: Message) -> None:
        use_ids = tuple(use.id for use in message.tool_uses())
        marks = message_breakpoints(message)
        if index < len(self.use_ids):
            self._forget(self.use_ids[index], self.marks[index])
            self.use_ids[index], self.marks[index] = use_ids, marks
        else:
            self.use_ids.append(use_ids)
            self.marks.append(marks)
        self.breakpoints += marks
        for use_id in use_ids:
            self.use_counts[use_id] += 1
            if self.use_counts[use_id] > 1:
                self.duplicated.add(use_id)

    def _forget(self, use_ids: tuple[str, ...], marks: int) -> None:
        self.breakpoints -= marks
        for use_id in use_ids:
            self.use_counts[use_id] -= 1
            if self.use_counts[use_id] <= 1:
                self.duplicated.discard(use_id)


class OutgoingCopy:
    """The outgoing copy of one session (see the module's docstring).

    ``estimator`` is the one whose figures the copy keeps per position (the agent's);
    asked with another, it answers ``None`` and the caller estimates the messages itself.
    """

    _cut: int
    _truncate: Truncation | None
    _marks: dict[int, tuple[Message, bytes]]  # the forms the last ``marked`` made, with JSON

    def __init__(self, estimator: Estimator | None = None) -> None:
        self.estimator = estimator
        self.version = 0
        self._lock = threading.Lock()
        self._source: Sequence[StoredMessage] | None = None
        # Per recent version, the lowest position changed on the way to the next one.
        self._lowest_changed: dict[int, int] = {}
        self._restart(0, None)

    # -- what changes the copy ------------------------------------------------------------

    def update(
        self, stored: Sequence[StoredMessage], head: Message | None = None, start: int = 0
    ) -> tuple[SentMessages, Prefix[int | None]]:
        """The copy of ``[head] + stored[start:]`` and each position's sequence number (the
        head: ``None``), grown from what it was or restarted."""
        with self._lock:
            if not self._extends(stored, head, start):
                self._restart(start, head)
            self._source = stored
            seen = len(self._seen)
            if start + seen < len(stored):
                redo_from = self._grow(stored[start + seen :])
                self._forget_forms(redo_from)
                for index in range(redo_from, len(self._repaired)):
                    self._put(index, self._form_at(index))
                self.version += 1
            return self._current(), Prefix(self._seqs, len(self._sent))

    def truncate_below(self, cut: int, truncate: Truncation) -> SentMessages:
        """The copy with every message below ``cut`` sent in its truncated form."""
        with self._lock:
            self._use(truncate)
            cut = min(cut, len(self._sent))
            if cut != self._cut:
                low, high = sorted((cut, self._cut))
                self._cut = cut
                self._reach(high)
                # A move of the cut over [low, high) changes the form only at the positions
                # there that truncation shortens.
                shortened = self._shortened
                first = bisect.bisect_left(shortened, low)
                self._refresh(shortened[first : bisect.bisect_left(shortened, high, lo=first)])
            return self._current()

    def truncation_gain(self, start: int, end: int, truncate: Truncation) -> tuple[int, int]:
        """Blocks truncation shortens in ``[start, end)`` and the tokens it saves there."""
        with self._lock:
            self._use(truncate)
            self._reach(end)
            return self._cut_blocks.between(start, end), self._cut_saved.between(start, end)

    @property
    def stored(self) -> Prefix[StoredMessage]:
        """The stored messages behind the copy (from the start it was given)."""
        return Prefix(self._seen)

    def changed_since(self, old: int, new: int) -> int | None:
        with self._lock:
            known = self._lowest_changed
            if old == new:
                return len(self._sent)
            if not old < new <= self.version or old not in known:
                return None  # a version too old to be remembered, or not yet made
            return min(known.get(version, len(self._sent)) for version in range(old, new))

    # -- what the copy answers for its views ---------------------------------------------

    @property
    def breakpoints(self) -> int:
        return self._checks.breakpoints

    def json_parts(self, version: int, marks: Mapping[int, Message]) -> list[bytes] | None:
        with self._lock:
            if version != self.version:
                return None
            parts = list(self._json)
            for index, marked in marks.items():
                made = self._marks.get(index)
                parts[index] = made[1] if made and made[0] is marked else message_json(marked)
            return parts

    def marked(
        self, blocks: Mapping[int, Collection[int]], mark: Mark, version: int
    ) -> dict[int, Message] | None:
        with self._lock:
            if version != self.version:
                return None
            self._marks = {i: mark(self._sent[i], at, self._json[i]) for i, at in blocks.items()}
            return {index: form for index, (form, _) in self._marks.items()}

    def token_sums(self, estimator: object, split: int, version: int) -> tuple[int, int] | None:
        with self._lock:
            if estimator is not self.estimator or version != self.version:
                return None
            return self._tokens.upto(len(self._sent)), self._tokens.upto(split)

    def made(self, messages: Sequence[Message]) -> bool:
        """Whether ``messages`` is the copy as it is now (marked for the cache or not)."""
        view = live_view(messages)
        return view is not None and view.source is self

    def violations(self, request: Request) -> list[Violation]:
        """:func:`validate_request`'s answer, checking only what changed since the last
        check when ``request`` holds this copy's messages."""
        if not self.made(request.messages):
            return validate_request(request)
        with self._lock:
            fine = self._fine(request.marks)
            breakpoints = self._checks.breakpoints + marked_breakpoints(request)
        fixed = fixed_facts(request)
        if fine and not fixed.empty_system and fixed.breakpoints + breakpoints <= MAX_BREAKPOINTS:
            return []
        return validate_request(request)

    # -- inside ---------------------------------------------------------------------------

    def _restart(self, start: int, head: Message | None) -> None:
        self._changed(0)
        self._start, self._head = start, head
        self._seen: list[StoredMessage] = []
        self._joined: list[Message] = []
        # Only ever appended to (a joined message keeps its first part's number).
        self._seqs: list[int | None] = [] if head is None else [None]
        self._repaired: list[Message] = [] if head is None else [head]
        # Per position, the stored message when it is the repaired form (see ``_known``).
        self._stored: list[StoredMessage | None] = [None] * len(self._repaired)
        self._ids = UsedIds()
        self._cut = 0
        self._truncate = None
        self._forms: list[Message] = []
        # The positions whose truncated form is another message, ascending: the only ones a
        # move of the cut changes (most messages have nothing to truncate).
        self._shortened: list[int] = []
        self._cut_blocks, self._cut_saved = Sums(), Sums()
        # Changed in place only past ``_lent``, the positions no view handed out holds.
        self._sent: list[Message] = []
        self._lent = 0
        self._json: list[bytes] = []
        self._tokens = Sums()
        self._checks = _Checks()
        self._unchecked: set[int] = set()
        self._marks = {}
        self._checked = False  # whether every position was found valid since the restart
        self._view: SentMessages | None = None
        if head is not None:
            self._put(0, head)
        self.version += 1

    def _extends(self, stored: Sequence[StoredMessage], head: Message | None, start: int) -> bool:
        """Whether ``stored[start:]`` begins with exactly the messages seen so far."""
        # A new turn reads its record back from the store, so its head message is a new
        # object equal to the one the copy holds: the copy goes on with the one it has.
        if start != self._start or (head is not self._head and head != self._head):
            return False
        seen = len(self._seen)
        if len(stored) < start + seen:
            return False
        if not seen:
            return True
        if stored is self._source:
            # The same list, only ever appended to: its seen part is what it was.
            return stored[start + seen - 1] is self._seen[-1]
        return tuple(stored[start : start + seen]) == tuple(self._seen)

    def _grow(self, new: Sequence[StoredMessage]) -> int:
        """Repair ``new`` onto the copy; the first position that was redone."""
        redo_from = len(self._repaired)
        for item in new:
            self._seen.append(item)
            if self._joined and self._joined[-1].role == item.message.role:
                # The last joined message grows: redo it.
                self._joined[-1] = joined(self._joined[-1], item.message)
                self._ids.drop_last()
                self._repaired[-1], self._stored[-1] = self._repair_last(), None
                redo_from = min(redo_from, len(self._repaired) - 1)
                continue
            self._joined.append(item.message)
            self._seqs.append(item.seq)
            repaired = self._repair_last()
            self._repaired.append(repaired)
            self._stored.append(item if repaired is item.message else None)
        return redo_from

    def _repair_last(self) -> Message:
        previous = self._joined[-2] if len(self._joined) > 1 else None
        return self._ids.unique(repair_message(self._joined[-1], previous))

    def _put(self, index: int, message: Message, *, form: bool = False) -> None:
        """``message`` is sent at ``index`` (a position that exists, or the next one); a
        ``form`` of the message there keeps its role and ids: its neighbours' rules hold."""
        self._changed(index)
        known = self._known(index, message)
        part = getattr(known, "json_part", None) or message_json(message)
        if index == len(self._sent):
            self._sent.append(message)
            self._json.append(part)
        else:
            if index < self._lent:  # a view holds the position: it keeps the list it has
                self._sent, self._lent = list(self._sent), 0
            self._sent[index], self._json[index] = message, part
        if self.estimator is not None:
            self._tokens.put(index, _tokens(known, message, self.estimator))
        self._checks.put(index, message)
        if self._checked:  # else the next check looks at every position anyway
            self._unchecked.update((index,) if form else (index - 1, index, index + 1))

    def _known(self, index: int, message: Message) -> StoredMessage | None:
        """The stored message when it is ``message``, sent at ``index`` unchanged: what the
        store holds with it (JSON, estimate) is ``message``'s, and a restarted session
        serializes and counts nothing."""
        stored = self._stored[index]
        return stored if stored is not None and stored.message is message else None

    def _changed(self, index: int) -> None:
        """Note a change at ``index`` on the way from the current version to the next."""
        known = self._lowest_changed
        known[self.version] = min(known.get(self.version, index), index)
        if len(known) > VERSIONS_REMEMBERED:
            del known[next(iter(known))]

    def _use(self, truncate: Truncation) -> None:
        """Truncate with ``truncate`` from now on (another one: every form is redone)."""
        if truncate is not self._truncate:
            self._truncate = truncate
            self._forget_forms(0)
            self._refresh(range(min(self._cut, len(self._sent))))

    def _form_at(self, index: int) -> Message:
        if index >= self._cut:
            return self._repaired[index]
        self._reach(index + 1)
        return self._forms[index]

    def _refresh(self, indexes: Iterable[int]) -> None:
        changed = False
        for index in indexes:
            form = self._form_at(index)
            if form is not self._sent[index]:  # most messages have nothing to truncate
                self._put(index, form, form=True)
                changed = True
        if changed:  # else the views handed out still hold: nobody redoes anything
            self.version += 1

    def _reach(self, end: int) -> None:
        """Work out the truncated forms of the positions below ``end``."""
        truncate = self._truncate
        if truncate is None:
            raise RuntimeError("no truncation was given to the outgoing copy")
        for index in range(len(self._forms), min(end, len(self._repaired))):
            repaired = self._repaired[index]
            tokens = _tokens(self._known(index, repaired), repaired, truncate.estimator)
            form, blocks, saved = truncate(repaired, tokens)
            self._forms.append(form)
            if form is not self._repaired[index]:
                self._shortened.append(index)
            self._cut_blocks.put(index, blocks)
            self._cut_saved.put(index, saved)

    def _forget_forms(self, start: int) -> None:
        del self._forms[start:]
        del self._shortened[bisect.bisect_left(self._shortened, start) :]
        self._cut_blocks.cut(start)
        self._cut_saved.cut(start)

    def _current(self) -> SentMessages:
        view = self._view
        if view is None or view.version != self.version:
            self._lent = len(self._sent)
            view = self._view = SentMessages(self._sent, self._lent, self, self.version)
        return view

    def _fine(self, marks: Mapping[int, Message]) -> bool:
        """Whether the copy's messages read through ``marks`` pass every rule, checking what
        changed since the last check that passed and around the marks (a mark only adds
        ``cache_control``, which no rule here reads: a message passes where its mark does)."""
        sent, checks = self._sent, self._checks
        if not sent or sent[0].role != "user" or checks.duplicated:
            self._checked = False
            return False
        marked = (n for i in marks for n in (i - 1, i, i + 1))
        positions = self._unchecked.union(marked) if self._checked else range(len(sent))
        # Unique ids are the running count's; the other rules are looked at per position.
        fine = _passes_at(MarkedMessages(sent, marks) if marks else sent, positions)
        self._checked = fine
        self._unchecked.clear()
        return fine


def _tokens(known: StoredMessage | None, message: Message, estimator: Estimator) -> int:
    """``message``'s estimate: the one stored with it when ``estimator`` made that one."""
    figure = known.estimate if known else None
    if figure and figure[0] == getattr(estimator, "signature", None):
        return figure[1]
    return estimator.estimate_message(message)


def _passes_at(messages: Sequence[Message], positions: Iterable[int]) -> bool:
    """Whether the rules of every position in ``positions`` that exists hold."""
    last = len(messages) - 1
    return not any(position_violations(messages, i, None) for i in positions if 0 <= i <= last)
