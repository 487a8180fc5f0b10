"""Backends for BFCL tasks, registered as ``bfcl/multi_turn`` and ``bfcl/single_turn``.

* `BFCLBackend`: BFCL's stateful API classes (file system, trading bot, ...), fresh instances at
  every ``reset``, calls dispatched by name after the fixed checks of ``validate_call``.
* `RecordingBackend`: BFCL's single-turn functions are descriptions only (nothing to run); a valid
  call is acknowledged, and the state is the list of calls made.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from envace_gym.backends.base import ToolResult, state_digest, validate_call
from envace_gym.calls import ErrorCode, ToolCall
from envace_gym.tools import ToolSpec

from .world import BFCLWorld, Outcome, public_state, to_json

if TYPE_CHECKING:
    from envace_gym.tasks import Task

__all__ = [
    "BFCLBackend",
    "RecordingBackend",
    "ACKNOWLEDGEMENT",
    "result_content",
    "make_multi_turn_backend",
    "make_single_turn_backend",
]

#: What a valid single-turn call returns: BFCL scores the calls themselves, so there is no result to show.
ACKNOWLEDGEMENT = {"status": "ok", "message": "call recorded; BFCL functions of this category are not executed"}


def result_content(value: Any) -> Any:
    """A method's return value as a tool result: a non-empty JSON object or array (other values, and ``{}``,
    are wrapped as ``{"result": value}``), so that imagined results can have the same shape."""
    value = to_json(value)
    if isinstance(value, list) or (isinstance(value, dict) and value):
        return value
    return {"result": value}


class BFCLBackend:
    """BFCL's multi-turn API classes as a `Backend`.

    ``reset(task)`` builds fresh instances of ``task.metadata["involved_classes"]`` from
    ``task.initial_state`` (BFCL's ``initial_config``). A call that raises inside the API becomes a
    ``TOOL_EXECUTION_ERROR`` and keeps whatever it changed, as in BFCL's own runs (its checker replays
    calls without rollback). A call running past ``timeout`` gives ``TOOL_TIMEOUT`` and the world is rebuilt
    by replaying the calls that finished before it.
    """

    def __init__(self, timeout: float | None = 5.0) -> None:
        self.timeout = timeout
        self.call_count = 0
        self._task: Task | None = None
        self._specs: dict[str, ToolSpec] = {}
        self._world: BFCLWorld | None = None
        self._done: list[ToolCall] = []  # calls that ran to the end, for rebuilding after a timeout

    @property
    def tools(self) -> Sequence[ToolSpec]:
        return list(self._specs.values())

    @property
    def world(self) -> BFCLWorld:
        """The live instances (BFCL's state check compares their public attributes)."""
        if self._world is None:
            raise RuntimeError("BFCLBackend: reset(task) first")
        return self._world

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        if task is None:
            raise ValueError("BFCLBackend needs a task: its involved classes and initial configuration")
        self._task = task
        self._specs = {s.name: s for s in task.tool_specs}
        self._world = new_world(task)
        self._done = []
        self.call_count = 0

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, self._specs)
        if error is not None:
            return ToolResult(call, None, error)
        outcome = self._run(call)
        if outcome is None:
            self._rebuild()
            return ToolResult.failure(
                call, ErrorCode.TOOL_TIMEOUT, f"{call.name} did not finish within {self.timeout:g}s"
            )
        self._done.append(call)
        if outcome.error is not None:
            return ToolResult.failure(
                call, ErrorCode.TOOL_EXECUTION_ERROR, f"{type(outcome.error).__name__}: {outcome.error}"
            )
        try:
            return ToolResult(call, result_content(outcome.value))
        except (TypeError, ValueError) as exc:
            return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"result is not JSON: {exc}")

    def state(self) -> dict[str, Any]:
        return public_state(self.world)

    def state_hash(self) -> str:
        return state_digest(self.state())

    def copy(self) -> BFCLBackend:
        """An independent backend at the current state (rehearsal from the current point)."""
        clone = copy.copy(self)
        clone._world = copy.deepcopy(self._world)
        clone._done = list(self._done)
        clone._specs = dict(self._specs)
        return clone

    # ------------------------------------------------------------------ internals
    def _run(self, call: ToolCall) -> Outcome | None:
        saved = _mpmath_precision()
        try:
            outcome = self._run_call(call)
            if outcome is not None and outcome.error is None:
                try:  # rendered while the call's own precision is still in force (an mpf prints with it)
                    outcome = Outcome(value=to_json(outcome.value))
                except (TypeError, ValueError):
                    pass  # execute() reports a result that is not JSON
            return outcome
        finally:
            # BFCL's MathAPI sets mpmath's process-wide precision (logarithm(precision=...)): put it back, so
            # that no call changes what later calls (or other code in the process) compute.
            _set_mpmath_precision(saved)

    def _run_call(self, call: ToolCall) -> Outcome | None:
        world = self.world
        if self.timeout is None:
            return world.call(call.name, call.arguments)
        box: list[Outcome] = []

        def target() -> None:
            try:
                box.append(world.call(call.name, call.arguments))
            except BaseException as exc:  # noqa: BLE001 - even SystemExit from an API stays an observation
                box.append(Outcome(error=exc))

        worker = threading.Thread(target=target, daemon=True, name=f"envace-bfcl-{call.name}")
        worker.start()
        worker.join(self.timeout)
        return box[0] if box else None

    def _rebuild(self) -> None:
        # The timed-out call may still be changing the old instances in its thread: start over from scratch,
        # replaying the finished calls under the same watchdog (one that now hangs ends the replay there).
        assert self._task is not None
        self._world = new_world(self._task)
        for i, call in enumerate(self._done):
            if self._run(call) is None:  # its thread may still write to this world: build one more without it
                self._done = self._done[:i]
                self._world = new_world(self._task)
                for done in self._done:  # each just finished under the watchdog
                    self._world.call(done.name, done.arguments)
                break


