"""``hango serve`` against going direct, to the same loopback upstream, streaming.

Three processes, as in a deployment: the client (this one), the gateway (``hango serve``'s
app on uvicorn, SQLite in a scratch directory, ``--max-input-tokens`` large enough that
nothing is compacted) and the upstream (``bench.loopback.streaming_api``: it answers once
the whole body is in, without parsing it, since what the API spends on a body is the same
whichever way it came). One pooled HTTP client sends the same pre-serialized bytes both
ways, so the client's own JSON encoding is in neither figure.

- **steady call** at 400 / 2,000 / 10,000-message histories (``synthetic_history`` of
  ``bench_call_peers``): the session already stored (the first call, which stores the
  history, is timed apart as ``first``); each round appends a tool round to the client's
  history and sends it through the gateway and directly, in alternating order. The added
  time is the p50 of the per-round differences (gateway - direct) with its quartiles,
  after ``WARMUP`` rounds not counted; beside it, each phase of the gateway's requests
  (``bench.gateway_timeline``: marks taken inside the gateway's process on the clock the
  client uses) and the gateway process's CPU time per request.
- **concurrent**: 50 clients at once, each its own session, 5 streamed calls each through
  the gateway: errors, and time to first byte p50 / p95 beside the same load direct.
- **memory**: the process's resident set before and after 20 sessions of 400 messages
  were served (a gateway in this process), per session.
- **cache read share**: a 30-round tool session with Claude Code's markers (system and
  newest message), directly and through the gateway, each on a fresh upstream whose
  prompt-cache simulator reports the usage: cache reads over all input tokens.

Run: ``python -m bench.bench_gateway [--sizes 400 2000 10000] [--rounds 31] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from bench.bench_call_peers import synthetic_history
from bench.gateway_timeline import CPU, PHASES, install
from bench.loopback import server_process, streaming_api
from tests.fakeapi import FakeAnthropicAPI, text_reply
from tests.gateway_support import running_gateway, tool_output

MODEL = "claude-sonnet-4-5"
HUGE_WINDOW = 1_000_000_000
# Paired rounds run and not counted, per size (the gateway's first turns after storing).
WARMUP = 3
Json = dict[str, Any]


def streamed(
    client: httpx2.Client, url: str, body: Json | bytes, session: str
) -> tuple[float, float, float]:
    """When the request started (``perf_counter``), seconds to the first byte of the
    answer and to its end. ``bytes``: the body serialized already (sent as it is)."""
    headers = {"x-api-key": "sk-ant-bench", "x-hango-session": session}
    if isinstance(body, bytes):
        headers["content-type"] = "application/json"
        sending: Json = {"content": body}
    else:
        sending = {"json": body}
    started = time.perf_counter()
    with client.stream("POST", f"{url}/v1/messages", headers=headers, **sending) as answer:
        chunks = answer.iter_raw()
        next(chunks)
        first = time.perf_counter() - started
        for _ in chunks:
            pass
        if answer.status_code != 200:
            raise RuntimeError(f"status {answer.status_code}")
    return started, first, time.perf_counter() - started


def body_of(history: list[Json]) -> Json:
    return {"model": MODEL, "max_tokens": 100, "stream": True, "messages": history}


def tool_round(history: list[Json], n: int) -> None:
    call = {"type": "tool_use", "id": f"toolu_bench_{n}", "name": "Bash", "input": {"n": n}}
    history.append({"role": "assistant", "content": [call]})
    result = {"type": "tool_result", "tool_use_id": f"toolu_bench_{n}", "content": f"ok {n}"}
    history.append({"role": "user", "content": [result]})


@dataclass
class GatewayProcess:
    """The gateway in a process of its own, and the per-phase marks of its requests."""

    url: str
    marks: Any  # the receiving end of a pipe of PHASES -> perf_counter dicts

    def timeline(self, started: float, first: float) -> dict[str, float]:
        """The last request's intervals in ms: from the client's start to each phase's
        first reach and on to the client's first byte, as consecutive differences."""
        if not self.marks.poll(60):
            raise RuntimeError("the gateway sent no timeline for the request")
        marks = self.marks.recv()
        cpu = {CPU: marks[CPU] * 1000}
        points = [("client_start", started)] + [(p, marks[p]) for p in PHASES if p in marks]
        points.append(("client_first_byte", started + first))
        return cpu | {
            f"{a}->{b}": (tb - ta) * 1000 for (a, ta), (b, tb) in itertools.pairwise(points)
        }

    @contextmanager
    def drained(self) -> Iterator[None]:
        """Timelines read and dropped while the block runs (concurrent requests: the
        marks of overlapping requests mean nothing, and an unread pipe would block)."""
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                while self.marks.poll(0.05):
                    self.marks.recv()

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def steady(
    client: httpx2.Client, gateway: GatewayProcess, direct: str, size: int, rounds: int
) -> Json:
    """Paired rounds: the same serialized body through the gateway and directly, in
    alternating order; the added time is each round's difference (gateway - direct)."""
    history = synthetic_history(size)
    session = f"steady-{size}"
    load = os.getloadavg()[0]
    # Serialized as every later round is (a client serializes its history one way).
    first = streamed(client, gateway.url, json.dumps(body_of(history)).encode(), session)
    gateway.timeline(*first[:2])
    pairs: list[tuple[tuple[float, float, float], tuple[float, float, float]]] = []
    phases: list[dict[str, float]] = []
    for n in range(WARMUP + rounds):
        tool_round(history, n)
        data = json.dumps(body_of(history)).encode()  # the client's own cost, not timed
        via, alone = _paired(client, gateway, direct, data, session, n % 2 == 0)
        phases.append(gateway.timeline(*via[:2]))
        pairs.append((via, alone))
    return _steady_row(len(history), first, pairs[WARMUP:], phases[WARMUP:], load)


