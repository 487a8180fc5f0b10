"""Record/replay caches of tool results (JSON Lines, never pickle).

An entry is keyed by (task id, the calls the episode ran before it, tool, canonical arguments): a result
is replayed only in the state it was recorded in. A task fixes the initial state and the tools are
deterministic, so the calls before a call fix the state it meets: a ``get_balance`` recorded after a
transfer is never replayed in an episode that made no transfer (it is a miss there, which the chain's
fallback answers). The key is stricter than the state itself (a read-only call before it changes the key
too), never looser. The tool log that grounds the env role (`ToolLog`) uses the same key.

Caches written before 2026-12-06 keyed an entry by its occurrence (the n-th identical call of an episode)
instead, which can replay a result recorded in another state; they are refused with a one-line error that
says so and how to record a new one (``--backend cache:NEW.jsonl``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..calls import CallError, ErrorCode, ToolCall, canonical_json, json_value_problem
from ..jsonl import read_jsonl
from ..tools import ToolSpec
from .base import Backend, ToolResult, replayed_state_hash, state_digest, validate_call
from .ledger import LEDGER, is_self_accounting

if TYPE_CHECKING:
    from ..tasks import Task

__all__ = ["ReplayBackend", "ReplayFileError", "ToolLog", "history_key", "log_key", "result_from_record"]

#: The calls an episode ran so far, in order: ``(tool name, arguments)`` each.
History = list[tuple[str, dict[str, Any]]]

#: What an old-format line (keyed by occurrence) is told: why it is refused and what to do.
OLD_FORMAT = (
    "an entry keyed by occurrence (a cache written before 2026-12-06), which can replay a result recorded "
    "in another state; record a new cache with --backend cache:NEW.jsonl (or ToolLog.from_reference)"
)


class ReplayFileError(ValueError):
    """A replay cache line that cannot be read."""


def history_key(history: History) -> str:
    """A digest of the calls an episode ran before this one (each tool name and its canonical arguments, in
    order): with the task's initial state and deterministic tools, it fixes the state the next call meets."""
    return hashlib.sha256(canonical_json([[name, args] for name, args in history]).encode()).hexdigest()[:20]


def log_key(task_id: str, history: str, name: str, arguments: dict[str, Any]) -> str:
    """The key of a cache entry: ``name(arguments)`` in ``task_id``'s episode after the calls whose
    `history_key` is ``history``."""
    # JSON, not joined strings: no task id or tool name can contain a separator that makes two keys collide.
    return canonical_json([task_id, history, name, arguments])


def _record_problem(rec: Any) -> str | None:
    """Why a parsed cache line is not a replay entry, or None."""
    if not isinstance(rec, dict):
        return f"a line must be a JSON object, got {type(rec).__name__}"
    if "occurrence" in rec and "history" not in rec:
        return OLD_FORMAT
    missing = [k for k in ("task_id", "name", "arguments", "history", "payload") if k not in rec]
    if missing:
        return f"missing {', '.join(missing)}"
    if not isinstance(rec["task_id"], str) or not isinstance(rec["name"], str):
        return "task_id and name must be strings"
    if not isinstance(rec["arguments"], dict):
        return f"arguments must be an object, got {type(rec['arguments']).__name__}"
    if not isinstance(rec["history"], str):
        return f"history must be a string (a digest of the calls before the entry), got {rec['history']!r}"
    if not isinstance(rec.get("ok", True), bool):
        return f"ok must be true or false, got {rec['ok']!r}"
    problem = json_value_problem([rec["arguments"], rec["payload"]])
    return f"the entry holds {problem}" if problem else None


def result_from_record(call: ToolCall, rec: dict[str, Any]) -> ToolResult:
    """The `ToolResult` a log entry recorded for ``call`` (a success, or the error it recorded)."""
    payload = rec["payload"]
    if rec.get("ok", True):
        return ToolResult(call, payload)
    err = payload.get("error", {}) if isinstance(payload, dict) else {}
    code = err.get("code", ErrorCode.TOOL_EXECUTION_ERROR.value)
    return ToolResult(
        call,
        None,
        CallError(
            ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.TOOL_EXECUTION_ERROR,
            err.get("message", ""),
            call.name,
        ),
    )


