"""``hango replay`` of a long transcript of short lines: time and peak memory by size.

Writes a Claude Code JSONL of N alternating short user/assistant lines into a temporary
directory (never into the repository), runs ``hango replay FILE --json`` in a child
process per size and prints wall and CPU seconds and peak RSS (``ru_maxrss`` of the
child) side by side, with the growth factor of CPU time between sizes: linear time shows
as a factor near the size ratio. ``--lines 1000000`` is the issue-26 case by its number
of lines (half a million turns); its default lines are longer than that transcript's (109
MB here, 61 MB there), so the probe raises the size limit to 200 MB. ``--short`` writes
61-byte lines: ``--short --lines 1000000`` is that file's size too (61 MB, under the 64
MiB default limit).

    .venv/bin/python -m bench.probe_replay_scale --short --lines 8000 16000 32000 64000
"""

from __future__ import annotations

import argparse
import json
import resource
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HANGO = str(Path(sys.executable).parent / "hango")


def write_transcript(path: Path, lines: int, *, short: bool = False) -> int:
    """N short lines, user and assistant alternating; the file's size in bytes.

    ``short``: ~61-byte lines (compact JSON, string content, no uuid), the length of the
    issue-26 transcript's (61 MB for a million lines), instead of ~109.
    """
    with path.open("w", encoding="utf-8") as out:
        for n in range(lines):
            out.write(_short_line(n) if short else _line(n))
    return path.stat().st_size


def _line(n: int) -> str:
    role = "user" if n % 2 == 0 else "assistant"
    content = f"line {n}" if role == "user" else [{"type": "text", "text": f"ok {n}"}]
    record = {"type": role, "message": {"role": role, "content": content}, "uuid": f"u{n}"}
    return json.dumps(record) + "\n"


def _short_line(n: int) -> str:
    role = "user" if n % 2 == 0 else "assistant"
    # One letter of content: the lines are then 61 bytes on average, as that file's.
    record = {"type": role, "message": {"role": role, "content": string.ascii_letters[n % 52]}}
    return json.dumps(record, separators=(",", ":")) + "\n"


def measure(path: Path, *extra: str) -> tuple[float, float, float, int]:
    """Seconds, CPU seconds, peak RSS (MB) and exit status of ``hango replay`` on ``path``.

    CPU seconds (user + system of the child) compare across sizes on a shared machine,
    where the wall clock also counts the time other processes held the cores.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [HANGO, "replay", str(path), "--json", "--max-bytes", str(200 * 1024 * 1024), *extra],
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, after.ru_maxrss / 1024, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[20_000, 40_000, 80_000])
    parser.add_argument(
        "--short", action="store_true", help="~61-byte lines (the issue-26 file's length)"
    )
    parser.add_argument(
        "--max-input-tokens",
        metavar="TOKENS",
        help="the replay's window (a small one compacts every few thousand lines)",
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="write the files here and keep them"
    )
    args = parser.parse_args(argv)
    print(
        f"{'lines':>9} {'MB':>7} {'seconds':>9} {'CPU s':>8} {'x CPU':>6} "
        f"{'peak RSS MB':>12} {'exit':>5}"
    )
    previous: float | None = None
    with tempfile.TemporaryDirectory(prefix="hango-replay-probe-") as scratch:
        for lines in args.lines:
            path = Path(args.keep or scratch) / f"t{lines}{'s' if args.short else ''}.jsonl"
            size = write_transcript(path, lines, short=args.short)
            window = ("--max-input-tokens", args.max_input_tokens) if args.max_input_tokens else ()
            seconds, cpu, peak, code = measure(path, *window)
            factor = f"{cpu / previous:.2f}" if previous else "-"
            previous = cpu
            # ru_maxrss of children is the largest child so far: sizes run in ascending order.
            row = f"{lines:>9} {size / 1e6:>7.1f} {seconds:>9.1f} {cpu:>8.1f} {factor:>6}"
            print(f"{row} {peak:>12.0f} {code:>5}", flush=True)
            if args.keep is None:
                path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
