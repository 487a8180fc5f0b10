"""The task-suite registry: names such as ``builtin`` or ``builtin/retail`` resolve to a TaskSuite.

A suite may also be given as a path to a ``.jsonl`` task file. An installed package can add suites through
the entry-point group ``envace_gym.suites`` (``name = "module:loader"``, a zero-argument callable returning
a `TaskSuite`), read on the first lookup or listing. A suite may register, beside its loader, a
cheap ``info`` function (`SuiteInfo`: its domains and task counts by split, e.g. counted from its data
files): `suite_info` calls it instead of loading the suite, which is what keeps ``envace list`` fast
(loading every BFCL and tau2 suite takes seconds).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from ._registry import Registry, did_you_mean, unknown_message
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
    "unknown_suite",
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
_SUITE_HINT = "`envace list` shows all; or give a path to a .jsonl task file"
_SUITES: Registry[TaskSuite] = Registry("suite", group=SUITE_ENTRY_POINTS, hint=_SUITE_HINT)
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
    raise unknown_suite(name)


def unknown_suite(name: str, folder: Path | None = None) -> KeyError:
    """The error of a suite name nothing registers, one line: the close names (``bank`` ->
    ``builtin/bank``) and, where the name looks like the user's own, the ``--import MODULE`` that would
    register it (`_import_hint`; ``folder``: where to look for the module, default the current one)."""
    names = suite_names()
    close = did_you_mean(name, names)
    hint = "" if close else _import_hint(name, names, Path.cwd() if folder is None else folder)
    return KeyError(unknown_message("suite", name, close, f"{hint}; {_SUITE_HINT}" if hint else _SUITE_HINT))


def _import_hint(name: str, names: list[str], folder: Path) -> str:
    """How an unregistered ``name`` may become registered: a ``.py`` file of ``folder`` that spells the name
    in quotes, else a module of ``folder`` named as a part of it (``weather/today`` -> ``weather.py``), else,
    for a name under a prefix nothing registers (``my/...``), the flag in general; "" for none of these."""
    quoted = (f'"{name}"', f"'{name}'")
    files = sorted(folder.glob("*.py"))[:500]
    spelled = [f for f in files if f.stat().st_size < 1_000_000 and any(q in _read(f) for q in quoted)]
    if spelled:
        return f"{spelled[0].name} in the current directory names it: add --import {spelled[0].stem}"
    for part in name.split("/"):
        found = [p for p in (f"{part}.py", f"{part}/__init__.py") if (folder / p).is_file()]
        if part.isidentifier() and found:
            if part in sys.modules:
                return f"module {part} is imported and registers no such suite"
            return f"if {found[0]} in the current directory registers it, add --import {part}"
    prefix, slash, _ = name.partition("/")
    if slash and not any(n.startswith(f"{prefix}/") for n in names):
        return "a suite your own code registers needs its module imported first: add --import MODULE"
    return ""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
