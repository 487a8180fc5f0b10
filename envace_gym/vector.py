"""The native vector env: ``gym.make_vec("EnvACE-ToolCall-v0", num_envs=8)``.

`ToolCallVectorEnv` is Gymnasium's ``SyncVectorEnv`` (same spaces, info batching, autoreset modes,
``reset_mask``), except that one `step` steps its envs through
`step_envs`: envs whose tool results are imagined by one shared env
role (``SelfRehearsalEnv`` wrappers around the same policy) step as half-steps, and the env-role requests of
the step go to the policy in one ``imagine_batch`` call per round (no thread). `make_vector` is the registration's
``vector_entry_point``; it takes ``gym.make``'s kwargs, plus ``imaginer=`` for imagined backends.

``gym.make_vec(..., vectorization_mode="sync" | "async")`` uses Gymnasium's own vector envs (no env-role
batching); async works because `envace_gym.spaces` registers `UnicodeText`
with Gymnasium's shared-memory utilities.
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Sequence
from copy import deepcopy
from multiprocessing.connection import wait as wait_for_sentinels
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import concatenate, iterate

from .compose import check_imaginer, make_env
from .imagination import Imaginer
from .imagination.halfstep import LocalEnvs, imaginer_of, roles_of, step_envs

__all__ = [
    "ToolCallVectorEnv",
    "ToolCallAsyncVectorEnv",
    "WorkerDiedError",
    "WorkerTimeoutError",
    "make_vector",
    "PER_ENV_OPTIONS",
]

#: Reset options that may be given per env, as a list with one entry per env.
PER_ENV_OPTIONS = ("task_id",)


class ToolCallVectorEnv(SyncVectorEnv):
    """``num_envs`` tool-calling envs stepped together, the env role batched across them.

    Args:
        env_fns: one callable per env that builds it (as ``SyncVectorEnv``), e.g.
            ``lambda: SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0"), policy)``; an already built env is
            accepted in place of a callable.
        copy: return copies of the observation tuple (as ``SyncVectorEnv``).
        autoreset_mode: Gymnasium's ``AutoresetMode``: ``NEXT_STEP`` (default: the step after an episode's
            end resets that env, its action ignored), ``SAME_STEP`` (the env resets in the step that ends
            it; ``info["final_obs"]`` / ``info["final_info"]`` hold the last observation and info), or
            ``DISABLED`` (reset ended envs yourself with ``reset(options={"reset_mask": mask})``).

    ``reset(options={"task_id": [...]})`` gives each env its own task (one id per env, ``None`` for a
    random draw); a single string gives all envs that task. Other options go to every env as they are.
    ``envs`` holds the sub-envs (stepped in this process), so ``envace_gym.agents.collect`` drives them
    directly. Observations are a tuple of strings, rewards/terminations/truncations numpy arrays, and
    ``info`` is batched by Gymnasium's ``_add_info`` (``info["task_id"]`` is an object array, with the mask
    ``info["_task_id"]``).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env] | gym.Env],
        copy: bool = True,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    ) -> None:
        fns = [fn if callable(fn) and not isinstance(fn, gym.Env) else (lambda env=fn: env) for fn in env_fns]
        if not fns:
            raise ValueError("ToolCallVectorEnv needs at least one env")
        super().__init__(fns, copy=copy, autoreset_mode=autoreset_mode)
        self._local = LocalEnvs(self.envs)
        # Each env's env role (its SelfRehearsalEnv's imaginer), answered by the step; None: nothing imagined.
        self._imaginers = [imaginer_of(env) for env in self.envs]
        self._roles = [roles_of(env) for env in self.envs]  # a model user's turns and judge's verdicts, batched too

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every env (or those of ``options["reset_mask"]``); see the class docstring for per-env
        options. ``seed``: None, an int (env ``i`` gets ``seed + i``) or one seed per env."""
        options = dict(options or {})
        per_env = {k: options.pop(k) for k in PER_ENV_OPTIONS if isinstance(options.get(k), list | tuple)}
        for key, values in per_env.items():
            if len(values) != self.num_envs:
                raise ValueError(
                    f"options[{key!r}] has {len(values)} entries for {self.num_envs} envs; give one per env"
                )
        if not per_env:
            return super().reset(seed=seed, options=options or None)
        # As SyncVectorEnv.reset (its reset_mask path included), each env with its own options.
        mask = options.pop("reset_mask", None)
        mask = np.ones(self.num_envs, dtype=np.bool_) if mask is None else np.asarray(mask, dtype=np.bool_)
        seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed or [None] * self.num_envs
        self._terminations[mask] = self._truncations[mask] = self._autoreset_envs[mask] = False
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(mask):
            env_options = {**options, **{k: v[i] for k, v in per_env.items() if v[i] is not None}}
            self._env_obs[i], info = self.envs[i].reset(seed=seeds[i], options=env_options or None)
            infos = self._add_info(infos, info, i)
        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        return (deepcopy(self._observations) if self.copy else self._observations), infos

    def step(self, actions: Any) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env (autoreset as ``autoreset_mode`` says), with every env-role request of the step
        sent as one batch; results as ``SyncVectorEnv.step``."""
        actions = list(iterate(self.action_space, actions))
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset_envs.any():
            ended = np.flatnonzero(self._autoreset_envs).tolist()
            raise RuntimeError(f"envs {ended} ended; with autoreset_mode=DISABLED reset them (options['reset_mask'])")
        resetting = (
            self._autoreset_envs
            if self.autoreset_mode == AutoresetMode.NEXT_STEP
            else np.zeros_like(self._autoreset_envs)
        )
        stepping = [i for i in range(self.num_envs) if not resetting[i]]
        stepped = step_envs(self._local, stepping, [actions[i] for i in stepping], self._imaginers, roles=self._roles)
        outcomes = dict(zip(stepping, stepped, strict=True))

        infos: dict[str, Any] = {}
        for i, env in enumerate(self.envs):
            if resetting[i]:
                self._env_obs[i], env_info = env.reset()
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            else:
                obs, reward, terminated, truncated, env_info = outcomes[i]
                self._env_obs[i], self._rewards[i] = obs, reward
                self._terminations[i], self._truncations[i] = terminated, truncated
                if self.autoreset_mode == AutoresetMode.SAME_STEP and (terminated or truncated):
                    infos = self._add_info(infos, {"final_obs": obs, "final_info": env_info}, i)
                    self._env_obs[i], env_info = env.reset()
            infos = self._add_info(infos, env_info, i)

        self._observations = concatenate(self.single_observation_space, self._env_obs, self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            deepcopy(self._observations) if self.copy else self._observations,
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )


