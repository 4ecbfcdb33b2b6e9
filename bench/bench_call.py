"""Per-call CPU cost of hango's inline path beside deepagents and langchain, in one process.

The same synthetic tool-calling history (``bench.bench_call_peers.synthetic_history``, in
Messages API JSON) is stored in a hango session on the embedded SQLite default, with an
instant scripted provider, and given to the peers' per-call hooks. Interleaved rounds,
CPU time (``time.process_time``) medians, for each size:

- ``hango steady``: one agent step after the loop has seen the history: the previous
  tool round appended and the model's reply made (not timed), then ``call_model`` through
  the whole chain, plus ``api_body()`` of the request (what the Anthropic provider hands
  the SDK); the provider caches prompts like the Anthropic one, so the breakpoints are
  placed too;
- ``hango cold``: a fresh agent (new loop, estimator and caches) over the stored session,
  loading it and making the first call;
- ``hango compacting``: the call that crosses the trigger and compacts, with an instant
  summarizer and an in-memory offloader (so the summarizer itself is not measured);
- ``json.dumps``: of the exact body hango's steady call sent, the floor of any sender;
- the peers' hooks and whole stacks (see ``bench.bench_call_peers``).

Ratios are printed and, with ``--json PATH``, written as JSON.

Run: ``python -m bench.bench_call [--sizes 400 2000 10000] [--repeats 15] [--json PATH]``
(the peers come with the ``bench`` extra: ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import bench_call_peers as peers
from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.compaction.record import RunState
from hango.core.messages import Message, Request, Response, TextBlock, Usage
from hango.core.settings import load_settings
from hango.middleware.base import StateHolder
from hango.providers.base import Capabilities
from hango.providers.scripted import ScriptedProvider
from hango.store import Store
from hango.wiring.agent import Agent, build_agent

SESSION = "bench"
STEADY_WINDOW = 1_000_000_000


class InstantSummarizer:
    """A summary at once: the benchmark measures the pipeline, not a model."""

    def summarize(self, job: SummaryJob) -> SummaryResult:
        return SummaryResult(
            text=f"Summary of messages {job.from_seq}-{job.to_seq}.", summarizer="instant"
        )


class MemoryOffloader:
    def offload(self, job: OffloadJob) -> str:
        return f"/conversation_history/{job.session_id}.md"


_OK = (TextBlock(text="ok"),)


def instant_reply(request: Request) -> Response:
    """The model's answer to ``request``, with usage (what a real response always carries)."""
    return reply_to(request.model, len(request.messages))


def reply_to(model: str, messages: int) -> Response:
    """The model's answer to a request of ``messages`` messages.

    Built without validation: the model answers instantly, so what a reply costs to parse
    belongs to the provider's side, which the peers' hooks do not pay either.
    """
    usage = Usage.model_construct(input_tokens=messages * 450, output_tokens=1)
    return Response.model_construct(
        id="msg_bench", model=model, content=_OK, stop_reason="end_turn", usage=usage
    )


@dataclass
class Hango:
    """One stored session and an agent over it."""

    root: Path
    window: int
    history: list[dict[str, Any]]
    provider: ScriptedProvider = field(default_factory=lambda: ScriptedProvider())
    agent: Agent | None = None
    prompt_caching: bool = True

    def settings(self) -> Any:
        return load_settings(
            model=peers.MODEL,
            model_profiles={peers.MODEL: {"max_input_tokens": self.window}},
            database_url=f"sqlite:///{self.root / 'hango.db'}",
            history_root=self.root / "history",
        )

    def build(self, store: Store | None = None) -> Agent:
        # Caching prompts, as the Anthropic provider does: the breakpoints are placed on
        # every call, as in production.
        self.provider = ScriptedProvider(
            fallback=instant_reply, capabilities=Capabilities(prompt_caching=self.prompt_caching)
        )
        # The peers' system prompt; the tools are hango's own (file tools, history tools).
        system = (TextBlock(text=peers.system_prompt()),)
        agent = build_agent(
            self.settings(),
            provider=self.provider,
            summarizer=InstantSummarizer(),
            offloader=MemoryOffloader(),
            store=store,
            system_prompt=system,
        )
        self.agent = agent
        return agent


def store_history(hango: Hango) -> Agent:
    agent = hango.build()
    ctx = agent.loop.begin_turn(SESSION)
    for item in hango.history:
        agent.loop.append(ctx, Message.model_validate(item))
    agent.loop.end_turn(ctx)
    return agent


Timed = Callable[[], object]
Step = tuple[Callable[[], None], Timed]


def steady(hango: Hango) -> Step:
    """Append one tool round (untimed), then the call plus the body the provider sends."""
    agent = store_history(hango)
    # Its own provider: the cold step builds new agents (and providers) on the same Hango.
    provider = hango.provider
    loop = agent.loop
    ctx = loop.begin_turn(SESSION)
    rounds = iter(range(10**9))
    loop.call_model(ctx)

    def prepare() -> None:
        n = next(rounds)
        use = {"type": "tool_use", "id": f"toolu_bench_{n}", "name": "bash", "input": {"n": n}}
        answer = {"type": "tool_result", "tool_use_id": f"toolu_bench_{n}", "content": "done"}
        loop.append(ctx, Message.model_validate({"role": "assistant", "content": [use]}))
        loop.append(ctx, Message.model_validate({"role": "user", "content": [answer]}))
        # The model's reply is ready before the call: making it is the model's (and its
        # SDK's) work, not the layer's, and the peers' hooks make none either. The call
        # sends the previous request plus the tool round just appended.
        previous = provider.requests[-1]
        provider.push(reply_to(previous.model, len(previous.messages) + 2))

    def call() -> object:
        loop.call_model(ctx)
        return provider.requests[-1].api_body()

    return prepare, call


