"""Evaluation: episode reports (`evaluate`) and the env role's fidelity report."""

from .evaluate import EpisodeResult, EvalReport, evaluate

__all__ = ["EpisodeResult", "EvalReport", "evaluate"]
