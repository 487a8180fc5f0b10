"""Adapters to other RL libraries: TRL's ``GRPOTrainer`` (`trl`) and verl's agent loop (`verl`),
both fed the same rows from a trajectory's role tags (`rows`).

Names load their module on first use, so ``import envace_gym.agents.integrations`` needs neither TRL nor verl.
"""

from __future__ import annotations

from envace_gym.agents._lazy import lazy_getattr

_LAZY = {
    "EnvACEAgentLoop": ".verl",
    "EnvACERolloutFunc": ".trl",
    "EnvACEToolEnv": ".trl",
    "env_reward": ".trl",
    "make_environment_factory": ".trl",
    "make_rollout_func": ".trl",
    "split_trajectory": ".rows",
    "task_dataset": ".trl",
    "verl_dataset": ".verl",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
