"""Java and JavaScript argument literals for BFCL's simple_java / simple_javascript categories.

In those categories every argument is passed as a string of host-language source (``"true"``, ``"50L"``,
``"new ArrayList<>(Arrays.asList(\\"a\\"))"``), and BFCL's checker converts it back with its type converters
before comparing with the ground truth. The reference trajectory therefore needs the inverse: a literal
that those converters read back as the ground-truth value. `encode` writes one; strings are passed as
they are (BFCL compares ``String``/``any`` values, and variable names, without quotes).

Also here: `string_typed_doc`, the function doc a model sees in these categories (every parameter a
string, with the host type in its description), as BFCL's prompt pre-processing presents it.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

__all__ = ["encode", "string_typed_doc", "host_language"]


def host_language(category: str) -> str | None:
    """``"java"``, ``"javascript"`` or ``None`` (Python: arguments are JSON values, not source strings)."""
    if "javascript" in category:
        return "javascript"
    if "java" in category:
        return "java"
    return None


def encode(value: Any, kind: str, items: str | None, language: str) -> str:
    """A ``language`` literal of type ``kind`` (element type ``items``) that BFCL reads back as ``value``."""
    if isinstance(value, str):
        return value
    return _java(value, kind, items) if language == "java" else _js(value, kind, items)


# ------------------------------------------------------------------------------------------------ Java
def _java(value: Any, kind: str, items: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "long" and isinstance(value, int):
        return f"{value}L"
    if kind == "float" and isinstance(value, (int, float)):
        return f"{value}f"
    if kind in ("Array",) and isinstance(value, list):
        return (
            "new " + (items or "Object") + "[]{" + ", ".join(_java_element(v, items, quote=False) for v in value) + "}"
        )
    if kind == "ArrayList" and isinstance(value, list):
        if not value:
            return "new ArrayList<>()"
        return "new ArrayList<>(Arrays.asList(" + ", ".join(_java_element(v, items, quote=True) for v in value) + "))"
    if kind == "HashMap" and isinstance(value, dict):
        puts = " ".join(f'put("{k}", {_java_value(v)});' for k, v in value.items())
        return "new HashMap<String, Object>() {{ " + puts + " }}"
    return _plain(value)


def _java_element(value: Any, items: str | None, quote: bool) -> str:
    if isinstance(value, str):
        # ArrayList elements of String/char type have their quotes stripped by BFCL; Array elements do not.
        if quote and items in ("String", "char"):
            return f'"{value}"' if items == "String" else f"'{value}'"
        return value if items else f'"{value}"'
    return _java(value, items or "", None) if items else _java_value(value)


def _java_value(value: Any) -> str:
    # Untyped values (HashMap entries): BFCL's parse_java_value reads quoted strings, true/false and numbers.
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return _plain(value)


# ------------------------------------------------------------------------------------------------ JavaScript
def _js(value: Any, kind: str, items: str | None) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if kind == "Bigint" and isinstance(value, int):
        return f"{value}n"
    if kind == "float" and isinstance(value, float):
        return _decimal(value)  # BFCL reads floats without an exponent only
    if isinstance(value, list):
        return "[" + ", ".join(_js_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_value(v)}" for k, v in value.items()) + "}"
    return _plain(value)


def _js_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_js_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_js_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return _decimal(value)
    return _plain(value)


def _decimal(value: float) -> str:
    return format(Decimal(repr(value)), "f")


def _plain(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


# ------------------------------------------------------------------------------------------------ docs
def string_typed_doc(doc: dict[str, Any], language: str) -> dict[str, Any]:
    """The doc with every parameter typed ``string`` and its host type (and element/entry schema) described."""
    out = copy.deepcopy(doc)
    label = "Java 8" if language == "java" else "JavaScript"
    out["description"] = f"{out.get('description', '')} (This function is written in {label} syntax.)".strip()
    for param in (out.get("parameters") or {}).get("properties", {}).values():
        host = param.get("type") or "any"
        note = (
            f" Pass a {label} {host} value written as source text."
            if host != "any"
            else f" Pass any {label} value written as source text."
        )
        if isinstance(param.get("items"), dict):
            note += f" Its elements are of type {param['items'].get('type', 'any')}."
        if host == "dict" and isinstance(param.get("properties"), dict):
            note += " Its entries follow this schema: " + json.dumps(param["properties"]) + "."
        for key in ("items", "properties", "required"):
            param.pop(key, None)
        param["description"] = (param.get("description", "") + note).strip()
        param["type"] = "string"
    return out
