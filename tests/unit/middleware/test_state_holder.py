"""StateHolder.needs_saving: everything but the learned token correction must be saved."""

from __future__ import annotations

import pytest

from hango.compaction.record import RunState
from hango.middleware.base import StateHolder


def test_a_new_correction_alone_needs_no_save() -> None:
    holder = StateHolder(RunState())
    assert not holder.needs_saving()
    holder.calibrate("claude-x", 1.2)
    holder.calibrate("claude-x", 1.3)
    assert holder.correction("claude-x") == 1.3
    assert not holder.needs_saving()


def test_the_saved_state_carries_the_latest_corrections() -> None:
    holder = StateHolder(RunState(token_corrections={"old": 0.9, "claude-x": 1.0}))
    holder.calibrate("claude-x", 1.25)
    assert holder.correction("old") == 0.9
    assert holder.correction("unknown") is None
    settled = holder.settled()
    assert settled.token_corrections == {"old": 0.9, "claude-x": 1.25}
    assert holder.state is settled
    holder.truncate_before(12)  # a later change keeps them
    assert holder.settled().token_corrections == {"old": 0.9, "claude-x": 1.25}
    assert holder.state.truncated_before_seq == 12


@pytest.mark.parametrize(
    "change",
    [
        lambda h: h.truncate_before(40),
        lambda h: setattr(h, "state", h.state.model_copy(update={"force_compaction": "tool"})),
        lambda h: setattr(h, "state", h.state.model_copy(update={"compaction_count": 3})),
    ],
)
def test_any_other_change_needs_a_save_until_saved(change) -> None:  # type: ignore[no-untyped-def]
    holder = StateHolder(RunState())
    holder.calibrate("claude-x", 1.2)
    change(holder)
    assert holder.needs_saving()
    holder.calibrate("claude-x", 1.4)  # a correction on top does not hide it
    assert holder.needs_saving()
    holder.saved()
    assert not holder.needs_saving()


def test_an_equal_state_rebuilt_needs_no_save() -> None:
    holder = StateHolder(RunState(truncated_before_seq=7))
    holder.state = RunState(truncated_before_seq=7, token_corrections={"m": 1.1})
    assert not holder.needs_saving()
