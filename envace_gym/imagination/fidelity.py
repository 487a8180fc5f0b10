"""How close an imagined tool result is to the real one: exact match, and F1 or recall over JSON leaves.

The one definition used by the fidelity report (``envace fidelity``), by the env role's fidelity reward and
by the training metrics, so that "exact match" means the same thing everywhere.
"""

from __future__ import annotations

from typing import Any

from ..calls import canonical_json

__all__ = ["leaf_f1", "leaf_recall", "result_fidelity"]


def _leaves(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return {leaf for k, v in value.items() for leaf in _leaves(v, f"{prefix}/{k}")} or {f"{prefix}={{}}"}
    if isinstance(value, list):
        return {leaf for i, v in enumerate(value) for leaf in _leaves(v, f"{prefix}[{i}]")} or {f"{prefix}=[]"}
    return {f"{prefix}={canonical_json(value)}"}


def leaf_f1(predicted: Any, real: Any) -> float:
    """F1 of the (path, value) leaves of two JSON values; 0.0 when ``predicted`` is None."""
    if predicted is None:
        return 0.0
    p, r = _leaves(predicted), _leaves(real)
    hits = len(p & r)
    if not hits:
        return 0.0
    precision, recall = hits / len(p), hits / len(r)
    return 2 * precision * recall / (precision + recall)


def leaf_recall(predicted: Any, real: Any) -> float:
    """The share of the real value's (path, value) leaves that ``predicted`` holds exactly: how many of the
    real result's fields the answer got right, whatever else it adds; 0.0 when ``predicted`` is None."""
    if predicted is None:
        return 0.0
    r = _leaves(real)
    return len(_leaves(predicted) & r) / len(r)


def result_fidelity(predicted: Any, real: Any) -> tuple[bool, float]:
    """``(exact, score)`` of an imagined result against the real one: exact is canonical-JSON equality,
    score is 1.0 when exact, else `leaf_f1` (0.0 for an unusable answer, ``predicted=None``)."""
    if predicted is not None and canonical_json(predicted) == canonical_json(real):
        return True, 1.0
    return False, leaf_f1(predicted, real)
