"""The episode as tau2 sees it: participant messages and the tool calls that reached the environment.

`EpisodeLog` is what our scorer reads and what `to_tau2_messages` turns into tau2's own
message objects (for ``tau2.evaluator``). It holds only what tau2's trajectory would hold: calls rejected
by our deterministic checks (``TOOL_NOT_AVAILABLE``, ``INVALID_PARAMETERS``, bad call syntax) never reached
the environment and are left out.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LoggedCall", "LoggedMessage", "EpisodeLog", "STOP_REASONS", "to_tau2_messages", "to_simulation_run"]

#: Terminations after which tau2 scores the episode; any other (max_steps, too_many_errors, user_error,
#: agent_error) scores 0, as in ``tau2.evaluator.evaluate_simulation``. Values are tau2's TerminationReason.
STOP_REASONS = ("user_stop", "agent_stop")


@dataclass
class LoggedCall:
    """A tool call that the environment executed, with tau2's tool-message content."""

    id: str
    name: str
    arguments: dict[str, Any]
    requestor: str  # "assistant" or "user"
    content: str | None = None
    error: bool = False


@dataclass
class LoggedMessage:
    """One assistant or user message: its visible text (``None`` when it only calls tools) and its calls."""

    role: str
    text: str | None = None
    calls: list[LoggedCall] = field(default_factory=list)


@dataclass
class EpisodeLog:
    """All messages of one episode in order, including a task's initial message history."""

    messages: list[LoggedMessage] = field(default_factory=list)
    termination: str | None = None

    def calls(self) -> list[LoggedCall]:
        """Every executed call (agent and user), in execution order."""
        return [c for m in self.messages for c in m.calls]

    def assistant_texts(self) -> list[str]:
        return [m.text for m in self.messages if m.role == "assistant" and m.text and m.text.strip()]

    def to_dict(self) -> dict[str, Any]:
        return {"termination": self.termination, "messages": [asdict(m) for m in self.messages]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeLog:
        messages = [
            LoggedMessage(m["role"], m.get("text"), [LoggedCall(**c) for c in m.get("calls", [])])
            for m in data.get("messages", [])
        ]
        return cls(messages, data.get("termination"))


def result_content(value: Any) -> str:
    """tau2's tool-message content for a JSON result: strings as they are, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def log_from_history(history: list[Any]) -> list[LoggedMessage]:
    """Our log entries for a tau2 task's initial ``message_history`` (tool messages folded into calls)."""
    out: list[LoggedMessage] = []
    pending: dict[str, LoggedCall] = {}
    for msg in history:
        if msg.role in ("assistant", "user"):
            calls = [LoggedCall(tc.id, tc.name, dict(tc.arguments), tc.requestor) for tc in msg.tool_calls or []]
            pending.update({c.id: c for c in calls})
            out.append(LoggedMessage(msg.role, msg.content, calls))
        elif msg.role == "tool" and msg.id in pending:
            pending[msg.id].content, pending[msg.id].error = msg.content, bool(msg.error)
    return out


def to_tau2_messages(log: EpisodeLog) -> list[Any]:
    """tau2 ``AssistantMessage`` / ``UserMessage`` / ``ToolMessage`` objects for the episode."""
    from . import _runtime

    _runtime._quiet()
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage

    out: list[Any] = []
    for m in log.messages:
        text = m.text if m.text and m.text.strip() else None
        if text is None and not m.calls:
            continue  # nothing tau2 would have recorded (e.g. only malformed calls)
        calls = [_runtime.tau2_call(c.id, c.name, c.arguments, c.requestor) for c in m.calls] or None
        cls = AssistantMessage if m.role == "assistant" else UserMessage
        out.append(cls(role=m.role, content=text, tool_calls=calls, turn_idx=len(out)))
        for c in m.calls:
            out.append(
                ToolMessage(
                    id=c.id, role="tool", content=c.content, requestor=c.requestor, error=c.error, turn_idx=len(out)
                )
            )
    return out


def to_simulation_run(log: EpisodeLog, task_id: str) -> Any:
    """A tau2 ``SimulationRun`` of the episode (what ``tau2.evaluator.evaluate_simulation`` takes)."""
    from tau2.data_model.simulation import SimulationRun

    return SimulationRun(
        id=str(uuid.uuid4()),
        task_id=task_id,
        start_time="",
        end_time="",
        duration=0.0,
        termination_reason=log.termination or "agent_error",
        messages=to_tau2_messages(log),
    )
