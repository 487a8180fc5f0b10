"""The one tool-call parser and formatter, shared by env, policy, trainer and evaluation.

Assistant text -> :class:`ParsedAction` (free text, reasoning, calls, format errors). Formats:

* ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``: one block per call, several = parallel
  (the default format we render and tell policies to use);
* a bare JSON object or array of such objects, as the whole message;
* Python call syntax as the whole message, ``f(a=1, b="x")`` or ``[f(a=1), g()]``, read with :mod:`ast`
  as literals only: nothing is ever evaluated.

Nothing inside ``<think>...</think>`` is ever a call. Parsing never raises on any string.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "ErrorCode",
    "ToolCall",
    "CallError",
    "ParsedAction",
    "parse_calls",
    "format_calls",
    "canonical_json",
    "strip_reasoning",
    "INVALID_CALL_CODES",
    "THINK_BLOCK",
]


class ErrorCode(StrEnum):
    """Fixed error codes, shared with the EnvACE reference code (and extended for execution)."""

    INVALID_TOOL_CALL_FORMAT = "INVALID_TOOL_CALL_FORMAT"
    TOOL_NOT_AVAILABLE = "TOOL_NOT_AVAILABLE"
    INVALID_PARAMETERS = "INVALID_PARAMETERS"
    TOOL_EXECUTION_ERROR = "TOOL_EXECUTION_ERROR"
    TOOL_TIMEOUT = "TOOL_TIMEOUT"


#: Codes of calls that were invalid and never ran (the agent's mistake); the other codes are the world's answer.
INVALID_CALL_CODES = frozenset(
    {ErrorCode.INVALID_TOOL_CALL_FORMAT, ErrorCode.TOOL_NOT_AVAILABLE, ErrorCode.INVALID_PARAMETERS}
)


@dataclass(frozen=True)
class ToolCall:
    """A parsed call: the tool's name and its JSON arguments. ``id`` does not take part in equality."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}

    def key(self) -> str:
        """Canonical identity of the call: name plus sorted-key JSON of the arguments."""
        return f"{self.name}:{canonical_json(self.arguments)}"


@dataclass(frozen=True)
class CallError:
    """A structured error: a fixed code, a readable message, and the tool it concerns if any."""

    code: ErrorCode
    message: str
    tool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.value, "message": self.message}
        if self.tool is not None:
            out["tool"] = self.tool
        return out


