"""Lazy name -> object registries, resolved from "module:attr" strings the way Gymnasium entry points are.

Only code registers names; task files and CLI flags refer to registered names, so loading a task file can
never import an arbitrary module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Callable[..., T] | str] = {}

    def register(self, name: str, entry: Callable[..., T] | str, *, overwrite: bool = False) -> None:
        if name in self._entries and not overwrite:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry

    def discard(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def resolve(self, name: str) -> Callable[..., T]:
        try:
            entry = self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"unknown {self.kind} {name!r}; registered: {known}") from None
        if isinstance(entry, str):
            entry = self._import(entry)
            self._entries[name] = entry
        return entry

    @staticmethod
    def _import(path: str) -> Any:
        """The object a ``"module:attr"`` string names."""
        module, _, attr = path.partition(":")
        return getattr(importlib.import_module(module), attr)

    def make(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.resolve(name)(*args, **kwargs)
