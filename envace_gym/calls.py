"""The one tool-call parser and formatter, shared by env, policy, trainer and evaluation.

Assistant text -> `ParsedAction` (free text, reasoning, calls, format errors). Formats:

* ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``: one block per call, several = parallel
  (the default format we render and tell policies to use);
* a bare JSON object or array of such objects, as the whole message;
* Python call syntax as the whole message, ``f(a=1, b="x")`` or ``[f(a=1), g()]``, read with `ast`
  as literals only: nothing is ever evaluated;
* either of the last two inside one fenced code block that is the whole message (```` ```python ````,
  ```` ```json ````, a bare ```` ``` ```` or any other language tag, the body on the lines after it). A
  fence with other text around it, or two fences, is an answer that shows code, not a call.

What is a call and what is an answer. A message that parses as calls with keyword literal arguments is
a call, whatever the names (a name no tool has is ``TOOL_NOT_AVAILABLE`` downstream). A message that does
not parse is a broken call attempt (``INVALID_TOOL_CALL_FORMAT``, so the agent is told, instead of an
answer sent by mistake) only when it plainly is one:

* ``<tool_call>`` tags that are unbalanced or hold bad JSON; a whole-message JSON text with ``"name"``
  that is not valid JSON;
* a message that opens with ``name(`` and does not parse as calls (a syntax error, cut short, or
  positional or non-literal arguments), when ``tool_names`` (the declared tools, passed by callers that
  know them: the envs, the features wrapper) holds that ``name``. Plain language that happens to look
  like a call, ``Refund(s) processed for order W123 (total 10)``, names no tool and stays an answer.
  Without ``tool_names`` the rule is conservative: a whole message ``name(...)`` closed at the end whose
  parenthesis opens with keyword syntax (``name(key=...``), or one that parses as calls with bad
  arguments (``f(1)``; in a fenced block, where ``print(x)`` is code shown, not a call, only the former).

Reasoning. Nothing inside ``<think>...</think>`` is ever a call. A ``<think>`` that is never closed ends
at the first ``<tool_call>`` after it (those calls are read); with no ``<tool_call>`` after it, it runs
to the end of the message, and a message that then holds no call is an ``INVALID_TOOL_CALL_FORMAT``
error that says so (its hidden text was maybe the answer; an empty or truncated answer would mislead).
Parsing never raises on any string.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Collection, Iterable, Sequence
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
    "json_text",
    "strip_reasoning",
    "tool_names_of",
    "INVALID_CALL_CODES",
    "UNCLOSED_THINK_MESSAGE",
    "MAX_ARGUMENT_DEPTH",
    "json_value_problem",
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


# One encoder of each kind, built once: ``json.dumps`` with any non-default option builds a new JSONEncoder
# (and its C encoder) per call, a third of the time of encoding the small values a step shows and hashes.
_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False)
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_text(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)``: the JSON text a message shows (tool results, call arguments)."""
    return _TEXT_ENCODER.encode(value)


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON: the identity used for caches, hashes and call matching."""
    return _CANONICAL_ENCODER.encode(value)


# ---------------------------------------------------------------------------- parsing
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_OPEN_TAG = "<tool_call>"
_CLOSE_TAG = "</tool_call>"
# Python-syntax detection is only attempted on messages that look like a call, and never on huge ones.
_PY_CALL_SHAPE = re.compile(r"^\[?\s*[A-Za-z_][\w.]*\s*\(", re.DOTALL)
_MAX_PY_CHARS = 20_000

#: The error of a message whose ``<think>`` is never closed and that holds no call.
UNCLOSED_THINK_MESSAGE = (
    "the message opens <think> and never closes it, so nothing after <think> was read as an answer or a "
    "call; close reasoning with </think> before the answer or the call"
)


def parse_calls(text: Any, tool_names: Collection[str] | None = None) -> ParsedAction:
    """Parse assistant text into free text, reasoning and tool calls. Never raises.

    A message that tries to call a tool and gets the syntax wrong yields an ``INVALID_TOOL_CALL_FORMAT``
    error, not a silent answer, so the agent gets told what went wrong. ``tool_names``: the tools the
    message may call (declared ones); they decide whether a Python-syntax-looking message that does not
    parse is a broken call or plain language (see the module docstring). ``None``: not known, a
    conservative rule applies.
    """
    if not isinstance(text, str):
        return ParsedAction("", [], [_format_error(f"action must be a string, got {type(text).__name__}")])
    names = _name_set(tool_names)
    if _THINK_OPEN in text:
        visible, reasoning, unclosed = _split_reasoning(text)
    else:  # the usual case: skip a scan that cannot find anything
        visible, reasoning, unclosed = text, "", False
    parsed = _parse_visible(visible, reasoning, names)
    if unclosed and not parsed.calls:
        # Without this, an unclosed <think> silently swallows the answer (or a call written as Python or
        # JSON) and the message reads as empty or cut short.
        parsed.errors.append(_format_error(UNCLOSED_THINK_MESSAGE))
    return parsed


def _name_set(tool_names: Collection[str] | None) -> frozenset[str] | None:
    if tool_names is None:
        return None
    if type(tool_names) is frozenset:  # already a set of names (the env's offered tools, every step)
        return tool_names
    if isinstance(tool_names, str):  # one name passed bare
        return frozenset((tool_names,))
    try:
        return frozenset(n for n in tool_names if isinstance(n, str))
    except TypeError:  # not iterable: as if not given
        return None


def tool_names_of(tools: Iterable[Any] | None) -> frozenset[str]:
    """The names of ``tools``: OpenAI schemas (``{"type": "function", "function": {"name": ...}}`` or
    ``{"name": ...}``), `ToolSpec` objects or plain names; what cannot be read is
    skipped. For ``parse_calls(text, tool_names=...)``."""
    out: set[str] = set()
    for tool in tools or ():
        if isinstance(tool, str):
            name: Any = tool
        elif isinstance(tool, dict):
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
        else:
            name = getattr(tool, "name", None)
        if isinstance(name, str) and name:
            out.add(name)
    return frozenset(out)


def _parse_visible(visible: str, reasoning: str, names: frozenset[str] | None) -> ParsedAction:
    if _OPEN_TAG in visible or _CLOSE_TAG in visible:
        return _parse_tagged(visible, reasoning)
    stripped = visible.strip()
    found = _parse_whole(stripped, names)
    if found is None:
        body = _fenced_body(stripped)
        if body is not None:
            found = _parse_whole(body, names, fenced=True)
    if found is not None:
        calls, errors = found
        return ParsedAction("", calls, errors, reasoning)
    return ParsedAction(stripped, [], [], reasoning)


def _parse_whole(
    stripped: str, names: frozenset[str] | None, fenced: bool = False
) -> tuple[list[ToolCall], list[CallError]] | None:
    """``stripped`` read as a whole-message call (bare JSON or Python syntax): its calls and errors; or a
    broken call attempt: one format error; or None: not a call, an answer. ``fenced``: the body of a code
    block, where code such as ``print(x)`` is shown far more often than written as a call."""
    if stripped[:1] in "{[":
        bare = _parse_bare_json(stripped)
        if bare is not None:
            return bare
    if len(stripped) <= _MAX_PY_CHARS and _PY_CALL_SHAPE.match(stripped):
        py = _parse_python_calls(stripped)
        if py is not None:
            calls, errors = py
            # Parsed, but with no good call: ``Refund(s)`` or ``Note(see above)`` written as prose (or
            # ``print(x)`` shown in a code block) is a call only if it names a declared tool; with no
            # declared tools, outside a fence, as before (``f(1)``: use keyword arguments).
            if calls:
                return py
            if names is None and not fenced:
                return py
            if names is not None and any(e.tool in names for e in errors):
                return py
    attempt = _broken_call_attempt(stripped, names)
    if attempt is not None:
        return [], [_format_error(attempt)]
    return None


# A whole message shaped as a Python call, ``f(...)`` or ``[f(...), ...]``: no space before the parenthesis
# and closed at the end, so prose such as "Yes (it is)" stays an answer.
_PY_ATTEMPT = re.compile(r"^\[?\s*(?P<name>[A-Za-z_][\w.]*)\((?P<rest>.*)\)\s*\]?$", re.DOTALL)
_PY_LEADING_NAME = re.compile(r"\[?\s*(?P<name>[A-Za-z_][\w.]*)\(")
# Keyword-argument syntax right after the parenthesis (``key=`` but not ``key==``), or an empty call.
_KEYWORD_START = re.compile(r"\s*(?:[A-Za-z_]\w*\s*=(?!=)|\)|$)")


def _broken_call_attempt(stripped: str, names: frozenset[str] | None) -> str | None:
    """Why a message that tries to call a tool and fails to parse is not an answer, or None: bare JSON that
    names a tool (``"name"``) but is not valid JSON, or a whole-message Python-syntax call that does not
    parse (deep nesting, a syntax error, cut short) and opens with a declared tool's name (``names``), or,
    with no ``names``, is closed at the end and opens with keyword syntax."""
    if stripped[:1] in "{[" and '"name"' in stripped:
        return 'the message looks like a JSON tool call (it has "name") but is not valid JSON'
    if names is not None:
        # A declared tool's name opening the message: a call even when cut short (``f(a="x`` at a token
        # limit), since prose seldom starts with a tool's identifier and a parenthesis.
        match = _PY_LEADING_NAME.match(stripped)
        looks_like_call = match is not None and match.group("name") in names
    else:
        match = _PY_ATTEMPT.match(stripped)
        looks_like_call = match is not None and _KEYWORD_START.match(match.group("rest")) is not None
    if match is None or not looks_like_call:
        return None  # prose that happens to look like a call: "Refund(s) processed for order W123 (total 10)"
    name = match.group("name")
    return f"the message looks like a Python-syntax call of {name!r} but does not parse (keyword literals only)"


_FENCE = "```"
_FENCE_LANG = re.compile(r"[\w+.-]*")


def _fenced_body(stripped: str) -> str | None:
    """The body of a fenced code block that is the whole message (```` ```lang ```` on the first line,
    ```` ``` ```` closing it at the end, no other fence), or None."""
    if len(stripped) < 7 or not (stripped.startswith(_FENCE) and stripped.endswith(_FENCE)):
        return None
    if stripped.count(_FENCE) != 2:
        return None
    header, newline, body = stripped[3:-3].partition("\n")
    if not newline or not _FENCE_LANG.fullmatch(header.strip()):
        return None
    return body.strip()


def _split_reasoning(text: str) -> tuple[str, str, bool]:
    """``text`` split into its visible part, its reasoning (the ``<think>`` bodies, joined) and whether an
    unclosed ``<think>`` ran to the end of the text. A ``<think>`` ends at the first ``</think>`` after it;
    one never closed ends at the first ``<tool_call>`` after it (the calls are read), or else at the end.
    A ``</think>`` left over (nested tags: ``<think><think></think>...</think>``) closes reasoning that ran
    to it, so everything before the last one is reasoning too: a call inside it is never run.

    One pass with ``str.find``, linear in the text: the last ``</think>`` is found once, so an unclosed
    ``<think>`` never rescans the rest (thousands of them would otherwise be quadratic)."""
    last_close = text.rfind(_THINK_CLOSE)
    visible, reasoning, pos, unclosed = [], [], 0, False
    while True:
        start = text.find(_THINK_OPEN, pos)
        if start < 0:
            visible.append(text[pos:])
            break
        visible.append(text[pos:start])
        body = start + len(_THINK_OPEN)
        end = text.find(_THINK_CLOSE, body) if last_close >= body else -1
        if end >= 0:
            reasoning.append(text[body:end])
            pos = end + len(_THINK_CLOSE)
            continue
        call = text.find(_OPEN_TAG, body)
        if call >= 0:  # unclosed, but a call follows: the reasoning ends where the call starts
            reasoning.append(text[body:call])
            pos = call
            continue
        reasoning.append(text[body:])
        unclosed = True
        break
    shown = "".join(visible)
    if _THINK_CLOSE in shown:
        shown = shown.rsplit(_THINK_CLOSE, 1)[1]
    return shown, "\n".join(r.strip() for r in reasoning).strip(), unclosed


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` blocks (the visible part that may hold calls or answers); see
    `_split_reasoning` for where a block ends."""
    return _split_reasoning(text)[0]


