"""What ``bench_call``'s collection before each timed call does to a short call.

``bench_call`` runs ``gc.collect()`` before every timed call (hango's and the peers'): no
collector pass then lands inside a timed call, and every contestant starts cold. This
probe measures the steady and in-band calls and deepagents' hook (``bench_call``'s own
steps, 400 messages by default) three ways, interleaved, each contestant prepared as there:

- ``collected``: ``gc.collect()`` before each call, as ``bench_call`` does;
- ``collected, heap frozen``: the same, after ``gc.freeze()`` moved everything made during
  the setup out of the collector's reach: the collection walks only what the rounds made;
- ``warm``: no collection before the call.

Then, with nothing of hango in the way, what a collection's walk over a large heap costs
the next reads of it: 200 dicts read one after the other in memory, and 200 as far apart
as the heap goes, each read after a collection (and after one with the heap frozen).

    .venv/bin/python -m bench.probe_cold [--size 400] [--rounds 7]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import bench_call as bc
from bench import bench_call_peers as peers

HOOK = "deepagents.wrap_model_call"
MODES = ("collected", "collected, heap frozen", "warm")


def timed(prepare: Callable[[], None], call: Callable[[], object], mode: str) -> float:
    prepare()
    if mode != "warm":
        gc.collect()
    started = time.process_time()
    call()
    return time.process_time() - started


def calls(size: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median CPU ms of each contestant in each mode."""
    history = peers.synthetic_history(size)
    samples: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as scratch, peers.no_network():
        root = Path(scratch)
        hook = peers.peer_steady_calls(history)[HOOK]
        for mode in MODES:
            # A session of its own per mode: the in-band one holds a few rounds before the
            # trigger, and every mode starts from the same share of the window.
            steps = {
                bc.STEADY: bc.steady(bc.made(root / f"steady-{mode}", history, True)),
                bc.BAND: bc.in_band(bc.made(root / f"band-{mode}", history, True)),
                HOOK: ((lambda: None), hook),
            }
            for prepare, call in steps.values():
                prepare()
                call()
            if mode == "collected, heap frozen":
                gc.freeze()
            for _ in range(rounds):
                for name, (prepare, call) in steps.items():
                    taken = timed(prepare, call, mode)
                    samples.setdefault(name, {}).setdefault(mode, []).append(taken)
            gc.unfreeze()
    return {
        name: {mode: statistics.median(values) * 1000 for mode, values in by_mode.items()}
        for name, by_mode in samples.items()
    }


def reads(rounds: int) -> dict[str, float]:
    """Median µs of reading 200 dicts after a collection, close together and far apart."""
    heap = [{"key": [n, str(n)]} for n in range(1_500_000)]
    near = range(500_000, 500_200)
    far = range(0, len(heap), len(heap) // 200)
    found: dict[str, float] = {}
    for frozen in (False, True):
        if frozen:
            gc.freeze()
        for label, where in (("200 dicts side by side", near), ("200 dicts far apart", far)):
            taken = []
            for _ in range(rounds):
                gc.collect()
                started = time.perf_counter()
                for index in where:
                    heap[index]["key"]
                taken.append(time.perf_counter() - started)
            name = f"{label}{', heap frozen' if frozen else ''}"
            found[name] = statistics.median(taken) * 1e6
    gc.unfreeze()
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    try:
        import deepagents  # noqa: F401
    except ImportError as exc:
        print(f"skipped: the peers are not installed ({exc}); install the bench extra")
        return
    medians = calls(args.size, args.rounds)
    print(f"{args.size} messages (CPU ms, median of {args.rounds} interleaved rounds)")
    print(f"  {'':<32}" + "".join(f"{mode:>26}" for mode in MODES))
    for name, by_mode in medians.items():
        print(f"  {name:<32}" + "".join(f"{by_mode[mode]:>26.2f}" for mode in MODES))
    for name in (bc.STEADY, bc.BAND):
        ratios = "".join(f"{medians[name][mode] / medians[HOOK][mode]:>26.2f}" for mode in MODES)
        print(f"  {name + ' / hook':<32}" + ratios)
    print("\nreading after a collection (µs, median)")
    for name, value in reads(args.rounds * 3).items():
        print(f"  {name:<40} {value:>8.1f}")


if __name__ == "__main__":
    main()
