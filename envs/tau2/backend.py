"""``Tau2Backend``: a real `Backend` over a tau2 domain environment.

Each ``reset`` builds a fresh tau2 ``Environment`` at the task's initial state. Calls pass our deterministic
checks first (``TOOL_NOT_AVAILABLE``, ``INVALID_PARAMETERS`` against tau2's own OpenAI schemas); the rest are
dispatched by name through tau2's ``Environment.get_response``, exactly as tau2's orchestrator does, so a
tool that raises becomes ``TOOL_EXECUTION_ERROR`` with tau2's message and, as in tau2, keeps any change it
made before raising (no rollback: the scorer replays calls the same way). The user's device tools
(telecom) run on the same environment through `execute_user`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from envace_gym.backends.base import ToolResult, state_digest, validate_call
from envace_gym.calls import CallError, ErrorCode, ToolCall
from envace_gym.tools import ToolSpec

from . import _runtime
from .domains import check_domain

if TYPE_CHECKING:
    from envace_gym.tasks import Task

__all__ = ["Tau2Backend", "make_backend", "tau2_result", "user_tool_schemas"]

_MAX_EXPRESSION = 200


def tau2_result(call: ToolCall, content: str | None, error: bool) -> ToolResult:
    """Our result for a tau2 tool message: errors as ``TOOL_EXECUTION_ERROR`` carrying tau2's text; JSON
    objects and arrays as they are; anything else (tau2 returns plain strings, e.g. a user id) as
    ``{"result": value}``, so that every result, real or imagined, is a JSON object or array."""
    if error:
        return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, content or "Error")
    try:
        value = json.loads(content) if content is not None else None
    except ValueError:
        value = content
    return ToolResult(call, value if isinstance(value, (dict, list)) else {"result": value})


def _refuse(call: ToolCall) -> CallError | None:
    # tau2's `calculate` allows '**', which our arithmetic (no eval, see _runtime.calculate) does not: such
    # expressions (9**9**9**9 would run for ever) and very long ones are refused like a schema violation.
    if call.name == "calculate":
        expr = call.arguments.get("expression")
        if isinstance(expr, str) and ("**" in expr or len(expr) > _MAX_EXPRESSION):
            msg = f"calculate: expression not supported (no '**', at most {_MAX_EXPRESSION} characters)"
            return CallError(ErrorCode.INVALID_PARAMETERS, msg, call.name)
    return None


@cache
def _specs(domain: str) -> tuple[dict[str, ToolSpec], dict[str, ToolSpec], tuple[dict[str, Any], ...]]:
    env = _runtime.new_environment(domain)
    user = env.get_user_tools() if env.user_tools is not None else []
    return (
        {t.name: ToolSpec.from_openai(t.openai_schema) for t in env.get_tools()},
        {t.name: ToolSpec.from_openai(t.openai_schema) for t in user},
        tuple(t.openai_schema for t in user),
    )


def user_tool_schemas(domain: str) -> list[dict[str, Any]]:
    """OpenAI schemas of the user's own tools in ``domain`` (telecom's device tools; empty elsewhere)."""
    return list(_specs(domain)[2])


class Tau2Backend:
    """The real tools of one tau2 domain. ``env`` is the episode's tau2 ``Environment``."""

    def __init__(self, domain: str, timeout: float | None = None) -> None:
        self.domain = check_domain(domain)
        self.timeout = timeout  # unused: tau2 tools run inline (see _refuse for the one that could hang)
        self._agent_specs, self._user_specs, user_schemas = _specs(domain)
        self.user_tool_schemas = list(user_schemas)
        self.env: Any = None  # built by reset()
        self.task: Task | None = None
        self.call_count = 0
        self.raw: dict[str, tuple[str | None, bool]] = {}  # call id -> tau2's tool message (content, error)

    @property
    def tools(self) -> Sequence[ToolSpec]:
        return list(self._agent_specs.values())

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        """A fresh environment at ``task``'s initial state (its initial message history included)."""
        self.task = task
        self.call_count = 0
        self.raw = {}
        if task is None:
            self.env = _runtime.new_environment(self.domain)
        else:
            self.env = _runtime.fresh_environment(self.domain, _runtime.parse_task(task.metadata["tau2"]["task"]))

    def execute(self, call: ToolCall) -> ToolResult:
        """An agent-side call."""
        return self._execute(call, self._agent_specs, "assistant")

    def execute_user(self, call: ToolCall) -> ToolResult:
        """A user-side call (the user's device tools; telecom only)."""
        return self._execute(call, self._user_specs, "user")

    def _execute(self, call: ToolCall, specs: dict[str, ToolSpec], requestor: str) -> ToolResult:
        self.call_count += 1
        error = validate_call(call, specs) or _refuse(call)
        if error is not None:
            return ToolResult(call, None, error)
        if self.env is None:
            raise RuntimeError("Tau2Backend.reset() must be called before execute()")
        msg = self.env.get_response(
            _runtime.tau2_call(call.id or "", call.name, copy.deepcopy(call.arguments), requestor)
        )
        self.raw[call.id or ""] = (msg.content, bool(msg.error))
        return tau2_result(call, msg.content, bool(msg.error))

    def state(self) -> dict[str, Any]:
        """The agent-side (and user-side) databases as JSON."""
        out = {"db": self.env.tools.db.model_dump(mode="json")}
        if self.env.user_tools is not None:
            out["user_db"] = self.env.user_tools.db.model_dump(mode="json")
        return out

    def state_hash(self) -> str:
        return state_digest({"db": self.env.get_db_hash(), "user_db": self.env.get_user_db_hash()})

    def copy(self) -> Tau2Backend:
        """An independent backend at the current state (tau2's environment deep-copied)."""
        clone = copy.copy(self)
        clone.env = copy.deepcopy(self.env)
        clone.raw = dict(self.raw)
        return clone


def make_backend(domain: str, timeout: float | None = None, **_: Any) -> Tau2Backend:
    """Factory registered as ``tau2/<domain>``."""
    return Tau2Backend(domain, timeout=timeout)
