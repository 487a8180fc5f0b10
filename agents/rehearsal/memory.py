"""Rehearsal memory: what imagined episodes leave for the agent's real attempt, condensed deterministically.

`condense` reads one rehearsal's own messages (those after the state it started from) into a
`RehearsalOutcome`: the calls tried in order, what came back (clipped), which calls the
deterministic checks rejected (a malformed call, an unknown tool, arguments outside the schema: these fail
for real too), and the final answer. `render_memory` writes outcomes as a short note bounded by a
token budget. `first_step` reads a rehearsal's first message alone (what select mode commits), and
`outcome_line` writes one rehearsal as a line (the memory's and the judge prompt's). Nothing here reads a
task: a rehearsal's messages are all it knows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envace_gym.calls import INVALID_CALL_CODES, canonical_json

__all__ = [
    "CallOutcome",
    "RehearsalOutcome",
    "condense",
    "first_step",
    "outcome_line",
    "render_memory",
    "cut_to_tokens",
    "predicted_error",
    "MEMORY_HEADER",
]

MEMORY_HEADER = "Private rehearsal, imagined (results predicted, not real; REJECTED calls fail for real too):"
_INVALID = {str(code) for code in INVALID_CALL_CODES}


@dataclass
class CallOutcome:
    """One call of a rehearsal: ``name(arguments)`` and what came back (``result`` text, or ``error``)."""

    name: str
    arguments: dict[str, Any]
    result: str = ""
    error_code: str | None = None
    error: str | None = None

    @property
    def rejected(self) -> bool:
        """Refused by the deterministic checks (format, tool name, schema): it fails for real too."""
        return self.error_code in _INVALID

    @property
    def failed(self) -> bool:
        """Refused, or answered by an error (the env's shape, or ``{"error": "<text>"}`` as an env role may write
        it)."""
        if self.error_code is not None:
            return True
        try:
            value = json.loads(self.result)
        except (ValueError, TypeError):
            return False
        return predicted_error(value) is not None


@dataclass
class RehearsalOutcome:
    """One rehearsal, condensed."""

    calls: list[CallOutcome] = field(default_factory=list)
    answer: str | None = None  # the last answer (a message without calls), if any
    ended: str = "answer"  # "answer", "turn limit", or "unusable imagined result"

    def plan(self) -> tuple[tuple[tuple[str, str], ...], str | None]:
        """What two rehearsals must share to agree: the calls in order (name, canonical arguments) and the
        final answer (whitespace-normalised)."""
        answer = " ".join(self.answer.split()) if self.answer is not None else None
        return tuple((c.name, canonical_json(c.arguments)) for c in self.calls), answer

    @property
    def reached_answer(self) -> bool:
        """Ended in a final answer with no call refused or answered by an error, its (imagined) results taken at
        their word: select mode's ``choose="outcome"`` score of a rehearsal."""
        return self.ended == "answer" and self.answer is not None and not any(c.failed for c in self.calls)


def _error_of(content: str) -> tuple[str | None, str | None]:
    try:
        payload = json.loads(content)
    except (ValueError, TypeError):
        return None, None
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and "code" in error:
        return str(error["code"]), str(error.get("message", ""))
    return None, None


def predicted_error(value: Any) -> tuple[str, str] | None:
    """``(code, message)`` when an imagined result (its parsed JSON) is an error: the env's shape
    ``{"error": {"code", "message"}}``, or ``{"error": "<text>"}`` (code ``"error"``); else None."""
    code, message = _error_of(json.dumps(value))
    if code is not None:
        return code, message or ""
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, str) and error.strip():
        return "error", error
    return None


