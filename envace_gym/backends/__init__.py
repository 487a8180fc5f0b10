"""Tool backends: the `Backend` protocol, real Python backends, and the backend registry.

Tasks name their backend by a registered name (``"builtin/retail"``); `make_backend` builds it. An
installed package can add names through the entry-point group ``envace_gym.backends`` (``name =
"module:factory"``), read on the first lookup or listing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._registry import Registry
from .base import (
    Backend,
    BackendCopyError,
    PendingCall,
    RequestingBackend,
    ToolResult,
    replayed_state_hash,
    state_digest,
    validate_call,
)
from .ledger import CALL_KINDS, LEDGER, CallLedger, charged_as, is_self_accounting
from .python import PythonBackend, Toolkit, tool
from .replay import ReplayBackend, ReplayFileError, ToolLog, history_key, log_key
from .spec import BackendSpec, parse_backend_spec

__all__ = [
    "Backend",
    "BackendCopyError",
    "PendingCall",
    "RequestingBackend",
    "BackendSpec",
    "parse_backend_spec",
    "replayed_state_hash",
    "ToolResult",
    "PythonBackend",
    "ReplayBackend",
    "ReplayFileError",
    "ToolLog",
    "history_key",
    "log_key",
    "Toolkit",
    "tool",
    "validate_call",
    "state_digest",
    "register_backend",
    "make_backend",
    "backend_names",
    "backend_registered",
    "BACKEND_ENTRY_POINTS",
    "CALL_KINDS",
    "CallLedger",
    "LEDGER",
    "charged_as",
    "is_self_accounting",
]

#: Entry-point group of installed packages' backends: ``name = "module:factory"`` (called like a registered factory).
BACKEND_ENTRY_POINTS = "envace_gym.backends"
_BACKENDS: Registry[Backend] = Registry("backend", group=BACKEND_ENTRY_POINTS)


def register_backend(name: str, factory: Callable[..., Backend] | str, *, overwrite: bool = False) -> None:
    """Register a backend factory (a callable, or a lazy ``"module:attr"`` string) under ``name``."""
    _BACKENDS.register(name, factory, overwrite=overwrite)


def make_backend(name: str, **kwargs: Any) -> Backend:
    """Build a fresh backend instance by registered name."""
    return _BACKENDS.make(name, **kwargs)


def backend_names() -> list[str]:
    """Every registered backend name, those of installed packages' entry points included."""
    return _BACKENDS.names()


def backend_registered(name: str) -> bool:
    """Whether code registered ``name`` (installed packages' entry points are not read: no import cost)."""
    return _BACKENDS.registered(name)
