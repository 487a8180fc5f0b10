"""The env role's prompted-mode prompt (EnvACE's ``tool_simulator_agent``) and the parsing of its answers."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from ..calls import ToolCall, json_text, json_value_problem, strip_reasoning
from ..tasks import Task
from ..tools import ToolSpec, compact_signature
from ..transcript import render_transcript

__all__ = [
    "ENV_ROLE_SYSTEM_PROMPT",
    "GROUNDINGS",
    "MAX_EXAMPLES",
    "build_env_role_prompt",
    "reference_examples",
    "parse_execution_result",
    "parse_inline_result",
    "format_execution_result",
    "format_result",
    "execution_block",
    "EXPECTED_BLOCK",
    "is_result_shaped",
]

#: The prompted env role's system message, in EnvACE's words (a model-facing text: it calls the role a "tool
#: simulator"; the code calls it the env role, and ``simulator`` names only the separate-model backend).
ENV_ROLE_SYSTEM_PROMPT = (
    "You are a precise tool simulator. Given tool schemas, examples of real calls with their results, the "
    "conversation so far and one new tool call, you return exactly what the real tool would return for "
    "that call: same structure, data types and facts as the examples and the conversation. Act as a silent "
    "function: no explanations, no hints, no instructions to the assistant. Answer with\n"
    "<execution_result>\n<a non-empty JSON object or array>\n</execution_result>\nand nothing else."
)

#: The env role's few-shot (arguments, result) examples: ``reference``, from the task's own reference trajectory
#: (the paper's grounding); ``log``, from a tool log of *other* tasks' real results (``ToolLog.examples``, never
#: the task's own); ``none``, no example: no real result anywhere in the prompt.
GROUNDINGS = ("reference", "log", "none")
#: Examples shown per call at most.
MAX_EXAMPLES = 3

_RESULT = re.compile(r"<execution_result>(.*?)</execution_result>", re.DOTALL)
#: What a prompted answer without a result block is told was expected.
EXPECTED_BLOCK = "expected the result inside <execution_result>...</execution_result>"
#: How much of an unusable answer its error quotes.
_QUOTED = 60


def reference_examples(task: Task, tool: str, limit: int = MAX_EXAMPLES) -> list[dict[str, Any]]:
    """The task's reference calls as few-shot examples, calls of ``tool`` first."""
    same = [c for c in task.reference_calls if c.name == tool]
    other = [c for c in task.reference_calls if c.name != tool]
    return [{"name": c.name, "arguments": c.arguments, "result": c.result} for c in (same + other)[:limit]]


def build_env_role_prompt(
    task: Task,
    call: ToolCall,
    messages: Sequence[dict[str, Any]],
    specs: Sequence[ToolSpec],
    grounding: str = "reference",
    max_examples: int = MAX_EXAMPLES,
    examples: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The prompted-mode env-role prompt (system + user message) for one call; ``examples``: the few-shot
    examples to show (default: the task's reference ones where ``grounding == "reference"``, else none)."""
    spec = next((s for s in specs if s.name == call.name), None)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))
    raw = messages[last].get("content", "") if last < len(messages) else ""
    history = list(messages[:last]) + list(messages[last + 1 :])  # later items: this step's earlier results
    if examples is None:
        examples = reference_examples(task, call.name, max_examples) if grounding == "reference" else []
    current = {"name": call.name, "schema": spec.to_openai()["function"] if spec else None, "arguments": call.arguments}
    parts = [
        # Candidate tools as one signature line each; the current tool's full schema comes below.
        "## Candidate tools\n" + "\n".join(compact_signature(s.to_openai()) for s in specs),
        "## Examples of real calls and results\n"
        + ("\n".join(json_text(e) for e in examples) if examples else "<unavailable>"),
        "## Conversation so far\n" + render_transcript(history, include_system=False),
        "## The assistant's last message\n" + raw,
        "## Tool call to simulate\n" + json_text(current),
    ]
    return [{"role": "system", "content": ENV_ROLE_SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_execution_result(text: Any, max_chars: int = 16_384) -> tuple[Any, str | None]:
    """``(value, None)`` for a valid answer, else ``(None, reason)``. Never raises; bounded work."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty env-role answer"
    if len(text) > 4 * max_chars:
        return None, f"env-role answer is {len(text)} characters; the limit is {4 * max_chars}"
    body = execution_block(text)
    if body is None:
        return None, f"{EXPECTED_BLOCK}, got: {_quote(text)}"
    return _json_result(body, max_chars, "execution result")


def execution_block(text: str) -> str | None:
    """The text inside ``text``'s first ``<execution_result>`` block (``<think>`` blocks left out), stripped;
    None when there is no whole block."""
    match = _RESULT.search(strip_reasoning(text))
    return match.group(1).strip() if match is not None else None


def _quote(text: str) -> str:
    """The start of ``text`` as an error quotes it."""
    return repr(text[:_QUOTED]) + ("..." if len(text) > _QUOTED else "")


def parse_inline_result(text: Any, max_chars: int = 16_384) -> tuple[Any, str | None]:
    """An inline answer is the tool message itself: a non-empty JSON object or an array (``[]`` too: an
    empty list is a tool's answer), nothing else.
    ``(value, None)`` when valid, else ``(None, reason)``. Never raises; bounded work."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty env-role answer"
    return _json_result(text, max_chars, "imagined result")


def _json_result(body: str, max_chars: int, what: str) -> tuple[Any, str | None]:
    if len(body) > max_chars:
        return None, f"{what} is {len(body)} characters; the limit is {max_chars}"
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return None, f"{what} is not JSON: {str(exc)[:100]}"
    if not isinstance(value, (dict, list)) or value == {}:
        return None, f"{what} must be a non-empty JSON object or an array"
    problem = json_value_problem(value)
    if problem is not None:  # NaN/Infinity, lone surrogates, deep nesting: each would break a later step
        return None, f"{what} holds {problem}"
    return value, None


def format_execution_result(value: Any) -> str:
    """``value`` (a tool's result, any JSON value) in the format a prompted env role answers with:
    ``<execution_result>``, the JSON, ``</execution_result>``."""
    return f"<execution_result>\n{json_text(value)}\n</execution_result>"


def format_result(value: Any, mode: str) -> str:
    """``value`` (a tool's result, any JSON value) as the env role answers in ``mode``: inside
    ``<execution_result>`` tags (`format_execution_result`) when ``"prompted"``, the bare JSON of the tool
    message when ``"inline"``. Raises ``TypeError``/``ValueError`` for a value that is not JSON."""
    if mode == "inline":
        return json_text(value)
    if mode == "prompted":
        return format_execution_result(value)
    raise ValueError(f"mode must be 'prompted' or 'inline', got {mode!r}")


# An optional tag or two (``<success>``, ``<tool_response>``...), then a JSON object or array.
_RESULT_SHAPED = re.compile(r"^\s*(?:<[A-Za-z_]+>\s*)*[\[{]")


def is_result_shaped(message: dict[str, Any]) -> bool:
    """An assistant message that holds neither a call nor an answer but a tool result the actor wrote itself
    (``<execution_result>...``, ``<success>{...}``, bare JSON): the role confusion a joint warm start of actor
    and env role can cause. Messages with tool calls are never result-shaped."""
    if message.get("role") != "assistant" or message.get("tool_calls"):
        return False
    text = strip_reasoning(str(message.get("content") or ""))
    return "<execution_result>" in text or bool(_RESULT_SHAPED.match(text))
