"""The task-suite registry: names such as ``builtin`` or ``builtin/retail`` resolve to a TaskSuite.

A suite may also be given as a path to a ``.jsonl`` task file. An installed package can add suites through
the entry-point group ``envace_gym.suites`` (``name = "module:loader"``, a zero-argument callable returning
a :class:`TaskSuite`), read on the first lookup or listing.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from pathlib import Path

from ._registry import Registry
from .tasks import TaskSuite

__all__ = [
    "SUITE_ENTRY_POINTS",
    "register_suite",
    "register_suite_family",
    "load_suite",
    "suite_names",
    "suite_registered",
]

#: Entry-point group of installed packages' suites: ``name = "module:loader"`` (a zero-argument loader).
SUITE_ENTRY_POINTS = "envace_gym.suites"
_SUITES: Registry[TaskSuite] = Registry(
    "suite", group=SUITE_ENTRY_POINTS, hint="`envace list` shows all; or give a path to a .jsonl task file"
)
# prefix -> (its names, a "module:attr" string or a callable; the loader of one name). Expanded on first use,
# so registering a benchmark's family imports nothing of the benchmark.
_FAMILIES: dict[str, tuple[str | Callable[[], list[str]], str | Callable[[str], TaskSuite]]] = {}


def register_suite(name: str, loader: Callable[[], TaskSuite] | str, *, overwrite: bool = False) -> None:
    """Register a zero-argument suite loader (a callable or a lazy ``"module:attr"`` string)."""
    _SUITES.register(name, loader, overwrite=overwrite)
    _load_registered.cache_clear()


def register_suite_family(
    prefix: str, names: str | Callable[[], list[str]], loader: str | Callable[[str], TaskSuite]
) -> None:
    """Register the suites ``prefix/<name>`` for each of ``names`` (a lazy ``"module:attr"`` string naming a
    list, or a callable), each loaded as ``loader(name)``; nothing is imported until a suite is listed or
    loaded."""
    _FAMILIES[prefix] = (names, loader)


def _expand_families() -> None:
    while _FAMILIES:
        prefix, (names, loader) = _FAMILIES.popitem()
        if isinstance(names, str):
            names = Registry._import(names)
        load = Registry._import(loader) if isinstance(loader, str) else loader
        for name in names() if callable(names) else names:
            if f"{prefix}/{name}" not in _SUITES:
                register_suite(f"{prefix}/{name}", partial(load, name))


def suite_names() -> list[str]:
    """Every suite name: registered, of the registered families and of installed packages' entry points."""
    _expand_families()
    return _SUITES.names()


def suite_registered(name: str) -> bool:
    """Whether code registered ``name`` (neither families nor entry points are read: no import cost)."""
    return _SUITES.registered(name)


@cache
def _load_registered(name: str) -> TaskSuite:
    return _SUITES.make(name)


def load_suite(name: str) -> TaskSuite:
    """A registered suite by name (loaded once per process) or a JSONL task file by path."""
    _expand_families()
    if name in _SUITES:
        return _load_registered(name)
    if name.endswith(".jsonl") or Path(name).is_file():
        return TaskSuite.load_jsonl(name)
    raise _SUITES.unknown(name)
