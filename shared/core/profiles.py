"""Model profiles: each model's window and when to compact it.

A profile is resolved from three layers, most specific first:

1. ``HANGO_MODEL_PROFILES`` entries (``{"model": {"max_input_tokens": n, ...}}``);
2. the built-in table of current Claude windows (:data:`BUILTIN_WINDOWS`);
3. for fields a profile leaves unset, the settings-level defaults
   ``HANGO_CONTEXT_TRIGGER_FRAC``, ``HANGO_CONTEXT_KEEP_FRAC``, ``HANGO_CONTEXT_TARGET_FRAC``,
   ``HANGO_SUMMARIZER_MODEL``
   (and the model itself as its own summarizer when none is named).

A model found nowhere gets the documented fallback: compact at 170,000 tokens and keep
the last 6 messages. That is logged once per unknown model, not once per call.

Dated ids (``claude-sonnet-4-5-20250929``, ``claude-sonnet-4-5@20250929``) resolve to
their base id. The table is a seed (research note A5); windows change, so an override
always wins.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from shared.core.settings import ProfileOverride, Settings

log = logging.getLogger(__name__)

FALLBACK_MAX_INPUT_TOKENS = 200_000
FALLBACK_TRIGGER_TOKENS = 170_000
FALLBACK_KEEP_LAST = 6

_1M = 1_000_000
_200K = 200_000

# Max input tokens per base model id (research note A5, from the models overview pages).
BUILTIN_WINDOWS: Mapping[str, int] = {
    "claude-opus-4-8": _1M,
    "claude-opus-4-7": _1M,
    "claude-opus-4-6": _1M,
    "claude-opus-4-5": _200K,
    "claude-sonnet-4-6": _1M,
    "claude-sonnet-4-5": _200K,
    "claude-haiku-4-5": _200K,
    "claude-opus-5": _1M,
    "claude-opus-5-5": _1M,
    "claude-sonnet-5": _1M,
    "claude-sonnet-5-5": _1M,
    "claude-haiku-5-5": _1M,
}

_DATE_SUFFIX = re.compile(r"[-@]\d{8}$")


def base_model_id(model: str) -> str:
    """The id without its snapshot date: ``claude-haiku-4-5-20251001`` -> ``claude-haiku-4-5``."""
    return _DATE_SUFFIX.sub("", model.strip())


@dataclass(frozen=True)
class ModelProfile:
    """When to compact one model's requests and how much to keep.

    Exactly one of ``keep_frac`` (a fraction of the messages) and ``keep_last`` (a fixed
    number of messages, used by the unknown-model fallback) is set.
    """

    model: str
    max_input_tokens: int
    trigger_frac: float
    keep_frac: float | None
    summarizer_model: str
    known: bool
    keep_last: int | None = None
    # Where a mechanical truncation aims, as a share of the window (HANGO_CONTEXT_TARGET_FRAC).
    target_frac: float = 0.60

    def __post_init__(self) -> None:
        if self.max_input_tokens <= 0:
            raise ValueError(f"{self.model}: max_input_tokens must be positive")
        if not 0 < self.trigger_frac <= 1:
            raise ValueError(f"{self.model}: trigger_frac must be in (0, 1]")
        if (self.keep_frac is None) == (self.keep_last is None):
            raise ValueError(f"{self.model}: set exactly one of keep_frac and keep_last")
        if self.keep_frac is not None and not 0 < self.keep_frac < 1:
            raise ValueError(f"{self.model}: keep_frac must be in (0, 1)")
        if self.keep_last is not None and self.keep_last < 1:
            raise ValueError(f"{self.model}: keep_last must be at least 1")
        if not 0 < self.target_frac < 1:
            raise ValueError(f"{self.model}: target_frac must be in (0, 1)")

    @property
    def trigger_tokens(self) -> int:
        """Input tokens above which the request is compacted."""
        # The epsilon keeps e.g. 200,000 x 0.85 from flooring to 169,999 on float error.
        return int(self.max_input_tokens * self.trigger_frac + 1e-6)

    @property
    def target_tokens(self) -> int:
        """Where a truncation aims: well under the trigger, so the next calls fit as they are.

        Never above the trigger: a target over it would truncate to a request that compacts
        again on the next call.
        """
        return min(int(self.max_input_tokens * self.target_frac + 1e-6), self.trigger_tokens)

    def keep_count(self, n_messages: int) -> int:
        """How many of the latest ``n_messages`` to keep verbatim (at least one, if any)."""
        if n_messages <= 0:
            return 0
        if self.keep_frac is not None:
            # The epsilon keeps 30 x 0.1 = 3.0000000000000004 from rounding up to 4.
            return min(n_messages, max(1, math.ceil(n_messages * self.keep_frac - 1e-9)))
        return min(n_messages, self.keep_last or 1)


class Profiles:
    """Resolves a model name to its :class:`ModelProfile` (cached per model)."""

    def __init__(
        self,
        *,
        overrides: Mapping[str, ProfileOverride] | None = None,
        trigger_frac: float = 0.85,
        keep_frac: float = 0.10,
        target_frac: float = 0.60,
        summarizer_model: str | None = None,
        windows: Mapping[str, int] = BUILTIN_WINDOWS,
    ) -> None:
        given = dict(overrides or {})
        # Exact keys first, then their base ids, so a dated key also covers its alias.
        self._overrides = {base_model_id(k): v for k, v in given.items()} | given
        self._windows = {base_model_id(k): v for k, v in windows.items()}
        self._trigger_frac = trigger_frac
        self._keep_frac = keep_frac
        self._target_frac = target_frac
        self._summarizer_model = summarizer_model
        self._resolved: dict[str, ModelProfile] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> Profiles:
        return cls(
            overrides=settings.model_profiles,
            trigger_frac=settings.context_trigger_frac,
            keep_frac=settings.context_keep_frac,
            target_frac=settings.context_target_frac,
            summarizer_model=settings.summarizer_model,
        )

    def resolve(self, model: str) -> ModelProfile:
        with self._lock:
            profile = self._resolved.get(model)
            if profile is None:
                profile = self._build(model)
                self._resolved[model] = profile
                if not profile.known:
                    log.warning(
                        "model %r has no profile: compacting at %d tokens and keeping the "
                        "last %d messages; describe it in HANGO_MODEL_PROFILES",
                        model,
                        FALLBACK_TRIGGER_TOKENS,
                        FALLBACK_KEEP_LAST,
                    )
            return profile

    def _build(self, model: str) -> ModelProfile:
        base = base_model_id(model)
        override = self._overrides.get(model) or self._overrides.get(base)
        if override is not None:
            return self._profile(
                model,
                override.max_input_tokens,
                trigger_frac=override.trigger_frac,
                keep_frac=override.keep_frac,
                summarizer_model=override.summarizer_model,
            )
        window = self._windows.get(base)
        if window is not None:
            return self._profile(model, window)
        return ModelProfile(
            model=model,
            max_input_tokens=FALLBACK_MAX_INPUT_TOKENS,
            trigger_frac=FALLBACK_TRIGGER_TOKENS / FALLBACK_MAX_INPUT_TOKENS,
            keep_frac=None,
            keep_last=FALLBACK_KEEP_LAST,
            summarizer_model=self._summarizer_model or model,
            known=False,
            target_frac=self._target_frac,
        )

    def _profile(
        self,
        model: str,
        max_input_tokens: int,
        *,
        trigger_frac: float | None = None,
        keep_frac: float | None = None,
        summarizer_model: str | None = None,
    ) -> ModelProfile:
        return ModelProfile(
            model=model,
            max_input_tokens=max_input_tokens,
            trigger_frac=self._trigger_frac if trigger_frac is None else trigger_frac,
            keep_frac=self._keep_frac if keep_frac is None else keep_frac,
            summarizer_model=summarizer_model or self._summarizer_model or model,
            known=True,
            target_frac=self._target_frac,
        )
