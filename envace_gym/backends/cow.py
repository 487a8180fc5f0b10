"""Copy-on-write views of a backend's JSON state, so that undoing a call costs what the call touched.

Why: a backend must be able to undo any call that raises, returns something that is not JSON or times out.
Deep-copying the whole state before every call makes every call pay for the whole state, even a lookup
that reads one field. Here the state a call starts from is never written at all, so there is nothing to
undo, and what a call pays is a shallow copy of each container it reaches.

How:

* Between calls the *committed* state is shared and never mutated in place: after a reset it is the task's
  ``initial_state`` itself, and `PythonBackend.copy` shares it with the copy.
* A call runs on an *overlay*: a fresh `CowDict` root owned by the call's `Txn`. Whenever the
  tool reaches a container through the overlay (indexing, ``get``, ``setdefault``, ``pop``, iteration,
  ``items``/``values``, slicing, ``copy``, ``+``, ``{**d}``, ``dict(d)``, ...), a container still shared with
  the committed state is first replaced, in the overlay only, by a shallow copy that the call owns (a
  *fork*, itself a `CowDict` or `CowList` of the same call); its own children stay shared
  until they are reached in turn. The tool mutates what it reached with ordinary dict and list operations.
* Success: the overlay is deactivated and becomes the committed state; the subtrees the call never reached
  are shared with the previous state. Failure or timeout: the overlay is dropped. A timed-out tool that
  keeps running in its thread only ever writes into its own overlay, which nobody reads any more.
* Containers the tool creates and stores during the call are its own and are not copied again within the
  call, so aliasing inside one call behaves as with plain dicts.

From outside, the state is a dict (a `CowDict` is a ``dict`` subclass) that serialises, compares and
hashes like the plain JSON it holds; `plain_copy` turns it into plain dicts and lists. Reading a
container through the raw ``dict``/``list`` C API (``dict.__getitem__(d, k)``, `heapq` on a state list,
``plain_list[:] = state_list``) skips the fork; a tool must not mutate what it got that way.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

__all__ = ["Txn", "CowDict", "CowList", "overlay", "unchanged", "release", "plain_copy", "detach_json"]

# Values that are never copied: immutable JSON scalars.
_ATOMIC = frozenset({str, int, float, bool, type(None)})


class Txn:
    """One call's ownership token. While ``active``, reaching a container through an overlay forks it."""

    __slots__ = ("active", "fresh", "forks")

    def __init__(self) -> None:
        self.active = True
        # ids of plain containers (and forked non-JSON values) this call created and stored: its own, never
        # copied again. The committed state's objects stay alive during the call, so no id here is theirs.
        self.fresh: set[int] = set()
        self.forks: list[CowDict | CowList] = []  # every fork made for this call (see `unchanged`)


def _own(value: Any, txn: Txn) -> Any:
    """``value`` as something ``txn`` owns: itself when already owned or immutable, else a fork."""
    t = type(value)
    if t is CowDict or t is CowList:
        if value._txn is txn:
            return value
        return t._fork(value, txn)
    if t in _ATOMIC or id(value) in txn.fresh:
        return value
    if t is dict:
        return CowDict._fork(value, txn)
    if t is list:
        return CowList._fork(value, txn)
    other = copy.deepcopy(value)  # not JSON (a tuple, a set): copied whole, then owned
    txn.fresh.add(id(other))
    return other


def _adopt(value: Any, txn: Txn) -> None:
    """Record that the call stored ``value``, a container it made (so later reads do not copy it)."""
    t = type(value)
    if t is dict or t is list:
        txn.fresh.add(id(value))