def _format_error(message: str, tool: str | None = None) -> CallError:
    return CallError(ErrorCode.INVALID_TOOL_CALL_FORMAT, message, tool)


def _split_tagged(visible: str) -> tuple[list[str], str]:
    """The bodies of the ``<tool_call>...</tool_call>`` blocks (each from an opening tag to the first closing
    tag after it) and the text around them. One pass with ``str.find``: a regex with a lazy ``.*?`` retried
    at every unclosed ``<tool_call>`` is quadratic (thousands of open tags took seconds)."""
    bodies, rest, pos = [], [], 0
    while True:
        start = visible.find(_OPEN_TAG, pos)
        end = visible.find(_CLOSE_TAG, start + len(_OPEN_TAG)) if start >= 0 else -1
        if end < 0:
            rest.append(visible[pos:])
            return bodies, "".join(rest)
        rest.append(visible[pos:start])
        bodies.append(visible[start + len(_OPEN_TAG) : end])
        pos = end + len(_CLOSE_TAG)


def _parse_tagged(visible: str, reasoning: str) -> ParsedAction:
    calls: list[ToolCall] = []
    errors: list[CallError] = []
    bodies, remainder = _split_tagged(visible)
    for i, raw in enumerate(bodies):
        body = raw.strip()
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
    problem = json_value_problem(args)
    if problem is not None:
        return None, _format_error(f"arguments of {name!r} rejected: {problem}", name)
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
            problem = json_value_problem(value)
            if problem is not None:
                bad = f"argument {kw.arg!r} rejected: {problem}"
                break
            value = _as_lists(value)
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


