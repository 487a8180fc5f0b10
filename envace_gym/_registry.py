"""Lazy name -> object registries, resolved from "module:attr" strings the way Gymnasium entry points are.

Only code registers names; task files and CLI flags refer to registered names, so loading a task file can
never import an arbitrary module. Installed packages register names too, through an entry-point group
(``envace_gym.backends``, ``envace_gym.suites``): a registry reads its group once, on its first lookup or
listing (not when ``envace_gym`` is imported), and imports an entry point's module only when that name is
used. A name registered in code wins over an entry point of the same name.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def did_you_mean(name: str, choices: Iterable[str]) -> list[str]:
    """Up to three of ``choices`` that ``name`` may have meant, best first: names under ``name/`` (``tau2`` ->
    ``tau2/airline``...), else names ending in ``/name`` (``bank`` -> ``builtin/bank``), else the closest
    spellings, case aside (`difflib.get_close_matches`, and only those about as close as the best)."""
    choices = list(choices)
    folded = {c.casefold(): c for c in choices}  # case is a typo too: envace-bfcl-v0
    key = name.casefold()
    family = [c for f, c in folded.items() if f.startswith(f"{key}/")]
    if family:
        return family[:3]
    member = [c for f, c in folded.items() if "/" not in key and f.endswith(f"/{key}")]
    if member:
        return member[:3]
    close = difflib.get_close_matches(key, folded, n=3, cutoff=0.6)
    best = difflib.SequenceMatcher(None, close[0], key).ratio() if close else 1.0
    return [folded[c] for c in close if difflib.SequenceMatcher(None, c, key).ratio() >= best - 0.1]


def unknown_message(kind: str, name: str, suggestions: Sequence[str], hint: str = "") -> str:
    """The one wording of an unknown name, one line: ``unknown suite 'bulitin'; did you mean 'builtin'?
    (`envace list` shows all)``. ``hint`` says where the names are (or lists them)."""
    says = f"unknown {kind} {name!r}"
    if suggestions:
        quoted = [repr(s) for s in suggestions]
        either = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        says += f"; did you mean {either}?"
    return f"{says} ({hint})" if hint else says


class Registry(Generic[T]):
    """Names -> factories of one ``kind`` (a callable, a lazy ``"module:attr"`` string, or an installed
    package's entry point from ``group``). ``hint`` ends the message of an unknown name (where to see the
    names, or what else is accepted); default: the registered names."""

    def __init__(self, kind: str, group: str | None = None, hint: str | None = None) -> None:
        self.kind = kind
        self.group = group
        self.hint = hint
        self._entries: dict[str, Callable[..., T] | str | EntryPoint] = {}
        self._group_read = group is None
        self._from_group: set[str] = set()  # names whose entry is an entry point (loaded or not)

    def register(self, name: str, entry: Callable[..., T] | str, *, overwrite: bool = False) -> None:
        if name in self._entries and not overwrite and name not in self._from_group:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        self._from_group.discard(name)

    def registered(self, name: str) -> bool:
        """Whether code registered ``name`` (the entry-point group is not read)."""
        return name in self._entries and name not in self._from_group

    def _read_group(self) -> None:
        """Add the group's entry points (once; names registered in code keep their entry)."""
        if self._group_read:
            return
        self._group_read = True
        for ep in entry_points(group=self.group):
            if ep.name not in self._entries:
                self._entries[ep.name] = ep
                self._from_group.add(ep.name)

    def discard(self, name: str) -> None:
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        self._read_group()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._read_group()
        return name in self._entries

    def unknown(self, name: str) -> KeyError:
        """The error for a name that is not registered: close names suggested, then the hint."""
        hint = self.hint if self.hint is not None else f"registered: {', '.join(self.names()) or 'none'}"
        return KeyError(unknown_message(self.kind, name, did_you_mean(name, self.names()), hint))

    def resolve(self, name: str) -> Callable[..., T]:
        self._read_group()
        try:
            entry = self._entries[name]
        except KeyError:
            raise self.unknown(name) from None
        if isinstance(entry, EntryPoint):
            entry = self._load_entry_point(name, entry)
            self._entries[name] = entry
        elif isinstance(entry, str):
            entry = self._import(entry)
            self._entries[name] = entry
        return entry

    def _load_entry_point(self, name: str, ep: EntryPoint) -> Callable[..., T]:
        try:
            return ep.load()
        except Exception as exc:  # the package's own bug: one line that names the package and the entry point
            dist = f" of package {ep.dist.name}" if ep.dist else ""
            raise ValueError(
                f"{self.kind} {name!r} (entry point {ep.value!r}{dist}, group {self.group}) cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    @staticmethod
    def _import(path: str) -> Any:
        """The object a ``"module:attr"`` string names."""
        module, _, attr = path.partition(":")
        return getattr(importlib.import_module(module), attr)

    def make(self, name: str, *args: Any, **kwargs: Any) -> T:
        return self.resolve(name)(*args, **kwargs)
