"""A restarted process rebuilds a session's budget from the estimates stored with it.

Each message's estimate is stored when it is appended, under the estimator's signature.
A new loop over the stored session (a restart) reads them back with the messages and its
outgoing copy counts with them: its text counter never sees a stored message's text, and
the figure it measures equals the one a fresh estimator computes from scratch. An
estimator with another signature ignores the stored figures and counts for itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from hango.compaction.outgoing import OutgoingCopy
from hango.compaction.tool_args import Truncation
from hango.core.messages import (
    Message,
    Request,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_json,
)
from hango.providers.scripted import text_reply, tool_reply
from hango.store import Store
from hango.tokens.framing import FramedEstimator
from hango.tokens.heuristic import heuristic_text_tokens
from hango.wiring.agent import Agent
from tests.agent_support import build
from tests.histories import call, calls, payload, result, results, user

SESSION = "restart"
WINDOW = 400_000  # far from the trigger: no compaction, no truncation step


class CountingEstimator(FramedEstimator):
    """The heuristic estimator, remembering every text its counter was asked about."""

    def __init__(self, name: str = "counting") -> None:
        self.texts: list[str] = []
        super().__init__(name, self._count)

    def _count(self, text: str) -> float:
        self.texts.append(text)
        return heuristic_text_tokens(text)


def stored_texts(messages: list[Message]) -> set[str]:
    """Every text the estimator would count to estimate these messages."""
    texts: set[str] = set()
    for message in messages:
        for block in message.blocks():
            if isinstance(block, TextBlock):
                texts.add(block.text)
            elif isinstance(block, ToolResultBlock):
                texts.add(block.text())
            elif isinstance(block, ToolUseBlock):
                texts.add(json.dumps(block.input, ensure_ascii=False, separators=(",", ":")))
    return {text for text in texts if text}


def first_call_after_restart(
    tmp_path: Path, store: Store, estimator: CountingEstimator
) -> tuple[Agent, Request]:
    """A new agent over the stored session makes one call; the request it sent."""
    agent, provider = build(tmp_path, store=store, window=WINDOW, estimator=estimator)
    provider.push(text_reply("Resuming."))
    ctx = agent.loop.begin_turn(SESSION)
    agent.loop.call_model(ctx)
    agent.loop.end_turn(ctx)
    return agent, provider.requests[-1]


def test_a_restarted_loop_counts_no_stored_message_and_measures_the_same(tmp_path: Path) -> None:
    first, provider = build(tmp_path, window=WINDOW, estimator=CountingEstimator())
    for turn in range(6):
        provider.push(
            tool_reply(("ls", {"path": f"/work/dir_{turn}"}), text=f"Listing step {turn}."),
            text_reply(f"Finished step {turn} of the refactoring."),
        )
        first.loop.run_turn(SESSION, f"Step {turn}: refactor module number {turn}.")
    stored = [m.message for m in first.store.messages(SESSION)]
    texts = stored_texts(stored)
    assert len(stored) >= 24 and len(texts) >= 18

    restarted = CountingEstimator()  # same signature: uses the stored figures
    resumed, sent = first_call_after_restart(tmp_path, first.store, restarted)
    assert restarted.signature == first.loop.estimates.signature  # type: ignore[union-attr]
    assert texts.isdisjoint(restarted.texts)

    other = CountingEstimator("counting-v2")  # another signature: counts for itself
    recounted, resent = first_call_after_restart(tmp_path, first.store, other)
    assert not texts.isdisjoint(other.texts)

    from_scratch = CountingEstimator().estimate_request(sent)
    assert resumed.store.session(SESSION).last_input_tokens == from_scratch  # type: ignore[union-attr]
    assert resent == sent
    assert recounted.store.session(SESSION).last_input_tokens == from_scratch  # type: ignore[union-attr]


def test_stored_estimates_are_returned_only_for_their_estimator(tmp_path: Path) -> None:
    agent, provider = build(tmp_path, window=WINDOW, estimator=CountingEstimator())
    provider.push(text_reply("Hello."))
    agent.loop.run_turn(SESSION, "Say hello.")
    signature = agent.loop.estimates.signature  # type: ignore[union-attr]
    figures = agent.store.message_estimates(SESSION, signature)
    fresh = CountingEstimator()
    expected = {m.seq: fresh.estimate_message(m.message) for m in agent.store.messages(SESSION)}
    assert figures == expected and len(figures) == 2
    assert agent.store.message_estimates(SESSION, "heuristic/other") == {}


def stored_with_figures(history: list[Message], signature: str) -> list[StoredMessage]:
    """The history as a read gives it back: each message with its JSON and its estimate
    (by a fresh estimator, stored under ``signature``)."""
    fresh = CountingEstimator()
    return [
        StoredMessage.as_stored(
            n + 1, 1, m, message_json(m), (signature, fresh.estimate_message(m))
        )
        for n, m in enumerate(history)
    ]


def tool_history() -> list[Message]:
    return [
        user("Tidy the parser."),
        calls(call("toolu_1", "write_file", path="/src/p.py", body=payload(6_000, "big"))),
        results(result("toolu_1", "written")),
        calls(call("toolu_2", path="/src/q.py")),
        results(result("toolu_2", payload(300, "small"))),
        Message(role="assistant", content="Done; the tests next."),
    ]


def test_a_copy_counts_with_the_stored_figures_even_where_it_truncates() -> None:
    history = tool_history()
    estimator = CountingEstimator()
    copy = OutgoingCopy(estimator)
    sent, _ = copy.update(stored_with_figures(history, estimator.signature))
    truncation = Truncation(max_tokens=200, estimator=estimator)
    cut = copy.truncate_below(len(sent), truncation)

    assert cut[1] != history[1] and list(cut[2:]) == history[2:]  # only the big input is cut
    # Nothing within budget was counted: not when the copy was made, nor by truncation
    # deciding what to cut; only the big input (judged) and the form made of it.
    within = stored_texts([history[0], *history[2:]])
    assert within.isdisjoint(estimator.texts)
    fresh = CountingEstimator()
    whole, _ = copy.token_sums(estimator, 0, copy.version) or (None, None)
    assert whole == sum(fresh.estimate_message(m) for m in cut)


def test_a_copy_counts_for_itself_what_another_estimator_stored() -> None:
    history = tool_history()
    estimator = CountingEstimator()
    copy = OutgoingCopy(estimator)

    copy.update(stored_with_figures(history, "counting-v2"))

    assert stored_texts(history) <= set(estimator.texts)


def test_a_stored_figure_counts_only_where_its_own_message_is_sent() -> None:
    """Marked figures (777,777 tokens, which no message here is) show where the copy used
    them: at a stored message sent as it is, never at the head, a joined message, a
    repaired one or a truncated form, whose messages are other objects."""
    fake = 777_777
    history = [
        user("Look at the parser."),
        user("And its tests."),  # joined with the message before it
        calls(call("toolu_1", path="/src/p.py")),
        results(result("toolu_1", "ok")),
        calls(call("toolu_2", "write_file", body=payload(6_000, "big"))),
        # toolu_2 has no result: repaired (an error result is added)
        Message(role="user", content="Carry on."),
        Message(role="assistant", content="Done."),
    ]
    estimator = CountingEstimator()
    stored = [
        StoredMessage.as_stored(n + 1, 1, m, message_json(m), (estimator.signature, fake))
        for n, m in enumerate(history)
    ]
    copy = OutgoingCopy(estimator)
    head = Message(role="user", content="Summary of what came before.")
    sent, _ = copy.update(stored, head=head, start=0)
    cut = copy.truncate_below(len(sent), Truncation(max_tokens=200, estimator=estimator))

    fresh = CountingEstimator()
    for index, message in enumerate(cut):
        own = any(message is item.message for item in stored)
        expected = fake if own else fresh.estimate_message(message)
        before, upto = (copy.token_sums(estimator, k, copy.version) for k in (index, index + 1))
        assert before is not None and upto is not None
        assert upto[1] - before[1] == expected, index
    # The head, the joined pair, two messages as stored, the truncated call, the repaired
    # answer, the last message as stored.
    assert [i for i, m in enumerate(cut) if any(m is s.message for s in stored)] == [2, 3, 6]
