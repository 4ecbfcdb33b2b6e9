"""Per-call CPU cost of hango's inline path beside deepagents and langchain, in one process.

The same synthetic tool-calling history (``bench.bench_call_peers.synthetic_history``, in
Messages API JSON) is stored in a hango session on the embedded SQLite default, with an
instant scripted provider, and given to the peers' per-call hooks. Interleaved rounds,
CPU time (``time.process_time``) medians, for each size:

- ``hango steady``: one agent step after the loop has seen the history: the previous
  tool round appended and the model's reply made (not timed), then ``call_model`` through
  the whole chain, plus ``api_parts()`` of the request (the body the Anthropic provider
  joins and sends through the SDK); the provider caches prompts like the Anthropic one, so
  the breakpoints are placed too;
- ``hango cold``: a fresh agent (new loop, estimator and caches) over the stored session,
  loading it and making the first call, in this process (whose other agents and peers
  hold far more objects than the session: the collector's full passes are rarer here);
- ``hango cold, restarted process``: the same in a process of its own, started for it
  (spawned; imports not timed), as a deployment restarts, its collector included: the
  agent built (once per process: mostly the tokenizer's tables loaded) and its first call
  (the session loaded and sent), timed apart;
- ``hango in-band``: regime (b), the steady call with the window sized so the request
  sits between the pre-summary watermark and the trigger, a ready pre-summary held;
- ``hango truncation-step``: regime (c), the call that moves the truncation cut;
- ``hango compacting``: the call that crosses the trigger and compacts, with an instant
  summarizer and an in-memory offloader (so the summarizer itself is not measured), and
  regime (d), the same call with the default wiring's ports: the real offload to the local
  history directory and the summarizer building its real prompt for an instant model;
- ``hango whole call``: regime (f), the steady call through the Anthropic provider and the
  real SDK to a loopback HTTP server (its own process), beside the same body POSTed
  pre-serialized with the SDK's own HTTP client;
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
import multiprocessing
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import bench_call_peers as peers
from bench.loopback import loopback_api
from hango.agent.loop import TurnContext
from hango.compaction.jobs import OffloadJob, SummaryJob, SummaryResult
from hango.compaction.record import RunState
from hango.core.identity import HeldMemo
from hango.core.messages import Message, Request, Response, TextBlock, Usage
from hango.core.settings import load_settings
from hango.middleware.base import StateHolder
from hango.middleware.summarization import SummarizationMiddleware
from hango.middleware.tool_args import ToolArgTruncationMiddleware
from hango.providers.anthropic import AnthropicProvider
from hango.providers.base import Capabilities, Provider
from hango.providers.scripted import ScriptedProvider
from hango.store import Store
from hango.wiring.agent import Agent, build_agent

SESSION = "bench"
STEADY_WINDOW = 1_000_000_000
# Where the request sits in its window: between the watermark (0.70) and the trigger (0.85)
# with room for the rounds appended while timing; under the watermark, past half the trigger
# (where a truncation step that clears enough is taken).
BAND_SHARE = 0.74
STEP_SHARE = 0.6

STEADY = "hango steady call + body"
BAND = "hango in-band call + body"
STEP = "hango truncation-step call + body"
COMPACTING = "hango compacting call + body"
REAL_COMPACTING = "hango compacting call, real offload + prompt"
WHOLE = "hango whole call via SDK, loopback"
POST = "pre-serialized POST, same client"
RESTARTED = "hango cold, restarted process: first call"
RESTARTED_BUILD = "hango cold, restarted process: agent built"


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


SUMMARY = "## Task\nThe user asked for a refactor of the parser.\n" + "- step done\n" * 120


def summary_reply(request: Request) -> Response:
    """The summarizing model's instant answer: a summary of a plausible length."""
    usage = Usage.model_construct(input_tokens=len(request.messages) * 450, output_tokens=400)
    return Response.model_construct(
        id="msg_summary",
        model=request.model,
        content=(TextBlock(text=SUMMARY),),
        stop_reason="end_turn",
        usage=usage,
    )


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
    # The default wiring's offload to the local history directory and summarizer building
    # its real prompt (the model answers instantly), instead of stand-ins for both.
    real_ports: bool = False
    # The provider the agent sends through (None: the instant scripted one).
    sender: Provider | None = None
    # What the Anthropic provider keeps: the serialized fixed part, per system and tools.
    fixed: HeldMemo[bytes] = field(default_factory=HeldMemo)
    # The peers' system prompt, made once: generating the synthetic text (about 10 ms) is
    # the benchmark's input, not the cold start it times.
    system: str = field(default_factory=peers.system_prompt)

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
        system = (TextBlock(text=self.system),)
        ports: dict[str, Any] = {}
        if not self.real_ports:
            ports = {"summarizer": InstantSummarizer(), "offloader": MemoryOffloader()}
        agent = build_agent(
            self.settings(),
            provider=self.sender or self.provider,
            summarizer_provider=ScriptedProvider(fallback=summary_reply),
            store=store,
            system_prompt=system,
            **ports,
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


def steady(hango: Hango, agent: Agent | None = None) -> Step:
    """Append one tool round (untimed), then the call plus the body the provider sends."""
    agent = agent or store_history(hango)
    # Its own provider: the cold step builds new agents (and providers) on the same Hango.
    provider = hango.provider
    loop = agent.loop
    ctx = loop.begin_turn(SESSION)
    rounds = iter(range(10**9))
    loop.call_model(ctx)

    def prepare() -> None:
        append_tool_round(agent, ctx, next(rounds))
        # The model's reply is ready before the call: making it is the model's (and its
        # SDK's) work, not the layer's, and the peers' hooks make none either. The call
        # sends the previous request plus the tool round just appended.
        previous = provider.requests[-1]
        provider.push(reply_to(previous.model, len(previous.messages) + 2))

    def call() -> object:
        loop.call_model(ctx)
        return provider.requests[-1].api_parts(fixed=hango.fixed)

    return prepare, call


def append_tool_round(agent: Agent, ctx: TurnContext, n: int) -> None:
    use = {"type": "tool_use", "id": f"toolu_bench_{n}", "name": "bash", "input": {"n": n}}
    answer = {"type": "tool_result", "tool_use_id": f"toolu_bench_{n}", "content": "done"}
    agent.loop.append(ctx, Message.model_validate({"role": "assistant", "content": [use]}))
    agent.loop.append(ctx, Message.model_validate({"role": "user", "content": [answer]}))


def at_share(hango: Hango, share: float) -> Agent:
    """The stored session behind an agent whose window puts its request at ``share`` of it.

    The figure is the anchored one (the provider's usage of the previous call, corrected):
    a call on a probe agent with an unbounded window measures it; the agent returned is
    built over the same store with the window sized from it.
    """
    agent = store_history(hango)
    figure = settle(agent)
    hango.window = int(figure / share)
    agent = hango.build(agent.store)
    settle(agent)  # the decisions of the new window taken (a truncation step, say), untimed
    return agent


def settle(agent: Agent) -> int:
    """A turn of two calls (the second one anchored); the request's figure."""
    ctx = agent.loop.begin_turn(SESSION)
    agent.loop.call_model(ctx)
    agent.loop.call_model(ctx)
    agent.loop.end_turn(ctx)
    return ctx.holder.input_tokens


def summarization_of(agent: Agent) -> SummarizationMiddleware:
    return next(m for m in agent.loop.chain if isinstance(m, SummarizationMiddleware))


def in_band(hango: Hango) -> Step:
    """Regime (b): the request between the watermark and the trigger, a ready pre-summary held.

    Its summary was made before (untimed). Each round appends a tool round, so the session
    walks toward the trigger and the calls meet different decisions on the way (none due, a
    ready one not yet worth extending, the extension weighed on every call): at 400
    messages the median depends on how many rounds are timed (``bench.probe_band`` shows
    each round's).
    """
    agent = at_share(hango, BAND_SHARE)
    prepare_round, call = steady(hango, agent)
    middleware = summarization_of(agent)

    def prepare() -> None:
        prepare_round()
        held = middleware.presummaries.items.get(SESSION)
        if held is None:
            raise RuntimeError("the band regime holds no pre-summary: the window is off")
        held.work.result()  # ready, as a pre-summary dispatched calls ago is

    return prepare, call


def truncation_step(hango: Hango) -> Step:
    """Regime (c): the call that moves the truncation cut, from the uncut state each time.

    The window puts the request under the watermark but past half the trigger, where a
    step that clears enough is taken; the truncated forms are known (each call in a live
    session weighs the range the step covers), their JSON is made by the timed call.
    """
    agent = at_share(hango, STEP_SHARE)
    loop = agent.loop
    ctx = loop.begin_turn(SESSION)
    uncut = ctx.holder.state.model_copy(update={"truncated_before_seq": 0})
    truncation = next(m for m in loop.chain if isinstance(m, ToolArgTruncationMiddleware))

    def prepare() -> None:
        ctx.holder = StateHolder(uncut)
        # The copy sends the uncut messages again, so the timed step re-sends (serializes)
        # every message it newly truncates; the truncated forms stay known, as in a live
        # session where each call already weighed the range the step covers.
        ctx.memory.copy.truncate_below(0, truncation.truncation)

    def call() -> object:
        loop.call_model(ctx)
        if ctx.holder.state.truncated_before_seq == 0:
            raise RuntimeError("the truncation regime took no step: the window is off")
        return hango.provider.requests[-1].api_parts(fixed=hango.fixed)

    return prepare, call


def dumps_of(hango: Hango) -> Step:
    body = json.loads(hango.provider.requests[-1].api_bytes())
    return (lambda: None), (lambda: json.dumps(body))


def cold(hango: Hango) -> Step:
    """A fresh agent over the stored session: load it and make the first call."""
    store = Store.from_url(f"sqlite:///{hango.root / 'hango.db'}")

    def call() -> object:
        agent = hango.build(store)
        ctx = agent.loop.begin_turn(SESSION)
        return agent.loop.call_model(ctx)

    return (lambda: None), call


def _first_call_here(root: str, window: int, caching: bool, sink: Any) -> None:
    """In a new process: an agent over the session stored under ``root`` (its window and
    prompt caching as given), then its first call; the CPU ms of each go to ``sink``."""
    hango = Hango(Path(root), window, [], prompt_caching=caching)
    store = Store.from_url(f"sqlite:///{Path(root) / 'hango.db'}")
    started = time.process_time()
    agent = hango.build(store)
    built = time.process_time()
    agent.loop.call_model(agent.loop.begin_turn(SESSION))
    sink.send(((built - started) * 1000, (time.process_time() - built) * 1000))


def restarted(hango: Hango, repeats: int) -> dict[str, float]:
    """Median CPU ms of the cold start in ``repeats`` processes of its own, one at a time."""
    context = multiprocessing.get_context("spawn")
    taken = []
    for _ in range(repeats):
        receiving, sending = context.Pipe(duplex=False)
        shape = (str(hango.root), hango.window, hango.prompt_caching)
        child = context.Process(target=_first_call_here, args=(*shape, sending))
        child.start()
        sending.close()  # a child that dies ends recv() with EOFError, not a hang
        taken.append(receiving.recv())
        child.join()
    return {
        RESTARTED_BUILD: statistics.median(build for build, _ in taken),
        RESTARTED: statistics.median(call for _, call in taken),
    }


def compacting(hango: Hango) -> Step:
    """The call that crosses the trigger and compacts, from the uncompacted state each time.

    With ``real_ports`` the evicted range is written to the local history file (removed
    before each call: every call is the session's first summary, as the peers' are) and
    the summarizer builds its prompt and calls the instant model.
    """
    agent = store_history(hango)
    provider = hango.provider
    loop = agent.loop
    ctx = loop.begin_turn(SESSION)

    def prepare() -> None:
        ctx.holder = StateHolder(RunState())
        shutil.rmtree(hango.root / "history", ignore_errors=True)

    def call() -> object:
        loop.call_model(ctx)
        return provider.requests[-1].api_parts(fixed=hango.fixed)

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
        steps = {STEADY: steady(steady_hango)}
        steps["json.dumps of the body"] = dumps_of(steady_hango)
        steps["hango cold"] = cold(steady_hango)
        steps[BAND] = in_band(made(root / f"band-{size}", history, caching))
        steps[STEP] = truncation_step(made(root / f"step-{size}", history, caching))
        steps.update(peer_steps(peers.peer_steady_calls(history)))
        medians.update(_medians(interleave(steps, repeats)))
        medians.update(restarted(steady_hango, repeats))
        window = peers.COMPACT_WINDOW
        steps = {
            COMPACTING: compacting(made(root / f"compact-{size}", history, caching, window)),
            REAL_COMPACTING: compacting(
                made(root / f"real-{size}", history, caching, window, real_ports=True)
            ),
        }
        compact_peers = peers.peer_compacting_calls(history, root / f"deepagents-files-{size}")
        steps.update({f"{n} (compacting)": s for n, s in peer_steps(compact_peers).items()})
        medians.update(_medians(interleave(steps, repeats)))
    # The one regime that talks HTTP, to a server of its own on the loopback interface.
    with loopback_api() as url:
        steps = whole_call_steps(url, root / f"whole-{size}", history)
        medians.update(_medians(interleave(steps, repeats)))
    return medians


def scaling(sizes: Sequence[int], repeats: int, root: Path, caching: bool) -> dict[str, float]:
    """The steady and in-band calls at the smallest and the largest size in the same
    interleaved rounds: their ratio side by side, not across the minutes (and the machine's
    load) between two sizes' runs."""
    steps: dict[str, Step] = {}
    with peers.no_network():
        for size in (min(sizes), max(sizes)):
            history = peers.synthetic_history(size)
            band = made(root / f"scale-band-{size}", history, caching)
            steps[f"{STEADY} at {size}"] = steady(made(root / f"scale-{size}", history, caching))
            steps[f"{BAND} at {size}"] = in_band(band)
        return _medians(interleave(steps, repeats))


def made(
    root: Path,
    history: list[dict[str, Any]],
    caching: bool,
    window: int = STEADY_WINDOW,
    **more: Any,
) -> Hango:
    root.mkdir(parents=True)
    return Hango(root, window, history, prompt_caching=caching, **more)


def whole_call_steps(url: str, root: Path, history: list[dict[str, Any]]) -> dict[str, Step]:
    """Regime (f): the steady call through the Anthropic provider and the real SDK over
    loopback HTTP, beside the same body POSTed pre-serialized with the SDK's HTTP client."""
    sender = AnthropicProvider(api_key="bench", base_url=url, prompt_caching=True)
    recorder = Recording(sender)
    hango = made(root, history, True, sender=recorder)
    agent = store_history(hango)
    loop = agent.loop
    ctx = loop.begin_turn(SESSION)
    loop.call_model(ctx)
    rounds = iter(range(10**9))

    def prepare() -> None:
        append_tool_round(agent, ctx, next(rounds))

    def whole() -> object:
        return loop.call_model(ctx)

    client = sender._client._client  # the SDK's own HTTP client, its pool warm
    headers = {"content-type": "application/json", "x-api-key": "bench"}

    body = [b""]

    def serialize() -> None:
        body[0] = json.dumps(json.loads(recorder.last.api_bytes())).encode()

    def post() -> object:
        return client.post(f"{url}/v1/messages", content=body[0], headers=headers).content

    return {WHOLE: (prepare, whole), POST: (serialize, post)}


class Recording:
    """The provider it wraps, keeping the last request sent."""

    def __init__(self, inner: AnthropicProvider) -> None:
        self.inner = inner
        self.last = Request(model=peers.MODEL, max_tokens=1, messages=())

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def complete(self, request: Request) -> Response:
        self.last = request
        return self.inner.complete(request)


def _medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) * 1000 for name, values in samples.items()}


