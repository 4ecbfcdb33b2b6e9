"""The ``hango`` command, run in-process: simulate, replay, sessions, history, migrate, errors.

Every transcript here is written by the test itself; nothing reads the reference corpus.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hango.cli import main
from hango.cli.errors import (
    EXIT_CONFIG,
    EXIT_QUEUE,
    EXIT_SESSION,
    EXIT_TRANSCRIPT,
    EXIT_USAGE,
    error_line,
    failure_for,
)
from hango.cli.progress import RunStats
from hango.compaction.record import RunState
from hango.compaction.validate import validate_request
from hango.core.errors import (
    CannotFitError,
    ConfigError,
    ContextOverflowError,
    InvalidRequestError,
    InvalidSessionIdError,
    ProviderError,
    SessionBusyError,
    TranscriptError,
    TurnLeaseLostError,
)
from hango.core.messages import Message, Request, Response, TextBlock, Usage
from hango.core.price import Price
from hango.core.profiles import known_price
from hango.cost.meter import UsageTotals
from hango.history.local import LocalHistory
from hango.store import Store
from tests.unit.store.test_store_sqlite import HEAD_REVISION


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def hango(capsys: pytest.CaptureFixture[str], *argv: str) -> Ran:
    code = main(list(argv))
    captured = capsys.readouterr()
    return Ran(code, captured.out, captured.err)


@pytest.fixture(autouse=True)
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HANGO_REDIS_URL",
        "ANTHROPIC_API_KEY",
        "HANGO_ANTHROPIC_API_KEY",
        "HANGO_MODEL_PROFILES",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HANGO_ESTIMATOR", "heuristic")  # fast; the choice is not under test
    monkeypatch.setenv("HANGO_MODEL", "cli-test-model")


# --- simulate, then inspect what it stored -------------------------------------------------


@dataclass(frozen=True)
class Simulated:
    report: dict[str, Any]
    database_url: str
    history_root: Path
    progress: str


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    root = tmp_path_factory.mktemp("simulate")
    url, history = f"sqlite:///{root / 'hango.db'}", root / "history"
    with pytest.MonkeyPatch.context() as patch, _capture() as capture:
        patch.setenv("HANGO_ESTIMATOR", "heuristic")
        patch.setenv("HANGO_MODEL", "cli-test-model")
        patch.delenv("HANGO_REDIS_URL", raising=False)
        code = main(
            # 9,500: at 9,000 seed 3's ~8,800-token tool round of turn 5 sits on the window's
            # edge, where a few tokens of summary decide between a truncation and a failure.
            ["simulate", "--turns", "6", "--max-input-tokens", "9500", "--seed", "3", "--json",
             "--database-url", url, "--history-root", str(history)]
        )  # fmt: skip
        out, err = capture.read()
    assert code == 0, err
    yield Simulated(json.loads(out), url, history, err)


class _capture:
    """stdout/stderr capture usable from a module-scoped fixture (capsys is per test)."""

    def __enter__(self) -> _capture:
        self._saved = sys.stdout, sys.stderr
        self._out, self._err = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = self._out, self._err
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self._saved

    def read(self) -> tuple[str, str]:
        return self._out.getvalue(), self._err.getvalue()


SIMULATE_KEYS: dict[str, type | tuple[type, ...]] = {
    "session_id": str,
    "provider": str,
    "model": str,
    "seed": int,
    "turns": int,
    "max_input_tokens": int,
    "database_url": str,
    "queue": bool,
    "model_calls": int,
    "tool_calls": int,
    "summary_calls": int,
    "stored_messages": int,
    "compactions": list,
    "compactions_by_reason": dict,
    "summaries": dict,
    "summary_routes": dict,
    "trigger_wait_ms": dict,
    "presummary_hit_rate": (float, type(None)),
    "presummary_ready_rate": (float, type(None)),
    "trigger_compactions": list,
    "truncated_tool_args": int,
    "overflow_retries": int,
    "invalid_requests_blocked": int,
    "breakpoints_last_request": int,
    "input_tokens_sent": dict,
    "session_counters": dict,
    "history_file": str,
    "elapsed_seconds": float,
    "cache": dict,
    "summarizer_cost": dict,
    "prefix_summary_cost": dict,
}
COMPACTION_KEYS = {
    "turn", "reason", "tokens_before", "tokens_after", "evicted_messages", "kept_from_seq",
    "summarizer", "fallback_reason", "offload_path", "summary_usage", "summary_route",
}  # fmt: skip


def test_simulate_json_reports_compactions_counters_and_history(simulated: Simulated) -> None:
    report = simulated.report

    assert set(report) == set(SIMULATE_KEYS)
    for key, kind in SIMULATE_KEYS.items():
        assert isinstance(report[key], kind), key
    assert report["turns"] == 6 and report["model"] == "cli-test-model"
    assert report["compactions"], "a 9.5k window compacts within six turns"
    assert all(set(record) == COMPACTION_KEYS for record in report["compactions"])
    assert sum(report["compactions_by_reason"].values()) == len(report["compactions"])
    assert report["session_counters"]["compactions"] == len(report["compactions"])
    assert report["summary_calls"] >= 1
    summaries = [c for c in report["compactions"] if c["reason"] != "truncate"]
    # No queue: every summary was made in-process, none came from a worker.
    assert report["summaries"] == {
        "from_worker": 0,
        "in_process": len(summaries),
        "fell_back": 0,
        "fallback_reasons": {},
    }
    assert report["truncated_tool_args"] > 0
    assert report["input_tokens_sent"]["max"] <= 9500  # the window
    assert Path(report["history_file"]).is_file()
    # progress is on stderr, one plain line per turn when stderr is not a terminal
    assert [
        line.split(":")[0] for line in simulated.progress.splitlines() if line.startswith("turn ")
    ] == [f"turn {n}/6" for n in range(1, 7)]


def test_simulate_prices_the_agent_and_the_summarizer_apart(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_MODEL", "claude-sonnet-4-5")
    monkeypatch.setenv("HANGO_SUMMARIZER_MODEL", "claude-haiku-4-5")
    flags = ["--turns", "5", "--max-input-tokens", "9500", "--seed", "3",
             "--history-root", str(tmp_path / "hist")]  # fmt: skip
    ran = hango(capsys, "simulate", *flags, "--database-url", f"sqlite:///{tmp_path / 'j.db'}",
                "--json")  # fmt: skip
    table = hango(capsys, "simulate", *flags, "--database-url", f"sqlite:///{tmp_path / 't.db'}")

    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    agent, summarizer = report["cache"], report["summarizer_cost"]
    assert (agent["model"], summarizer["model"]) == ("claude-sonnet-4-5", "claude-haiku-4-5")
    # Every answered call: a call refused as too long (then retried) is never cached.
    assert agent["requests"] == report["model_calls"] - report["overflow_retries"]
    assert summarizer["requests"] == report["summary_calls"] >= 1
    assert agent["read_ratio"] > 0.5  # the rolling breakpoints are read from call to call
    for figures, model in ((agent, "claude-sonnet-4-5"), (summarizer, "claude-haiku-4-5")):
        price = known_price(model)
        assert price is not None
        split = (figures["read_tokens"], figures["write_tokens"], figures["uncached_tokens"])
        assert figures["input_cost_usd"] == round(price.input_cost(*split), 6)
        assert figures["output_cost_usd"] == round(price.output_cost(figures["output_tokens"]), 6)
    assert "agent (claude-sonnet-4-5)" in table.out
    assert "summarizer (claude-haiku-4-5)" in table.out
    assert "input cost (USD)" in table.out and "output cost (USD)" in table.out


def test_simulate_reports_how_long_the_trigger_waited_for_a_slow_summarizer(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGO_CONTEXT_PRESUMMARIZE_FRAC", "1")  # every summary at the trigger
    ran = hango(
        capsys, "simulate", "--turns", "5", "--max-input-tokens", "8000", "--json",
        "--summarizer-latency", "0.25", "--database-url", f"sqlite:///{tmp_path / 'w.db'}",
        "--history-root", str(tmp_path / "hist"),
    )  # fmt: skip

    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    assert report["compactions_by_reason"].get("threshold"), "a 8k window compacts in 5 turns"
    waits = report["trigger_wait_ms"]
    # Each compaction at the trigger waited at least for the scripted summary's latency.
    assert 250 <= waits["p50"] <= waits["p95"]
    assert report["presummary_hit_rate"] == 0


def test_simulate_reports_the_pre_summaries_installed_at_the_trigger(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ran = hango(
        capsys, "simulate", "--turns", "5", "--max-input-tokens", "8000", "--json",
        "--model-latency", "0.01", "--database-url", f"sqlite:///{tmp_path / 'p.db'}",
        "--history-root", str(tmp_path / "hist"),
    )  # fmt: skip

    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    threshold = report["compactions_by_reason"].get("threshold", 0)
    assert threshold, "a 8k window compacts in 5 turns"
    rate = report["presummary_hit_rate"]
    # A share of the compactions at the trigger (whether one fits depends on the script).
    assert rate is not None and 0 <= rate <= 1
    assert rate * threshold == pytest.approx(round(rate * threshold), abs=0.01)  # 3 decimals


def test_simulate_prints_tables_without_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'h.db'}"
    ran = hango(
        capsys, "simulate", "--turns", "5", "--max-input-tokens", "8000",
        "--database-url", database, "--history-root", str(tmp_path / "hist"),
    )  # fmt: skip

    assert ran.code == 0, ran.err
    assert "Compactions" in ran.out and "threshold" in ran.out
    assert "compactions (counter)" in ran.out
    assert "0 from the worker" in ran.out and "0 fell back" in ran.out
    assert "waited for summaries at the trigger" in ran.out
    assert "pre-summaries installed at the trigger" in ran.out
    assert f"History file: {tmp_path / 'hist'}" in ran.out


def test_sessions_show_and_list_and_history_read_what_simulate_stored(
    capsys: pytest.CaptureFixture[str], simulated: Simulated
) -> None:
    session = simulated.report["session_id"]
    flags = (
        "--database-url",
        simulated.database_url,
        "--history-root",
        str(simulated.history_root),
    )

    shown = hango(capsys, "sessions", "show", session, *flags, "--json")
    table = hango(capsys, "sessions", "show", session, *flags)
    listed = hango(capsys, "sessions", "list", "--database-url", simulated.database_url, "--json")
    history = hango(capsys, "history", session, *flags)

    details = json.loads(shown.out)
    assert details["compaction_records"] == simulated.report["compactions"]
    assert details["compactions"] == len(simulated.report["compactions"])
    assert details["stored_messages"] == simulated.report["stored_messages"]
    assert details["history_file"] == simulated.report["history_file"]
    assert "Compaction records" in table.out and "kept from" in table.out
    usages = [r["summary_usage"] for r in details["compaction_records"] if r["summary_usage"]]
    assert usages, "the simulated summarizer reported no usage: the check proves nothing"
    assert details["summarizer_usage"] == {
        key: sum(u[key] for u in usages) for key in ("input_tokens", "output_tokens")
    }
    assert "summarizer tokens in / out" in table.out
    assert [s["id"] for s in json.loads(listed.out)] == [session]
    assert history.out == Path(simulated.report["history_file"]).read_text(encoding="utf-8")
    assert "/work/src/" in history.out


def test_sessions_show_prints_the_real_cache_read_ratio_and_input_cost(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'usage.db'}"
    store = Store.from_url(database)
    store.migrate()
    store.ensure_session("s-cost", "claude-sonnet-4-5")
    price = Price(base_input=3.0, cache_write_5m=3.75, cache_read=0.3, output=15.0)
    usage = UsageTotals()
    for read, write, uncached in ((0, 5000, 20), (5000, 800, 30), (5800, 100, 25)):
        usage = usage.plus(
            Usage(
                input_tokens=uncached,
                output_tokens=100,
                cache_read_input_tokens=read,
                cache_creation_input_tokens=write,
            ),
            price,
        )
    store.write_session_counters("s-cost", last_input_tokens=5925, compactions=0, usage=usage)
    store.engine.dispose()

    shown = hango(capsys, "sessions", "show", "s-cost", "--database-url", database, "--json")
    table = hango(capsys, "sessions", "show", "s-cost", "--database-url", database)

    assert json.loads(shown.out)["usage"] == {
        "read_tokens": 10_800,
        "write_tokens": 5_900,
        "uncached_tokens": 75,
        "output_tokens": 300,
        "read_ratio": round(10_800 / 16_775, 4),
        "input_cost_usd": round((10_800 * 0.3 + 5_900 * 3.75 + 75 * 3.0) / 1e6, 6),
    }
    assert f"{10_800 / 16_775:.3f} (read 10,800, written 5,900, uncached 75" in table.out
    assert f"${(10_800 * 0.3 + 5_900 * 3.75 + 75 * 3.0) / 1e6:.4f}" in table.out


def test_sessions_show_prints_the_learned_token_correction_per_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'corrections.db'}"
    store = Store.from_url(database)
    store.migrate()
    store.ensure_session("s-fix", "claude-opus-4-7")
    learned = RunState(token_corrections={"claude-opus-4-7": 1.3125, "m2": 0.9})
    store.finish_run(store.start_run("s-fix", 1, RunState()), "completed")
    store.finish_run(store.start_run("s-fix", 2, learned), "completed")
    store.engine.dispose()

    shown = hango(capsys, "sessions", "show", "s-fix", "--database-url", database, "--json")
    table = hango(capsys, "sessions", "show", "s-fix", "--database-url", database)

    assert json.loads(shown.out)["token_corrections"] == {"claude-opus-4-7": 1.3125, "m2": 0.9}
    assert "claude-opus-4-7 x1.312, m2 x0.900" in table.out


# --- replay ---------------------------------------------------------------------------------


def _turns_transcript(turns: int) -> dict[str, Any]:
    """A coding session with large tool inputs and results: it must compact on a small window."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append(
            {"role": "user", "content": f"Task {t}: write module_{t}.py and run its tests."}
        )
        source = f"def f_{t}():\n    return {t}\n" * 120
        write = {
            "type": "tool_use",
            "id": f"toolu_w{t}",
            "name": "Write",
            "input": {"file_path": f"/repo/module_{t}.py", "content": source},
        }
        run_a = {
            "type": "tool_use",
            "id": f"toolu_a{t}",
            "name": "Bash",
            "input": {"command": f"pytest -k m{t}"},
        }
        run_b = {
            "type": "tool_use",
            "id": f"toolu_b{t}",
            "name": "Bash",
            "input": {"command": "make"},
        }
        messages += [
            {"role": "assistant", "content": [_text(f"Writing module_{t}."), write]},
            {"role": "user", "content": [_result(f"toolu_w{t}", "ok")]},
            {"role": "assistant", "content": [run_a, run_b]},
            {"role": "user", "content": [
                _result(f"toolu_a{t}", f"test_{t} PASSED\n" * 300),
                _result(f"toolu_b{t}", "built\n" * 40),
            ]},
            {"role": "assistant", "content": [_text(f"module_{t}.py is done.")]},
        ]  # fmt: skip
    tools = [
        {"name": n, "input_schema": {"type": "object", "properties": {}}} for n in ("Write", "Bash")
    ]
    return {
        "source": "written by the test",
        "system": "You are a careful coder.",
        "tools": tools,
        "messages": messages,
    }


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _result(tool_use_id: str, content: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


def _dumped(path: Path) -> list[Request]:
    lines = path.read_text(encoding="utf-8").splitlines()
    requests = []
    for number, line in enumerate(lines, start=1):
        body = json.loads(line)
        request = Request.model_validate(body)
        assert request.to_api() == body, f"line {number} is not exactly a request body"
        assert validate_request(request) == [], f"line {number} would be refused by the API"
        _assert_pairs(request, number)
        requests.append(request)
    return requests


def _assert_pairs(request: Request, number: int) -> None:
    """No orphan tool blocks in either direction (checked here independently of the validator)."""
    messages = request.messages
    for index, message in enumerate(messages):
        if index + 1 < len(messages):
            answered = {r.tool_use_id for r in messages[index + 1].tool_results()}
            assert {u.id for u in message.tool_uses()} <= answered, (
                f"line {number}: tool_use orphan"
            )
        asked = {u.id for u in messages[index - 1].tool_uses()} if index else set()
        assert {r.tool_use_id for r in message.tool_results()} <= asked, (
            f"line {number}: tool_result orphan"
        )
    assert not any(messages[-1].tool_uses())


def test_replay_json_transcript_dumps_every_request_valid_and_compacts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    transcript = tmp_path / "session.json"
    body = _turns_transcript(6)
    transcript.write_text(json.dumps(body))
    dump, history = tmp_path / "requests.jsonl", tmp_path / "history"

    ran = hango(
        capsys,
        "replay",
        str(transcript),
        "--max-input-tokens",
        "6000",
        "--dump-requests",
        str(dump),
        "--history-root",
        str(history),
        "--json",
    )

    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    assistants = [m for m in body["messages"] if m["role"] == "assistant"]
    requests = _dumped(dump)
    assert len(requests) == report["calls"] == len(assistants) == 18
    assert (
        report["compactions"] >= 1
        and sum(report["compactions_by_reason"].values()) == report["compactions"]
    )
    assert report["tokens_sent"]["max"] <= 6000 < report["tokens_raw"]["max"]
    assert report["tokens_sent"]["mean"] < report["tokens_raw"]["mean"]
    assert report["invalid_requests_blocked"] == 0 and report["format"] == "messages-json"
    # each request is the conversation up to that reply: it ends with the message before it,
    # its large tool results offloaded to the history as a live turn would have done
    for request, reply_index in zip(requests, _indices_of(body, "assistant"), strict=True):
        _assert_same_or_offloaded(request.messages[-1].to_api(), body["messages"][reply_index - 1])
    (offloaded_path,) = [
        p for p in LocalHistory(history).ls("/large_tool_results") if p.endswith("/toolu_a0")
    ]
    offloaded = LocalHistory(history).read(offloaded_path)
    assert offloaded == body["messages"][4]["content"][0]["content"]
    assert requests[0].system_blocks()[0].text == "You are a careful coder."
    assert {"Write", "Bash", "read_file"} <= {tool.name for tool in requests[0].tool_definitions()}
    compacted = [r for r in requests if "/conversation_history/" in r.messages[0].text()]
    assert compacted, "some request opens with the summary message"
    assert requests[-1].messages[0].content[-1].cache_control is not None  # type: ignore[union-attr]


def _assert_same_or_offloaded(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    # The newest message carries the rolling cache breakpoint (a string content becomes
    # one text block to carry it); apart from the marker it is the recorded message.
    sent = {**sent, "content": [_unmarked(block) for block in sent["content"]]}
    if isinstance(recorded["content"], str):
        assert sent == {**recorded, "content": [{"type": "text", "text": recorded["content"]}]}
        return
    assert len(sent["content"]) == len(recorded["content"])
    for block, original in zip(sent["content"], recorded["content"], strict=True):
        if block == original:
            continue
        assert block["type"] == "tool_result" and block["tool_use_id"] == original["tool_use_id"]
        assert re.search(
            rf"/large_tool_results/[\w.-]+/{original['tool_use_id']}\b", block["content"]
        )


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


def _indices_of(body: dict[str, Any], role: str) -> list[int]:
    return [i for i, m in enumerate(body["messages"]) if m["role"] == role]


TASKS = 8


def _claude_code_log() -> str:
    def entry(kind: str, content: Any, **extra: Any) -> str:
        return json.dumps(
            {"type": kind, "message": {"role": kind, "content": content}, "uuid": "u", **extra}
        )

    lines = [json.dumps({"type": "summary", "summary": "old", "leafUuid": "x"})]
    for t in range(TASKS):
        use = {
            "type": "tool_use",
            "id": f"toolu_{t}",
            "name": "Read",
            "input": {"file_path": f"/r/{t}.py"},
        }
        lines += [
            entry("user", f"Look at file {t}: " + "why does it matter? " * 60),
            json.dumps({"type": "file-history-snapshot", "snapshot": {}}),
            entry("assistant", [{"type": "thinking", "thinking": "...", "signature": "sig"}]),
            entry("assistant", [{"type": "text", "text": f"Reading {t}."}]),
            entry("assistant", [use]),
            entry(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{t}",
                        "content": f"line {t}\n" * 100,
                    }
                ],
            ),
            entry("assistant", "side chain", isSidechain=True),
            entry("assistant", [{"type": "text", "text": f"File {t} is fine."}]),
        ]
    return "\n".join(lines) + "\n"