def _paired(
    client: httpx2.Client,
    gateway: GatewayProcess,
    direct: str,
    data: bytes,
    session: str,
    first: bool,
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    if first:
        via = streamed(client, gateway.url, data, session)
        return via, streamed(client, direct, data, session)
    alone = streamed(client, direct, data, session)
    return streamed(client, gateway.url, data, session), alone


def _steady_row(
    messages: int,
    first: tuple[float, float, float],
    pairs: list[tuple[tuple[float, float, float], tuple[float, float, float]]],
    phases: list[dict[str, float]],
    load: float,
) -> Json:
    added = sorted((via[1] - alone[1]) * 1000 for via, alone in pairs)
    added_total = [(via[2] - alone[2]) * 1000 for via, alone in pairs]
    quartiles = statistics.quantiles(added, n=4)
    return {
        "messages": messages,
        "rounds": len(pairs),
        "load_at_start": round(load, 2),
        "load_at_end": round(os.getloadavg()[0], 2),
        "first_call_ms": round(first[2] * 1000, 1),
        "ttfb_gateway_ms": _ms(statistics.median(via[1] for via, _ in pairs) * 1000),
        "ttfb_direct_ms": _ms(statistics.median(alone[1] for _, alone in pairs) * 1000),
        "ttfb_added_p50_ms": _ms(statistics.median(added)),
        "ttfb_added_p25_p75_ms": [_ms(quartiles[0]), _ms(quartiles[2])],
        "total_added_p50_ms": _ms(statistics.median(added_total)),
        "gateway_process_cpu_p50_ms": _ms(statistics.median(p[CPU] for p in phases)),
        "phases_p50_ms": {
            name: _ms(statistics.median(p[name] for p in phases if name in p))
            for name in phases[0]
            if name != CPU
        },
    }


def _ms(value: float) -> float:
    return round(value, 2)


def concurrent(url: str, clients: int = 50, calls: int = 5) -> Json:
    errors: list[str] = []
    firsts: list[float] = []
    lock = threading.Lock()

    def one_client(index: int) -> None:
        history = synthetic_history(40, seed=index)
        with httpx2.Client(timeout=120) as client:
            for n in range(calls):
                tool_round(history, n)
                try:
                    _, first, _ = streamed(client, url, body_of(history), f"load-{index}")
                except Exception as error:
                    with lock:
                        errors.append(f"{type(error).__name__}: {error}")
                    continue
                with lock:
                    firsts.append(first)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one_client, range(clients)))
    quantiles = statistics.quantiles(firsts, n=20) if len(firsts) > 1 else [0.0] * 19
    return {
        "clients": clients,
        "calls": clients * calls,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "ttfb_p50_ms": round(statistics.median(firsts) * 1000, 1) if firsts else None,
        "ttfb_p95_ms": round(quantiles[18] * 1000, 1),
        "wall_s": round(time.perf_counter() - started, 2),
    }


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_per_session(client: httpx2.Client, url: str, sessions: int = 20) -> Json:
    histories = [synthetic_history(400, seed=100 + i) for i in range(sessions)]
    gc.collect()
    before = resident_bytes()
    for index, history in enumerate(histories):
        streamed(client, url, body_of(history), f"memory-{index}")
    gc.collect()
    grown = resident_bytes() - before
    return {
        "sessions": sessions,
        "messages_each": 401,
        "mib_per_session": round(grown / sessions / 2**20, 2),
    }