def ratios(results: dict[int, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    sizes = sorted(results)
    for size in sizes:
        r = results[size]
        hook = r["deepagents.wrap_model_call"]
        for label, key in (("steady", STEADY), ("in-band", BAND)):
            out[f"{size}: {label} / json.dumps"] = r[key] / r["json.dumps of the body"]
            out[f"{size}: {label} / deepagents hook"] = r[key] / hook
        out[f"{size}: steady / langchain hook"] = r[STEADY] / r["langchain.before_model"]
        out[f"{size}: truncation step / deepagents hook"] = r[STEP] / hook
        peer = r.get("deepagents.wrap_model_call (compacting)")
        if peer is not None:
            out[f"{size}: compacting / deepagents compacting"] = r[COMPACTING] / peer
            out[f"{size}: real compacting / deepagents compacting"] = r[REAL_COMPACTING] / peer
        filed = r.get("deepagents.wrap_model_call[file backend] (compacting)")
        if filed is not None:
            out[f"{size}: real compacting / deepagents[file] compacting"] = (
                r[REAL_COMPACTING] / filed
            )
        out[f"{size}: whole call / pre-serialized POST"] = r[WHOLE] / r[POST]
    return out


def scaling_ratios(medians: dict[str, float], sizes: Sequence[int]) -> dict[str, float]:
    small, large = min(sizes), max(sizes)
    return {
        f"{label} {large} / {label} {small} (side by side)": medians[f"{key} at {large}"]
        / medians[f"{key} at {small}"]
        for label, key in (("steady", STEADY), ("in-band", BAND))
    }


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
        if len(args.sizes) > 1:
            scaled = scaling(args.sizes, args.repeats, Path(scratch), not args.no_prompt_cache)
            print(f"\nscaling (CPU ms, median of {args.repeats} interleaved rounds)")
            for name, value in scaled.items():
                print(f"  {name:<56} {value:>10.2f}")
    found = ratios(results)
    if len(args.sizes) > 1:
        found.update(scaling_ratios(scaled, args.sizes))
    print("\nratios")
    for name, value in found.items():
        print(f"  {name:<56} {value:>10.2f}")
    if args.json is not None:
        ms: dict[str, Any] = {str(size): r for size, r in results.items()}
        if len(args.sizes) > 1:
            ms["scaling"] = scaled
        args.json.write_text(json.dumps({"ms": ms, "ratios": found}, indent=2) + "\n")


if __name__ == "__main__":
    main()
