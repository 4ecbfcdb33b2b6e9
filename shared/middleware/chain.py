"""The middleware chain, assembled in one place so its order can be read at a glance."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial, reduce

from hango.core.messages import Response
from hango.middleware.base import Assembly, Handler, Middleware, ModelCall


def build_chain(
    *,
    filesystem: Middleware,
    truncation: Middleware,
    summarization: Middleware,
    prompt_cache: Middleware,
    late: Sequence[Middleware] = (),
) -> tuple[Middleware, ...]:
    """The order every model call passes through, outermost first."""
    return (
        # Contributes the file tools and their system block; large tool results were
        # already offloaded by it when they were produced.
        filesystem,
        # The cheapest mechanism first: old large tool arguments/results become previews.
        truncation,
        # Counts the whole request (every block contributed anywhere in the chain) and
        # compacts over the trigger; the result is validated before it moves on.
        summarization,
        # Breakpoints rolling with the messages, on the stable system block and the summary.
        prompt_cache,
        # The slot for blocks contributed later (memory): they land after the system
        # breakpoint by design, because they change more often than what precedes it.
        *late,
    )


def assemble(chain: Sequence[Middleware], base: Assembly | None = None) -> Assembly:
    """Phase one: every middleware contributes system blocks and tools, in chain order,
    after ``base`` (the agent's own system prompt, the most stable block of all)."""
    return reduce(lambda assembly, mw: mw.contribute(assembly), chain, base or Assembly())


def run_chain(chain: Sequence[Middleware], call: ModelCall, terminal: Handler) -> Response:
    """Phase two: the call passes through every middleware's ``wrap``, then ``terminal``."""
    handler = terminal
    for middleware in reversed(chain):
        # A partial, not a closure: no Python frame of its own between two middlewares.
        handler = partial(middleware.wrap, call_next=handler)
    return handler(call)
