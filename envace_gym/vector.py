"""The native vector env: ``gym.make_vec("EnvACE-ToolCall-v0", num_envs=8)``.

`ToolCallVectorEnv` is a Gymnasium ``VectorEnv`` that behaves as Gymnasium's ``SyncVectorEnv`` (same spaces,
info batching, autoreset modes, ``reset_mask``, ``call``/``get_attr``/``set_attr``), except that one `step`
steps its envs through `step_envs`: envs whose tool results are imagined by one shared env
role (``SelfRehearsalEnv`` wrappers around the same policy) step as half-steps, and the env-role requests of
the step go to the policy in one ``imagine_batch`` call per round (no thread). `make_vector` is the registration's
``vector_entry_point``; it takes ``gym.make``'s kwargs, plus ``imaginer=`` for imagined backends.

``gym.make_vec(..., vectorization_mode="sync" | "async")`` uses Gymnasium's own vector envs (no env-role
batching); async works because `envace_gym.spaces` registers `UnicodeText`
with Gymnasium's shared-memory utilities.

Both vector envs here use Gymnasium's public API only (``tests/test_seams.py`` checks it): the native one keeps
its own step state and batches infos itself, and `ToolCallAsyncVectorEnv` extends ``AsyncVectorEnv`` through
its public methods and a wrapper around each worker's env (`envace_gym.worker.WorkerEnv`), so that a
Gymnasium minor release that changes its internals cannot break them.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import warnings
from collections.abc import Callable, Sequence
from copy import deepcopy
from multiprocessing.connection import wait as wait_for_sentinels
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from .compose import check_imaginer, make_env
from .imagination import Imaginer
from .imagination.halfstep import LocalEnvs, imaginer_of, reset_envs, roles_of, step_envs
from .worker import WorkerEnv

__all__ = [
    "ToolCallVectorEnv",
    "ToolCallAsyncVectorEnv",
    "WorkerDiedError",
    "WorkerTimeoutError",
    "add_info",
    "make_vector",
    "PER_ENV_OPTIONS",
]

#: Reset options that may be given per env, as a list with one entry per env.
PER_ENV_OPTIONS = ("task_id",)


def add_info(infos: dict[str, Any], info: dict[str, Any], index: int, num_envs: int) -> dict[str, Any]:
    """Add env ``index``'s ``info`` to a vector env's batched ``infos`` (and return it), in Gymnasium's layout:
    for each key a value array over the envs and a boolean mask ``_key`` of the envs that gave it; a nested
    dict is batched the same way, recursively; ``final_obs`` is an object array. (Gymnasium's own batching is
    a private method of its vector envs, so this is ours; ``agents.rollout.remote.unbatch_info`` reads it.)"""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get(key, np.full(num_envs, None, dtype=object))
            array[index] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, index, num_envs)
        else:
            if key in infos:
                array = infos[key]
            elif type(value) in (int, float, bool) or isinstance(value, np.number):
                array = np.zeros(num_envs, dtype=type(value))
            elif isinstance(value, np.ndarray):  # every env's array of one shape, as Gymnasium assumes
                array = np.zeros((num_envs, *value.shape), dtype=value.dtype)
            else:
                array = np.full(num_envs, None, dtype=object)
            array[index] = value
        mask = infos.get(f"_{key}", np.zeros(num_envs, dtype=np.bool_))
        mask[index] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


class ToolCallVectorEnv(VectorEnv):
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
    ``info`` is batched as Gymnasium batches it (`add_info`: ``info["task_id"]`` is an object array, with the
    mask ``info["_task_id"]``).
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
        self.env_fns, self.copy = fns, copy
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.envs = [fn() for fn in fns]
        self.num_envs = len(self.envs)
        first = self.envs[0]
        # A copy, so that the sub-env's (class-level) metadata is left as it was.
        self.metadata = {**first.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = first.render_mode
        self.single_observation_space, self.single_action_space = first.observation_space, first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        for i, env in enumerate(self.envs):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise RuntimeError(f"env {i}'s observation or action space differs from env 0's; all must match")
        # Our own step state, as SyncVectorEnv keeps its own: each env's last observation, their batch, and
        # which envs ended in the last step (NEXT_STEP resets them in the next one, DISABLED refuses them).
        self._env_obs_list: list[Any] = [None] * self.num_envs
        self._obs_batch = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)
        self._needs_reset = np.zeros(self.num_envs, dtype=np.bool_)
        self._local = LocalEnvs(self.envs)
        # Each env's env role (its SelfRehearsalEnv's imaginer), answered by the step; None: nothing imagined.
        self._imaginers = [imaginer_of(env) for env in self.envs]
        self._roles = [roles_of(env) for env in self.envs]  # a model user's turns and judge's verdicts, batched too

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[tuple[str, ...], dict[str, Any]]:
        """Reset every env (or those of ``options["reset_mask"]``, a boolean array); see the class docstring
        for per-env options. ``seed``: None, an int (env ``i`` gets ``seed + i``) or one seed per env."""
        options = dict(options or {})
        mask = self._reset_mask(options.pop("reset_mask", None))
        seeds = self._seeds(seed)
        per_env = {k: options.pop(k) for k in PER_ENV_OPTIONS if isinstance(options.get(k), list | tuple)}
        for key, values in per_env.items():
            if len(values) != self.num_envs:
                raise ValueError(
                    f"options[{key!r}] has {len(values)} entries for {self.num_envs} envs; give one per env"
                )
        resets = {}
        for i in np.flatnonzero(mask).tolist():
            env_options = {**options, **{k: v[i] for k, v in per_env.items() if v[i] is not None}}
            resets[i] = (self.envs[i], seeds[i], env_options or None)
        infos: dict[str, Any] = {}
        for i, (obs, info) in self._reset(resets).items():
            self._env_obs_list[i] = obs
            infos = add_info(infos, info, i, self.num_envs)
        self._needs_reset[mask] = False
        return self._batched_obs(), infos

    def _reset(self, resets: dict[int, tuple[gym.Env, int | None, dict[str, Any] | None]]) -> dict[int, tuple]:
        """`reset_envs`: the opening turns of model users (tau2's) answered here, batched across the envs that
        start together, never inside an env's ``reset``."""
        return reset_envs(self._local, resets, self._imaginers, self._roles)

    def _reset_mask(self, mask: Any) -> np.ndarray:
        if mask is None:
            return np.ones(self.num_envs, dtype=np.bool_)
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (self.num_envs,) or not mask.any():
            raise ValueError(
                f"options['reset_mask'] must be a boolean array of shape ({self.num_envs},) with at least one "
                f"True, got {mask!r}"
            )
        return mask

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int):
            return [seed + i for i in range(self.num_envs)]
        if len(seed) != self.num_envs:
            raise ValueError(f"{len(seed)} seeds for {self.num_envs} envs; give one per env, an int or None")
        return list(seed)

    def _batched_obs(self) -> tuple[str, ...]:
        self._obs_batch = concatenate(self.single_observation_space, self._env_obs_list, self._obs_batch)
        return deepcopy(self._obs_batch) if self.copy else self._obs_batch

    def step(self, actions: Any) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env (autoreset as ``autoreset_mode`` says), with every env-role request of the step
        sent as one batch; results as ``SyncVectorEnv.step``."""
        actions = list(iterate(self.action_space, actions))
        if self.autoreset_mode == AutoresetMode.DISABLED and self._needs_reset.any():
            ended = np.flatnonzero(self._needs_reset).tolist()
            raise RuntimeError(f"envs {ended} ended; with autoreset_mode=DISABLED reset them (options['reset_mask'])")
        resetting = self._needs_reset.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP else None
        stepping = [i for i in range(self.num_envs) if resetting is None or not resetting[i]]
        stepped = step_envs(self._local, stepping, [actions[i] for i in stepping], self._imaginers, roles=self._roles)
        outcomes = dict(zip(stepping, stepped, strict=True))

        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        for i, outcome in outcomes.items():
            rewards[i], terminations[i], truncations[i] = outcome[1:4]
        # NEXT_STEP: an env that ended last step resets now (its action ignored); SAME_STEP: one that ends now.
        ended = terminations | truncations if self.autoreset_mode == AutoresetMode.SAME_STEP else None
        again = [i for i in range(self.num_envs) if i not in outcomes or (ended is not None and ended[i])]
        fresh = self._reset({i: (self.envs[i], None, None) for i in again})
        infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            if i in outcomes:
                obs, env_info = outcomes[i][0], outcomes[i][4]
                self._env_obs_list[i] = obs
                if i in fresh:
                    infos = add_info(infos, {"final_obs": obs, "final_info": env_info}, i, self.num_envs)
            if i in fresh:
                self._env_obs_list[i], env_info = fresh[i]
            infos = add_info(infos, env_info, i, self.num_envs)
        self._needs_reset = np.logical_or(terminations, truncations)
        return self._batched_obs(), rewards, terminations, truncations, infos

    def render(self) -> tuple[Any, ...]:
        """Each env's ``render()``."""
        return tuple(env.render() for env in self.envs)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Each env's method ``name`` called with these arguments (or attribute ``name``), as ``SyncVectorEnv``."""
        results = []
        for env in self.envs:
            attr = env.get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(results)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Each env's attribute ``name``."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set attribute ``name`` of each env: ``values`` one per env (a list or tuple), or one for all."""
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"{len(values)} values for {self.num_envs} envs; give one per env")
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each env's ``np_random_seed`` (as ``SyncVectorEnv``)."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's ``np_random`` (as ``SyncVectorEnv``)."""
        return self.get_attr("np_random")

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()


class WorkerDiedError(RuntimeError):
    """A worker process of a `ToolCallAsyncVectorEnv` died; the vector env is closed."""


class WorkerTimeoutError(RuntimeError):
    """Workers of a `ToolCallAsyncVectorEnv` did not answer within ``worker_timeout``; they are
    terminated and the vector env is closed. ``workers``: the indices of those that did not answer (empty
    where that is not known)."""

    def __init__(self, message: str, workers: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.workers = list(workers)


def _reports_dead_workers(method: Callable) -> Callable:
    @functools.wraps(method)
    def run(self: ToolCallAsyncVectorEnv, *args: Any, **kwargs: Any) -> Any:
        if self._closing_because is not None and not self.closed:
            # close() waits for the call in flight first; none can answer now, and a timeout has close()
            # terminate the workers (AsyncVectorEnv.close_extras).
            raise multiprocessing.TimeoutError(self._closing_because)
        try:
            return method(self, *args, **kwargs)
        except (BrokenPipeError, EOFError, ConnectionResetError) as exc:
            dead = self._dead_workers()
            if not dead:
                raise
            self._close_because(f"{type(self).__name__}: {'; '.join(dead)}; the vector env is closed, build a new one")
            raise WorkerDiedError(self._closing_because) from exc

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
            stuck = self.busy_workers()
            who = f"worker(s) {stuck}" if stuck else "some worker(s)"
            self._close_because(
                f"{type(self).__name__}: {who} did not answer within {timeout} s; they were terminated and the "
                "vector env is closed, build a new one"
            )
            raise WorkerTimeoutError(self._closing_because, stuck) from None

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

    Each env runs inside a `WorkerEnv` wrapper, which marks in shared memory whether it is busy (that is how
    the stuck workers are named), and ``call`` goes through it (``WorkerEnv.tracked_call``). Its own ``step``
    leaves each worker's env role to that worker (its own copy of the imaginer);
    ``envace_gym.agents.collect`` batches the env role across the workers (their half-steps' requests come
    back to the parent's policy).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], worker_timeout: float | None = None, **kwargs: Any):
        if worker_timeout is not None and worker_timeout <= 0:
            raise ValueError(f"worker_timeout must be > 0 seconds, got {worker_timeout}")
        self.worker_timeout = worker_timeout
        self._closing_because: str | None = None  # why we are closing it (a worker died or is stuck)
        # One busy byte per worker, in shared memory that each worker attaches to by name (WorkerEnv).
        self._busy = SharedMemory(create=True, size=max(1, len(env_fns)))
        tracked = [functools.partial(_worker_env, fn, self._busy, i) for i, fn in enumerate(env_fns)]
        try:
            super().__init__(tracked, **kwargs)
        except BaseException:
            self._release_busy()
            raise

    def busy_workers(self) -> list[int]:
        """The workers given work that they have not finished (after a timeout: the stuck ones)."""
        return [i for i in range(self.num_envs) if self._busy.buf[i]] if not self.closed else []

    def _mark_busy(self, mask: np.ndarray | None = None) -> None:
        for i in range(self.num_envs):
            self._busy.buf[i] = 1 if mask is None or mask[i] else 0

    def _release_busy(self) -> None:
        self._busy.close()
        with contextlib.suppress(FileNotFoundError):  # released already (by a close that failed part-way)
            self._busy.unlink()

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """As ``AsyncVectorEnv.close_extras``, then the busy bytes' shared memory is released."""
        try:
            super().close_extras(timeout=timeout, terminate=terminate)
        finally:
            self._release_busy()

    def _close_because(self, reason: str) -> None:
        self._closing_because = reason
        with warnings.catch_warnings():  # close() warns of the call in flight: we know, and say why
            warnings.filterwarnings("ignore", message=".*while waiting for a pending call")
            self.close(terminate=True)

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

    @_reports_dead_workers
    def reset_async(self, seed: int | list[int | None] | None = None, options: dict | None = None) -> None:
        """As ``AsyncVectorEnv.reset_async``; the envs of ``options["reset_mask"]`` (all by default) are marked busy."""
        self._mark_busy((options or {}).get("reset_mask"))
        super().reset_async(seed=seed, options=options)

    @_reports_dead_workers
    def step_async(self, actions: Any) -> None:
        """As ``AsyncVectorEnv.step_async``; every env is marked busy."""
        self._mark_busy()
        super().step_async(actions)

    @_reports_dead_workers
    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """As ``AsyncVectorEnv.call_async``, through each worker's `WorkerEnv` (marked busy meanwhile)."""
        if name in ("reset", "step", "close"):
            raise ValueError(f"call({name!r}) is refused: use {name}() itself")
        self._mark_busy()
        super().call_async("tracked_call", name, *args, **kwargs)

    reset_wait = _reports_dead_workers(_bounded_wait(AsyncVectorEnv.reset_wait))
    step_wait = _reports_dead_workers(_bounded_wait(AsyncVectorEnv.step_wait))
    call_wait = _reports_dead_workers(_bounded_wait(AsyncVectorEnv.call_wait))
    set_attr = _reports_dead_workers(AsyncVectorEnv.set_attr)


