"""The extractive summarizer: a deterministic, bounded briefing without a model."""

from __future__ import annotations

from collections.abc import Sequence

from hango.compaction.extractive import (
    MAX_ERRORS,
    MAX_RESULTS,
    MAX_USER_REQUESTS,
    PREVIOUS_SUMMARY_CHARS,
    RESULT_CHARS,
    USER_REQUEST_CHARS,
    ExtractiveSummarizer,
)
from hango.compaction.jobs import SummaryJob
from hango.core.messages import Message, StoredMessage
from tests.histories import HistoryBuilder, assistant, call, calls, payload, result, results, user


def stored(messages: Sequence[Message]) -> tuple[StoredMessage, ...]:
    return tuple(StoredMessage(seq=n + 1, turn=1, message=m) for n, m in enumerate(messages))


def summarize(messages: Sequence[Message], previous: str | None = None) -> str:
    evicted = stored(messages)
    job = SummaryJob(
        session_id="s",
        turn=3,
        from_seq=evicted[0].seq,
        to_seq=evicted[-1].seq,
        previous_summary=previous,
        evicted=evicted,
        model="unused",
    )
    outcome = ExtractiveSummarizer().summarize(job)
    assert outcome.summarizer == "extractive"
    assert outcome.usage is None and outcome.fallback_reason is None
    return outcome.text


def session() -> list[Message]:
    return [
        user("Migrate the users table.\nKeep the column names."),
        calls(
            call("toolu_1", "read_file", path="/db/schema.sql"),
            text="I will read the schema first. Then I will write the migration. Extra words.",
        ),
        results(result("toolu_1", "CREATE TABLE users (id int);")),
        calls(call("toolu_2", "bash", command="alembic upgrade head")),
        results(result("toolu_2", "ERROR: relation users_v2 does not exist", is_error=True)),
        assistant("The upgrade failed because users_v2 is missing."),
    ]


def test_briefing_keeps_requests_statements_files_errors_and_results() -> None:
    text = summarize(session())
    assert "- [seq 1] Migrate the users table.\n  Keep the column names." in text
    assert "I will read the schema first. Then I will write the migration." in text
    assert "Extra words." not in text  # statements keep their first two sentences
    assert "- /db/schema.sql" in text
    assert "- bash \u00d71" in text and "- read_file \u00d71" in text
    errors = text.split("## Errors\n")[1].split("\n\n")[0]
    assert errors == "- [seq 5] bash (toolu_2) error: ERROR: relation users_v2 does not exist"
    assert "read_file (toolu_1): CREATE TABLE users (id int);" in text
    assert "The upgrade failed because users_v2 is missing." in text


def test_briefing_folds_the_previous_summary_and_is_deterministic() -> None:
    text = summarize(session(), previous="Earlier: created /db/base.sql.")
    assert "## Earlier summary\nEarlier: created /db/base.sql." in text
    assert text == summarize(session(), previous="Earlier: created /db/base.sql.")
    assert "## Earlier summary" not in summarize(session())


def test_every_part_is_bounded() -> None:
    builder = HistoryBuilder()
    for n in range(MAX_USER_REQUESTS + 10):
        builder.user(f"request {n} " + payload(USER_REQUEST_CHARS * 2, str(n)))
        builder.batch(1, name="bash", result_chars=RESULT_CHARS * 3, errors=[0])
        builder.say(f"statement {n}.")
    previous = "P" * (PREVIOUS_SUMMARY_CHARS * 3)
    text = summarize(builder.build(), previous=previous)

    requests = text.split("## User requests\n")[1].split("\n## ")[0]
    assert requests.count("- [seq ") == MAX_USER_REQUESTS
    assert "request 0 " in requests and f"request {MAX_USER_REQUESTS + 9} " in requests
    assert "more requests" in requests
    assert "P" * PREVIOUS_SUMMARY_CHARS in text and "P" * (PREVIOUS_SUMMARY_CHARS + 1) not in text
    errors = text.split("## Errors\n")[1].split("\n\n")[0]
    assert errors.count("\n") + 1 == MAX_ERRORS
    latest = text.split("## Latest tool results\n")[1]
    assert latest.count("\n") + 1 == MAX_RESULTS
    assert all(len(line) < RESULT_CHARS + 120 for line in latest.splitlines())
    # Generous upper bound: far less than the 30 x 6,000+ characters that went in.
    assert len(text) < 80_000


def test_text_only_range_leaves_tool_sections_out() -> None:
    text = summarize([user("Hi there."), assistant("Hello. How can I help?")])
    assert "## User requests" in text and "## Assistant statements" in text
    for absent in (
        "## Files and artifacts",
        "## Tool calls",
        "## Errors",
        "## Latest tool results",
    ):
        assert absent not in text
