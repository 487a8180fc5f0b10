"""tau2-bench's own evaluator, run on one of our episodes (the reference our scorer is checked against).

``tau2.evaluator.evaluator`` imports ``tau2.registry`` and, through the NL-assertion evaluator,
``tau2.utils.llm_utils``; both import litellm, which is not installed here. When they cannot be imported,
small stand-ins are put in their place: a registry that returns the domain's ``get_environment`` (what the
real one returns for these domains) and an LLM call that refuses (NL assertions are not part of tau2's
default ``ALL`` evaluation). With litellm installed the real modules are used.
"""

from __future__ import annotations

import sys
import types
from functools import lru_cache
from typing import Any

from . import _runtime
from .trajectory import EpisodeLog, to_simulation_run

__all__ = ["evaluate_with_tau2"]


class _Registry:
    def get_env_constructor(self, domain: str) -> Any:
        return _runtime.domain_module(domain).get_environment


def _no_llm(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("tau2's LLM calls are not available offline (litellm is not installed)")


@lru_cache(maxsize=1)
def _evaluator() -> tuple[Any, Any]:
    _runtime._quiet()
    for name, attrs in (("tau2.registry", {"registry": _Registry()}), ("tau2.utils.llm_utils", {"generate": _no_llm})):
        try:
            __import__(name)
        except ImportError:
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            sys.modules[name] = stub
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    return evaluate_simulation, EvaluationType


def evaluate_with_tau2(domain: str, task_data: dict[str, Any], log: EpisodeLog) -> Any:
    """tau2's ``RewardInfo`` for the episode (``evaluate_simulation`` with ``EvaluationType.ALL``)."""
    evaluate_simulation, evaluation_type = _evaluator()
    task = _runtime.parse_task(task_data)
    run = to_simulation_run(log, task.id)
    return evaluate_simulation(run, task, evaluation_type.ALL, solo_mode=False, domain=domain)
