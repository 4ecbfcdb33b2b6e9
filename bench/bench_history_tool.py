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
  median of the later ones (the index only catches up), in the same run.

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


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.1f}%)" if whole else "-"


def main() -> None:
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
        print(
            f"| {transcript.name} | {messages} | {found.evicted} | "
            f"{_share(found.read_exact, found.evicted)} | "
            f"{_share(found.results_exact, found.results)} | "
            f"{_share(found.found_top5, found.identifiers)} | "
            f"{_share(found.error_lines_top5, found.error_lines)} | {cold:.1f} | {warm:.1f} |"
        )
    print(
        f"all: read back {_share(total.read_exact, total.evicted)}, tool results "
        f"{_share(total.results_exact, total.results)}, identifiers in top 5 "
        f"{_share(total.found_top5, total.identifiers)}, error lines in top 5 "
        f"{_share(total.error_lines_top5, total.error_lines)}"
    )
    for miss in total.misses[:20]:
        print(f"  not in top 5: {miss!r}")


if __name__ == "__main__":
    main()
