"""What an env in a process vector env's worker offers the parent, through Gymnasium's public vector API only.

* `PerEnvCall` (mixed into `ToolCallEnv` and `WorkerEnv`): a method call with each env's own arguments.
  Gymnasium's ``vec.call(name, *args)`` gives every env the same arguments, but ``vec.set_attr(name, values)``
  takes one value per env; so the parent first sets each env's arguments (``vec.set_attr(CALL_ARGS, [...])``,
  None for an env that takes no part), then ``vec.call(CALL_WITH_ARGS, name)`` has each env call its method
  ``name`` with its own arguments (an env without arguments returns None). The rollout loop's ``RemoteEnvs``
  runs each worker's half-step (``begin_step``, ``continue_step``) this way.
* `WorkerEnv`: the wrapper that `ToolCallAsyncVectorEnv` puts around each of its envs: it marks, in memory
  shared with the parent, whether its env is busy, so that the parent can name the workers that did not
  answer in time (Gymnasium's own timeout says only that some worker did not).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import gymnasium as gym

__all__ = ["CALL_ARGS", "CALL_WITH_ARGS", "PerEnvCall", "WorkerEnv"]

#: The attribute that holds an env's own arguments for its next `PerEnvCall.call_with_pending_args`.
CALL_ARGS = "pending_call_args"
#: The method that calls another with the env's own arguments.
CALL_WITH_ARGS = "call_with_pending_args"


class PerEnvCall:
    """A method call with this env's own arguments, set beforehand with ``vec.set_attr(CALL_ARGS, ...)``."""

    # A class attribute, so that Gymnasium's ``set_wrapper_attr`` finds the env (or wrapper) that holds it and
    # sets it there: the same object whose ``call_with_pending_args`` ``get_wrapper_attr`` finds.
    pending_call_args: tuple | None = None

    def call_with_pending_args(self, name: str) -> Any:
        """Call method ``name`` (found as ``get_wrapper_attr`` finds it) with the pending arguments, which are
        used once; None, calling nothing, where none are pending (this env takes no part)."""
        args, self.pending_call_args = self.pending_call_args, None
        if args is None:
            return None
        return self.get_wrapper_attr(name)(*args)  # type: ignore[attr-defined]


class WorkerEnv(PerEnvCall, gym.Wrapper):
    """Env ``index`` of a `ToolCallAsyncVectorEnv`, marking ``busy[index]`` while it resets, steps or runs a call.

    ``busy`` is shared memory with a byte per worker (a ``SharedMemory``: it pickles by name, so a worker
    attaches to it under any start method); the parent sets an env's byte when it sends it work, and the env
    clears it when the work is done, so after a timeout the bytes still set name the stuck workers.
    """

    def __init__(self, env: gym.Env, busy: SharedMemory, index: int) -> None:
        super().__init__(env)
        self.busy, self.index = busy, index  # the SharedMemory itself is kept: its buffer lives as long as it

    @contextmanager
    def _working(self) -> Iterator[None]:
        # Set on entry too: with SAME_STEP autoreset the worker resets right after the step that cleared it.
        self.busy.buf[self.index] = 1
        try:
            yield
        finally:
            self.busy.buf[self.index] = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        with self._working():
            return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        with self._working():
            return self.env.step(action)

    def tracked_call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """What Gymnasium's worker does for ``vec.call(name, *args, **kwargs)``, marked busy meanwhile: call
        the attribute ``name`` (found as ``get_wrapper_attr`` finds it) or, if it is not callable, return it."""
        with self._working():
            attr = self.get_wrapper_attr(name)
            return attr(*args, **kwargs) if callable(attr) else attr