#: Arguments nested deeper than this are refused: every later consumer (schema checks, hashing, the
#: tokenizer) would otherwise need unbounded recursion.
MAX_ARGUMENT_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_value_problem(value: Any, max_depth: int = MAX_ARGUMENT_DEPTH) -> str | None:
    """Why ``value`` (parsed JSON or a Python literal) cannot be a tool call's arguments, or None: a value
    that is not JSON (sets, bytes, ...), a non-finite number, a non-string key, a lone surrogate (it cannot
    be encoded as UTF-8, so hashing or tokenizing it later would crash), or nesting deeper than
    ``max_depth``. Iterative: safe on any depth."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"nested deeper than {max_depth} levels"
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return "a non-finite number (NaN or Infinity)"
        elif isinstance(item, str):
            if _SURROGATE.search(item):
                return "a lone surrogate in a string (not encodable as UTF-8)"
        elif isinstance(item, (list, tuple)):
            stack.extend((x, depth + 1) for x in item)
        elif isinstance(item, dict):
            for key, x in item.items():
                if not isinstance(key, str):
                    return f"a non-string key ({type(key).__name__})"
                if _SURROGATE.search(key):
                    return "a lone surrogate in a key (not encodable as UTF-8)"
                stack.append((x, depth + 1))
        else:
            return f"a {type(item).__name__} value (not JSON)"
    return None


def _as_lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_lists(v) for k, v in value.items()}
    return value


def _short(exc: BaseException, limit: int = 120) -> str:
    msg = str(exc)
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


# ---------------------------------------------------------------------------- formatting
def _json_for_tags(value: Any) -> str:
    # Escaping '<' (legal only inside JSON strings) keeps argument text such as "</tool_call>" or
    # "<think>" from being read as markup when the message is parsed back.
    return json_text(value).replace("<", "\\u003c")


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
            "function": {"name": c.name, "arguments": json_text(c.arguments)},
        }
        for i, c in enumerate(calls)
    ]
