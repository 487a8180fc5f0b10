"""The task-suite registry: names such as ``builtin`` or ``builtin/retail`` resolve to a TaskSuite.

A suite may also be given as a path to a ``.jsonl`` task file. An installed package can add suites through
the entry-point group ``envace_gym.suites`` (``name = "module:loader"``, a zero-argument callable returning
a `TaskSuite`), read on the first lookup or listing. A suite may register, beside its loader, a
cheap ``info`` function (`SuiteInfo`: its domains and task counts by split, e.g. counted from its data
files): `suite_info` calls it instead of loading the suite, which is what keeps ``envace list`` fast
(loading every BFCL and tau2 suite takes seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from ._registry import Registry
from .tasks import TaskSuite

__all__ = [
    "SUITE_ENTRY_POINTS",
    "SuiteInfo",
    "register_suite",
    "register_suite_family",
    "load_suite",
    "suite_info",
    "suite_names",
    "suite_registered",
]


@dataclass(frozen=True)
class SuiteInfo:
    """What a suite holds, known without loading it: its task domains (sorted) and task counts by split."""

    domains: tuple[str, ...]
    splits: dict[str, int]

    @property
    def tasks(self) -> int:
        return sum(self.splits.values())

    @classmethod
    def of(cls, suite: TaskSuite) -> SuiteInfo:
        """The info of a loaded suite (what a registered ``info`` function must agree with)."""
        return cls(tuple(suite.domains), {split: len(suite.filter(split=split)) for split in suite.splits})


#: Entry-point group of installed packages' suites: ``name = "module:loader"`` (a zero-argument loader).
SUITE_ENTRY_POINTS = "envace_gym.suites"
_SUITES: Registry[TaskSuite] = Registry(
    "suite", group=SUITE_ENTRY_POINTS, hint="`envace list` shows all; or give a path to a .jsonl task file"
)
_INFOS: Registry[SuiteInfo] = Registry("suite info")
# prefix -> (its names, a "module:attr" string or a callable; the loader of one name; the info function of
# one name or None). Expanded on first use, so registering a benchmark's family imports nothing of it.
_FAMILIES: dict[
    str,
    tuple[str | Callable[[], list[str]], str | Callable[[str], TaskSuite], str | Callable[[str], SuiteInfo] | None],
] = {}


def register_suite(
    name: str,
    loader: Callable[[], TaskSuite] | str,
    *,
    info: Callable[[], SuiteInfo] | str | None = None,
    overwrite: bool = False,
) -> None:
    """Register a zero-argument suite loader (a callable or a lazy ``"module:attr"`` string) and, optionally,
    a zero-argument ``info`` function that tells the suite's `SuiteInfo` without loading it (it must
    agree with ``SuiteInfo.of(loader())``)."""
    _SUITES.register(name, loader, overwrite=overwrite)
    if info is not None:
        _INFOS.register(name, info, overwrite=True)
    else:  # a suite registered again without info: the old one's info no longer applies
        _INFOS.discard(name)
    _load_registered.cache_clear()


def register_suite_family(
    prefix: str,
    names: str | Callable[[], list[str]],
    loader: str | Callable[[str], TaskSuite],
    info: str | Callable[[str], SuiteInfo] | None = None,
) -> None:
    """Register the suites ``prefix/<name>`` for each of ``names`` (a lazy ``"module:attr"`` string naming a
    list, or a callable), each loaded as ``loader(name)`` and, if given, described cheaply as
    ``info(name)``; nothing is imported until a suite is listed or loaded."""
    _FAMILIES[prefix] = (names, loader, info)


def _expand_families() -> None:
    while _FAMILIES:
        prefix, (names, loader, info) = _FAMILIES.popitem()
        if isinstance(names, str):
            names = Registry._import(names)
        load = Registry._import(loader) if isinstance(loader, str) else loader
        describe = Registry._import(info) if isinstance(info, str) else info
        for name in names() if callable(names) else names:
            if f"{prefix}/{name}" not in _SUITES:
                register_suite(
                    f"{prefix}/{name}", partial(load, name), info=partial(describe, name) if describe else None
                )


def suite_names() -> list[str]:
    """Every suite name: registered, of the registered families and of installed packages' entry points."""
    _expand_families()
    return _SUITES.names()


def suite_registered(name: str) -> bool:
    """Whether code registered ``name`` (neither families nor entry points are read: no import cost)."""
    return _SUITES.registered(name)


def suite_info(name: str) -> SuiteInfo:
    """A registered suite's domains and task counts by split: from its ``info`` function where it registered
    one (cheap), else by loading it."""
    _expand_families()
    if name in _INFOS:
        return _INFOS.make(name)
    return SuiteInfo.of(load_suite(name))


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
