"""Atomic tool groups and the keep boundary, on adversarial hand-built histories."""

from __future__ import annotations

import pytest

from hango.compaction.boundary import keep_boundary
from hango.compaction.groups import group_starts
from hango.compaction.validate import validate_messages
from hango.core.messages import Message
from tests.histories import (
    HistoryBuilder,
    assistant,
    boundaries_from,
    call,
    calls,
    head_message,
    is_group_start,
    result,
    results,
    tool_groups,
    user,
)

HEAD = head_message()


def ten_percent_inside_parallel_batch() -> tuple[Message, ...]:
    """31 messages where keeping the last 10% (3) cuts inside a batch of 3 parallel calls.

    0 task, 1..26 thirteen single-call groups, 27 AI(3 calls), 28 user(3 results),
    29 AI text, 30 user follow-up.
    """
    builder = HistoryBuilder().user("Refactor the parser.")
    for _ in range(13):
        builder.batch(1)
    builder.batch(3, text="Reading three files at once.")
    builder.say("All three read.").user("Now run the tests.")
    return builder.build()


def test_raw_ten_percent_boundary_lands_between_tool_use_and_its_result() -> None:
    messages = ten_percent_inside_parallel_batch()
    keep = round(len(messages) * 0.10)
    raw = len(messages) - keep
    assert raw == 28
    assert len(list(messages[raw].tool_results())) == 3  # the raw cut orphans three results
    naive = validate_messages((HEAD, *messages[raw:]))
    assert [v.kind for v in naive] == ["alternation"] + ["orphan_tool_result"] * 3

    boundary = keep_boundary(messages, keep)

    assert boundary == 27  # moved back to the assistant holding the batch
    assert validate_messages((HEAD, *messages[boundary:])) == []


def test_boundary_on_an_assistant_message_is_kept_as_is() -> None:
    messages = ten_percent_inside_parallel_batch()
    assert keep_boundary(messages, len(messages) - 27) == 27
    assert keep_boundary(messages, len(messages) - 29) == 29


def test_keep_everything_or_more_means_nothing_can_be_evicted() -> None:
    messages = ten_percent_inside_parallel_batch()
    assert keep_boundary(messages, len(messages)) is None
    assert keep_boundary(messages, len(messages) + 5) is None
    assert keep_boundary(messages, len(messages) - 1) == 1


def test_keep_zero_still_keeps_the_last_group() -> None:
    messages = ten_percent_inside_parallel_batch()
    assert keep_boundary(messages, 0) == 29


def test_min_index_refuses_boundaries_before_it() -> None:
    messages = ten_percent_inside_parallel_batch()
    assert keep_boundary(messages, 26, min_index=5) == 5
    assert keep_boundary(messages, 26, min_index=6) is None  # raw 5 < 6: no start in range


def test_negative_keep_count_is_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="keep_count"):
        keep_boundary(ten_percent_inside_parallel_batch(), -1)
    with pytest.raises(ValueError, match="min_index"):
        keep_boundary(ten_percent_inside_parallel_batch(), 1, min_index=-1)


def test_candidate_boundaries_step_one_group_at_a_time() -> None:
    messages = ten_percent_inside_parallel_batch()
    assert boundaries_from(messages, 3)[:2] == [3, 5]
    assert boundaries_from(messages, 4)[0] == 5
    assert boundaries_from(messages, 26) == [27, 29]
    assert boundaries_from(messages, 30) == []


def test_groups_partition_the_history_and_start_on_assistants() -> None:
    messages = ten_percent_inside_parallel_batch()
    groups = tool_groups(messages)
    covered = [index for group in groups for index in group]
    assert covered == list(range(len(messages)))
    assert groups[0] == range(0, 1)
    assert all(messages[group.start].role == "assistant" for group in groups[1:])
    assert groups[-2] == range(27, 29)  # the parallel batch and its results, together
    assert [g.start for g in groups[1:]] == group_starts(messages)


def test_langchain_38352_shape_never_gets_a_boundary_between_the_calls() -> None:
    # AI(call a), AI(call b), results(a, b): impossible under strict alternation, but a
    # cut at the second AI would keep an orphan result for a.
    messages = (
        user("task"),
        calls(call("toolu_a")),
        calls(call("toolu_b")),
        results(result("toolu_a"), result("toolu_b")),
        assistant("done"),
        user("thanks"),
    )
    assert group_starts(messages) == [1, 4]
    assert not is_group_start(messages, 2)
    assert keep_boundary(messages, 4) == 1  # raw 2 moves back past the straddled call
    orphaned = validate_messages((HEAD, *messages[2:]))
    assert "orphan_tool_result" in {v.kind for v in orphaned}


def test_validator_catches_the_langchain_38352_shape_itself() -> None:
    messages = (
        user("task"),
        calls(call("toolu_a")),
        calls(call("toolu_b")),
        results(result("toolu_a"), result("toolu_b")),
    )
    kinds = [(v.kind, v.message_index) for v in validate_messages(messages)]
    assert kinds == [
        ("missing_tool_result", 1),
        ("alternation", 2),
        ("orphan_tool_result", 3),
    ]


def test_a_history_that_opens_with_an_assistant_can_keep_from_zero() -> None:
    kept = (assistant("hello"), user("hi"), assistant("how can I help"), user("fix it"))
    assert group_starts(kept) == [0, 2]
    assert keep_boundary(kept, 4, min_index=0) == 0
    assert tool_groups(kept) == [range(0, 2), range(2, 4)]


def test_empty_history_has_no_groups_and_no_boundary() -> None:
    assert tool_groups(()) == []
    assert keep_boundary((), 0) is None
    assert boundaries_from((), 0) == []
