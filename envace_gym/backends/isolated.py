"""``ProcessBackend``: a registered backend run in a worker process that is killed when a call hangs.

In-process tools can only be timed out, not stopped: a hung Python tool's thread runs on, and C-level work
(BFCL's ``power(10, 20000000)``) ignores the timeout altogether. Here the backend named by the task lives in
a child process; a call that does not answer within ``timeout`` gets the child killed (SIGKILL), a fresh
child rebuilt from the task with the episode's finished calls replayed (each under the same timeout), and a
``TOOL_TIMEOUT`` result. A child that dies (a crash in native code, ``os._exit``) is rebuilt the same way
and the call is a ``TOOL_EXECUTION_ERROR``. Messages are JSON over a pipe (never pickle): the task as
``Task.to_dict()``, calls and results as JSON.

The cost is one round trip per call and a process per env (``benchmarks/env_step.py`` prints it beside the
in-thread paths). `real_backend` decides where a registered backend's tools run; under the env's
default (``tool_isolation="auto"``) a toolkit that does not declare ``run_inline`` gets a worker process and
the builtin toolkits (pure, bounded tools that declare it) keep running in the caller's thread.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import sys
import warnings
from multiprocessing.connection import Connection
from typing import Any

from ..calls import CallError, ErrorCode, ToolCall
from ..tasks import Task
from ..tools import ToolSpec
from . import make_backend
from .base import Backend, ToolResult, validate_call
from .python import PythonBackend

__all__ = ["ProcessBackend", "TOOL_ISOLATIONS", "real_backend"]

#: Where a registered backend's tools run (``ToolCallEnv(tool_isolation=...)``; see `real_backend`).
TOOL_ISOLATIONS = ("auto", "thread", "process")


def real_backend(
    name: str, isolation: str = "auto", timeout: float | None = 5.0, memory_mb: int | None = None
) -> Backend:
    """The registered backend ``name``, its tools run where ``isolation`` says.

    * ``"process"``: a `ProcessBackend`: every call in a worker process, killed at ``timeout``.
    * ``"thread"``: built in this process: a toolkit that declares ``run_inline`` runs in the caller's
      thread, any other tool under a watchdog thread that abandons a hung call (its thread runs on).
    * ``"auto"``: ``"process"`` for a `PythonBackend` whose calls can hang (its toolkit does not
      declare ``run_inline``, or it has plain-function tools), ``"thread"`` for the rest: toolkits that
      declare ``run_inline`` (the builtin ones), backends that contain their own calls (BFCL, tau2, MCP),
      and ``timeout=None`` (no timeout asked for: nothing to end). Where this process may not start a
      worker (a daemonic process such as an ``AsyncVectorEnv`` worker, or a platform without ``fork``),
      ``"auto"`` falls back to ``"thread"`` with a one-time ``RuntimeWarning``.

    The worker is forked, so it inherits the registry: a toolkit defined in a function or registered with
    a lambda runs there as it would here; nothing is pickled.
    """
    if isolation not in TOOL_ISOLATIONS:
        raise ValueError(f"tool_isolation must be one of {TOOL_ISOLATIONS}, got {isolation!r}")
    if isolation == "process":
        return ProcessBackend(name, timeout=timeout or 5.0, memory_mb=memory_mb)
    local = make_backend(name, timeout=timeout)
    if isolation == "thread" or not isinstance(local, PythonBackend) or local.runs_inline:
        return local
    reason = _why_no_worker()
    if reason is not None:
        if (name, reason) not in _WARNED:
            _WARNED.add((name, reason))
            warnings.warn(
                f"tool_isolation='auto': {name!r} runs its tools under a watchdog thread in this process "
                f"(a hung call is abandoned, not killed): {reason}",
                RuntimeWarning,
                stacklevel=2,
            )
        return local
    assert timeout is not None  # runs_inline is True without a timeout
    return ProcessBackend(name, timeout=timeout, memory_mb=memory_mb)


_WARNED: set[tuple[str, str]] = set()


def _why_no_worker() -> str | None:
    """Why this process cannot fork a tool worker, or None when it can."""
    if multiprocessing.current_process().daemon:
        return "this is a daemonic process (an AsyncVectorEnv worker, say), which may not start children"
    if "fork" not in multiprocessing.get_all_start_methods():
        return "this platform cannot fork a worker"
    return None


def _limit_memory(extra_mb: int) -> None:
    """Cap the child's address space at what it maps now plus ``extra_mb``: a tool that allocates without
    bound gets a MemoryError (a TOOL_EXECUTION_ERROR) instead of taking the machine's memory."""
    with open("/proc/self/status", encoding="utf-8") as fh:
        mapped_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
    limit = (mapped_kb * 1024) + extra_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _serve(conn: Connection, name: str, memory_mb: int | None = None) -> None:
    """The child: builds backend ``name`` (no watchdog: the parent's timeout ends this process) and answers."""
    # What tools print goes to stderr: stdout is the parent's (``envace eval --json`` prints its result there).
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if memory_mb is not None:
        _limit_memory(memory_mb)
    backend = make_backend(name, timeout=None)
    while True:
        try:
            message = json.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        op = message["op"]
        if op == "reset":
            task = Task.from_dict(message["task"]) if message["task"] is not None else None
            backend.reset(task, seed=message["seed"])
            reply: dict[str, Any] = {"tools": [s.to_openai() for s in backend.tools]}
        elif op == "call":
            result = backend.execute(ToolCall(message["name"], message["arguments"]))
            reply = {"content": result.content, "text": result.text}
            if result.error is not None:
                reply["error"] = {"code": result.error.code.value, "message": result.error.message}
        elif op == "state":
            reply = {"state": backend.state()}
        elif op == "hash":
            reply = {"hash": backend.state_hash()}
        else:
            reply = {}
        conn.send_bytes(json.dumps(reply, ensure_ascii=False).encode("utf-8"))


