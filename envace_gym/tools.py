"""Tool specifications: JSON Schema for arguments (and optionally results), validated with jsonschema.

A `ToolSpec` can be built from an OpenAI function dict, from a type-hinted Python function with a
Google-style docstring, or from the BFCL dialect of JSON Schema. Every consumer (env, policy prompt,
trainer, evaluation) sees the same OpenAI-format dict from `ToolSpec.to_openai`.
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

from .kept import KeptByIdentity

__all__ = [
    "ToolSpec",
    "SchemaError",
    "check_hinted",
    "schema_from_annotation",
    "bfcl_to_json_schema",
    "compact_signature",
]


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
        compiled = {}
        for label, schema in (("parameters", self.parameters), ("returns", self.returns)):
            if schema is None:
                continue
            key = json.dumps(schema, sort_keys=True, default=repr)
            problem = _schema_problem(key)
            if problem:
                raise SchemaError(f"tool {self.name!r}: invalid {label} schema: {problem}")
            compiled[label] = _compiled(key, schema)
        if self.parameters.get("type", "object") != "object":
            raise SchemaError(f"tool {self.name!r}: parameters must be an object schema")
        # Compiled validators are cached on the frozen instance.
        args_validator, args_fast = compiled["parameters"]
        object.__setattr__(self, "_args_validator", args_validator)
        object.__setattr__(self, "_args_fast", args_fast)
        object.__setattr__(self, "_returns_validator", compiled["returns"][0] if self.returns else None)

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_openai(cls, spec: dict[str, Any]) -> ToolSpec:
        """From ``{"type": "function", "function": {...}}`` or the bare ``{"name", "parameters"}`` dict."""
        if not isinstance(spec, dict):
            raise SchemaError(f"tool spec must be a dict, got {type(spec).__name__}")
        fn = spec.get("function", spec) if spec.get("type") == "function" or "function" in spec else spec
        if not isinstance(fn, dict):
            raise SchemaError(f"tool spec's 'function' must be an object, got {type(fn).__name__}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise SchemaError(f"tool spec needs a non-empty string 'name': {sorted(fn)}")
        for key in ("parameters", "returns", "response"):
            if fn.get(key) is not None and not isinstance(fn[key], dict):
                raise SchemaError(
                    f"tool {fn['name']!r}: {key!r} must be a JSON schema object, got {type(fn[key]).__name__}"
                )
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
        check_hinted(fn, name)
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
            schema = schema_from_annotation(hints.get(pname, Any))  # an explicit Any: {} (check_hinted)
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
        fast = self._args_fast  # type: ignore[attr-defined]
        if fast is not None and FAST_VALIDATION and fast(arguments):
            return []
        return _messages(self._args_validator, arguments)  # type: ignore[attr-defined]

    def validate_result(self, result: Any) -> list[str]:
        """Messages for a result that breaks the ``returns`` schema; empty when valid or no schema."""
        validator = self._returns_validator  # type: ignore[attr-defined]
        return _messages(validator, result) if validator else []


def check_hinted(fn: Callable[..., Any], name: str | None = None) -> None:
    """Raise `SchemaError` naming the tool, the parameter and the fix when a parameter of ``fn`` (other than
    ``self``/``cls``, ``*args``, ``**kwargs``) has no type hint.

    An error rather than a schema that accepts anything: the schema is what the model is shown and what
    every call is validated against, so a silent ``{}`` makes a typo'd or mistyped argument pass unnoticed,
    and a warning scrolls past in a training log. The fix is one annotation; ``Any`` remains for a
    parameter that really takes any JSON value. Only the annotation's presence is read, so ``@tool`` can
    check when the class body runs, before forward references resolve."""
    for pname, param in inspect.signature(fn).parameters.items():
        if pname in ("self", "cls") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.annotation is inspect.Parameter.empty:
            raise SchemaError(
                f"tool {name or fn.__name__!r}: parameter {pname!r} has no type hint; annotate it "
                f"(e.g. `{pname}: str`), or write `{pname}: Any` to accept any JSON value"
            )


@lru_cache(maxsize=4096)
def _schema_problem(schema_json: str) -> str | None:
    # Meta-validating a schema costs milliseconds and suites repeat the same tools thousands of times.
    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


# Building a validator costs far more than most validations and every task of a suite restates the same
# tools: validators are shared between equal schemas. ``schema_json`` is the schema's sorted-key JSON; the
# schema itself is compared too, since that JSON writes values it cannot encode with repr.
_VALIDATORS: dict[str, tuple[Any, Draft202012Validator, Callable[[Any], bool] | None]] = {}


def _compiled(schema_json: str, schema: dict[str, Any]) -> tuple[Draft202012Validator, Callable[[Any], bool] | None]:
    hit = _VALIDATORS.get(schema_json)
    if hit is not None and hit[0] == schema:
        return hit[1], hit[2]
    own = copy.deepcopy(schema)  # the cached validator must not see later edits of the caller's dict
    entry = (own, Draft202012Validator(own), _fast_check(own))
    if len(_VALIDATORS) < 4096:
        _VALIDATORS[schema_json] = entry
    return entry[1], entry[2]


# Checking arguments with jsonschema costs tens of microseconds per call (it builds a validator per
# subschema it descends into). Most tool schemas use a handful of keywords, so those are compiled into a
# plain predicate that answers True only for instances jsonschema accepts too; any other answer, and any
# schema with another keyword, goes to jsonschema, which alone writes the error messages.
FAST_VALIDATION = True  # False: every check goes through jsonschema (for comparison)

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated"})
_FAST_KEYWORDS = frozenset({"type", "enum", "properties", "required", "additionalProperties", "items", "anyOf"})
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})
# Exact Python types per JSON type: narrower than jsonschema's isinstance checks, never wider.
_JSON_TYPES: dict[str, frozenset[type]] = {
    "string": frozenset({str}),
    "integer": frozenset({int}),
    "number": frozenset({int, float}),
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
    "object": frozenset({dict}),
    "array": frozenset({list}),
}


def _accept(value: Any) -> bool:
    return True


def _fast_check(schema: Any) -> Callable[[Any], bool] | None:
    """A predicate that is True only where jsonschema finds no error; None when the schema is out of reach."""
    if schema is True:
        return _accept
    if not isinstance(schema, dict) or not set(schema) - _ANNOTATIONS <= _FAST_KEYWORDS:
        return None
    types: frozenset[type] | None = None
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not all(isinstance(n, str) and n in _JSON_TYPES for n in names):
            return None
        types = frozenset().union(*(_JSON_TYPES[n] for n in names))
    enum: frozenset[tuple[type, Any]] | None = None
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not all(type(v) in _SCALAR_TYPES for v in values):
            return None
        enum = frozenset((type(v), v) for v in values)
    props: dict[str, Callable[[Any], bool]] = {}
    for name, sub in (schema.get("properties") or {}).items():
        check = _fast_check(sub)
        if check is None:
            return None
        props[name] = check
    required = list(schema.get("required") or ())
    if not all(isinstance(r, str) for r in required):
        return None
    extra = schema.get("additionalProperties", True)
    extra_check = None if extra is False else _fast_check(extra)
    if extra is not False and extra_check is None:
        return None
    items = None
    if "items" in schema:
        items = _fast_check(schema["items"])
        if items is None:
            return None
    any_of = None
    if "anyOf" in schema:
        if not isinstance(schema["anyOf"], list) or not schema["anyOf"]:
            return None
        any_of = [_fast_check(s) for s in schema["anyOf"]]
        if any(c is None for c in any_of):
            return None
    object_rules = bool(props or required or extra is not True)

    def check(value: Any) -> bool:
        t = type(value)
        if types is not None and t not in types:
            return False
        if enum is not None and (t not in _SCALAR_TYPES or (t, value) not in enum):
            return False
        if object_rules:
            if t is dict:
                for name in required:
                    if name not in value:
                        return False
                for name, v in value.items():
                    sub = props.get(name)
                    if sub is not None:
                        if not sub(v):
                            return False
                    elif extra_check is None or not extra_check(v):
                        return False
            elif isinstance(value, dict):
                return False  # a dict subclass: let jsonschema decide
        if items is not None:
            if t is list:
                for v in value:
                    if not items(v):
                        return False
            elif isinstance(value, list):
                return False
        return any_of is None or any(c(value) for c in any_of)

    return check


def _messages(validator: Draft202012Validator, instance: Any) -> list[str]:
    # Collecting jsonschema's errors costs about half a plain env step, and a policy repeats its wrong calls
    # (a group of samples of one task, a random policy's few shapes): the messages are kept per validator
    # and instance. The key is the instance's repr, which tells apart what jsonschema's messages tell apart
    # (1, 1.0 and True; a list and a tuple; key order). Long instances are not kept (memory).
    text = repr(instance)
    kept = _KEPT_MESSAGES.get(validator, text)
    if kept is not None:
        return list(kept)
    out = []
    for err in sorted(validator.iter_errors(instance), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in err.path)
        out.append(f"{where}: {err.message}" if where else err.message)
    if len(text) <= 2048:
        _KEPT_MESSAGES.put(validator, tuple(out), text)
    return out


_KEPT_MESSAGES: KeptByIdentity[tuple[str, ...]] = KeptByIdentity(4096)


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
