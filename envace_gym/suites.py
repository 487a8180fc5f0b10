"""The task-suite registry: names such as ``builtin`` or ``builtin/retail`` resolve to a TaskSuite.

A suite may also be given as a path to a ``.jsonl`` task file.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from ._registry import Registry
from .tasks import TaskSuite

__all__ = ["register_suite", "load_suite", "suite_names"]

_SUITES: Registry[TaskSuite] = Registry("suite")


def register_suite(name: str, loader: Callable[[], TaskSuite] | str, *, overwrite: bool = False) -> None:
    """Register a zero-argument suite loader (a callable or a lazy ``"module:attr"`` string)."""
    _SUITES.register(name, loader, overwrite=overwrite)
    _load_registered.cache_clear()


def suite_names() -> list[str]:
    return _SUITES.names()


@cache
def _load_registered(name: str) -> TaskSuite:
    return _SUITES.make(name)


def load_suite(name: str) -> TaskSuite:
    """A registered suite by name (loaded once per process) or a JSONL task file by path."""
    if name in _SUITES:
        return _load_registered(name)
    if name.endswith(".jsonl") or Path(name).is_file():
        return TaskSuite.load_jsonl(name)
    known = ", ".join(suite_names()) or "none"
    raise KeyError(f"unknown suite {name!r}; registered: {known} (or give a path to a .jsonl task file)")