class _WorkerGone(Exception):
    """The child did not answer in time (``timed_out``) or died."""

    def __init__(self, timed_out: bool) -> None:
        super().__init__("timed out" if timed_out else "died")
        self.timed_out = timed_out


class ProcessBackend:
    """The registered backend ``name`` (e.g. ``"builtin/bank"``, ``"bfcl/multi_turn"``), run in a child process.

    Args:
        name: a registered backend name (what a task's ``backend`` field holds).
        timeout: seconds a call (or a reset) may take before the child is killed and rebuilt.
        memory_mb: megabytes the child may allocate beyond what it maps at start (``RLIMIT_AS``); None: no cap.
    """

    def __init__(self, name: str, timeout: float = 5.0, memory_mb: int | None = None) -> None:
        if timeout is None or timeout <= 0:
            raise ValueError(f"ProcessBackend needs a timeout > 0 seconds, got {timeout}")
        if memory_mb is not None and memory_mb <= 0:
            raise ValueError(f"memory_mb must be > 0, got {memory_mb}")
        self.name, self.timeout, self.memory_mb = name, timeout, memory_mb
        self.task: Task | None = None
        self.seed: int | None = None
        self.tools: list[ToolSpec] = []
        self.call_count = 0
        self.restarts = 0
        self._done: list[ToolCall] = []  # calls that finished this episode: replayed into a rebuilt child
        self._conn: Connection | None = None
        self._process: Any = None

    # ------------------------------------------------------------------ protocol
    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.task, self.seed, self.call_count, self._done = task, seed, 0, []
        self._ensure_child()
        try:
            reply = self._ask({"op": "reset", "task": task.to_dict() if task is not None else None, "seed": seed})
        except _WorkerGone as gone:
            self._stop_child()
            raise RuntimeError(f"tool worker for {self.name!r} {gone} while resetting to the task") from None
        self.tools = [ToolSpec.from_openai(t) for t in reply["tools"]]

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, {s.name: s for s in self.tools})
        if error is not None:
            return ToolResult(call, None, error)
        try:
            reply = self._ask({"op": "call", "name": call.name, "arguments": call.arguments})
        except _WorkerGone as gone:
            self._rebuild()
            if gone.timed_out:
                message = f"{call.name} did not finish within {self.timeout:g}s (its worker process was killed)"
                return ToolResult.failure(call, ErrorCode.TOOL_TIMEOUT, message)
            return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"{call.name} crashed its worker process")
        if "error" in reply:
            err = reply["error"]
            code = ErrorCode(err["code"]) if err["code"] in ErrorCode.__members__ else ErrorCode.TOOL_EXECUTION_ERROR
            return ToolResult(call, None, CallError(code, err["message"], call.name))
        self._done.append(call)
        return ToolResult(call, reply["content"], text=reply.get("text"))

    def state(self) -> dict[str, Any]:
        return self._ask({"op": "state"})["state"]

    def state_hash(self) -> str:
        return self._ask({"op": "hash"})["hash"]

    def copy(self) -> ProcessBackend:
        """An independent backend at the same point: a new child, reset and replayed to it."""
        clone = ProcessBackend(self.name, self.timeout, self.memory_mb)
        clone.reset(self.task, self.seed)
        for call in self._done:
            clone.execute(call)
        clone.call_count = self.call_count
        return clone

    def close(self) -> None:
        self._stop_child()

    def __del__(self) -> None:
        self._stop_child()

    # ------------------------------------------------------------------ internals
    def _ensure_child(self) -> None:
        if self._process is not None and self._process.is_alive():
            return
        self._stop_child()
        parent, child = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("fork").Process(
            target=_serve, args=(child, self.name, self.memory_mb), daemon=True, name=f"envace-tools-{self.name}"
        )
        self._process.start()
        child.close()
        self._conn = parent

    def _stop_child(self) -> None:
        process, self._process = getattr(self, "_process", None), None
        conn, self._conn = getattr(self, "_conn", None), None
        if conn is not None:
            conn.close()
        if process is not None and process.is_alive():
            process.kill()
            process.join(5)

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._conn is None:
            raise _WorkerGone(timed_out=False)
        try:
            self._conn.send_bytes(json.dumps(message, ensure_ascii=False).encode("utf-8"))
            if not self._conn.poll(self.timeout):
                raise _WorkerGone(timed_out=True)
            return json.loads(self._conn.recv_bytes())
        except (EOFError, OSError, BrokenPipeError):
            raise _WorkerGone(timed_out=False) from None

    def _rebuild(self) -> None:
        """A fresh child at the episode's last good state: reset, then the finished calls replayed (each under
        the timeout; a replay that hangs too leaves the backend without a child: later calls are errors)."""
        self._stop_child()
        self.restarts += 1
        done, count = list(self._done), self.call_count
        try:
            self.reset(self.task, self.seed)
            for call in done:
                self._ask({"op": "call", "name": call.name, "arguments": call.arguments})
        except (_WorkerGone, RuntimeError):
            self._stop_child()
        self._done, self.call_count = done, count