def test_replay_claude_code_jsonl(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    log.write_text(_claude_code_log())
    dump = tmp_path / "out.jsonl"

    ran = hango(
        capsys,
        "replay",
        str(log),
        "--max-input-tokens",
        "5000",
        "--dump-requests",
        str(dump),
        "--json",
    )

    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    requests = _dumped(dump)
    assert report["format"] == "claude-code-jsonl"
    assert report["calls"] == len(requests) == 2 * TASKS  # two merged replies per task
    assert report["turns"] == TASKS
    assert report["compactions"] >= 1
    assert all("thinking" not in json.dumps(r.to_api()) for r in requests)
    assert not any("side chain" in json.dumps(r.to_api()) for r in requests)


def _claude_code_log_with_usage(pause_seconds: int) -> tuple[str, list[dict[str, int]]]:
    """A Claude Code log whose replies carry the API's usage and every entry a timestamp.

    Each reply is streamed over two entries of one ``message.id`` (the usage repeated, the
    last one final), ``pause_seconds`` pass between a reply and the next user entry, and
    one error notice with zero usage stands for a reply that was no API call.
    """
    clock = 1_750_000_000
    lines: list[str] = []
    usages: list[dict[str, int]] = []

    def entry(kind: str, content: Any, **message: Any) -> str:
        at = datetime.fromtimestamp(clock, tz=UTC).isoformat().replace("+00:00", "Z")
        body = {"role": kind, "content": content, **message}
        return json.dumps({"type": kind, "message": body, "timestamp": at})

    for t in range(6):
        lines.append(entry("user", f"Task {t}: look at module {t}. " + "Explain it well. " * 150))
        clock += 2
        usage = {
            "input_tokens": 4 + t,
            "cache_read_input_tokens": 1000 * t,
            "cache_creation_input_tokens": 900 + t,
            "output_tokens": 30 + t,
        }
        usages.append(usage)
        use = {"type": "tool_use", "id": f"toolu_{t}", "name": "Read", "input": {"path": f"{t}"}}
        early = {**usage, "output_tokens": 1}  # streamed: the first entry's output is partial
        lines.append(entry("assistant", [{"type": "text", "text": "Reading."}], id=f"m{t}a",
                           model="claude-sonnet-4-5", usage=early))  # fmt: skip
        lines.append(entry("assistant", [use], id=f"m{t}a", model="claude-sonnet-4-5",
                           usage=usage))  # fmt: skip
        clock += 1
        result = {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": "x = 1\n" * 300}
        lines.append(entry("user", [result]))
        clock += 2
        lines.append(entry("assistant", [{"type": "text", "text": f"Module {t} is fine."}],
                           id=f"m{t}b", usage=usage))  # fmt: skip
        usages.append(usage)
        clock += pause_seconds
    zero = {"input_tokens": 0, "output_tokens": 0}
    lines.append(entry("user", "are you there?"))
    lines.append(entry("assistant", [{"type": "text", "text": "API Error"}], id="e", usage=zero))
    return "\n".join(lines) + "\n", usages


def test_replay_prices_the_recorded_usage_beside_the_simulated_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text, usages = _claude_code_log_with_usage(pause_seconds=5)
    log = tmp_path / "usage.jsonl"
    log.write_text(text)

    ran = hango(capsys, "replay", str(log), "--json")
    table = hango(capsys, "replay", str(log))

    assert ran.code == 0, ran.err
    cache = json.loads(ran.out)["cache"]
    recorded = cache["recorded"]
    read = sum(u["cache_read_input_tokens"] for u in usages)
    write = sum(u["cache_creation_input_tokens"] for u in usages)
    uncached = sum(u["input_tokens"] for u in usages)
    assert (recorded["requests"], recorded["read_tokens"]) == (len(usages), read)
    assert (recorded["write_tokens"], recorded["uncached_tokens"]) == (write, uncached)
    assert recorded["read_ratio"] == round(read / (read + write + uncached), 4)
    assert cache["ttl_from_timestamps"] is True
    assert cache["requests"] == 13 and cache["read_ratio"] > 0.5
    # The human table carries the same figures, the recorded ones beside the simulated ones.
    assert "simulated" in table.out and "recorded" in table.out
    assert f"{read:,}" in table.out and f"{cache['read_tokens']:,}" in table.out
    assert f"${recorded['input_cost_usd']:.4f}" in table.out
    assert f"{cache['relative_input_cost']:.3f}" in table.out


def test_replay_expires_the_simulated_cache_over_the_recorded_pauses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    reads = {}
    for pause in (5, 400):  # well within, and past, the 5-minute TTL
        log = tmp_path / f"pause-{pause}.jsonl"
        log.write_text(_claude_code_log_with_usage(pause)[0])
        ran = hango(capsys, "replay", str(log), "--json")
        assert ran.code == 0, ran.err
        reads[pause] = json.loads(ran.out)["cache"]

    short, long = reads[5], reads[400]
    assert short["prompt_tokens"] == long["prompt_tokens"]  # the same requests
    assert long["read_tokens"] < short["read_tokens"]
    # Past the TTL, only the call answered seconds after its turn's first one reads.
    assert long["write_tokens"] > short["write_tokens"]


def test_replay_of_a_transcript_without_usage_has_no_recorded_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(_turns_transcript(2)))

    ran = hango(capsys, "replay", str(transcript), "--json")
    table = hango(capsys, "replay", str(transcript))

    cache = json.loads(ran.out)["cache"]
    assert cache["recorded"] is None and cache["ttl_from_timestamps"] is False
    assert "Prompt cache and input cost" in table.out and "recorded" not in table.out
    assert f"{cache['write_tokens']:,}" in table.out
    assert f"${cache['input_cost_usd']:.4f}" in table.out


def test_replay_prints_a_table_by_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps(_turns_transcript(2)))

    ran = hango(capsys, "replay", str(transcript))

    assert ran.code == 0, ran.err
    assert "Replayed 6 model calls" in ran.out and "mean tokens sent vs raw" in ran.out


