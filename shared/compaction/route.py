"""Which way a summary is made and what each way is expected to cost.

Two routes make a summary:

- ``range``: the summarizer model reads the evicted range rendered as text
  (:func:`~hango.compaction.summary_prompt.build_summary_request`), every token at its base
  input price;
- ``prefix``: the agent's own model gets the exact request the previous call sent, with
  the summary instruction appended after its rolling breakpoint, so the provider reads the
  rest from its prompt cache (:mod:`hango.compaction.prefix`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from hango.core.messages import Usage
from hango.core.price import TOKENS_PER_MTOK, Price

RouteName = Literal["range", "prefix"]
RouteSetting = Literal["auto", "range", "prefix"]

# The provider's default cache lifetime: a prefix last sent longer ago than this is cold.
CACHE_TTL_SECONDS = 300.0


class SummaryRoute(BaseModel):
    """How a compaction's summary was made and what it cost, in USD.

    ``expected_*``: the estimate each route had when the choice was made (``None``: the
    route was not open, ``reason`` says why); ``cost_usd``: the summary calls' real usage
    priced (cache reads at the cache-read rate), every attempt included.
    """

    model_config = ConfigDict(frozen=True)

    name: RouteName = "range"
    reason: str | None = None
    expected_prefix_usd: float | None = None
    expected_range_usd: float | None = None
    cost_usd: float | None = None


def usage_cost(usage: Usage | None, price: Price) -> float:
    """USD for one call's (or several calls') usage: reads, writes, uncached, output."""
    if usage is None:
        return 0.0
    return price.input_cost(*usage.split()) + price.output_cost(usage.output_tokens)


def expected_prefix_cost(prefix: int, instruction: int, output: int, price: Price) -> float:
    """The prefix read from the cache, the instruction fresh, the summary out."""
    per_mtok = prefix * price.cache_read + instruction * price.base_input + output * price.output
    return per_mtok / TOKENS_PER_MTOK


def expected_range_cost(range_tokens: int, output: int, price: Price) -> float:
    """The rendered range fresh (it shares no prefix with anything cached), the summary out."""
    return (range_tokens * price.base_input + output * price.output) / TOKENS_PER_MTOK
