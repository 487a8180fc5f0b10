"""Real tool backends over plain Python: stateless functions or a stateful `Toolkit`.

Every call is contained: a tool that raises, returns something that is not JSON, or runs past its
per-call timeout becomes an error observation, and the backend state is rolled back to what it was
before the call, so a failed call never changes state.

Rollback is copy-on-write (`cow`): a call runs on an overlay of the committed state and only the
containers it reaches are copied, so undoing a failed call is dropping the overlay, and reset and
`PythonBackend.copy` share the state instead of copying it. The earlier strategy, a deep copy of the
whole state before every call, stays available as ``rollback="deepcopy"`` (for comparison and as a fallback).
"""

from __future__ import annotations

import copy
import json
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..calls import ErrorCode, ToolCall
from ..kept import KeptByIdentity
from ..tools import ToolSpec, check_hinted
from .base import ToolResult, state_digest, validate_call
from .cow import CowDict, Txn, detach_json, overlay, plain_copy, release, unchanged

if TYPE_CHECKING:
    from ..tasks import Task

__all__ = ["tool", "Toolkit", "PythonBackend", "ROLLBACKS", "DEFAULT_ROLLBACK"]

_TOOL_ATTR = "__envace_tool__"

ROLLBACKS = ("cow", "deepcopy")
# What ``PythonBackend(rollback=None)`` uses: every registered backend is built that way, so setting this
# before building an env switches all of its Python backends (the env_step benchmark does, to compare).
DEFAULT_ROLLBACK = "cow"
# Whether toolkits that declare ``run_inline`` run their tools in the caller's thread (see Toolkit).
# False puts every call under the watchdog thread again (the env_step benchmark measures both).
INLINE_TOOLKITS = True


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None):
    """Mark a `Toolkit` method (or a plain function) as a tool; its schema comes from its hints. A parameter
    without a type hint raises `SchemaError` here, naming the tool and the parameter (`check_hinted`)."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        check_hinted(f, name)  # fails where the tool is defined, not at the first backend built on it
        setattr(f, _TOOL_ATTR, {"name": name or f.__name__})
        return f

    return mark(fn) if fn is not None else mark


class Toolkit:
    """Base class for a stateful tool domain.

    All mutable state lives in ``self.state``, a JSON-serialisable dict, so that snapshots, hashes,
    rollback and copies are exact. Subclasses mark tool methods with `tool`; tools read and write
    ``self.state`` with ordinary dict and list operations. Built directly, a toolkit deep-copies the state
    it is given; a `PythonBackend` instead hands it a copy-on-write overlay (see `cow`).
    """

    _specs_cache: ClassVar[dict[type, dict[str, tuple[str, ToolSpec]]]] = {}

    #: True for a toolkit whose tools are bounded, pure computations over ``self.state`` (no I/O, no
    #: waiting, no unbounded loops): a `PythonBackend` then runs them in the caller's thread, without
    #: the per-call timeout, since handing a call to a watchdog thread and back costs more than such a call.
    #: Leave it False when a tool may block: only the watchdog thread turns a hang into a timeout.
    run_inline: ClassVar[bool] = False

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        if type(state) is CowDict and state._txn.active:
            # A backend's overlay: adopted as is (whatever __init__ writes lands in the overlay).
            self.state: dict[str, Any] = state
            return
        self.state = copy.deepcopy(state) if state else {}

    @classmethod
    def tool_methods(cls) -> dict[str, tuple[str, ToolSpec]]:
        """Tool name -> (method name, spec) for every method marked with `tool`."""
        cached = Toolkit._specs_cache.get(cls)
        if cached is None:
            cached = {}
            for attr in dir(cls):
                member = getattr(cls, attr, None)
                meta = getattr(member, _TOOL_ATTR, None)
                if meta is not None and callable(member):
                    spec = ToolSpec.from_function(member, name=meta["name"])
                    cached[spec.name] = (attr, spec)
            Toolkit._specs_cache[cls] = cached
        return cached

    @classmethod
    def tool_specs(cls) -> list[ToolSpec]:
        return [spec for _, spec in cls.tool_methods().values()]


class PythonBackend:
    """Runs declared tools in-process, with per-call timeout, error containment and state rollback.

    Args:
        toolkit: a `Toolkit` subclass; a fresh instance is built from the task's initial state at
            every ``reset``.
        functions: plain functions (stateless tools), used instead of or beside a toolkit.
        timeout: seconds a single call may run; ``None`` runs calls inline without a watchdog.
        rollback: ``"cow"`` (copy-on-write, see `cow`: a call pays for what it reaches, a failed call
            is undone by dropping its overlay) or ``"deepcopy"`` (the whole state is deep-copied before each
            call and at every reset; calls run on a new thread each). ``None``: `DEFAULT_ROLLBACK`.
    """

    def __init__(
        self,
        toolkit: type[Toolkit] | None = None,
        functions: Iterable[Callable[..., Any]] = (),
        timeout: float | None = 5.0,
        rollback: str | None = None,
    ) -> None:
        self.rollback = rollback or DEFAULT_ROLLBACK
        if self.rollback not in ROLLBACKS:
            raise ValueError(f"rollback must be one of {ROLLBACKS}, got {self.rollback!r}")
        self.toolkit_cls = toolkit or Toolkit
        self.timeout = timeout
        self._functions: dict[str, tuple[Callable[..., Any], ToolSpec]] = {}
        for fn in functions:
            meta = getattr(fn, _TOOL_ATTR, None) or {"name": fn.__name__}
            spec = ToolSpec.from_function(fn, name=meta["name"])
            self._functions[spec.name] = (fn, spec)
        self._all_specs = {
            **{n: s for n, (_, s) in self.toolkit_cls.tool_methods().items()},
            **{n: s for n, (_, s) in self._functions.items()},
        }
        # What a task lists when it offers every tool unchanged (builtin tasks do): then reset can use
        # these specs instead of building (and compiling) one ToolSpec per tool per task.
        self._all_openai = tuple(s.to_openai() for s in self._all_specs.values())
        self._specs = self._all_specs
        # task.tools (by identity) -> the episode's specs: tasks are reset many times.
        self._task_specs: KeptByIdentity[dict[str, ToolSpec]] = KeptByIdentity(65_536)
        self._inline = self.toolkit_cls.run_inline
        self._hashes: KeptByIdentity[str] = KeptByIdentity(4096)  # committed state -> its hash; see state_hash
        self._toolkit = self._new_toolkit({})
        self.call_count = 0
        self.timeouts = 0

    # ------------------------------------------------------------------ protocol
    @property
    def tools(self) -> Sequence[ToolSpec]:
        return list(self._specs.values())

    @property
    def runs_inline(self) -> bool:
        """True when every call runs in the caller's thread: the toolkit declares ``run_inline`` and there are
        no plain functions, or there is no timeout. Otherwise a call may hang, and only a watchdog (a thread
        here, a killable worker process under ``tool_isolation="auto"`` or ``"process"``) ends the wait."""
        if self.timeout is None:
            return True
        return self._inline and INLINE_TOOLKITS and not self._functions

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        """Fresh state from the task's initial state; the episode's tools are the task's, if it lists any.

        With copy-on-write the task's ``initial_state`` becomes the committed state without a copy: no call
        ever writes into committed state, so the task is never modified.
        """
        self._toolkit = self._new_toolkit(task.initial_state if task is not None else {})
        self.call_count = 0
        if task is not None and task.tools:
            hit = self._task_specs.get(task.tools)
            if hit is not None:
                self._specs = hit
                return
            if tuple(task.tools) == self._all_openai:
                self._specs = self._all_specs
            else:
                # The task's own schemas are authoritative (a task may withhold or restate tools).
                self._specs = {s.name: s for s in task.tool_specs if s.name in self._all_specs}
            self._task_specs.put(task.tools, self._specs)
        else:
            self._specs = self._all_specs

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, self._specs)
        if error is not None:
            return ToolResult(call, None, error)
        if self.rollback == "deepcopy":
            return self._execute_deepcopy(call)
        kit = self._toolkit
        committed = kit.state
        txn = Txn()
        root = kit.state = overlay(committed, txn)
        inline = self._inline and INLINE_TOOLKITS and call.name not in self._functions
        outcome = self._run(self._bound(kit, call.name), call.arguments, inline)
        if outcome[0] == "ok":
            try:
                content = detach_json(outcome[1])  # results never alias the state
            except (TypeError, ValueError) as exc:
                release(txn)
                self._toolkit = self._new_toolkit(committed)
                return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"result is not JSON: {exc}")
            txn.active = False  # commit: the overlay (or what the tool put in self.state) is the state now
            if kit.state is root and unchanged(txn):
                kit.state = committed  # a call that changed nothing (a lookup) keeps the state and its hash
            release(txn)
            return ToolResult(call, content)
        if outcome[0] != "timeout":  # a timed-out call still runs in its thread, on its own txn
            release(txn)
        # A fresh instance on the committed state: a timed-out call still running in its thread keeps its
        # own instance, whose state is the overlay that is being dropped (txn stays active for it).
        self._toolkit = self._new_toolkit(committed)
        return self._failure(call, outcome)

    def state(self) -> dict[str, Any]:
        return plain_copy(self._toolkit.state)

    def state_hash(self) -> str:
        state = self._toolkit.state
        if self.rollback != "cow":  # deepcopy rollback writes the state in place: nothing to remember
            return state_digest(state)
        # Committed state is never written (see `cow`), so its hash is known for as long as it is the
        # state: after reset (a task's initial state, shared by its episodes) and after calls that
        # changed nothing.
        kept = self._hashes.get(state)
        return kept if kept is not None else self._hashes.put(state, state_digest(state))

    def copy(self) -> PythonBackend:
        """An independent backend at the current state (for rehearsal from the current point).

        With copy-on-write both backends share the committed state, which neither ever writes.
        """
        clone = copy.copy(self)
        if self.rollback == "deepcopy":
            clone._toolkit = self.toolkit_cls(self._toolkit.state)
        else:
            clone._toolkit = self._new_toolkit(self._toolkit.state)
        clone._specs = dict(self._specs)
        return clone

    # ------------------------------------------------------------------ internals
    def _new_toolkit(self, state: dict[str, Any]) -> Toolkit:
        """A toolkit instance whose committed state is ``state`` (shared, not copied, under ``cow``)."""
        if self.rollback == "deepcopy":
            return self.toolkit_cls(state)
        base = state or {}
        txn = Txn()
        root = overlay(base, txn)
        kit = self.toolkit_cls(root)  # a subclass __init__ may write to it
        txn.active = False
        if kit.state is root and unchanged(txn):
            kit.state = base  # the task's initial state itself: its hash is known from earlier episodes
        release(txn)
        return kit

    def _bound(self, kit: Toolkit, name: str) -> Callable[..., Any]:
        if name in self._functions:
            return self._functions[name][0]
        method_name, _ = self.toolkit_cls.tool_methods()[name]
        return getattr(kit, method_name)

    def _failure(self, call: ToolCall, outcome: tuple[str, Any]) -> ToolResult:
        if outcome[0] == "timeout":
            self.timeouts += 1
            return ToolResult.failure(
                call, ErrorCode.TOOL_TIMEOUT, f"{call.name} did not finish within {self.timeout:g}s"
            )
        exc = outcome[1]
        return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"{type(exc).__name__}: {exc}")

    def _run(self, fn: Callable[..., Any], arguments: dict[str, Any], inline: bool) -> tuple[str, Any]:
        args = plain_copy(arguments)  # a tool may mutate its arguments; the call keeps its own
        if inline or self.timeout is None:
            try:
                return "ok", fn(**args)
            except Exception as exc:  # contained: becomes an error observation
                return "error", exc
        return _Worker.run(fn, args, self.timeout)

    # ------------------------------------------------------------------ rollback="deepcopy"
    def _execute_deepcopy(self, call: ToolCall) -> ToolResult:
        snapshot = copy.deepcopy(self._toolkit.state)
        target = self._bound(self._toolkit, call.name)
        outcome = self._run_deepcopy(target, call.arguments)
        if outcome[0] == "ok":
            try:
                content = json.loads(json.dumps(outcome[1]))  # also detaches results from live state
            except (TypeError, ValueError) as exc:
                self._toolkit = self.toolkit_cls(snapshot)
                return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"result is not JSON: {exc}")
            return ToolResult(call, content)
        # A fresh instance: a timed-out call still running in its thread keeps mutating the old one.
        self._toolkit = self.toolkit_cls(snapshot)
        return self._failure(call, outcome)

    def _run_deepcopy(self, fn: Callable[..., Any], arguments: dict[str, Any]) -> tuple[str, Any]:
        args = copy.deepcopy(arguments)
        if self.timeout is None:
            try:
                return "ok", fn(**args)
            except Exception as exc:  # contained: becomes an error observation
                return "error", exc
        box: list[tuple[str, Any]] = []

        def target() -> None:
            try:
                box.append(("ok", fn(**args)))
            except BaseException as exc:  # noqa: BLE001 - everything a tool raises is contained
                box.append(("error", exc))

        worker = threading.Thread(target=target, name=f"envace-tool-{fn.__name__}", daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive() or not box:
            return "timeout", None
        return box[0]


class _Worker:
    """A reusable daemon thread that runs tool calls under a timeout.

    Starting a thread per call costs more than most calls, so threads are pooled (process-wide, shared by
    all backends): a call takes an idle worker (or starts one) and the worker puts itself back once the
    call has finished, including a call that timed out and finished late; until then it is simply not idle.
    """

    _idle: ClassVar[list[_Worker]] = []
    MAX_IDLE: ClassVar[int] = 32

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="envace-tool-worker", daemon=True).start()

    @classmethod
    def run(cls, fn: Callable[..., Any], args: dict[str, Any], timeout: float) -> tuple[str, Any]:
        try:
            worker = cls._idle.pop()
        except IndexError:
            worker = cls()
        box: list[tuple[str, Any]] = []
        done = threading.Lock()
        done.acquire()
        worker._jobs.put((fn, args, box, done))
        if done.acquire(timeout=timeout) and box:
            return box[0]
        return "timeout", None

    def _loop(self) -> None:
        while True:
            fn, args, box, done = self._jobs.get()
            try:
                box.append(("ok", fn(**args)))
            except BaseException as exc:  # noqa: BLE001 - everything a tool raises is contained
                box.append(("error", exc))
            del fn, args  # drop references to the call's toolkit before idling
            idle = _Worker._idle
            if len(idle) >= _Worker.MAX_IDLE:
                done.release()
                return
            idle.append(self)
            done.release()