def cache_share(send: Callable[[str, Json], None], upstream: FakeAnthropicAPI) -> float:
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=00;"},
        {"type": "text", "text": "You run tools. " * 400, "cache_control": {"type": "ephemeral"}},
    ]
    history: list[Json] = [{"role": "user", "content": "begin"}]
    for n in range(30):
        marked = [dict(m) for m in history]
        last = marked[-1]
        content = last["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
        marked[-1] = {**last, "content": blocks}
        send(MODEL, {"model": MODEL, "max_tokens": 100, "system": system, "messages": marked})
        tool_round(history, n)
        history[-1]["content"][0]["content"] = tool_output(n, 1500)
    usage = upstream.usages
    read = sum(u["cache_read_input_tokens"] for u in usage)
    total = sum(
        u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] + u["input_tokens"]
        for u in usage
    )
    return read / total


def cache_shares(home: Path) -> Json:
    shares = {}
    for name in ("direct", "gateway"):
        with (
            FakeAnthropicAPI(responder=lambda body: text_reply("ok")) as upstream,
            running_gateway(upstream.base_url, home / name, max_input_tokens=HUGE_WINDOW) as gw,
            httpx2.Client(timeout=60) as client,
        ):
            url = gw.url if name == "gateway" else upstream.base_url

            def send(
                model: str, body: Json, url: str = url, client: httpx2.Client = client
            ) -> None:
                headers = {"x-api-key": "sk-ant-bench", "x-hango-session": "cache"}
                client.post(f"{url}/v1/messages", json=body, headers=headers).raise_for_status()

            shares[name] = round(cache_share(send, upstream), 4)
    return {**shares, "difference": round(shares["gateway"] - shares["direct"], 4)}


def _serve_gateway(upstream: str, home: str, marks: Any, port: Any) -> None:
    """The gateway's process: ``hango serve``'s app on ``upstream``, timed per phase."""
    # A pipe, not a queue: sent in the gateway's event loop after the answer ended, with
    # no feeder thread of its own competing with the gateway's threads for the GIL.
    install(marks.send)
    with running_gateway(upstream, Path(home), max_input_tokens=HUGE_WINDOW) as gw:
        port.value = int(gw.url.rsplit(":", 1)[1])
        threading.Event().wait()  # until the process is terminated


@contextmanager
def gateway_process(upstream: str, home: Path) -> Iterator[GatewayProcess]:
    receiving, sending = multiprocessing.get_context("spawn").Pipe(duplex=False)
    serve = functools.partial(_serve_gateway, upstream, str(home), sending)
    with server_process(serve) as url:
        yield GatewayProcess(url, receiving)


def run(sizes: list[int], rounds: int) -> Json:
    results: Json = {"steady": [], "cpu_count": os.cpu_count(), "load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as scratch, streaming_api() as direct:
        home = Path(scratch)
        with (
            gateway_process(direct, home / "gw") as gateway,
            httpx2.Client(timeout=600) as client,
        ):
            for size in sizes:
                results["steady"].append(steady(client, gateway, direct, size, rounds))
                print(json.dumps(results["steady"][-1]), flush=True)
            with gateway.drained():
                results["concurrent_gateway"] = concurrent(gateway.url)
            results["concurrent_direct"] = concurrent(direct)
            print(json.dumps(results["concurrent_gateway"]), flush=True)
        with (
            running_gateway(direct, home / "memory", max_input_tokens=HUGE_WINDOW) as gw,
            httpx2.Client(timeout=600) as client,
        ):
            results["memory"] = memory_per_session(client, gw.url)
        results["cache_read_share"] = cache_shares(home)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[400, 2000, 10000])
    parser.add_argument(
        "--rounds", "--repeats", type=int, default=31, help="paired rounds per size"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    results = run(args.sizes, args.rounds)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
