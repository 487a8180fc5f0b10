"""Rollouts: the one episode loop over a batch of envs and :class:`Trajectory` (env-role batching lives in
:mod:`envace_gym.rehearsal.batching`, shared with the native vector env)."""

from .loop import (
    EnvRoleSample,
    EpisodeResult,
    PolicyNote,
    Trajectory,
    collect,
    load_trajectories,
    save_trajectories,
)

__all__ = [
    "EnvRoleSample",
    "EpisodeResult",
    "PolicyNote",
    "Trajectory",
    "collect",
    "load_trajectories",
    "save_trajectories",
]
