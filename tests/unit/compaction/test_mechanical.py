"""Mechanical truncation: the fewest oldest groups dropped, never a split batch."""

from __future__ import annotations

import pickle

import pytest

from hango.compaction.groups import group_starts
from hango.compaction.mechanical import drop_oldest_groups
from hango.compaction.validate import validate_messages
from hango.core.errors import CannotFitError
from hango.core.messages import Message
from tests.histories import CharEstimator, HistoryBuilder, head_message

ESTIMATOR = CharEstimator()
HEAD = head_message("[Earlier turns were dropped to fit the context window.]")


def measure(messages: tuple[Message, ...]) -> int:
    return ESTIMATOR.estimate_messages(messages)


def history() -> tuple[Message, ...]:
    builder = HistoryBuilder().user("Port the service to the new API.")
    for width in (1, 3, 2, 1, 3, 1):
        builder.batch(width, arg_chars=400, result_chars=1_200)
    builder.say("Ported.").user("Run the linters too.")
    return builder.build()


def test_drops_the_fewest_oldest_groups_that_make_it_fit() -> None:
    messages = history()
    starts = group_starts(messages)
    target = starts[3]
    limit = measure((HEAD, *messages[target:]))

    boundary = drop_oldest_groups(messages, head=HEAD, measure=measure, limit=limit)

    assert boundary == target
    assert measure((HEAD, *messages[starts[2] :])) > limit  # one group fewer would not fit
    assert validate_messages((HEAD, *messages[boundary:])) == []


def test_every_limit_gives_a_valid_fitting_and_minimal_cut() -> None:
    messages = history()
    starts = group_starts(messages)
    smallest = measure((HEAD, *messages[starts[-1] :]))
    for limit in range(smallest, measure((HEAD, *messages)) + 50, 97):
        boundary = drop_oldest_groups(messages, head=HEAD, measure=measure, limit=limit)
        kept = (HEAD, *messages[boundary:])
        assert measure(kept) <= limit
        assert validate_messages(kept) == []
        earlier = [s for s in starts if s < boundary]
        assert not earlier or measure((HEAD, *messages[earlier[-1] :])) > limit


def test_cannot_fit_when_even_the_last_group_is_too_big() -> None:
    messages = history()
    last = group_starts(messages)[-1]
    smallest = measure((HEAD, *messages[last:]))

    with pytest.raises(CannotFitError) as caught:
        drop_oldest_groups(messages, head=HEAD, measure=measure, limit=smallest - 1)

    assert caught.value.tokens == smallest
    assert caught.value.limit == smallest - 1
    assert f"measures {smallest} tokens, over the limit of {smallest - 1}" in str(caught.value)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.tokens, copy.limit) == (smallest, smallest - 1)


def test_min_keep_from_only_allows_boundaries_at_or_after_it() -> None:
    messages = history()
    starts = group_starts(messages)
    roomy = measure((HEAD, *messages))
    assert drop_oldest_groups(messages, head=HEAD, measure=measure, limit=roomy) == starts[0]
    boundary = drop_oldest_groups(
        messages, head=HEAD, measure=measure, limit=roomy, min_keep_from=starts[2] - 1
    )
    assert boundary == starts[2]


def test_no_group_start_to_cut_at_is_a_cannot_fit() -> None:
    only_task = (HistoryBuilder().user("hello").build()[0],)
    with pytest.raises(CannotFitError, match="no assistant message at or after index 0"):
        drop_oldest_groups(only_task, head=HEAD, measure=measure, limit=10_000)
    messages = history()
    with pytest.raises(CannotFitError):
        drop_oldest_groups(
            messages, head=HEAD, measure=measure, limit=10_000, min_keep_from=len(messages)
        )


def test_search_measures_logarithmically_many_candidates() -> None:
    builder = HistoryBuilder().user("long session")
    for _ in range(200):
        builder.batch(1, result_chars=100)
    messages = builder.build()
    calls: list[int] = []

    def counting(candidate: tuple[Message, ...]) -> int:
        calls.append(len(candidate))
        return measure(candidate)

    limit = measure((HEAD, *messages[301:]))
    assert drop_oldest_groups(messages, head=HEAD, measure=counting, limit=limit) == 301
    assert len(calls) <= 10


def test_negative_min_keep_from_is_rejected() -> None:
    with pytest.raises(ValueError, match="min_keep_from"):
        drop_oldest_groups(history(), head=HEAD, measure=measure, limit=1, min_keep_from=-1)