def dumps_of(hango: Hango) -> Step:
    body = hango.provider.requests[-1].api_body()
    return (lambda: None), (lambda: json.dumps(body))


def cold(hango: Hango) -> Step:
    """A fresh agent over the stored session: load it and make the first call."""
    store = Store.from_url(f"sqlite:///{hango.root / 'hango.db'}")

    def call() -> object:
        agent = hango.build(store)
        ctx = agent.loop.begin_turn(SESSION)
        return agent.loop.call_model(ctx)

    return (lambda: None), call


def compacting(hango: Hango) -> Step:
    """The call that crosses the trigger and compacts, from the uncompacted state each time."""
    agent = store_history(hango)
    provider = hango.provider
    loop = agent.loop
    ctx = loop.begin_turn(SESSION)

    def prepare() -> None:
        ctx.holder = StateHolder(RunState())

    def call() -> object:
        loop.call_model(ctx)
        return provider.requests[-1].api_body()

    return prepare, call


def interleave(steps: dict[str, Step], repeats: int) -> dict[str, list[float]]:
    """CPU seconds of each timed part, round-robin; one untimed warm-up round first."""
    for prepare, call in steps.values():
        prepare()
        call()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, (prepare, call) in steps.items():
            prepare()
            gc.collect()
            started = time.process_time()
            call()
            samples[name].append(time.process_time() - started)
    return samples


def peer_steps(calls: dict[str, Callable[[], object]]) -> dict[str, Step]:
    return {name: ((lambda: None), call) for name, call in calls.items()}


def measure(size: int, repeats: int, root: Path, caching: bool = True) -> dict[str, float]:
    """Median milliseconds of every call at one size."""
    history = peers.synthetic_history(size)
    medians: dict[str, float] = {}
    with peers.no_network():
        steady_hango = Hango(
            root / f"steady-{size}", STEADY_WINDOW, history, prompt_caching=caching
        )
        steady_hango.root.mkdir(parents=True)
        steps = {"hango steady call + api_body": steady(steady_hango)}
        steps["json.dumps of the body"] = dumps_of(steady_hango)
        steps["hango cold"] = cold(steady_hango)
        steps.update(peer_steps(peers.peer_steady_calls(history)))
        medians.update(_medians(interleave(steps, repeats)))
        window = peers.COMPACT_WINDOW
        compact_hango = Hango(root / f"compact-{size}", window, history, prompt_caching=caching)
        compact_hango.root.mkdir(parents=True)
        steps = {"hango compacting call + api_body": compacting(compact_hango)}
        compact_peers = peers.peer_compacting_calls(history)
        steps.update({f"{n} (compacting)": s for n, s in peer_steps(compact_peers).items()})
        medians.update(_medians(interleave(steps, repeats)))
    return medians


def _medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def ratios(results: dict[int, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    sizes = sorted(results)
    for size in sizes:
        r = results[size]
        call = r["hango steady call + api_body"]
        out[f"{size}: steady / json.dumps"] = call / r["json.dumps of the body"]
        out[f"{size}: steady / deepagents hook"] = call / r["deepagents.wrap_model_call"]
        out[f"{size}: steady / langchain hook"] = call / r["langchain.before_model"]
        peer = r.get("deepagents.wrap_model_call (compacting)")
        if peer is not None:
            out[f"{size}: compacting / deepagents compacting"] = (
                r["hango compacting call + api_body"] / peer
            )
    if len(sizes) > 1:
        first, last = results[sizes[0]], results[sizes[-1]]
        key = "hango steady call + api_body"
        out[f"steady {sizes[-1]} / steady {sizes[0]}"] = last[key] / first[key]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(peers.SIZES))
    parser.add_argument("--repeats", type=int, default=peers.REPEATS)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument(
        "--no-prompt-cache",
        action="store_true",
        help="a provider that does not cache prompts (no breakpoints placed), as before",
    )
    args = parser.parse_args(argv)
    try:
        import deepagents  # noqa: F401
        import langchain  # noqa: F401
    except ImportError as exc:
        print(f"skipped: the peers are not installed ({exc}); install the bench extra")
        return
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes:
            results[size] = measure(
                size, args.repeats, Path(scratch), caching=not args.no_prompt_cache
            )
            print(f"\n{size} messages (CPU ms, median of {args.repeats} interleaved rounds)")
            for name, value in results[size].items():
                print(f"  {name:<56} {value:>10.2f}")
    found = ratios(results)
    print("\nratios")
    for name, value in found.items():
        print(f"  {name:<56} {value:>10.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"ms": results, "ratios": found}, indent=2) + "\n")


if __name__ == "__main__":
    main()