BAD_JSON = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]})
BAD_JSONL = '{"type": "user", "message": {"role": "user", "content": "hi"}}\n\n{oops\n'


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [("bad.json", BAD_JSON, "messages[1]"), ("bad.jsonl", BAD_JSONL, "line 3")],
)
def test_malformed_transcript_is_one_line_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, where: str
) -> None:
    transcript = tmp_path / name
    transcript.write_text(text)
    dump, database, history = tmp_path / "dump.jsonl", tmp_path / "kept.db", tmp_path / "history"

    ran = hango(
        capsys, "replay", str(transcript), "--dump-requests", str(dump),
        "--database-url", f"sqlite:///{database}", "--history-root", str(history),
    )  # fmt: skip

    assert ran.code == EXIT_TRANSCRIPT
    assert ran.out == ""
    assert ran.err.count("\n") == 1 and "Traceback" not in ran.err
    assert ran.err.startswith(f"hango replay: error: {transcript}: {where}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no dump, no database, no history


@pytest.mark.parametrize("debug_first", [True, False])
def test_debug_adds_the_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, debug_first: bool
) -> None:
    missing = str(tmp_path / "absent.json")
    argv = ["--debug", "replay", missing] if debug_first else ["replay", missing, "--debug"]

    ran = hango(capsys, *argv)

    assert ran.code == EXIT_TRANSCRIPT
    assert "Traceback" in ran.err and "no such file" in ran.err


