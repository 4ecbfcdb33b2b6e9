"""Token budget over the whole request: estimators and the input-token figure."""

from hango.tokens.base import Estimator, KeepsEstimates
from hango.tokens.framing import FramedEstimator, TextCounter
from hango.tokens.heuristic import HeuristicEstimator
from hango.tokens.measure import Measurement, can_count_tokens, measure_input_tokens
from hango.tokens.tiktoken_estimator import (
    EncodingSource,
    EstimatorKind,
    TiktokenEstimator,
    make_estimator,
)

__all__ = [
    "EncodingSource",
    "Estimator",
    "EstimatorKind",
    "FramedEstimator",
    "HeuristicEstimator",
    "KeepsEstimates",
    "Measurement",
    "TextCounter",
    "TiktokenEstimator",
    "can_count_tokens",
    "make_estimator",
    "measure_input_tokens",
]
