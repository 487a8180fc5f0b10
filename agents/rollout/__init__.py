"""Rollouts: the one episode loop over a batch of envs and `Trajectory` (the envs' half-steps, whose
env-role requests the loop answers in batches, live in `envace_gym.imagination.halfstep`, shared with the
native vector env)."""

from .hooks import PolicyChoice, PolicyHooks, PolicyNote, TurnContext
from .loop import (
    EnvRoleSample,
    EpisodeResult,
    Trajectory,
    collect,
    load_trajectories,
    save_trajectories,
)

__all__ = [
    "EnvRoleSample",
    "EpisodeResult",
    "PolicyChoice",
    "PolicyHooks",
    "PolicyNote",
    "Trajectory",
    "TurnContext",
    "collect",
    "load_trajectories",
    "save_trajectories",
]
