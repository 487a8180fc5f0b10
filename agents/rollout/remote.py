"""Sub-envs of a process-based vector env, driven one by one through Gymnasium's public vector API.

`collect` runs each env on its own schedule: an env whose episode
ends is reset at once with the next episode's seed and task, and only envs with an episode are stepped. A
vector env whose sub-envs live in other processes (``AsyncVectorEnv``, ``gym.make_vec(...,
vectorization_mode="async")``, `ToolCallAsyncVectorEnv`) offers whole-batch calls
only, so `RemoteEnvs` maps one onto the other:

* one env is reset with ``reset(seed=[...], options={"reset_mask": mask, ...})``;
* a step steps every worker at once (concurrently, the point of processes); an env with no episode to play
  gets the empty action, which ends whatever it was doing, and its result is dropped;
* each env's ``info`` is cut back out of the batched info dict (numpy scalars back to Python ones, so a
  trajectory still saves as JSON);
* the env role is batched across processes: `RemoteEnvs.begin_steps` and
  `RemoteEnvs.continue_steps` run each worker's half-step (``ToolCallEnv.begin_step``/``continue_step``,
  each worker with its own action or answer, all workers at once: ``set_attr`` hands each worker its own
  arguments, then one ``call`` runs them, `envace_gym.worker.PerEnvCall`) and bring back their env-role requests,
  which the parent answers (`step_envs`: one engine call per round
  for all workers) with its LM policy, for workers whose env role is a copy of that policy (the same
  ``name``; others answer in their own process, unbatched); the step then ends through each worker's
  wrappers with ``vec.step(actions)``, the same actions. A worker's action wrappers are not applied at the
  beginning (the parent cannot reach them): a vector env whose action space is not the env's text space has
  its env role answered in its workers.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from envace_gym.vector import WorkerTimeoutError
from envace_gym.worker import CALL_ARGS, CALL_WITH_ARGS

__all__ = ["RemoteEnvs", "RemoteEnv", "unbatch_info"]

#: The action given to a sub-env that has no episode to play in a step (a final answer: it ends the episode).
IDLE_ACTION = ""


def _python(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def unbatch_info(infos: dict[str, Any], index: int) -> dict[str, Any]:
    """Env ``index``'s own info out of a vector env's batched ``infos`` (Gymnasium's layout, as
    ``envace_gym.vector.add_info`` writes it: a value array per key and a mask ``_key``; nested dicts batched
    recursively)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_") and key[1:] in infos:
            continue  # a mask
        if isinstance(value, dict):
            present = infos.get(f"_{key}")
            if present is None or present[index]:
                out[key] = unbatch_info(value, index)
            continue
        present = infos.get(f"_{key}")
        if present is not None and not present[index]:
            continue
        out[key] = _python(value[index])
    return out


