"""The middleware contract: how one model call flows through the chain.

A model call happens in two phases.

1. **Assembly.** Each middleware, in chain order, may contribute system blocks and tool
   definitions (``contribute``). Because every contribution is in place before any
   middleware sees the call, the summarization middleware counts the whole request,
   including blocks contributed after it (memory), and the prompt-cache middleware
   records the index of the last stable block at its own position in the chain.
2. **Call.** Each middleware's ``wrap`` receives the call and the rest of the chain
   (``call_next``) and returns the model's response. It never edits the call: it passes a
   new one (``call.evolve(...)``) with a new request.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hango.compaction.outgoing import OutgoingCopy
from hango.compaction.record import (
    CompactionReason,
    CompactionRecord,
    PendingSummary,
    RunState,
)
from hango.core.collection import Prefix
from hango.core.messages import (
    Message,
    Request,
    Response,
    StoredMessage,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
)


@dataclass(frozen=True)
class Assembly:
    """The fixed part of a request, built along the chain."""

    system: tuple[TextBlock, ...] = ()
    tools: tuple[ToolDefinition, ...] = ()
    stable_system_index: int | None = None

    def add(
        self,
        system: tuple[TextBlock, ...] = (),
        tools: tuple[ToolDefinition, ...] = (),
    ) -> Assembly:
        return dataclasses.replace(self, system=self.system + system, tools=self.tools + tools)


class StateHolder:
    """The run's private state, shared by the middleware of one turn and saved by the loop."""

    def __init__(self, state: RunState | None = None) -> None:
        self.state = state or RunState()
        self.input_tokens = 0
        # The state as the store has it: what it was read from or created with.
        self._stored = self.state
        # Corrections learned since the state last took them in. They move on every call,
        # so they join the state when it is saved, not with a new state per call.
        self._corrections: dict[str, float] = {}

    def needs_saving(self) -> bool:
        """Whether a resumed turn would miss something the store does not have yet: anything
        but the learned token corrections, worth little after a crash (their anchors live in
        memory) and written with the next save, at the latest when the turn ends."""
        if self.state is self._stored:
            return False
        state, stored = self.state, self._stored
        if state.model_extra != stored.model_extra:
            return True
        # Field by field: unchanged fields hold the very same objects, compared at once.
        before = stored.__dict__
        return any(
            value is not before[name] and value != before[name]
            for name, value in state.__dict__.items()
            if name != "token_corrections"
        )

    def settled(self) -> RunState:
        """The state with every learned correction in it: what the store is given."""
        if self._corrections:
            corrections = {**self.state.token_corrections, **self._corrections}
            self.state = self.state.model_copy(update={"token_corrections": corrections})
        self._corrections = {}
        return self.state

    def saved(self) -> None:
        """The store now has the current state."""
        self._stored = self.state

    def record(self, record: CompactionRecord) -> None:
        self.state = self.state.with_compaction(record)

    def truncate_before(self, seq: int) -> None:
        """Tool arguments of every message before ``seq`` are sent truncated from now on."""
        seq = max(seq, self.state.truncated_before_seq)
        self.state = self.state.model_copy(update={"truncated_before_seq": seq})

    def correction(self, model: str) -> float | None:
        """The learned real-per-estimated-token figure of ``model``, if any."""
        learned = self._corrections.get(model)
        return learned if learned is not None else self.state.token_corrections.get(model)

    def calibrate(self, model: str, correction: float) -> None:
        """Keep the learned real-per-estimated-token figure of ``model`` (saved with the state)."""
        self._corrections[model] = correction

    def presummarize(self, pending: PendingSummary | None) -> None:
        """Note the pre-summary dispatched at the watermark (``None``: used or dropped)."""
        self.state = self.state.model_copy(update={"presummary": pending})

    def force(self, reason: CompactionReason | None) -> None:
        self.state = self.state.model_copy(update={"force_compaction": reason})


