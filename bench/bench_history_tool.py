"""The history tool over real recorded sessions replayed at a window that forces compaction.

Every ``*.json`` transcript of the corpus (see ``bench/bench_replay.py`` for where it is
looked for) is replayed with ``hango replay --max-input-tokens 20000`` into a kept SQLite
database. Then, through the tool (``hango.tools.history``), against the store's messages
read directly:

- **read-back**: every evicted message (sequence 1 to the last ``kept_from_seq`` - 1 of
  any compaction) read with ``command=read`` page by page (2,000-character pages, so long
  messages span pages), parsed back and compared block by block; and every evicted tool
  result read by its ``tool_use_id``;
- **search**: every identifier of the artifact index over the evicted messages searched
  for (``limit=5``), found when a hit's block holds it; and the same for the first line
  of every evicted error result (the error text a model would look up);
- **latency**: the first search of a session (the index is built from the store) and the
  median of the later ones (the index only catches up), in the same run; and, without the
  corpus, the median search over generated sessions of 1,000 and 10,000 messages held in
  memory (the ranking's own cost, which grows with the session).

Runtime: about a minute for the eight reference transcripts on 2 busy cores.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_replay import CORPUS_ENV, corpus_dir
from hango.cli import main as hango
from hango.core.messages import Message, StoredMessage, TextBlock, ToolResultBlock, ToolUseBlock
from hango.store import Store
from hango.tools.history import HistoryScope, HistoryTool, StoreTranscripts
from tests.history_reading import Probe, evicted_to, probe_session

WINDOW = 20_000
PAGE_CHARS = 2_000


def replay_kept(transcript: Path, scratch: Path) -> tuple[Store, str]:
    database = f"sqlite:///{scratch / 'kept.db'}"
    arguments = ["replay", str(transcript), "--json", "--max-input-tokens", str(WINDOW)]
    arguments += ["--database-url", database, "--history-root", str(scratch / "history")]
    with contextlib.redirect_stdout(io.StringIO()):
        if hango(arguments) != 0:
            raise RuntimeError(f"replay of {transcript.name} failed (see stderr)")
    store = Store.from_url(database)
    [session] = store.sessions()
    return store, session.id


def search_latency(store: Store, session_id: str, queries: list[str]) -> tuple[float, float]:
    """Milliseconds of the first search of a fresh tool, and the median of the later ones."""
    tool = HistoryTool(StoreTranscripts(store))
    scope = HistoryScope(session_id)
    times = []
    for query in queries or ["error"]:
        started = time.perf_counter()
        tool.answer({"command": "search", "query": query}, scope)
        times.append((time.perf_counter() - started) * 1000)
    return times[0], statistics.median(times[1:] or times)


def probe(transcript: Path) -> tuple[int, Probe, float, float]:
    with tempfile.TemporaryDirectory(prefix="hango-histtool-") as scratch:
        store, session_id = replay_kept(transcript, Path(scratch))
        try:
            messages = len(store.messages(session_id))
            found = probe_session(store, session_id, page_chars=PAGE_CHARS)
            evicted = store.messages(session_id, to_seq=evicted_to(store, session_id))
            queries = [m.message.text()[:40] for m in evicted if m.message.text().strip()][:20]
            cold, warm = search_latency(store, session_id, queries)
        finally:
            store.engine.dispose()
    return messages, found, cold, warm


class Generated:
    """A generated session of ``size`` messages, in memory: tool calls and their results."""

    def __init__(self, size: int) -> None:
        self.stored = [
            StoredMessage(seq=n, turn=1 + n // 40, message=_message(n)) for n in range(1, size + 1)
        ]

    def messages(
        self, scope: HistoryScope, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[StoredMessage]:
        first, last = from_seq or 1, to_seq or len(self.stored)
        return self.stored[first - 1 : last]


def _message(n: int) -> Message:
    if n % 2:
        path = f"/repo/src/pkg_{n % 17}/module_{n}.py"
        use = ToolUseBlock(id=f"t{n}", name="Read", input={"file_path": path})
        return Message(role="assistant", content=(TextBlock(text=f"Reading {path}."), use))
    body = "\n".join(f"    value_{k} = compute(item_{n}_{k})" for k in range(30 + n % 40))
    return Message(role="user", content=(ToolResultBlock(tool_use_id=f"t{n - 1}", content=body),))


def generated_latency(size: int, queries: list[str]) -> tuple[float, float]:
    """Milliseconds: the first search of a fresh tool, and the median of the later ones."""
    tool = HistoryTool(Generated(size))
    scope = HistoryScope("generated")
    times = []
    for query in queries:
        started = time.perf_counter()
        tool.answer({"command": "search", "query": query}, scope)
        times.append((time.perf_counter() - started) * 1000)
    return times[0], statistics.median(times[1:])


def print_generated() -> None:
    queries = ["module_501.py", "item_800_3", "compute", "value_12 = compute", "pkg_3"] * 3
    print("| generated session | first search ms | later search ms (median of 14) |")
    print("|---:|---:|---:|")
    for size in (1_000, 10_000):
        cold, warm = generated_latency(size, queries)
        print(f"| {size:,} messages | {cold:.1f} | {warm:.1f} |")


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.1f}%)" if whole else "-"


def main() -> None:
    print_generated()
    directory = corpus_dir()
    transcripts = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not transcripts:
        print(f"skipped: no *.json transcripts in {directory} (set {CORPUS_ENV})")
        return
    print(f"corpus: {directory} ({len(transcripts)} transcripts), window {WINDOW:,} tokens")
    print(
        "| transcript | messages | evicted | read back exact | tool results exact | "
        "identifiers in top 5 | error lines in top 5 | first search ms | later search ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    total = Probe()
    for transcript in transcripts:
        messages, found, cold, warm = probe(transcript)
        total.add(found)
        print(f"| {transcript.name} | {messages} | {_shares(found)} | {cold:.1f} | {warm:.1f} |")
    evicted, *shares = _shares(total).split(" | ")
    print(
        f"all: {evicted} evicted; read back exact {shares[0]}, tool results exact "
        f"{shares[1]}, identifiers in top 5 {shares[2]}, error lines in top 5 {shares[3]}"
    )
    for miss in total.misses[:20]:
        print(f"  not in top 5: {miss!r}")


def _shares(found: Probe) -> str:
    return (
        f"{found.evicted} | {_share(found.read_exact, found.evicted)} | "
        f"{_share(found.results_exact, found.results)} | "
        f"{_share(found.found_top5, found.identifiers)} | "
        f"{_share(found.error_lines_top5, found.error_lines)}"
    )


if __name__ == "__main__":
    main()
