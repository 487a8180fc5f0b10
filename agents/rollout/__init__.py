"""Rollouts: the one episode loop over a batch of envs, env-role batching, and :class:`Trajectory`."""

from .loop import EnvRoleSample, EpisodeResult, Trajectory, collect, load_trajectories, save_trajectories

__all__ = ["EnvRoleSample", "EpisodeResult", "Trajectory", "collect", "load_trajectories", "save_trajectories"]
