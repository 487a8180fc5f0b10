"""The backend protocol every tool source implements (Python code, MCP, replay cache, imagination)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..calls import CallError, ErrorCode, ToolCall, canonical_json, json_text
from ..tools import ToolSpec
from .ledger import LEDGER, is_self_accounting

if TYPE_CHECKING:
    from ..tasks import Task

__all__ = [
    "ToolResult",
    "Backend",
    "PendingCall",
    "RequestingBackend",
    "BackendCopyError",
    "validate_call",
    "state_digest",
    "reference_state_hash",
    "replayed_state_hash",
]


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call: a JSON ``content`` on success, or a structured ``error``.

    ``text``, when set, is the message content exactly as produced (an inline imagined result keeps the
    text the model sampled, so the actor's context holds those very tokens); else ``content`` is serialised.
    ``sample`` is the env-role generation that answered the call, when it was imagined
    (`EnvRoleSample`). ``fatal`` says the backend cannot go on with this
    episode (an unusable imagined result under ``on_invalid="end"``): the env runs no more calls and ends
    the episode with reward 0 (see `abort`).
    """

    call: ToolCall
    content: Any = None
    error: CallError | None = None
    text: str | None = None
    sample: Any = None
    fatal: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    def payload(self) -> Any:
        """What the agent is shown: the content, or ``{"error": {"code", "message"}}``."""
        if self.error is None:
            return self.content
        return {"error": {"code": self.error.code.value, "message": self.error.message}}

    def to_message_content(self) -> str:
        if self.text is not None and self.error is None:
            return self.text
        return json_text(self.payload())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.call.name, "arguments": self.call.arguments, "ok": self.ok}
        out["content"] = self.content if self.ok else None
        if self.error is not None:
            out["error"] = self.error.to_dict()
        return out

    @classmethod
    def failure(cls, call: ToolCall, code: ErrorCode, message: str) -> ToolResult:
        return cls(call, None, CallError(code, message, call.name))


@runtime_checkable
class Backend(Protocol):
    """What the environment needs from a tool source.

    ``reset`` starts a fresh episode from the task's initial state; ``execute`` runs one call (after the
    deterministic checks of `validate_call`) and never raises; ``state`` is a JSON snapshot and
    ``state_hash`` its digest; ``call_count`` counts calls since ``reset``. ``copy`` returns an independent
    backend at the current state (``env.fork()`` uses it); a backend that cannot be copied (an MCP server's
    world lives in another process) raises `BackendCopyError` with the reason.
    """

    tools: Sequence[ToolSpec]
    call_count: int

    def reset(self, task: Task | None = None, seed: int | None = None) -> None: ...

    def execute(self, call: ToolCall) -> ToolResult: ...

    def state(self) -> dict[str, Any]: ...

    def state_hash(self) -> str: ...

    def copy(self) -> Backend: ...


#: A call that waits on a model (an imagined tool result): it yields the request once, is sent the answer
#: (the model's, or the exception it raised) and returns the call's result. ``ToolCallEnv``'s step yields the
#: request on to whoever drives the step (``yield from``).
PendingCall = Generator[Any, Any, ToolResult]


@runtime_checkable
class RequestingBackend(Backend, Protocol):
    """A backend whose calls may wait on a model (`envace_gym.imagination.ImaginedBackend`): ``run`` returns
    the call's result when no model is needed (a call the deterministic checks refused), else the call
    pending on the model's answer (`PendingCall`); ``answer_here`` answers such a request in this process
    (what a whole ``env.step`` does, where no loop batches the requests). ``execute`` is the two in one."""

    def run(self, call: ToolCall) -> ToolResult | PendingCall: ...

    def answer_here(self, request: Any) -> Any: ...


class BackendCopyError(RuntimeError):
    """This backend cannot be copied (``Backend.copy``); the message says why."""


def replayed_state_hash(make_backend: Callable[[], Backend], task: Task | None, calls: Iterable[ToolCall]) -> str:
    """The state hash after replaying ``calls`` on a fresh backend from ``make_backend()``: the reference
    state of ``state_match`` (the reference calls), and the state of an episode whose results were replayed
    or imagined (the calls that succeeded). An offline check, never an interaction with the episode: each
    replayed call is booked as a ``verifier`` call in the `LEDGER`."""
    backend = make_backend()
    backend.reset(task, seed=0)
    books = not is_self_accounting(backend)
    for call in calls:
        backend.execute(call)
        if books:
            LEDGER.record("verifier")
    return backend.state_hash()


def reference_state_hash(task: Task, make_backend: Callable[[], Backend]) -> str:
    """The state hash after replaying ``task``'s reference calls on a fresh backend: what ``state_match``
    compares an episode's final state with (tau2's DB check)."""
    return replayed_state_hash(make_backend, task, [ref.call for ref in task.reference_calls])


def validate_call(call: ToolCall, specs: Mapping[str, ToolSpec]) -> CallError | None:
    """The deterministic checks before any execution: the tool exists, and the arguments fit its schema."""
    spec = specs.get(call.name)
    if spec is None:
        available = ", ".join(sorted(specs)) or "none"
        return CallError(
            ErrorCode.TOOL_NOT_AVAILABLE, f"tool {call.name!r} is not available; available: {available}", call.name
        )
    problems = spec.validate_arguments(call.arguments)
    if problems:
        # jsonschema quotes the offending value; clip so a huge argument cannot make a huge message.
        shown = [p if len(p) <= 300 else p[:297] + "..." for p in problems[:5]]
        return CallError(ErrorCode.INVALID_PARAMETERS, f"{call.name}: " + "; ".join(shown), call.name)
    return None


def state_digest(state: Any) -> str:
    """SHA-256 of the canonical JSON of a state snapshot."""
    return hashlib.sha256(canonical_json(state).encode("utf-8")).hexdigest()