# --- other commands and errors ---------------------------------------------------------------


def test_migrate_creates_the_schema_and_list_reads_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"

    before = hango(capsys, "sessions", "list", "--database-url", url)
    assert before.code == 0 and "no sessions" in before.err
    assert not (tmp_path / "fresh.db").exists()  # a read does not create the database

    migrated = hango(capsys, "migrate", "--database-url", url)
    after = hango(capsys, "sessions", "list", "--database-url", url, "--json")

    assert migrated.code == 0 and f"applied revisions none → {HEAD_REVISION}" in migrated.err
    assert (tmp_path / "fresh.db").is_file()
    assert after.code == 0 and json.loads(after.out) == []
    again = hango(capsys, "migrate", "--database-url", url)
    assert again.code == 0 and "already at the latest schema revision" in again.err


@pytest.mark.parametrize("command", ["simulate", "replay"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_window_that_is_not_positive_is_a_usage_error_in_every_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, value: str
) -> None:
    argv = [command, *(["t.json"] if command == "replay" else []), "--max-input-tokens", value]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == EXIT_USAGE
    assert "--max-input-tokens: must be a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["sessions", "show", "../etc"], EXIT_SESSION, "invalid session id"),
        (["sessions", "show", "nobody"], EXIT_SESSION, "no session 'nobody'"),
        (["history", "nobody"], EXIT_SESSION, "no session 'nobody'"),
        (["simulate", "--provider", "anthropic"], EXIT_CONFIG, "ANTHROPIC_API_KEY"),
        (["simulate", "--queue"], EXIT_QUEUE, "HANGO_REDIS_URL"),
        (["simulate", "--summarizer-latency=-1"], EXIT_CONFIG, "--summarizer-latency"),
        (["simulate", "--summarizer-latency", "soon"], EXIT_CONFIG, "--summarizer-latency"),
        (["replay", "missing.json"], EXIT_TRANSCRIPT, "no such file"),
        (["chat"], EXIT_CONFIG, "ANTHROPIC_API_KEY"),
    ],
)
def test_errors_are_one_line_with_their_exit_code(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    code: int,
    words: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HANGO_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite'}")

    ran = hango(capsys, *argv)

    assert ran.code == code
    assert ran.err.count("\n") == 1 and words in ran.err and "Traceback" not in ran.err
    command = " ".join(argv[:2]) if argv[0] == "sessions" else argv[0]
    assert ran.err.startswith(f"hango {command}: error: ")


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    ran = hango(capsys)

    assert ran.code == EXIT_USAGE and "simulate" in ran.err


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError("HANGO_X: bad", variable="HANGO_X"), 3),
        (TranscriptError("bad", source="t.json", location="messages[2]"), 4),
        (InvalidSessionIdError("../x"), 5),
        (ProviderError("boom", status=500), 6),
        (ContextOverflowError("prompt is too long"), 6),
        (CannotFitError("too big", tokens=10, limit=5), 7),
        (SessionBusyError("session 's' is running a turn", session_id="s", waited=1.0), 10),
        (TurnLeaseLostError("session 's': lost its lease", session_id="s"), 10),
        (RuntimeError("surprise"), 1),
    ],
)
def test_each_error_kind_has_its_exit_code(error: Exception, code: int) -> None:
    assert failure_for(error).code == code
    line = error_line("replay", error)
    assert line.startswith("hango replay: error: ") and "\n" not in line
    assert str(error).splitlines()[0] in line


