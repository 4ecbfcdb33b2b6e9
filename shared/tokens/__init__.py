"""Token budget over the whole request: estimators and the input-token figure."""

from shared.tokens.base import Estimator, KeepsEstimates
from shared.tokens.framing import FramedEstimator, TextCounter
from shared.tokens.heuristic import HeuristicEstimator
from shared.tokens.measure import Measurement, can_count_tokens, measure_input_tokens
from shared.tokens.tiktoken_estimator import (
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