class WorkerDiedError(RuntimeError):
    """A worker process of a `ToolCallAsyncVectorEnv` died; the vector env is closed."""


class WorkerTimeoutError(RuntimeError):
    """Workers of a `ToolCallAsyncVectorEnv` did not answer within ``worker_timeout``; they are
    terminated and the vector env is closed."""


def _reports_dead_workers(method: Callable) -> Callable:
    @functools.wraps(method)
    def run(self: ToolCallAsyncVectorEnv, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (BrokenPipeError, EOFError, ConnectionResetError) as exc:
            dead = self._dead_workers()
            if not dead:
                raise
            self._state = AsyncState.DEFAULT  # nothing pending can complete now
            self.close(terminate=True)
            raise WorkerDiedError(
                f"{type(self).__name__}: {'; '.join(dead)}; the vector env is closed, build a new one"
            ) from exc

    return run


def _bounded_wait(method: Callable) -> Callable:
    """A ``*_wait(timeout=None)`` that waits at most ``self.worker_timeout`` by default, and on a timeout
    terminates the workers (a stuck one cannot be told to stop) and raises `WorkerTimeoutError`."""

    @functools.wraps(method)
    def run(self: ToolCallAsyncVectorEnv, timeout: float | None = None) -> Any:
        timeout = self.worker_timeout if timeout is None else timeout
        try:
            return method(self, timeout)
        except multiprocessing.TimeoutError:
            stuck = [i for i, pipe in enumerate(self.parent_pipes) if pipe is not None and not pipe.poll(0)]
            self._state = AsyncState.DEFAULT
            self.close(terminate=True)
            raise WorkerTimeoutError(
                f"{type(self).__name__}: worker(s) {stuck} did not answer within {timeout} s; they were "
                "terminated and the vector env is closed, build a new one"
            ) from None

    return run


class ToolCallAsyncVectorEnv(AsyncVectorEnv):
    """Gymnasium's ``AsyncVectorEnv`` (one process per env, observations in shared memory), except that

    * a worker that dies (killed, out of memory, a crash in native code) raises `WorkerDiedError`
      naming the worker, its pid and exit code, and closes the vector env, instead of a bare
      ``BrokenPipeError``/``EOFError`` (Gymnasium's own call never hangs on a dead worker either, but says
      nothing of which worker or why);
    * with ``worker_timeout`` (seconds), a reset, step or call that a worker does not answer in time (a tool
      stuck in native code, say) raises `WorkerTimeoutError` naming the stuck workers, which are
      terminated, instead of waiting forever.

    Its own ``step`` leaves each worker's env role to that worker (its own copy of the imaginer);
    ``envace_gym.agents.collect`` batches the env role across the workers (their half-steps' requests come
    back to the parent's policy).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], worker_timeout: float | None = None, **kwargs: Any):
        if worker_timeout is not None and worker_timeout <= 0:
            raise ValueError(f"worker_timeout must be > 0 seconds, got {worker_timeout}")
        self.worker_timeout = worker_timeout
        super().__init__(env_fns, **kwargs)

    def _dead_workers(self) -> list[str]:
        # A worker whose pipe just broke may not have exited yet: wait (briefly) for one that has, and reap
        # those that have (their exit code is known only then).
        ended = wait_for_sentinels([p.sentinel for p in self.processes], timeout=1.0)
        dead = []
        for i, process in enumerate(self.processes):
            if process.sentinel in ended:
                process.join(timeout=1.0)
            if process.exitcode is not None:
                how = (
                    f"killed by signal {-process.exitcode}" if process.exitcode < 0 else f"exit code {process.exitcode}"
                )
                dead.append(f"worker {i} (pid {process.pid}) died ({how})")
        return dead

    reset_async = _reports_dead_workers(AsyncVectorEnv.reset_async)
    reset_wait = _reports_dead_workers(_bounded_wait(AsyncVectorEnv.reset_wait))
    step_async = _reports_dead_workers(AsyncVectorEnv.step_async)
    step_wait = _reports_dead_workers(_bounded_wait(AsyncVectorEnv.step_wait))
    call_async = _reports_dead_workers(AsyncVectorEnv.call_async)
    call_wait = _reports_dead_workers(_bounded_wait(AsyncVectorEnv.call_wait))
    set_attr = _reports_dead_workers(AsyncVectorEnv.set_attr)


def make_vector(
    num_envs: int = 1,
    *,
    env_id: str = "EnvACE-ToolCall-v0",
    imaginer: Imaginer | None = None,
    rehearsal: dict[str, Any] | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    copy: bool = True,
    asynchronous: bool = False,
    worker_timeout: float | None = None,
    max_episode_steps: int | None = None,
    **env_kwargs: Any,
) -> ToolCallVectorEnv | ToolCallAsyncVectorEnv:
    """The registration's ``vector_entry_point``: ``gym.make_vec(env_id, num_envs, **kwargs)`` lands here.

    Args:
        num_envs: how many envs.
        env_id: the single env's Gymnasium id (each env is ``gym.make(env_id, **env_kwargs)``).
        imaginer: who imagines tool results when ``backend`` is ``self``, ``self-inline`` or
            ``simulator`` (anything with ``imagine(ImagineRequest)``, e.g. an ``LMPolicy``; one with
            ``imagine_batch`` is sent each step's requests as one batch). Each env is
            ``envace_gym.make_env(env_id, imaginer=imaginer, rehearsal=rehearsal, **env_kwargs)``.
        rehearsal: more ``SelfRehearsalEnv`` kwargs (``grounding``, ``on_invalid``, ``real_fraction``, ...).
        autoreset_mode, copy: as `ToolCallVectorEnv`.
        asynchronous: one process per env (`ToolCallAsyncVectorEnv`: dead workers reported clearly),
            for slow tools; ``collect`` then batches the env role across the workers (``vec.step`` does not).
            ``gym.make_vec(..., vectorization_mode="async")`` gives Gymnasium's plain ``AsyncVectorEnv`` instead.
        worker_timeout: (``asynchronous``) seconds a worker may take to answer a reset, step or call before
            the stuck workers are terminated and `WorkerTimeoutError` is raised; None waits forever.
        max_episode_steps: wraps each env in ``TimeLimit`` (as ``gym.make``).
        env_kwargs: ``gym.make``'s kwargs for the single env (``suite``, ``split``, ``backend``, ...).

    Built envs (your own wrappers, mixed backends): ``ToolCallVectorEnv([lambda: ..., ...])``.
    """
    if num_envs < 1:
        raise ValueError(f"num_envs must be at least 1, got {num_envs}")
    if max_episode_steps is not None:
        env_kwargs["max_episode_steps"] = max_episode_steps
    check_imaginer(env_kwargs.get("backend"), imaginer, rehearsal)  # here, not in each worker process
    build = functools.partial(make_env, env_id, imaginer=imaginer, rehearsal=rehearsal, **env_kwargs)

    if asynchronous:
        return ToolCallAsyncVectorEnv(
            [build] * num_envs, worker_timeout=worker_timeout, copy=copy, autoreset_mode=autoreset_mode
        )
    if worker_timeout is not None:
        raise ValueError("worker_timeout applies to asynchronous=True (worker processes) only")
    return ToolCallVectorEnv([build] * num_envs, copy=copy, autoreset_mode=autoreset_mode)