def test_a_busy_session_points_at_the_wait_setting() -> None:
    line = error_line("sessions resume", SessionBusyError("busy", session_id="s", waited=2.0))

    assert line.endswith("(retry when it is done, or raise HANGO_SESSION_BUSY_TIMEOUT)")


def test_run_stats_count_answered_requests_and_refusals() -> None:
    stats = RunStats()
    marked = Request(
        model="m",
        max_tokens=10,
        system=(TextBlock(text="s", cache_control={"type": "ephemeral"}),),
        messages=(Message(role="user", content="hi"),),
    )
    answer = Response(
        id="r", model="m", content=(TextBlock(text="ok"),), usage=Usage(input_tokens=70)
    )

    stats.request_sent("s", 1, marked, 900)  # refused as too long
    stats.overflow_retry("s", 1, "overflow")
    stats.request_sent("s", 1, marked, 80)
    stats.response_received("s", 1, answer)  # the provider's usage wins over the estimate
    stats.tool_args_truncated("s", 1, 3)

    assert stats.model_calls == 2 and stats.overflow_retries == 1
    assert stats.sent_tokens == [70] and stats.refused_tokens == [900]
    assert stats.truncated_args == 3 and stats.breakpoints == 1


def test_simulate_resumes_an_existing_session_again_and_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The scripted model restarts its tool_use ids on every run: resuming reuses them.
    store = ("--database-url", f"sqlite:///{tmp_path / 'h.db'}")
    history = ("--history-root", str(tmp_path / "history"))
    for _ in range(3):
        ran = hango(
            capsys, "simulate", "--session", "again", "--turns", "3", "--json", *store, *history
        )
        assert ran.code == 0, ran.err
    ran = hango(capsys, "sessions", "show", "again", "--json", *store)
    assert ran.code == 0 and json.loads(ran.out)["turns"] == 9


def test_a_refused_request_does_not_point_at_the_api_key() -> None:
    error = InvalidRequestError("refusing to send an invalid request: ids must be unique")
    for command in ("simulate", "replay", "chat"):
        line = error_line(command, error)
        assert "ANTHROPIC_API_KEY" not in line and "--provider anthropic" not in line
        assert failure_for(error).code == 6
