"""``hango replay`` of a long transcript of short lines: time and peak memory by size.

Writes a Claude Code JSONL of N alternating short user/assistant lines into a temporary
directory (never into the repository), runs ``hango replay FILE --json`` in a child
process per size and prints wall and CPU seconds and peak RSS (``ru_maxrss`` of the
child) side by side, with the growth factor of CPU time between sizes: linear time shows
as a factor near the size ratio. ``--lines 1000000`` is the issue-26 case by its number
of lines (half a million turns); these lines are longer than that transcript's (109 MB
here, 61 MB there), so the probe raises the size limit to 200 MB.

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


def measure(path: Path) -> tuple[float, float, float, int]:
    """Seconds, CPU seconds, peak RSS (MB) and exit status of ``hango replay`` on ``path``.

    CPU seconds (user + system of the child) compare across sizes on a shared machine,
    where the wall clock also counts the time other processes held the cores.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [HANGO, "replay", str(path), "--json", "--max-bytes", str(200 * 1024 * 1024)],
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
    args = parser.parse_args(argv)
    print(
        f"{'lines':>9} {'MB':>7} {'seconds':>9} {'CPU s':>8} {'x CPU':>6} "
        f"{'peak RSS MB':>12} {'exit':>5}"
    )
    previous: float | None = None
    with tempfile.TemporaryDirectory(prefix="hango-replay-probe-") as scratch:
        for lines in args.lines:
            path = Path(scratch) / f"t{lines}.jsonl"
            size = write_transcript(path, lines)
            seconds, cpu, peak, code = measure(path)
            factor = f"{cpu / previous:.2f}" if previous else "-"
            previous = cpu
            # ru_maxrss of children is the largest child so far: sizes run in ascending order.
            row = f"{lines:>9} {size / 1e6:>7.1f} {seconds:>9.1f} {cpu:>8.1f} {factor:>6}"
            print(f"{row} {peak:>12.0f} {code:>5}", flush=True)
            path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
