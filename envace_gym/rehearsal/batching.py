"""Batch env-role requests made from concurrent threads: what the env-role fidelity evaluation
(``envace_gym.agents.eval.fidelity``) uses to replay recorded calls in threads. Rollouts do not: envs batch
their env role through half-steps (:mod:`.halfstep`), with no thread.

Threads that share a :class:`BatchingImaginer` each ask for one result at a time: each request waits until
every still-running thread is either waiting too or done, and then all waiting requests go to the policy in
one batched ``imagine_batch`` call, in the order of the threads' indices (not of arrival), so that seeded
sampling draws the same tokens for the same thread on every run. Generation itself runs in one thread at a
time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .protocol import ImagineRequest

__all__ = ["BatchingImaginer", "step_concurrently"]


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
    """Run each ``(step, imaginer)`` (``step``: a function that asks ``imaginer`` for results) in ``pool`` and
    return the results in order; env-role requests made meanwhile are answered in batches by ``imaginer``."""

    def run(index: int, step: Callable[[], Any], imaginer: BatchingImaginer | None) -> Any:
        if imaginer is not None:
            imaginer.bind_order(index)
        try:
            return step()
        finally:
            if imaginer is not None:
                imaginer.step_done()

    return [f.result() for f in [pool.submit(run, i, step, im) for i, (step, im) in enumerate(steps)]]
