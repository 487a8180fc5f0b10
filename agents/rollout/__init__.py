"""Rollouts: the one episode loop over a batch of envs, env-role batching, and :class:`Trajectory`."""

from .loop import EnvRoleSample, Trajectory, collect, load_trajectories, save_trajectories

__all__ = ["EnvRoleSample", "Trajectory", "collect", "load_trajectories", "save_trajectories"]
