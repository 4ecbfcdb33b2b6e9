"""Runs every ``bench/bench_*.py`` module's ``main()`` in one process, in name order."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import bench


def bench_modules() -> list[str]:
    return sorted(
        f"bench.{info.name}"
        for info in pkgutil.iter_modules(bench.__path__)
        if info.name.startswith("bench_")
    )


def main() -> int:
    for name in bench_modules():
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        importlib.import_module(name).main()
        print(f"({name} took {time.perf_counter() - started:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