def condense(messages: Sequence[dict[str, Any]], start: int, truncated: bool = False) -> RehearsalOutcome:
    """The `RehearsalOutcome` of a finished rehearsal whose conversation is ``messages``; its own part
    begins at index ``start`` (the messages before are the state it was forked from)."""
    out = RehearsalOutcome()
    results: dict[str, dict[str, Any]] = {
        m.get("tool_call_id", ""): m for m in messages[start:] if m.get("role") == "tool"
    }
    for message in messages[start:]:
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or []
        if not calls:
            out.answer = message.get("content") or ""
            continue
        for call in calls:
            fn = call.get("function", {})
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                arguments = {"_raw": fn.get("arguments")}
            tool = results.get(call.get("id", ""), {})
            content = str(tool.get("content", ""))
            code, error = _error_of(content)
            out.calls.append(CallOutcome(fn.get("name", ""), arguments, content, code, error))
    # Format errors (no call to run) come back as tool messages that answer no call.
    answered = {c.get("id") for m in messages[start:] for c in (m.get("tool_calls") or [])}
    for call_id, tool in results.items():
        if call_id not in answered:
            code, error = _error_of(str(tool.get("content", "")))
            if code is not None:
                out.calls.append(CallOutcome(tool.get("name") or "(malformed call)", {}, "", code, error))
    last = next((m for m in reversed(messages[start:]) if m.get("role") == "assistant"), None)
    if truncated:
        out.ended = "turn limit"
    elif last is not None and last.get("tool_calls"):  # it ended on a call: the env role's answer was unusable
        out.ended = "unusable imagined result"
    return out


def first_step(messages: Sequence[dict[str, Any]], start: int) -> tuple[str, RehearsalOutcome] | None:
    """A rehearsal's first assistant message after ``start`` (its text as generated) and the outcome of that
    one step: its calls with what came back (format errors included), or its answer. Two rehearsals agree on
    it when the outcomes' `plan` match. None when the rehearsal wrote no message."""
    first = next((i for i in range(start, len(messages)) if messages[i].get("role") == "assistant"), None)
    if first is None:
        return None
    end = next((i for i in range(first + 1, len(messages)) if messages[i].get("role") != "tool"), len(messages))
    return messages[first].get("content") or "", condense(messages[:end], start)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def outcome_line(index: int, outcome: RehearsalOutcome, result_chars: int = 160) -> str:
    """``Rehearsal <index>: <calls and what came back>; <final answer>.``, results clipped to ``result_chars``."""
    parts = []
    for call in outcome.calls:
        shown = f"{call.name}({canonical_json(call.arguments)})"
        if call.rejected:
            parts.append(f"{shown} -> REJECTED {call.error_code}: {_clip(call.error or '', result_chars)}")
        elif call.error_code is not None:
            parts.append(f"{shown} -> error {call.error_code}: {_clip(call.error or '', result_chars)}")
        else:
            parts.append(f"{shown} -> {_clip(call.result, result_chars)}")
    tried = "; ".join(parts) if parts else "no tool call"
    if outcome.answer is not None:
        end = f'final answer: "{_clip(outcome.answer, result_chars)}"'
    else:
        end = f"no final answer ({outcome.ended})"
    return f"Rehearsal {index}: {tried}; {end}."


def render_memory(
    outcomes: Sequence[RehearsalOutcome],
    max_tokens: int,
    count_tokens: Callable[[str], int] | None = None,
    result_chars: int = 160,
) -> str:
    """The memory note of ``outcomes`` within ``max_tokens`` (by ``count_tokens``; default about 4 characters a
    token). Over budget, the oldest rehearsals go first (the latest saw the most), then the text is cut."""
    count = count_tokens or (lambda text: (len(text) + 3) // 4)
    lines = [outcome_line(i, o, result_chars) for i, o in enumerate(outcomes, 1)]
    while True:
        text = "\n".join([MEMORY_HEADER, *lines])
        if count(text) <= max_tokens or len(lines) <= 1:
            break
        lines = lines[1:]
    return cut_to_tokens(text, max_tokens, count)


def cut_to_tokens(text: str, max_tokens: int, count: Callable[[str], int], marker: str = " ...[memory cut]") -> str:
    """``text`` if it fits ``max_tokens``, else its longest prefix that fits with ``marker`` after it."""
    if count(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(text[:mid] + marker) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + marker if lo > 0 else ""
