"""Token budget over the whole request: estimators and the input-token figure."""

from hango.tokens.base import Estimator
from hango.tokens.framing import FramedEstimator
from hango.tokens.heuristic import HeuristicEstimator
from hango.tokens.tiktoken_estimator import EncodingSource, TiktokenEstimator, make_estimator

__all__ = [
    "EncodingSource",
    "Estimator",
    "FramedEstimator",
    "HeuristicEstimator",
    "TiktokenEstimator",
    "make_estimator",
]
