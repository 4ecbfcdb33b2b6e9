"""Property: the truncation ledger's copy equals ``truncate_tool_args`` of the same input.

The ledger builds each truncated copy from the previous one, replacing only the positions
its lineage says may differ, so a missed position would send stale content rather than
merely redo a memo. Inputs are derived the ways the pipeline derives them (grown with the
last message redone, a few positions replaced by new or equal objects, cut, or a plain
tuple that breaks the lineage), with the cut moving both ways; every call's copy must be
the full recomputation's, element for element.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from hango.compaction.tool_args import TruncationLedger, truncate_tool_args
from hango.core.identity import derived, edited, replaced
from hango.core.messages import Message
from tests.histories import CharEstimator, call, calls, payload, result, results
from tests.properties import examples

MAX_TOKENS = 40


def message(code: int) -> Message:
    """A tool call or its result, large (truncated) or small, by ``code``."""
    size = 400 if code % 3 else 20
    tool_id = f"t{code}"
    if code % 2:
        return calls(call(tool_id, "write_file", content=payload(size, tool_id)))
    return results(result(tool_id, payload(size, tool_id)))


plans = st.lists(
    st.tuples(
        st.sampled_from(["grow", "grow", "replace", "equal", "cut", "plain"]),
        st.integers(0, 10_000),
        st.integers(0, 140),  # where truncation stops (moves both ways)
    ),
    min_size=1,
    max_size=25,
)


def next_input(latest: Sequence[Message], action: str, pick: int) -> Sequence[Message]:
    if action == "grow":
        keep = max(0, len(latest) - 1)
        tail = [message(pick + n) for n in range(pick % 4 + 1)]
        return edited(latest, {}, keep=keep, tail=tail)
    if action in ("replace", "equal") and latest:
        positions = {(pick + 7 * n) % len(latest) for n in range(pick % 3 + 1)}
        if action == "equal":  # new objects equal to the old ones
            return replaced(latest, {p: latest[p].model_copy() for p in positions})
        return replaced(latest, {p: message(pick + p) for p in positions})
    if action == "cut":
        return edited(latest, {}, keep=pick % (len(latest) + 1))
    return (*latest, message(pick))  # a plain tuple: no lineage


@settings(deadline=None, max_examples=examples(150))
@given(st.integers(0, 90), plans)
def test_each_truncated_copy_equals_the_full_recomputation(
    size: int, plan: list[tuple[str, int, int]]
) -> None:
    estimator = CharEstimator()
    ledger = TruncationLedger(max_tokens=MAX_TOKENS, estimator=estimator)
    messages: Sequence[Message] = derived([message(n) for n in range(size)], None)
    # The first copy is a fresh one; every later one is made from the copy before it.
    steps = [("as is", 0, size // 2), *plan]
    for action, pick, protect in steps:
        if action != "as is":
            messages = next_input(messages, action, pick)
        ledger.update(messages)
        made = ledger.truncated(protect)
        full = truncate_tool_args(
            tuple(messages), protect_from=protect, max_tokens=MAX_TOKENS, estimator=estimator
        )
        assert made.truncated == full.truncated
        assert tuple(made.messages) == tuple(full.messages)
