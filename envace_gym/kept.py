"""`KeptByIdentity`: values kept per object, by the object's identity, for objects that stay the same while
they are in use (a task's tool list, a committed state, a schema's validator)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, TypeVar

__all__ = ["KeptByIdentity"]

V = TypeVar("V")


class KeptByIdentity(Generic[V]):
    """A bounded store of values keyed by an object's identity (and an optional extra key). The object is
    held beside its value, so its id is not reused while the entry lives; when ``limit`` entries are kept,
    the store is emptied (the values are cheap to make again, just not at every step)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: dict[tuple[int, Hashable], tuple[Any, V]] = {}

    def get(self, obj: Any, extra: Hashable = None) -> V | None:
        kept = self._items.get((id(obj), extra))
        return kept[1] if kept is not None and kept[0] is obj else None

    def put(self, obj: Any, value: V, extra: Hashable = None) -> V:
        if len(self._items) >= self.limit:
            self._items.clear()
        self._items[(id(obj), extra)] = (obj, value)
        return value