def _mpmath_precision() -> int | None:
    mpmath = sys.modules.get("mpmath")
    return mpmath.mp.prec if mpmath is not None else None


def _set_mpmath_precision(prec: int | None) -> None:
    mpmath = sys.modules.get("mpmath")
    if mpmath is not None:
        mpmath.mp.prec = prec if prec is not None else 53  # mpmath's default (15 digits)


def new_world(task: Task) -> BFCLWorld:
    """Fresh instances for a BFCL multi-turn task."""
    meta = task.metadata
    return BFCLWorld(meta["involved_classes"], task.initial_state, long_context=bool(meta.get("long_context")))


class RecordingBackend:
    """BFCL single-turn functions: validated, acknowledged with `ACKNOWLEDGEMENT`, recorded as state."""

    def __init__(self) -> None:
        self.call_count = 0
        self._specs: dict[str, ToolSpec] = {}
        self._calls: list[dict[str, Any]] = []

    @property
    def tools(self) -> Sequence[ToolSpec]:
        return list(self._specs.values())

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self._specs = {s.name: s for s in task.tool_specs} if task is not None else {}
        self._calls = []
        self.call_count = 0

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, self._specs)
        if error is not None:
            return ToolResult(call, None, error)
        self._calls.append(call.to_dict())
        return ToolResult(call, dict(ACKNOWLEDGEMENT))

    def state(self) -> dict[str, Any]:
        return {"calls": copy.deepcopy(self._calls)}

    def state_hash(self) -> str:
        return state_digest(self.state())

    def copy(self) -> RecordingBackend:
        clone = copy.copy(self)
        clone._calls = copy.deepcopy(self._calls)
        return clone


def make_multi_turn_backend(timeout: float | None = 5.0, **_: Any) -> BFCLBackend:
    """Factory registered as ``bfcl/multi_turn``."""
    return BFCLBackend(timeout=timeout)


def make_single_turn_backend(**_: Any) -> RecordingBackend:
    """Factory registered as ``bfcl/single_turn`` (nothing runs, so no timeout applies)."""
    return RecordingBackend()
