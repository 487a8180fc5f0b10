"""Batch the environment role across envs that step at the same time.

In the core, so that the native vector env (:mod:`envace_gym.vector`) and the rollout engine
(``envace_gym.agents.rollout``) share one implementation, :func:`step_batched`. A ``SelfRehearsalEnv``
asks its imaginer for one result at a time, from inside ``env.step``. When several such envs step
together, their steps run in threads and share a :class:`BatchingImaginer`: each request waits until
every still-running step is either waiting too or done, and then all waiting requests go to the policy in
one batched ``imagine_batch`` call, in the order of the envs (not of thread arrival), so that seeded
sampling draws the same tokens for the same env on every run. Generation itself always runs in one thread
at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from .protocol import ImagineRequest

__all__ = ["BatchingImaginer", "step_concurrently", "step_batched", "imaginer_of"]


class _Pending:
    __slots__ = ("request", "order", "result", "error", "done")

    def __init__(self, request: ImagineRequest, order: tuple[int, int]) -> None:
        self.request = request
        self.order = order
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False


class BatchingImaginer:
    """An imaginer shared by concurrently stepping envs; see the module docstring.

    Args:
        policy: what answers, through ``imagine_batch(requests)``.
        running: how many steps are in flight (each must end with :meth:`step_done`).
    """

    def __init__(self, policy: Any, running: int) -> None:
        self.policy = policy
        self.running = running
        self.batches: list[int] = []  # sizes of the batches sent, for reports and tests
        self._cv = threading.Condition()
        self._waiting: list[_Pending] = []
        self._generating = False
        self._local = threading.local()  # which env this thread steps (set by step_concurrently)

    def bind_order(self, index: int) -> None:
        """The calling thread steps env ``index``: its requests go first in a batch with later envs'."""
        self._local.order, self._local.seq = index, 0

    def imagine(self, request: ImagineRequest) -> Any:
        seq = getattr(self._local, "seq", 0)
        self._local.seq = seq + 1
        item = _Pending(request, (getattr(self._local, "order", 0), seq))
        with self._cv:
            self._waiting.append(item)
            self._cv.notify_all()
            while not item.done:
                if not self._generating and self._waiting and len(self._waiting) >= self.running:
                    self._run_batch()
                else:
                    self._cv.wait()
        if item.error is not None:
            raise item.error
        return item.result

    def step_done(self) -> None:
        """One step finished: the others no longer wait for it."""
        with self._cv:
            self.running -= 1
            self._cv.notify_all()
            if not self._generating and self._waiting and len(self._waiting) >= self.running:
                self._run_batch()

    def _run_batch(self) -> None:
        # Called with the lock held; generation runs without it so waiting threads are not blocked on it.
        batch, self._waiting = sorted(self._waiting, key=lambda p: p.order), []
        self._generating = True
        self._cv.release()
        try:
            gens = self.policy.imagine_batch([p.request for p in batch])
            for p, g in zip(batch, gens, strict=True):
                p.result = g
        except BaseException as exc:  # every request of the batch sees the failure (contained upstream)
            for p in batch:
                p.error = exc
        finally:
            self._cv.acquire()
            self.batches.append(len(batch))
            for p in batch:
                p.done = True
            self._generating = False
            self._cv.notify_all()


def step_concurrently(
    pool: ThreadPoolExecutor, steps: Sequence[tuple[Callable[[], Any], BatchingImaginer | None]]
) -> list[Any]:
    """Run each ``(step, imaginer)`` (``step`` is one ``env.step``) in ``pool`` and return the results in
    order; env-role requests made meanwhile are answered in batches by their ``imaginer``."""

    def run(index: int, step: Callable[[], Any], imaginer: BatchingImaginer | None) -> Any:
        if imaginer is not None:
            imaginer.bind_order(index)
        try:
            return step()
        finally:
            if imaginer is not None:
                imaginer.step_done()

    return [f.result() for f in [pool.submit(run, i, step, im) for i, (step, im) in enumerate(steps)]]


def imaginer_of(env: gym.Env) -> Any:
    """The env role of ``env``'s rehearsal wrapper (reached through any outer wrappers), or None."""
    return env.get_wrapper_attr("imaginer") if env.has_wrapper_attr("imaginer") else None


def _set_imaginer(env: gym.Env, imaginer: Any) -> None:
    # force=False: set it where the wrapper chain has it (the SelfRehearsalEnv), never create it on top.
    if not env.set_wrapper_attr("imaginer", imaginer, force=False):
        raise AttributeError(f"no wrapper of {env} has an imaginer")


def step_batched(envs: Sequence[gym.Env], actions: Sequence[Any], pool: ThreadPoolExecutor | None) -> list[tuple]:
    """``env.step(action)`` for every env, results in order. Where two or more envs share an env role that
    can batch (``imagine_batch``), their steps run in ``pool``'s threads with a :class:`BatchingImaginer`
    lent to their rehearsal wrappers for the step (and given back after), so that every env-role request
    of the step goes out in one batch. Otherwise (or with ``pool=None``) the envs step one after another:
    pure-Python tools hold the GIL, so threads would buy nothing there."""
    groups: dict[int, list[int]] = {}
    for i, env in enumerate(envs):
        imaginer = imaginer_of(env)
        if hasattr(imaginer, "imagine_batch"):
            groups.setdefault(id(imaginer), []).append(i)
    originals = {i: imaginer_of(envs[i]) for members in groups.values() if len(members) > 1 for i in members}
    if pool is None or not originals:
        return [env.step(a) for env, a in zip(envs, actions, strict=True)]
    batchers = {
        key: BatchingImaginer(originals[members[0]], len(members))
        for key, members in groups.items()
        if len(members) > 1
    }
    batcher_of = {i: batchers[id(imaginer)] for i, imaginer in originals.items()}
    try:
        for i, batcher in batcher_of.items():
            _set_imaginer(envs[i], batcher)
        steps = [
            (lambda env=env, a=a: env.step(a), batcher_of.get(i))
            for i, (env, a) in enumerate(zip(envs, actions, strict=True))
        ]
        return step_concurrently(pool, steps)
    finally:
        for i, original in originals.items():
            _set_imaginer(envs[i], original)
