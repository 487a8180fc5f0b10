"""Real tool backends over plain Python: stateless functions or a stateful :class:`Toolkit`.

Every call is contained: a tool that raises, returns something that is not JSON, or runs past its
per-call timeout becomes an error observation, and the backend state is rolled back to what it was
before the call, so a failed call never changes state.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ..calls import ErrorCode, ToolCall
from ..tools import ToolSpec
from .base import ToolResult, state_digest, validate_call

if TYPE_CHECKING:
    from ..tasks import Task

__all__ = ["tool", "Toolkit", "PythonBackend"]

_TOOL_ATTR = "__envace_tool__"


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None):
    """Mark a :class:`Toolkit` method (or a plain function) as a tool; its schema comes from its hints."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, _TOOL_ATTR, {"name": name or f.__name__})
        return f

    return mark(fn) if fn is not None else mark


class Toolkit:
    """Base class for a stateful tool domain.

    All mutable state lives in ``self.state``, a JSON-serialisable dict, so that snapshots, hashes,
    rollback and copies are exact. Subclasses mark tool methods with :func:`tool`.
    """

    _specs_cache: ClassVar[dict[type, dict[str, tuple[str, ToolSpec]]]] = {}

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        self.state: dict[str, Any] = copy.deepcopy(state) if state else {}

    @classmethod
    def tool_methods(cls) -> dict[str, tuple[str, ToolSpec]]:
        """Tool name -> (method name, spec) for every method marked with :func:`tool`."""
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
        toolkit: a :class:`Toolkit` subclass; a fresh instance is built from the task's initial state at
            every ``reset``.
        functions: plain functions (stateless tools), used instead of or beside a toolkit.
        timeout: seconds a single call may run; ``None`` runs calls inline without a watchdog.
    """

    def __init__(
        self,
        toolkit: type[Toolkit] | None = None,
        functions: Iterable[Callable[..., Any]] = (),
        timeout: float | None = 5.0,
    ) -> None:
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
        self._specs = dict(self._all_specs)
        self._toolkit = self.toolkit_cls({})
        self.call_count = 0
        self.timeouts = 0

    # ------------------------------------------------------------------ protocol
    @property
    def tools(self) -> Sequence[ToolSpec]:
        return list(self._specs.values())

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        """Fresh state from the task's initial state; the episode's tools are the task's, if it lists any."""
        self._toolkit = self.toolkit_cls(task.initial_state if task is not None else {})  # Toolkit copies it
        self.call_count = 0
        if task is not None and task.tools:
            # The task's own schemas are authoritative (a task may withhold or restate tools).
            self._specs = {s.name: s for s in task.tool_specs if s.name in self._all_specs}
        else:
            self._specs = dict(self._all_specs)

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, self._specs)
        if error is not None:
            return ToolResult(call, None, error)
        snapshot = copy.deepcopy(self._toolkit.state)
        target = self._bound(call.name)
        outcome = self._run(target, call.arguments)
        if outcome[0] == "ok":
            try:
                content = json.loads(json.dumps(outcome[1]))  # also detaches results from live state
            except (TypeError, ValueError) as exc:
                self._restore(snapshot)
                return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"result is not JSON: {exc}")
            return ToolResult(call, content)
        self._restore(snapshot)
        if outcome[0] == "timeout":
            self.timeouts += 1
            return ToolResult.failure(
                call, ErrorCode.TOOL_TIMEOUT, f"{call.name} did not finish within {self.timeout:g}s"
            )
        exc = outcome[1]
        return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"{type(exc).__name__}: {exc}")

    def state(self) -> dict[str, Any]:
        return copy.deepcopy(self._toolkit.state)

    def state_hash(self) -> str:
        return state_digest(self._toolkit.state)

    def copy(self) -> PythonBackend:
        """An independent backend at the current state (for rehearsal from the current point)."""
        clone = copy.copy(self)
        clone._toolkit = self.toolkit_cls(self._toolkit.state)
        clone._specs = dict(self._specs)
        return clone

    # ------------------------------------------------------------------ internals
    def _bound(self, name: str) -> Callable[..., Any]:
        if name in self._functions:
            return self._functions[name][0]
        method_name, _ = self.toolkit_cls.tool_methods()[name]
        return getattr(self._toolkit, method_name)

    def _restore(self, snapshot: dict[str, Any]) -> None:
        # A fresh instance: a timed-out call still running in its thread keeps mutating the old one.
        self._toolkit = self.toolkit_cls(snapshot)

    def _run(self, fn: Callable[..., Any], arguments: dict[str, Any]) -> tuple[str, Any]:
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
