"""Names that load their module on first use (PEP 562), so importing a package stays cheap."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` (a module relative to ``package``) on demand."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(import_module(table[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