def _worker_env(env_fn: Callable[[], gym.Env], busy: SharedMemory, index: int) -> WorkerEnv:
    """Env ``index`` of a `ToolCallAsyncVectorEnv`, built in its worker: ``env_fn()`` in a `WorkerEnv`."""
    return WorkerEnv(env_fn(), busy, index)


def make_vector(
    num_envs: int = 1,
    *,
    env_id: str = "EnvACE-ToolCall-v0",
    imaginer: Imaginer | None = None,
    imagination: dict[str, Any] | None = None,
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
            ``envace_gym.make_env(env_id, imaginer=imaginer, imagination=imagination, **env_kwargs)``.
        imagination: more ``SelfRehearsalEnv`` kwargs (``grounding``, ``on_invalid``, ``real_fraction``, ...).
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
    check_imaginer(env_kwargs.get("backend"), imaginer, imagination)  # here, not in each worker process
    build = functools.partial(make_env, env_id, imaginer=imaginer, imagination=imagination, **env_kwargs)

    if asynchronous:
        return ToolCallAsyncVectorEnv(
            [build] * num_envs, worker_timeout=worker_timeout, copy=copy, autoreset_mode=autoreset_mode
        )
    if worker_timeout is not None:
        raise ValueError("worker_timeout applies to asynchronous=True (worker processes) only")
    return ToolCallVectorEnv([build] * num_envs, copy=copy, autoreset_mode=autoreset_mode)
