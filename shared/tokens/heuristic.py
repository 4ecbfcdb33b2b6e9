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

from hango.tokens.framing import FramedEstimator

BYTES_PER_TOKEN = 3.27
# Non-ASCII text is measured a slice at a time: encoding 50 MB at once would copy it whole.
_ENCODE_SLICE_CHARS = 1 << 20


def heuristic_text_tokens(text: str) -> float:
    """Real-token estimate of ``text`` from its UTF-8 length (in bounded memory)."""
    return utf8_length(text) / BYTES_PER_TOKEN


def utf8_length(text: str) -> int:
    """``len(text.encode("utf-8"))`` without holding more than a slice's bytes at once."""
    if text.isascii():
        return len(text)
    return sum(
        len(text[start : start + _ENCODE_SLICE_CHARS].encode("utf-8", "surrogatepass"))
        for start in range(0, len(text), _ENCODE_SLICE_CHARS)
    )


class HeuristicEstimator(FramedEstimator):
    """Calibrated bytes-per-token estimate plus the shared request framing."""

    def __init__(self) -> None:
        super().__init__("heuristic", heuristic_text_tokens, f"{BYTES_PER_TOKEN}bpt")