@dataclass
class ParsedAction:
    """What an assistant message says: free text (``content``), ``reasoning``, calls and format errors."""

    content: str
    calls: list[ToolCall]
    errors: list[CallError]
    reasoning: str = ""

    @property
    def is_answer(self) -> bool:
        """A message with no call and no malformed call attempt is a (final or turn) answer."""
        return not self.calls and not self.errors


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON: the identity used for caches, hashes and call matching."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------------------- parsing
#: A reasoning block; an unterminated one runs to the end of the text. Nothing inside it is ever parsed.
THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN_TAG = "<tool_call>"
_CLOSE_TAG = "</tool_call>"
# Python-syntax detection is only attempted on messages that look like a call, and never on huge ones.
_PY_CALL_SHAPE = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(", re.DOTALL)
_MAX_PY_CHARS = 20_000


def parse_calls(text: Any) -> ParsedAction:
    """Parse assistant text into free text, reasoning and tool calls. Never raises.

    A message that tries to call a tool and gets the syntax wrong yields an ``INVALID_TOOL_CALL_FORMAT``
    error, not a silent answer, so the agent gets told what went wrong.
    """
    if not isinstance(text, str):
        return ParsedAction("", [], [_format_error(f"action must be a string, got {type(text).__name__}")])
    if "<think>" in text:
        reasoning_parts = [m.group(0) for m in THINK_BLOCK.finditer(text)]
        visible = strip_reasoning(text)
        reasoning = "\n".join(_strip_think_tags(p) for p in reasoning_parts).strip()
    else:  # the usual case: skip two regex passes that cannot match
        visible, reasoning = text, ""

    if _OPEN_TAG in visible or _CLOSE_TAG in visible:
        return _parse_tagged(visible, reasoning)

    stripped = visible.strip()
    if stripped[:1] in "{[":
        bare = _parse_bare_json(stripped)
        if bare is not None:
            calls, errors = bare
            return ParsedAction("", calls, errors, reasoning)
    if len(stripped) <= _MAX_PY_CHARS and _PY_CALL_SHAPE.match(stripped):
        py = _parse_python_calls(stripped)
        if py is not None:
            calls, errors = py
            return ParsedAction("", calls, errors, reasoning)
    return ParsedAction(stripped, [], [], reasoning)


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` blocks (the visible part that may hold calls or answers)."""
    return THINK_BLOCK.sub("", text)


def _strip_think_tags(block: str) -> str:
    return block.removeprefix("<think>").removesuffix("</think>").strip()


def _format_error(message: str, tool: str | None = None) -> CallError:
    return CallError(ErrorCode.INVALID_TOOL_CALL_FORMAT, message, tool)


def _parse_tagged(visible: str, reasoning: str) -> ParsedAction:
    calls: list[ToolCall] = []
    errors: list[CallError] = []
    for i, match in enumerate(_TOOL_CALL.finditer(visible)):
        body = match.group(1).strip()
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError) as exc:
            errors.append(_format_error(f"tool call #{i + 1} is not valid JSON: {_short(exc)}"))
            continue
        items = payload if isinstance(payload, list) else [payload]
        for item in items:
            call, err = _call_from_obj(item)
            if call:
                calls.append(call)
            if err:
                errors.append(err)
    remainder = _TOOL_CALL.sub("", visible)
    if _OPEN_TAG in remainder or _CLOSE_TAG in remainder:
        errors.append(_format_error("unbalanced <tool_call> tags: every <tool_call> needs a </tool_call>"))
        remainder = remainder.replace(_OPEN_TAG, "").replace(_CLOSE_TAG, "")
    return ParsedAction(remainder.strip(), calls, errors, reasoning)


def _parse_bare_json(stripped: str) -> tuple[list[ToolCall], list[CallError]] | None:
    """A whole-message JSON call (or list of calls); None when it is not JSON or not call-shaped."""
    try:
        payload = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    items = payload if isinstance(payload, list) else [payload]
    if not items or not all(isinstance(it, dict) and "name" in it for it in items):
        return None  # ordinary JSON content in an answer, not a call attempt
    calls, errors = [], []
    for item in items:
        call, err = _call_from_obj(item)
        if call:
            calls.append(call)
        if err:
            errors.append(err)
    return calls, errors


def _call_from_obj(obj: Any) -> tuple[ToolCall | None, CallError | None]:
    if not isinstance(obj, dict):
        return None, _format_error(f"a tool call must be a JSON object, got {type(obj).__name__}")
    if "function" in obj and isinstance(obj["function"], dict) and "name" not in obj:
        obj = obj["function"]  # OpenAI {"type": "function", "function": {...}} shape
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, _format_error("a tool call needs a non-empty string 'name'")
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI wire format carries arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as exc:
            return None, _format_error(f"arguments of {name!r} are not valid JSON: {_short(exc)}", name)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return None, _format_error(f"arguments of {name!r} must be a JSON object, got {type(args).__name__}", name)
    if not _is_json_value(args):
        return None, _format_error(f"arguments of {name!r} contain non-JSON values", name)
    return ToolCall(name.strip(), args, obj.get("id") if isinstance(obj.get("id"), str) else None), None


def _parse_python_calls(stripped: str) -> tuple[list[ToolCall], list[CallError]] | None:
    try:
        tree = ast.parse(stripped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    node = tree.body
    nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    if not nodes or not all(isinstance(n, ast.Call) for n in nodes):
        return None
    calls, errors = [], []
    for n in nodes:
        name = _dotted_name(n.func)  # type: ignore[attr-defined]
        if name is None:
            errors.append(_format_error("a Python-syntax call must name a function, e.g. f(a=1)"))
            continue
        if n.args:  # type: ignore[attr-defined]
            errors.append(_format_error(f"{name}: use keyword arguments only, e.g. {name}(x=1)", name))
            continue
        args: dict[str, Any] = {}
        bad = None
        for kw in n.keywords:  # type: ignore[attr-defined]
            if kw.arg is None:
                bad = "**kwargs expansion is not allowed"
                break
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                bad = f"argument {kw.arg!r} is not a literal value"
                break
            value = _to_json_value(value)
            if value is _NOT_JSON:
                bad = f"argument {kw.arg!r} is not a JSON-compatible literal"
                break
            args[kw.arg] = value
        if bad:
            errors.append(_format_error(f"{name}: {bad}", name))
        else:
            calls.append(ToolCall(name, args))
    return calls, errors


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


_NOT_JSON = object()


def _to_json_value(value: Any) -> Any:
    """Python literal -> JSON value (tuples become lists); ``_NOT_JSON`` for sets, bytes, complex..."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_JSON
    if isinstance(value, (list, tuple)):
        items = [_to_json_value(v) for v in value]
        return _NOT_JSON if any(v is _NOT_JSON for v in items) else items
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            conv = _to_json_value(v)
            if not isinstance(k, str) or conv is _NOT_JSON:
                return _NOT_JSON
            out[k] = conv
        return out
    return _NOT_JSON


def _is_json_value(value: Any) -> bool:
    return _to_json_value(value) is not _NOT_JSON


def _short(exc: BaseException, limit: int = 120) -> str:
    msg = str(exc)
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


# ---------------------------------------------------------------------------- formatting
def _json_for_tags(value: Any) -> str:
    # Escaping '<' (legal only inside JSON strings) keeps argument text such as "</tool_call>" or
    # "<think>" from being read as markup when the message is parsed back.
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


def format_calls(calls: Iterable[ToolCall], style: str = "tool_call") -> str:
    """Render calls as assistant text; ``parse_calls(format_calls(c)).calls == c`` for every style.

    Styles: ``tool_call`` (one ``<tool_call>`` block per call), ``json`` (a bare JSON array), ``python``
    (``[f(a=1), g(b="x")]``).
    """
    calls = list(calls)
    if style == "tool_call":
        return "\n".join(
            f"{_OPEN_TAG}\n{_json_for_tags({'name': c.name, 'arguments': c.arguments})}\n{_CLOSE_TAG}" for c in calls
        )
    if style == "json":
        return _json_for_tags([{"name": c.name, "arguments": c.arguments} for c in calls])
    if style == "python":
        return "[" + ", ".join(_python_call(c) for c in calls) + "]"
    raise ValueError(f"unknown call style {style!r}; use 'tool_call', 'json' or 'python'")


def _python_call(call: ToolCall) -> str:
    for key in call.arguments:
        if not key.isidentifier():
            raise ValueError(f"argument name {key!r} cannot be written in Python call syntax")
    args = ", ".join(f"{k}={_py_literal(v)}" for k, v in call.arguments.items())
    return f"{call.name}({args})"


def _py_literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py_literal(k)}: {_py_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py_literal(v) for v in value) + "]"
    if isinstance(value, str):
        return repr(value).replace("<", "\\x3c")  # same reason as in _json_for_tags
    return repr(value)


def tool_calls_to_openai(calls: Sequence[ToolCall], id_prefix: str = "call") -> list[dict[str, Any]]:
    """OpenAI ``message.tool_calls`` entries (arguments as a JSON string)."""
    return [
        {
            "id": c.id or f"{id_prefix}_{i}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for i, c in enumerate(calls)
    ]
