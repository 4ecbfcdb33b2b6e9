"""The history tool over the real PostgreSQL store: exact read-back, search, scope."""

from __future__ import annotations

import pytest

from hango.core.messages import Message
from hango.store import Store
from hango.tools.history import HistoryScope, HistoryTool, StoreTranscripts
from tests.histories import call, calls, result, results, user
from tests.history_reading import expected_payload, parse_rendering, read_all, search_hits

pytestmark = pytest.mark.integration

TRICKY = 'naïve café ✓ 🧪 "quoted" back\\slash\r\nCRLF\ttab </session_history_data> --- block 1'


def conversation() -> list[Message]:
    long_output = "\n".join(f"line {n}: ok {'x' * (n % 50)}" for n in range(600))
    nested = {"file_path": "C:\\src\\app.py", "edits": [{"old": TRICKY, "new": "ü"}], "n": 3}
    return [
        user(f"Please look at src/retry_12.py. {TRICKY}"),
        calls(call("t1", "Edit", **nested), text="Editing."),
        results(result("t1", "ERROR: E1102 retry_12 is not callable", is_error=True)),
        calls(call("t2", "Bash", command="pytest -q tests/test_retry.py > /tmp/out.log")),
        results(result("t2", long_output)),
    ]


def test_every_message_reads_back_exactly_from_postgres(pg_store: Store) -> None:
    pg_store.ensure_session("s", "m")
    originals = conversation()
    for message in originals:
        pg_store.append_message("s", 1, message)
    tool = HistoryTool(StoreTranscripts(pg_store), page_chars=997)

    def answer(arguments: dict[str, object]) -> str:
        outcome = tool.answer(arguments, HistoryScope("s"))
        assert not outcome.is_error, outcome.content
        return outcome.content

    text = read_all(answer, {"command": "read", "from_seq": 1, "to_seq": len(originals)})
    read = parse_rendering(text)
    assert [m.seq for m in read] == [1, 2, 3, 4, 5]
    for got, message in zip(read, originals, strict=True):
        assert [payload for _, payload in got.blocks] == [
            expected_payload(block) for block in message.blocks()
        ]
    [one] = parse_rendering(read_all(answer, {"command": "read", "tool_use_id": "t2"}))
    assert one.blocks == [("tool_result for t2", next(originals[4].tool_results()).text())]
    assert search_hits(answer({"command": "search", "query": "E1102"}))[0] == (3, 1)
    assert search_hits(answer({"command": "search", "query": "C:\\src\\app.py"}))[0] == (2, 2)


def test_another_session_on_the_same_database_is_not_visible(pg_store: Store) -> None:
    for session in ("a", "b"):
        pg_store.ensure_session(session, "m")
    pg_store.append_message("a", 1, user("secret of a: tok-7781"))
    pg_store.append_message("b", 1, user("b's own"))
    tool = HistoryTool(StoreTranscripts(pg_store))
    found = tool.answer({"command": "search", "query": "tok-7781"}, HistoryScope("b"))
    assert "No stored message" in found.content
    read = tool.answer({"command": "read", "from_seq": 1, "to_seq": 5}, HistoryScope("b"))
    assert "tok-7781" not in read.content and "b's own" in read.content
