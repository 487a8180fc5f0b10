"""The one parser of backend spec strings (``real``, ``replay:PATH``, ``mcp:COMMAND``, ``self``...)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BackendSpec", "parse_backend_spec", "REAL_KINDS", "IMAGINED_KINDS"]

#: Kinds an env builds itself (``replay``, ``cache`` and ``mcp`` take a target after the colon).
REAL_KINDS = ("real", "replay", "cache", "mcp")
#: Kinds whose results are imagined: the env is wrapped in ``SelfRehearsalEnv`` (the CLI does this).
IMAGINED_KINDS = ("self", "self-inline", "simulator")
_WITH_TARGET = ("replay", "cache", "mcp")

_USAGE = "use real, replay:PATH, cache:PATH, mcp:COMMAND, mcp:http://127.0.0.1:PORT/mcp, self, self-inline or simulator"


@dataclass(frozen=True)
class BackendSpec:
    """A parsed backend spec: ``kind`` and, for ``replay``/``cache``/``mcp``, its ``target``."""

    kind: str
    target: str = ""

    @property
    def imagined(self) -> bool:
        return self.kind in IMAGINED_KINDS

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}" if self.target else self.kind


def parse_backend_spec(value: str) -> BackendSpec:
    """Parse a spec string; a bad one raises ``ValueError`` with a one-line message."""
    if not isinstance(value, str):
        raise ValueError(f"a backend spec is a string, got {type(value).__name__}")
    if value in REAL_KINDS[:1] + IMAGINED_KINDS:
        return BackendSpec(value)
    kind, sep, target = value.partition(":")
    if kind in _WITH_TARGET and sep and target.strip():
        return BackendSpec(kind, target.strip())
    if kind in _WITH_TARGET:
        raise ValueError(f"backend {value!r} needs a target after the colon ({kind}:...); {_USAGE}")
    raise ValueError(f"unknown backend {value!r}; {_USAGE}")
