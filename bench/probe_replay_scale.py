"""``hango replay`` of a long transcript of short lines: time and peak memory by size.

Writes a Claude Code JSONL of N alternating short user/assistant lines into a temporary
directory (never into the repository), runs ``hango replay FILE --json`` in a child
process per size and prints seconds and peak RSS (``ru_maxrss`` of the child) side by
side, with the growth factor between sizes: linear time shows as a factor near the
size ratio. ``--lines 1000000`` is the issue-26 case by its number of lines (half a
million turns); these lines are longer than that transcript's (109 MB here, 61 MB there),
so the probe raises the size limit to 200 MB.

    .venv/bin/python -m bench.probe_replay_scale --lines 20000 40000 80000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HANGO = str(Path(sys.executable).parent / "hango")


def write_transcript(path: Path, lines: int) -> int:
    """N short lines, user and assistant alternating; the file's size in bytes."""
    with path.open("w", encoding="utf-8") as out:
        for n in range(lines):
            role = "user" if n % 2 == 0 else "assistant"
            content = f"line {n}" if role == "user" else [{"type": "text", "text": f"ok {n}"}]
            record = {"type": role, "message": {"role": role, "content": content}, "uuid": f"u{n}"}
            out.write(json.dumps(record) + "\n")
    return path.stat().st_size


def measure(path: Path) -> tuple[float, float, int]:
    """Seconds, peak RSS (MB) and exit status of ``hango replay`` on ``path``."""
    started = time.perf_counter()
    done = subprocess.run(
        [HANGO, "replay", str(path), "--json", "--max-bytes", str(200 * 1024 * 1024)],
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return seconds, peak_mb, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[20_000, 40_000, 80_000])
    args = parser.parse_args(argv)
    print(f"{'lines':>9} {'MB':>7} {'seconds':>9} {'x time':>7} {'peak RSS MB':>12} {'exit':>5}")
    previous: float | None = None
    with tempfile.TemporaryDirectory(prefix="hango-replay-probe-") as scratch:
        for lines in args.lines:
            path = Path(scratch) / f"t{lines}.jsonl"
            size = write_transcript(path, lines)
            seconds, peak, code = measure(path)
            factor = f"{seconds / previous:.2f}" if previous else "-"
            previous = seconds
            # ru_maxrss of children is the largest child so far: sizes run in ascending order.
            row = f"{lines:>9} {size / 1e6:>7.1f} {seconds:>9.1f} {factor:>7}"
            print(f"{row} {peak:>12.0f} {code:>5}")
            path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