@dataclass(frozen=True)
class Overflow:
    """The provider refused the previous attempt as too long: what the pipeline ``measured``
    for it, and the provider's own figures when its error stated them."""

    measured: int
    tokens: int | None = None
    maximum: int | None = None


@dataclass(frozen=True)
class ModelCall:
    """One model call on its way to the provider."""

    session_id: str
    turn: int
    request: Request
    # Beside ``request.messages``: each one's store sequence number (None: the summary).
    seqs: Sequence[int | None]
    state: StateHolder
    # The stored messages behind the outgoing ones, verbatim even where truncation cut them.
    stored: Sequence[StoredMessage] = ()
    force: CompactionReason | None = None
    # The fixed part the chain assembled (the prompt-cache middleware reads its stable index).
    assembly: Assembly | None = None
    # What the provider said of the previous attempt, when this call retries an overflow.
    overflow: Overflow | None = None
    # The first outgoing message whose bytes differ from the previous call's copy, when a
    # middleware changed early history (a truncation step): the cache is read up to it.
    changed_from: int | None = None
    # The session's outgoing copy the request's messages came from (None: a caller that
    # builds its calls itself); a step that changes the messages asks it when it made them.
    copy: OutgoingCopy | None = None

    def evolve(self, **changes: Any) -> ModelCall:
        # Every field is an init field: the instance's dict rebuilds it, for less than
        # dataclasses.replace costs (it looks the fields up again), on every call.
        return ModelCall(**{**self.__dict__, **changes})

    @property
    def run_state(self) -> RunState:
        """The run's private state as it is now (the holder's latest)."""
        return self.state.state

    @property
    def first_real(self) -> int:
        """The index of the first stored message: 1 after a summary (head) message, else 0."""
        return 1 if self.seqs and self.seqs[0] is None else 0

    def index_of_seq(self, seq: int) -> int:
        """The index of the first outgoing message at or after sequence number ``seq`` (a
        binary search: past the summary message, the sequence numbers are sorted)."""
        first = self.first_real
        seqs = self.seqs
        if isinstance(seqs, Prefix):  # the loop's view: searched at C speed
            return seqs.bisect_left(seq, first)
        return bisect.bisect_left(seqs, seq, lo=first, key=_seq_key)

    def index_of(self, seq: int) -> int | None:
        """The index of the outgoing message with sequence number ``seq``, if it is sent."""
        index = self.index_of_seq(seq)
        return index if index < len(self.seqs) and self.seqs[index] == seq else None


def _seq_key(seq: int | None) -> int:
    if seq is None:
        raise ValueError("only the first outgoing message may lack a sequence number")
    return seq


Handler = Callable[[ModelCall], Response]


class Middleware(Protocol):
    def contribute(self, assembly: Assembly) -> Assembly: ...

    def wrap(self, call: ModelCall, call_next: Handler) -> Response: ...


class ToolResultHook(Protocol):
    """Sees each tool result before it is stored and returns what is stored instead (the
    filesystem middleware puts a large one in a file and returns a preview naming it)."""

    def tool_result(self, tool_use_id: str, content: str, *, session_id: str) -> str: ...


@runtime_checkable
class BatchHook(Protocol):
    """Sees a parallel batch's results together before they are stored (the filesystem
    middleware offloads the largest of a batch too large to fit beside anything else)."""

    def fit_batch(
        self, results: tuple[ToolResultBlock, ...], *, session_id: str
    ) -> tuple[ToolResultBlock, ...]: ...


class CanCompact(Protocol):
    """Whether a compaction of these outgoing messages would evict anything at all."""

    def can_evict(self, messages: Sequence[Message], *, head_present: bool) -> bool: ...


class PassThrough:
    """Base for middleware that only needs one of the two hooks."""

    def contribute(self, assembly: Assembly) -> Assembly:
        return assembly

    def wrap(self, call: ModelCall, call_next: Handler) -> Response:
        return call_next(call)
