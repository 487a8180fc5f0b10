"""Adapters to other RL libraries: TRL's ``GRPOTrainer`` (:mod:`.trl`).

Names load their module on first use, so ``import envace_gym.agents.integrations`` needs no TRL.
"""

from __future__ import annotations

from envace_gym.agents._lazy import lazy_getattr

_LAZY = {
    "EnvACERolloutFunc": ".trl",
    "EnvACEToolEnv": ".trl",
    "env_reward": ".trl",
    "make_environment_factory": ".trl",
    "make_rollout_func": ".trl",
    "split_trajectory": ".trl",
    "task_dataset": ".trl",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
