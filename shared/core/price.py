"""One model's prices in USD per million tokens, and what a call's tokens cost.

A core type: part of a model's profile (:mod:`hango.core.profiles` holds the table) and
of a ``HANGO_MODEL_PROFILES`` entry, which the settings validate.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

TOKENS_PER_MTOK = 1_000_000


class Price(BaseModel):
    """One model's rates in USD per million tokens (never negative, never inf or nan)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    base_input: float = Field(ge=0)
    cache_write_5m: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    output: float = Field(ge=0)

    def input_cost(self, read: int, write: int, uncached: int) -> float:
        """USD for a prompt split into cache reads, 5-minute cache writes and uncached tokens."""
        per_mtok = read * self.cache_read + write * self.cache_write_5m + uncached * self.base_input
        return per_mtok / TOKENS_PER_MTOK

    def output_cost(self, output_tokens: int) -> float:
        """USD for the generated tokens."""
        return output_tokens * self.output / TOKENS_PER_MTOK
