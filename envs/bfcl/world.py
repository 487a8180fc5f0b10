"""One episode's BFCL multi-turn world: fresh instances of the involved API classes, calls dispatched by name.

BFCL's own runner builds each call as a string and ``eval``s it, caching instances in module globals by
model and entry id. Here every `BFCLWorld` owns fresh instances, and a call is a method looked up
by name among the instances' public methods (a later class in ``involved_classes`` wins a name clash, as
upstream) and called with keyword arguments. Nothing is evaluated.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import upstream

__all__ = ["BFCLWorld", "Outcome", "official_result", "to_json", "public_state"]


@dataclass(frozen=True)
class Outcome:
    """What one call did: ``value`` (the method's return) or ``error`` (the exception it raised)."""

    value: Any = None
    error: BaseException | None = None


class BFCLWorld:
    """Fresh instances of ``involved_classes`` loaded from ``initial_config`` (BFCL's ``_load_scenario``)."""

    def __init__(
        self, involved_classes: Sequence[str], initial_config: Mapping[str, Any], long_context: bool = False
    ) -> None:
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}
        for name in involved_classes:
            instance = upstream.api_class(name)()
            if not upstream.is_stateless(name):
                # A deep copy: scenarios are shared, read-only data and the classes keep references to them.
                instance._load_scenario(copy.deepcopy(dict(initial_config.get(name, {}))), long_context=long_context)
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method_name.startswith("_"):
                    self.methods[method_name] = method

    def call(self, name: str, arguments: Mapping[str, Any]) -> Outcome:
        """Run one public method with keyword arguments; what it raises is returned, never propagated."""
        method = self.methods.get(name)
        if method is None:
            return Outcome(error=NameError(f"name {name!r} is not defined"))
        try:
            return Outcome(method(**copy.deepcopy(dict(arguments))))
        except Exception as exc:  # noqa: BLE001 - a failing API call is the world's answer
            return Outcome(error=exc)

    def bind(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for a call written with positional ones (BFCL's ground truth has some)."""
        method = self.methods.get(name)
        if method is None:
            raise KeyError(f"no public method {name!r} in {sorted(self.instances)}")
        return dict(inspect.signature(method).bind(*args, **kwargs).arguments)


def official_result(outcome: Outcome) -> str:
    """The string BFCL's checker compares for a call's result (its ``execute_multi_turn_func_call`` rules):
    strings as they are, dicts as ``json.dumps`` (``str`` when that fails), anything else as ``str``, and
    ``"Error during execution: <message>"`` for an exception."""
    if outcome.error is not None:
        return f"Error during execution: {outcome.error}"
    value = outcome.value
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def to_json(value: Any) -> Any:
    """A JSON value for a method's return: non-JSON leaves (sets, objects) become lists or strings."""
    return json.loads(json.dumps(value, default=_fallback))


def _fallback(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def public_state(world: BFCLWorld) -> dict[str, Any]:
    """A JSON snapshot of every instance's public attributes (what BFCL's state check compares)."""
    return {name: _snapshot(inst, set()) for name, inst in world.instances.items() if not upstream.is_stateless(name)}


def _snapshot(value: Any, active: set[int]) -> Any:
    # Objects (GorillaFileSystem's File/Directory) become dicts of their public attributes; a reference back to
    # an object being serialised (a directory's parent) is dropped so the snapshot is finite and deterministic.
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if id(value) in active:
        return "<cycle>"
    active.add(id(value))
    try:
        if isinstance(value, dict):
            return {str(k): _snapshot(v, active) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_snapshot(v, active) for v in value]
        if isinstance(value, (set, frozenset)):
            return sorted((_snapshot(v, active) for v in value), key=repr)
        if hasattr(value, "__dict__"):
            attrs = {k: v for k, v in vars(value).items() if not k.startswith("_")}
            return {"__class__": type(value).__name__, **{k: _snapshot(v, active) for k, v in attrs.items()}}
        return str(value)
    finally:
        active.discard(id(value))
