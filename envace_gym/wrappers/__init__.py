"""Pure-Gymnasium wrappers that give the text env the spaces classic RL libraries take (SB3 has no
``Text`` spaces): `CandidateActions` (``Discrete(k)`` over candidate messages built from the tool
schemas and the visible conversation) and `FeatureObservation` (a ``Box`` of hashed n-grams)."""

from .candidates import PAD_ANSWER, CandidateActions, build_calls, build_candidates, param_shape
from .features import FeatureObservation, hashed_ngrams, history_fields
from .values import Value, shape_of, visible_values

__all__ = [
    "CandidateActions",
    "FeatureObservation",
    "PAD_ANSWER",
    "Value",
    "build_calls",
    "build_candidates",
    "hashed_ngrams",
    "history_fields",
    "param_shape",
    "shape_of",
    "visible_values",
]
