"""BFCL ground truth read without evaluating anything.

* Multi-turn ground truth is a list of Python call strings per turn (``"mv(source='a', destination='b')"``,
  sometimes with positional arguments). `parse_call_string` reads one with `ast`, literals only.
* Single-turn ground truth lists the allowed values of every argument; `reference_arguments` picks the
  first allowed one (leaving out arguments whose first choice is ``""``, BFCL's "may be omitted"), reading
  dict and list-of-dict parameters the way BFCL's AST checker does (one list of allowed values per key).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["GroundTruthError", "parse_call_string", "reference_arguments", "OPTIONAL"]

OPTIONAL = ""  # BFCL's marker among allowed values: the argument may be omitted


class GroundTruthError(ValueError):
    """A ground-truth entry this reader cannot turn into calls."""


def parse_call_string(text: str) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """``"f(1, b='x')"`` -> ``("f", (1,), {"b": "x"})``; arguments must be Python literals."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise GroundTruthError(f"not a call: {text!r} ({exc.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise GroundTruthError(f"not a plain function call: {text!r}")
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise GroundTruthError(f"non-literal argument in {text!r}") from None
    if any(kw.arg is None for kw in node.keywords):
        raise GroundTruthError(f"**kwargs in {text!r}")
    return node.func.id, args, kwargs


def reference_arguments(
    allowed: Mapping[str, list[Any]], properties: Mapping[str, Any], required: Sequence[str] = ()
) -> dict[str, Any]:
    """One concrete argument dict from BFCL's ``{param: [allowed values]}``: the first choice of each.

    A required parameter whose first choice is ``""`` takes its first real choice, or ``""`` itself when it
    has no other (BFCL's checker demands required parameters whatever the ground truth says), and a
    parameter the function does not declare is left out (the checker refuses undeclared parameters).
    """
    out: dict[str, Any] = {}
    for name, choices in allowed.items():
        choices = choices if isinstance(choices, list) else [choices]
        if properties and name not in properties:
            continue
        real = [c for c in choices if not _is_optional_marker(c)]
        if name in required and not real and choices:
            out[name] = OPTIONAL  # required, yet only "" allowed: BFCL's string check accepts "" itself
            continue
        if not real or (name not in required and _is_optional_marker(choices[0])):
            continue
        out[name] = _decode(real[0], properties.get(name, {}))
    return out


def _is_optional_marker(choice: Any) -> bool:
    return isinstance(choice, str) and choice == OPTIONAL


# BFCL type names (Python, Java and JavaScript dialects) that its checker reads as a dict or as a list.
_DICT_TYPES = {"dict", "HashMap", "Hashtable"}
_LIST_TYPES = {"array", "tuple", "Array", "ArrayList", "Queue", "Stack"}


def _decode(value: Any, schema: Mapping[str, Any]) -> Any:
    # BFCL's checker reads a dict parameter's possible answer as {key: [allowed values]}, and a list of
    # dicts as a list of such dicts; other values are compared as they are.
    kind = schema.get("type")
    if kind in _DICT_TYPES and isinstance(value, dict):
        return _decode_dict(value)
    items = (schema.get("items") or {}).get("type")
    if kind in _LIST_TYPES and isinstance(value, list) and items in _DICT_TYPES:
        return [_decode_dict(v) if isinstance(v, dict) else v for v in value]
    return value


def _decode_dict(allowed: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for key, choices in allowed.items():
        if isinstance(choices, list):
            if choices and choices[0] != OPTIONAL:
                out[key] = choices[0]
        else:
            out[key] = choices
    return out