class RemoteEnvs:
    """The sub-envs of ``vec`` (a vector env that steps them elsewhere), for one `collect` run.

    ``env(i)`` is a stand-in with ``reset(seed=, options=)`` for sub-env ``i``; `step` steps the given
    sub-envs (all workers step, concurrently) and returns their outcomes in order.
    """

    def __init__(self, vec: gym.vector.VectorEnv) -> None:
        mode = AutoresetMode(vec.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        if mode == AutoresetMode.NEXT_STEP and getattr(vec, "shared_memory", True) is False:
            # Gymnasium 1.4's worker clears its autoreset flag on reset only with shared memory, so an env
            # reset after its episode ended would throw its next action away for an autoreset.
            raise ValueError(
                "collect() over an AsyncVectorEnv with shared_memory=False needs autoreset_mode SAME_STEP or "
                "DISABLED (Gymnasium's NEXT_STEP worker ignores the first action after a manual reset there)"
            )
        self.vec, self.mode = vec, mode
        self.num_envs = vec.num_envs
        # The name of each worker's env role (a SelfRehearsalEnv's imaginer), or None: the parent answers for
        # a worker whose env role has its own policy's name (a copy of it), through `_call_each`.
        self.imaginer_names: list[str | None] = [None] * self.num_envs
        text_actions = isinstance(vec.single_action_space, gym.spaces.Text)  # else a worker's wrapper maps them
        if (
            text_actions
            and all(vec.call("has_wrapper_attr", "imaginer_name"))
            and all(vec.call("has_wrapper_attr", CALL_WITH_ARGS))  # each worker's half-step, with its own action
        ):
            self.imaginer_names = list(vec.call("imaginer_name"))
        self._playing = np.zeros(self.num_envs, dtype=bool)  # reset by us for an episode that has not ended
        self._ended = np.zeros(self.num_envs, dtype=bool)  # the worker's env ended and was not reset since
        self._never_reset = np.ones(self.num_envs, dtype=bool)

    def env(self, index: int) -> RemoteEnv:
        return RemoteEnv(self, index)

    def _reset(self, mask: np.ndarray, seeds: list[int | None] | None = None, options: dict | None = None):
        out = self.vec.reset(seed=seeds, options={**(options or {}), "reset_mask": mask})
        self._ended[mask] = self._never_reset[mask] = False
        return out

    def reset_one(self, index: int, seed: int | None, options: dict[str, Any] | None) -> tuple[Any, dict]:
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[index] = True
        seeds: list[int | None] = [None] * self.num_envs
        seeds[index] = seed
        obs, infos = self._reset(mask, seeds, options)
        self._playing[index] = True
        return _python(obs[index]), unbatch_info(infos, index)

    def begin_steps(self, indices: list[int], actions: list[Any]) -> list[Any]:
        """``begin_step(action)`` on workers ``indices``, all at once: their pending steps."""
        return self._call_each("begin_step", indices, [(a,) for a in actions])

    def continue_steps(self, indices: list[int], answers: list[Any]) -> list[Any]:
        """``continue_step([answer])`` on workers ``indices``, all at once: their next pending steps."""
        return self._call_each("continue_step", indices, [([a],) for a in answers])

    def _call_each(self, name: str, indices: list[int], args: list[tuple]) -> list[Any]:
        # Gymnasium's call() gives every worker the same arguments, but set_attr() takes one value per worker:
        # each of ours gets its own action or answer that way (None: it takes no part), then one call() has
        # each worker run its method with them (envace_gym.worker.PerEnvCall).
        pending: list[tuple | None] = [None] * self.num_envs
        for i, a in zip(indices, args, strict=True):
            pending[i] = a
        self.vec.set_attr(CALL_ARGS, pending)
        try:
            results = self.vec.call(CALL_WITH_ARGS, name)  # a worker's exception is raised here, as Gymnasium's
        except WorkerTimeoutError as exc:  # ToolCallAsyncVectorEnv's worker_timeout: say which call and workers
            stuck = ", ".join(map(str, exc.workers)) or "?"
            raise WorkerTimeoutError(
                f"worker{'s' if len(exc.workers) > 1 else ''} {stuck} did not answer {name}() within "
                f"{self.vec.worker_timeout} s; the workers were terminated and the vector env is closed, build a "
                "new one",
                exc.workers,
            ) from None
        return [results[i] for i in indices]

    def step(self, indices: list[int], actions: list[Any]) -> list[tuple]:
        """Step sub-envs ``indices`` with ``actions`` (which also end their begun half-steps); every
        other sub-env idles (see the module docstring)."""
        batch = [IDLE_ACTION] * self.num_envs
        for i, action in zip(indices, actions, strict=True):
            if not self._playing[i]:
                raise RuntimeError(f"sub-env {i} is stepped outside an episode that collect() reset")
            batch[i] = action
        idle = np.ones(self.num_envs, dtype=bool)
        idle[indices] = False
        # An idle env must be steppable: reset once at least, and (DISABLED refuses ended envs) not ended.
        unsteppable = idle & (self._never_reset | (self._ended if self.mode == AutoresetMode.DISABLED else False))
        if unsteppable.any():
            self._reset(unsteppable)
        obs, rewards, terminations, truncations, infos = self.vec.step(tuple(batch))
        outcomes = []
        for i in indices:
            info = unbatch_info(infos, i)
            if self.mode == AutoresetMode.SAME_STEP and (terminations[i] or truncations[i]):
                # The worker already reset this env for a random task; its episode's end is in final_*.
                ob, info = infos["final_obs"][i], info.get("final_info", {})
            else:
                ob = obs[i]
            outcomes.append((_python(ob), float(rewards[i]), bool(terminations[i]), bool(truncations[i]), info))
        ended = np.logical_or(terminations, truncations)
        if self.mode == AutoresetMode.SAME_STEP:
            ended[:] = False  # the worker reset them in the same step
        self._ended = ended
        self._playing &= ~np.logical_or(terminations, truncations)
        return outcomes


class RemoteEnv:
    """Sub-env ``index`` of a `RemoteEnvs`, seen as an env by the episode loop."""

    def __init__(self, group: RemoteEnvs, index: int) -> None:
        self.group, self.index = group, index

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return self.group.reset_one(self.index, seed, options)
