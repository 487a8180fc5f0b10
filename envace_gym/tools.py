"""Tool specifications: JSON Schema for arguments (and optionally results), validated with jsonschema.

A :class:`ToolSpec` can be built from an OpenAI function dict, from a type-hinted Python function with a
Google-style docstring, or from the BFCL dialect of JSON Schema. Every consumer (env, policy prompt,
trainer, evaluation) sees the same OpenAI-format dict from :meth:`ToolSpec.to_openai`.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema import Draft202012Validator

__all__ = ["ToolSpec", "SchemaError", "schema_from_annotation", "bfcl_to_json_schema", "compact_signature"]


class SchemaError(ValueError):
    """A tool definition that cannot be turned into a valid JSON Schema."""


_EMPTY_OBJECT = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSpec:
    """One callable tool: its name, description, argument schema and optional result schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(_EMPTY_OBJECT))
    returns: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SchemaError(f"tool name must be a non-empty string, got {self.name!r}")
        for label, schema in (("parameters", self.parameters), ("returns", self.returns)):
            if schema is None:
                continue
            problem = _schema_problem(json.dumps(schema, sort_keys=True, default=repr))
            if problem:
                raise SchemaError(f"tool {self.name!r}: invalid {label} schema: {problem}")
        if self.parameters.get("type", "object") != "object":
            raise SchemaError(f"tool {self.name!r}: parameters must be an object schema")
        # Compiled validators are cached on the frozen instance.
        object.__setattr__(self, "_args_validator", Draft202012Validator(self.parameters))
        object.__setattr__(self, "_returns_validator", Draft202012Validator(self.returns) if self.returns else None)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_openai(cls, spec: dict[str, Any]) -> ToolSpec:
        """From ``{"type": "function", "function": {...}}`` or the bare ``{"name", "parameters"}`` dict."""
        if not isinstance(spec, dict):
            raise SchemaError(f"tool spec must be a dict, got {type(spec).__name__}")
        fn = spec.get("function", spec) if spec.get("type") == "function" or "function" in spec else spec
        if "name" not in fn:
            raise SchemaError(f"tool spec has no 'name': {sorted(fn)}")
        params = copy.deepcopy(fn.get("parameters") or _EMPTY_OBJECT)
        params.setdefault("type", "object")
        params.setdefault("properties", {})
        returns = fn.get("returns") or fn.get("response")
        return cls(
            name=fn["name"],
            description=fn.get("description", "") or "",
            parameters=params,
            returns=copy.deepcopy(returns) if returns else None,
        )

    @classmethod
    def from_bfcl(cls, spec: dict[str, Any]) -> ToolSpec:
        """From a BFCL function doc (``dict``/``float``/``tuple``/``any`` types, dotted names allowed)."""
        if "name" not in spec:
            raise SchemaError(f"BFCL function doc has no 'name': {sorted(spec)}")
        params = bfcl_to_json_schema(spec.get("parameters") or {"type": "dict", "properties": {}})
        params.setdefault("properties", {})
        returns = spec.get("response")
        return cls(
            name=spec["name"],
            description=spec.get("description", "") or "",
            parameters=params,
            returns=bfcl_to_json_schema(returns) if returns else None,
        )

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> ToolSpec:
        """From a Python function's type hints and Google-style docstring (``Args:`` / ``Returns:``)."""
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:  # unresolvable forward references
            raise SchemaError(f"cannot resolve type hints of {fn.__qualname__}: {exc}") from None
        summary, arg_docs = _parse_google_docstring(inspect.getdoc(fn) or "")
        properties: dict[str, Any] = {}
        required: list[str] = []
        for pname, param in sig.parameters.items():
            if pname in ("self", "cls") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = schema_from_annotation(hints.get(pname, Any))
            if pname in arg_docs:
                schema["description"] = arg_docs[pname]
            if param.default is inspect.Parameter.empty:
                required.append(pname)
            elif _json_literal(param.default):
                schema["default"] = param.default
            properties[pname] = schema
        params: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            params["required"] = required
        params["additionalProperties"] = False
        ret = hints.get("return")
        returns = schema_from_annotation(ret) if ret not in (None, type(None), Any) else None
        return cls(name=name or fn.__name__, description=summary, parameters=params, returns=returns)

    # ----------------------------------------------------------------- use
    def to_openai(self) -> dict[str, Any]:
        """The OpenAI ``tools=`` entry for this tool."""
        fn: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }
        if self.returns is not None:
            fn["returns"] = copy.deepcopy(self.returns)
        return {"type": "function", "function": fn}

    def validate_arguments(self, arguments: Any) -> list[str]:
        """Readable messages for every way ``arguments`` break the schema; empty when valid."""
        if not isinstance(arguments, dict):
            return [f"arguments must be a JSON object, got {type(arguments).__name__}"]
        return _messages(self._args_validator, arguments)  # type: ignore[attr-defined]

    def validate_result(self, result: Any) -> list[str]:
        """Messages for a result that breaks the ``returns`` schema; empty when valid or no schema."""
        validator = self._returns_validator  # type: ignore[attr-defined]
        return _messages(validator, result) if validator else []