class ToolLog:
    """A read-only log of real tool results in the replay-cache format (JSON Lines, one entry per line).

    The one reader of that format: `ReplayBackend` replays from it, and imagined training grounds its
    env role on it (``EnvACEConfig.tool_log``). `from_reference` writes one from tasks' reference
    trajectories (their recorded real results), so no live call is needed to build it.
    """

    def __init__(self, entries: dict[str, dict[str, Any]], path: Path | None = None) -> None:
        self.entries = entries
        self.path = path
        self._by_name: dict[str, list[dict[str, Any]]] | None = None  # examples' index, built on first use

    @classmethod
    def load(cls, path: str | Path, missing_ok: bool = False) -> ToolLog:
        """Read ``path``; a line that is not an entry raises ``ReplayFileError("file:line: why")``; a missing
        file is an error unless ``missing_ok`` (a recording cache starts empty)."""
        path = Path(path)
        entries: dict[str, dict[str, Any]] = {}
        if not path.exists():
            if missing_ok:
                return cls(entries, path)
            raise ReplayFileError(
                f"{path}: no such tool log (write one with ToolLog.from_reference, or record one with "
                "--backend cache:PATH)"
            )
        if not path.is_file():
            raise ReplayFileError(f"{path}: not a file (a replay cache is JSONL, one entry per line)")
        try:  # a torn last line (a recording run killed mid-write) is skipped with a warning
            for lineno, rec in read_jsonl(path):
                problem = _record_problem(rec)
                if problem is not None:
                    raise ReplayFileError(f"{path}:{lineno}: not a replay entry ({problem})")
                entries[log_key(rec["task_id"], rec["history"], rec["name"], rec["arguments"])] = rec
        except ReplayFileError:
            raise
        except ValueError as exc:
            raise ReplayFileError(str(exc)) from None
        return cls(entries, path)

    @staticmethod
    def from_reference(tasks: Sequence[Task], path: str | Path | None = None) -> ToolLog:
        """The log of ``tasks``' reference trajectories (their calls and recorded real results, each keyed by
        the reference calls before it), written to ``path`` unless it is None."""
        entries: dict[str, dict[str, Any]] = {}
        for task in tasks:
            history: History = []
            for ref in task.reference_calls:
                before = history_key(history)
                rec = {
                    "task_id": task.id,
                    "name": ref.name,
                    "arguments": ref.arguments,
                    "history": before,
                    "ok": True,
                    "payload": ref.result,
                }
                entries[log_key(task.id, before, ref.name, ref.arguments)] = rec
                history.append((ref.name, ref.arguments))
        if path is not None:
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in entries.values()))
        return ToolLog(entries, Path(path) if path is not None else None)

    def get(self, task_id: str, history: History, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """The entry for ``name(arguments)`` after the calls ``history`` of ``task_id``'s episode, or None: a
        result recorded in another state is never returned."""
        return self.entries.get(log_key(task_id, history_key(history), name, arguments))

    def examples(self, name: str, exclude_task: str, limit: int, key: str) -> list[dict[str, Any]]:
        """Up to ``limit`` successful logged calls of tool ``name`` from tasks other than ``exclude_task``, as
        few-shot examples (``{"name", "arguments", "result"}``), drawn reproducibly by ``key``: the env role's
        ``log`` grounding, which never shows a task its own results."""
        if self._by_name is None:
            self._by_name = {}
            for rec in self.entries.values():
                if rec.get("ok", True):
                    self._by_name.setdefault(rec["name"], []).append(rec)
        candidates = [r for r in self._by_name.get(name, []) if r["task_id"] != exclude_task]
        picked = random.Random(key).sample(candidates, min(limit, len(candidates)))
        return [{"name": r["name"], "arguments": r["arguments"], "result": r["payload"]} for r in picked]

    @property
    def task_ids(self) -> set[str]:
        return {rec["task_id"] for rec in self.entries.values()}

    def __len__(self) -> int:
        return len(self.entries)


class ReplayBackend:
    """Answers calls from a cache file; on a miss, an error or the next backend of a chain.

    Args:
        path: the JSONL cache (created on the first write when missing; a replay-only backend, ``on_miss=
            "error"``, refuses a missing file with ``ReplayFileError``).
        fallback: the backend to ask on a miss (e.g. the real one, or an imagined one).
        on_miss: ``"error"`` (a ``TOOL_EXECUTION_ERROR`` result) or ``"fallback"``.
        write_back: append what the fallback answered, so the next run replays it (recording).

    It books its own calls in the call ledger (``self_accounting``): a hit is ``logged``; each call the
    fallback executes (a miss, or keeping its state in step on a hit) is ``live``, unless the fallback books
    its own (an imagined one).
    """

    self_accounting = True

    def __init__(
        self, path: str | Path, fallback: Backend | None = None, on_miss: str = "error", write_back: bool = False
    ) -> None:
        if on_miss not in ("error", "fallback"):
            raise ValueError(f"on_miss must be 'error' or 'fallback', got {on_miss!r}")
        if on_miss == "fallback" and fallback is None:
            raise ValueError("on_miss='fallback' needs a fallback backend")
        self.path = Path(path)
        self.fallback = fallback
        self.on_miss = on_miss
        self.write_back = write_back
        self.entries = self._load()
        self.task: Task | None = None
        self.tools: Sequence[ToolSpec] = []
        self.call_count = 0
        self.hits = self.misses = 0
        self._history: History = []  # the calls that reached a tool (replayed or run): the state key
        self._ok_calls: list[ToolCall] = []

    def _load(self) -> dict[str, dict[str, Any]]:
        """The cache's entries; a line that is not one raises ``ReplayFileError("file:line: why")``."""
        if self.write_back and self.path.is_file() and self.path.stat().st_size:
            if not self.path.read_bytes().endswith(b"\n"):
                self._heal_torn_end()
        # Only a cache that records (or falls back) may start empty: a replay-only one with no file would turn
        # every call into a miss and report a run that never touched a tool.
        return ToolLog.load(self.path, missing_ok=self.write_back or self.on_miss == "fallback").entries

    def _heal_torn_end(self) -> None:
        """Cut a torn last line off a cache this backend will append to (else the next entry would be glued
        to it); reading alone never changes the file."""
        data = self.path.read_bytes()
        self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.task = task
        self.tools = list(task.tool_specs) if task is not None else []
        self.call_count = 0
        self._history = []
        self._ok_calls = []
        if self.fallback is not None:
            self.fallback.reset(task, seed)

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, {s.name: s for s in self.tools})
        if error is not None:
            return ToolResult(call, None, error)
        task_id = self.task.id if self.task is not None else ""
        before = history_key(self._history)
        rec = self.entries.get(log_key(task_id, before, call.name, call.arguments))
        if rec is not None:
            self.hits += 1
            LEDGER.record("logged")
            result = result_from_record(call, rec)
            if self.fallback is not None:  # keep the chained backend's state in step
                self._fallback_execute(call)
        else:
            self.misses += 1
            if self.on_miss == "error":
                # Not run anywhere: the state is as it was, and so is the history.
                return ToolResult.failure(
                    call,
                    ErrorCode.TOOL_EXECUTION_ERROR,
                    f"replay miss: no cached result for {call.name} in this state (after {len(self._history)} calls)",
                )
            result = self._fallback_execute(call)
            if self.write_back:
                self._append(task_id, call, before, result)
        self._history.append((call.name, call.arguments))
        if result.ok:
            self._ok_calls.append(call)
        return result

    def _fallback_execute(self, call: ToolCall) -> ToolResult:
        """Run ``call`` on the fallback; a real one (not self-accounting) ran a live call."""
        assert self.fallback is not None
        result = self.fallback.execute(call)
        if not is_self_accounting(self.fallback):
            LEDGER.record("live")
        return result

    def _append(self, task_id: str, call: ToolCall, history: str, result: ToolResult) -> None:
        rec = {
            "task_id": task_id,
            "name": call.name,
            "arguments": call.arguments,
            "history": history,
            "ok": result.ok,
            "payload": result.payload(),
        }
        self.entries[log_key(task_id, history, call.name, call.arguments)] = rec
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")

    def state(self) -> dict[str, Any]:
        return self.fallback.state() if self.fallback is not None else {"calls": [c.to_dict() for c in self._ok_calls]}

    def state_hash(self) -> str:
        if self.fallback is not None:
            return self.fallback.state_hash()
        if self.task is not None and self.task.backend:
            # Replay-only: the offline check replays the answered calls on a fresh real backend.
            from . import make_backend

            task = self.task
            return replayed_state_hash(lambda: make_backend(task.backend, timeout=None), task, self._ok_calls)
        return state_digest(self.state())

    def copy(self) -> ReplayBackend:
        """An independent backend at the current point of the episode (the cache entries are shared)."""
        clone = copy.copy(self)
        clone.fallback = self.fallback.copy() if self.fallback is not None else None
        clone._history = list(self._history)
        clone._ok_calls = list(self._ok_calls)
        return clone