class CowDict(dict):
    """A dict of a call's overlay (see the module docstring); behaves as a plain dict when inactive."""

    __slots__ = ("_txn", "_source")

    @classmethod
    def _fork(cls, source: dict, txn: Txn) -> CowDict:
        node = cls(dict.copy(source) if type(source) is cls else source)
        node._txn = txn
        node._source = source
        txn.forks.append(node)
        return node

    @classmethod
    def fromkeys(cls, iterable: Iterable[Any], value: Any = None) -> dict:  # type: ignore[override]
        return dict.fromkeys(iterable, value)

    def _own_all(self) -> None:
        txn = self._txn
        for key, value in dict.items(self):
            if type(value) not in _ATOMIC:
                owned = _own(value, txn)
                if owned is not value:
                    dict.__setitem__(self, key, owned)  # same keys: safe during iteration

    # ------------------------------------------------------------------ reads that hand out children
    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) in _ATOMIC or not self._txn.active:
            return value
        owned = _own(value, self._txn)
        if owned is not value:
            dict.__setitem__(self, key, owned)
        return owned

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if dict.__contains__(self, key) else default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if dict.__contains__(self, key):
            return self[key]
        self[key] = default
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        if dict.__contains__(self, key):
            value = self[key]
            dict.__delitem__(self, key)
            return value
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        key, value = dict.popitem(self)
        return key, (_own(value, self._txn) if self._txn.active else value)

    def items(self):  # type: ignore[override]
        if self._txn.active:
            self._own_all()
        return dict.items(self)

    def values(self):  # type: ignore[override]
        if self._txn.active:
            self._own_all()
        return dict.values(self)

    def __iter__(self):
        # Defined so that dict(d), {**d}, f(**d) and other.update(d) read values through __getitem__
        # (CPython copies a dict's storage directly only when its type keeps dict's own __iter__).
        return dict.__iter__(self)

    def copy(self) -> dict:
        if self._txn.active:
            self._own_all()
        return dict.copy(self)

    __copy__ = copy

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        new = self.copy()
        new.update(other)
        return new

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        new = dict(other)
        new.update(self)
        return new

    # ------------------------------------------------------------------ writes
    def __setitem__(self, key: Any, value: Any) -> None:
        if self._txn.active:
            _adopt(value, self._txn)
        dict.__setitem__(self, key, value)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:  # type: ignore[override]
        if not self._txn.active:
            dict.update(self, other, **kwargs)
            return
        if hasattr(other, "keys"):
            for key in other.keys():
                self[key] = other[key]
        else:
            for key, value in other:
                self[key] = value
        for key, value in kwargs.items():
            self[key] = value

    def __ior__(self, other: Any) -> CowDict:  # type: ignore[override,misc]
        self.update(other)
        return self

    # ------------------------------------------------------------------ copies leave as plain data
    def __deepcopy__(self, memo: dict[int, Any]) -> dict:
        return plain_copy(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (dict, (plain_copy(self),))


class CowList(list):
    """A list of a call's overlay (see the module docstring); behaves as a plain list when inactive."""

    __slots__ = ("_txn", "_source")

    @classmethod
    def _fork(cls, source: list, txn: Txn) -> CowList:
        node = cls(list.copy(source) if type(source) is cls else source)
        node._txn = txn
        node._source = source
        txn.forks.append(node)
        return node

    def _own_range(self, indices: Iterable[int]) -> None:
        txn = self._txn
        for i in indices:
            value = list.__getitem__(self, i)
            if type(value) not in _ATOMIC:
                owned = _own(value, txn)
                if owned is not value:
                    list.__setitem__(self, i, owned)

    def _own_all(self) -> None:
        self._own_range(range(len(self)))

    # ------------------------------------------------------------------ reads that hand out children
    def __getitem__(self, index: Any) -> Any:
        value = list.__getitem__(self, index)
        if not self._txn.active:
            return value
        if type(index) is slice:
            self._own_range(range(*index.indices(len(self))))
            return list.__getitem__(self, index)
        if type(value) in _ATOMIC:
            return value
        owned = _own(value, self._txn)
        if owned is not value:
            list.__setitem__(self, index, owned)
        return owned

    def __iter__(self):
        if self._txn.active:
            self._own_all()
        return list.__iter__(self)

    def __reversed__(self):
        if self._txn.active:
            self._own_all()
        return list.__reversed__(self)

    def pop(self, index: int = -1) -> Any:  # type: ignore[override]
        value = list.pop(self, index)
        return _own(value, self._txn) if self._txn.active else value

    def copy(self) -> list:
        if self._txn.active:
            self._own_all()
        return list.copy(self)

    __copy__ = copy

    def __add__(self, other: Any) -> Any:  # type: ignore[override]
        return list.__add__(self.copy(), other)

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return NotImplemented
        return list.__add__(list(other), self.copy())

    def __mul__(self, n: Any) -> Any:  # type: ignore[override]
        return list.__mul__(self.copy(), n)

    __rmul__ = __mul__

    # ------------------------------------------------------------------ writes
    def __setitem__(self, index: Any, value: Any) -> None:
        if self._txn.active:
            if type(index) is slice:
                value = list(value)
                for v in value:
                    _adopt(v, self._txn)
            else:
                _adopt(value, self._txn)
        list.__setitem__(self, index, value)

    def append(self, value: Any) -> None:
        if self._txn.active:
            _adopt(value, self._txn)
        list.append(self, value)

    def insert(self, index: Any, value: Any) -> None:
        if self._txn.active:
            _adopt(value, self._txn)
        list.insert(self, index, value)

    def extend(self, values: Iterable[Any]) -> None:
        if self._txn.active:
            values = list(values)
            for v in values:
                _adopt(v, self._txn)
        list.extend(self, values)

    def __iadd__(self, values: Iterable[Any]) -> CowList:  # type: ignore[override,misc]
        self.extend(values)
        return self

    # ------------------------------------------------------------------ copies leave as plain data
    def __deepcopy__(self, memo: dict[int, Any]) -> list:
        return plain_copy(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (list, (plain_copy(self),))


def overlay(state: dict[str, Any], txn: Txn) -> CowDict:
    """A root for one call over the committed ``state`` (which the call will never write)."""
    return CowDict._fork(state, txn)


def unchanged(txn: Txn) -> bool:
    """Whether the call of ``txn`` left what it reached as it found it: every container it forked holds, in
    the same order, the very objects its source holds (or forks of them, checked in turn). Then its overlay
    is the committed state over again, and the caller keeps the committed state itself, with what is known
    of it (its hash). Identity, not equality: ``1`` and ``1.0`` are equal but write different JSON; a key
    popped and put back, or a value rewritten with an equal one, counts as a change. A mutation through the
    raw C API (``heapq`` on a forked list) is seen too: it changes the fork's slots."""
    for node in txn.forks:
        source = node._source
        if type(node) is CowDict:
            if dict.__len__(node) != len(source):
                return False
            pairs = zip(dict.items(node), dict.items(source), strict=True)
            for (key, value), (source_key, source_value) in pairs:
                if key is not source_key or (value is not source_value and not _fork_of(value, source_value, txn)):
                    return False
        else:
            if list.__len__(node) != len(source):
                return False
            for value, source_value in zip(list.__iter__(node), list.__iter__(source), strict=True):
                if value is not source_value and not _fork_of(value, source_value, txn):
                    return False
    return True


def release(txn: Txn) -> None:
    """Let ``txn``'s forks go of their sources once its call is settled: a committed fork would otherwise
    keep every earlier version of its container alive (and the txn and its forks would form a cycle)."""
    for node in txn.forks:
        node._source = None
    txn.forks.clear()


def _fork_of(value: Any, source: Any, txn: Txn) -> bool:
    t = type(value)
    return (t is CowDict or t is CowList) and value._txn is txn and value._source is source


def plain_copy(value: Any) -> Any:
    """A deep copy made of plain dicts and lists (what `copy.deepcopy` gives, for JSON data, faster).

    Shared sub-objects are copied once per occurrence; values that are not JSON go through deepcopy.
    """
    t = type(value)
    if t is dict or t is CowDict:
        return {k: v if type(v) in _ATOMIC else plain_copy(v) for k, v in dict.items(value)}
    if t is list or t is CowList:
        return [v if type(v) in _ATOMIC else plain_copy(v) for v in list.__iter__(value)]
    if t in _ATOMIC:
        return value
    return copy.deepcopy(value)


class _NotPlainJSON(Exception):
    pass


def _detach(value: Any) -> Any:
    t = type(value)
    if t is dict or t is CowDict:
        out = {}
        for k, v in dict.items(value):
            if type(k) is not str:
                raise _NotPlainJSON
            out[k] = v if type(v) in _ATOMIC else _detach(v)
        return out
    if t is list or t is CowList:
        return [v if type(v) in _ATOMIC else _detach(v) for v in list.__iter__(value)]
    if t in _ATOMIC:
        return value
    raise _NotPlainJSON


def detach_json(value: Any) -> Any:
    """Exactly ``json.loads(json.dumps(value))``: a detached copy, or ``TypeError``/``ValueError``.

    Plain JSON (str keys; dict, list, str, int, float, bool, None) is copied directly; anything else
    (tuples, non-str keys, subclasses, cycles) takes the JSON round trip so that the outcome is the same.
    """
    try:
        return _detach(value)
    except (_NotPlainJSON, RecursionError):
        return json.loads(json.dumps(value))