@lru_cache(maxsize=4096)
def _schema_problem(schema_json: str) -> str | None:
    # Meta-validating a schema costs milliseconds and suites repeat the same tools thousands of times.
    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


def _messages(validator: Draft202012Validator, instance: Any) -> list[str]:
    out = []
    for err in sorted(validator.iter_errors(instance), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in err.path)
        out.append(f"{where}: {err.message}" if where else err.message)
    return out


def _json_literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_literal(v) for k, v in value.items())
    return False


# ---------------------------------------------------------------------- Python type hints -> schema
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
    dict: {"type": "object"},
    list: {"type": "array"},
    tuple: {"type": "array"},
}


def schema_from_annotation(tp: Any) -> dict[str, Any]:
    """JSON Schema for a type annotation (str/int/float/bool, list/dict/tuple, Optional, Union, Literal)."""
    if tp is Any or tp is inspect.Parameter.empty:
        return {}
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        options = [schema_from_annotation(a) for a in args]
        return {"anyOf": options}
    if origin in (list, list, set, frozenset):
        return {"type": "array", "items": schema_from_annotation(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_from_annotation(args[0])}
        items = [schema_from_annotation(a) for a in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if origin is dict:
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = schema_from_annotation(args[1])
        return schema
    raise SchemaError(f"unsupported type annotation for a tool argument: {tp!r}")


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^(Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _parse_google_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary text and per-argument descriptions from a Google-style docstring."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    arg_indent: int | None = None
    for raw in doc.splitlines():
        line = raw.strip()
        if _ARGS_HEADER.match(line):
            section, current, arg_indent = "args", None, None
        elif _SECTION.match(line):
            section, current = "other", None
        elif section == "summary":
            summary_lines.append(line)
        elif section == "args" and line:
            indent = len(raw) - len(raw.lstrip())
            match = _ARG_LINE.match(line)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = match.group(1).lstrip("*")
                args[current] = match.group(3).strip()
            elif current:  # continuation line of the current argument
                args[current] = (args[current] + " " + line).strip()
    return " ".join(part for part in summary_lines if part).strip(), args


# ---------------------------------------------------------------------- BFCL dialect -> JSON Schema
_BFCL_TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "list": "array",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "object": "object",
    "number": "number",
    "null": "null",
    # BFCL's Java/JavaScript categories name host-language types; their values arrive as strings.
    "char": "string",
    "byte": "string",
    "short": "string",
    "long": "string",
    "double": "string",
    "hashmap": "string",
    "hashset": "string",
    "arraylist": "string",
    "treemap": "string",
    "set": "string",
    "bigint": "string",
}


def bfcl_to_json_schema(schema: Any) -> dict[str, Any]:
    """Convert a BFCL parameter schema (its own type names, ``any``) into Draft 2020-12 JSON Schema."""
    if not isinstance(schema, dict):
        raise SchemaError(f"BFCL schema node must be a dict, got {type(schema).__name__}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            if value == "any":
                continue  # no constraint
            names = value if isinstance(value, list) else [value]
            mapped = []
            for n in names:
                if str(n).lower() not in _BFCL_TYPES:
                    raise SchemaError(f"unknown BFCL type {n!r}")
                mapped.append(_BFCL_TYPES[str(n).lower()])
            out["type"] = mapped[0] if len(mapped) == 1 else mapped
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {k: bfcl_to_json_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = bfcl_to_json_schema(value)
        elif key == "required":
            out["required"] = list(value)
        elif key == "optional":
            continue  # BFCL marker that duplicates the absence from `required`
        else:
            out[key] = copy.deepcopy(value)
    return out


# ---------------------------------------------------------------------- compact rendering for prompts
def _type_label(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return "|".join(_type_label(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"list[{_type_label(schema['items'])}]"
    return "|".join(kind) if isinstance(kind, list) else str(kind)


def compact_signature(tool: dict[str, Any]) -> str:
    """``- name(arg: type, opt?: type = default): description``: a tool in a tenth of its JSON tokens."""
    fn = tool.get("function", tool)
    params = fn.get("parameters", {})
    required = set(params.get("required", []))
    args = []
    for name, schema in params.get("properties", {}).items():
        label = f"{name}{'' if name in required else '?'}: {_type_label(schema)}"
        if "default" in schema:
            label += f" = {json.dumps(schema['default'])}"
        args.append(label)
    desc = fn.get("description", "")
    return f"- {fn['name']}({', '.join(args)})" + (f": {desc}" if desc else "")
