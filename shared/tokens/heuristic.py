"""The dependency-free estimator: UTF-8 bytes over a calibrated bytes-per-token ratio.

Calibration (``bench/bench_estimate.py`` documents it in ``docs/benchmarks.md``): over
the text content of the eight reference transcripts (text, compact tool_use input JSON,
tool_result text), 1,124,259 UTF-8 bytes gave 309,372 cl100k tokens, 3.634 bytes per
cl100k token. Real Claude tokens are ~ 1.11 x cl100k on real sessions
(docs/benchmarks.md has the method), so one real token is 3.634 / 1.11 ~ 3.27 bytes.
Per transcript the cl100k ratio ranged 3.51-3.99 bytes per token.

Bytes rather than characters: text outside ASCII (CJK, emoji) costs about one token per
character, which its UTF-8 length tracks and its character count does not.
"""

from __future__ import annotations

from shared.tokens.framing import FramedEstimator

BYTES_PER_TOKEN = 3.27


def heuristic_text_tokens(text: str) -> float:
    """Real-token estimate of ``text`` from its UTF-8 length."""
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return size / BYTES_PER_TOKEN


class HeuristicEstimator(FramedEstimator):
    """Calibrated bytes-per-token estimate plus the shared request framing."""

    def __init__(self) -> None:
        super().__init__("heuristic", heuristic_text_tokens)
