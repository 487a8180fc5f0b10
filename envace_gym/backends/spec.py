"""The one parser of backend spec strings (``real``, ``replay:PATH``, ``mcp:COMMAND``, ``self``...) and the one
vocabulary of backend kinds: which an env builds itself, which are imagined and how an imagined result
reaches the actor."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .._registry import did_you_mean, unknown_message

__all__ = [
    "BackendSpec",
    "parse_backend_spec",
    "REAL_KINDS",
    "IMAGINED_KINDS",
    "SELF_KINDS",
    "SELF_INLINE",
]

#: The policy writes each imagined result inside its own context (the tool message of its conversation).
SELF_INLINE = "self-inline"
#: Kinds an env builds itself (``replay``, ``cache`` and ``mcp`` take a target after the colon).
REAL_KINDS = ("real", "replay", "cache", "mcp")
#: Kind -> its imagination mode (``SelfRehearsalEnv``'s ``mode``, `envace_gym.imagination.MODES`):
#: ``prompted`` (from a fresh env-role prompt, the paper's setting) or ``inline`` (as the tool message of
#: the actor's own conversation), for the kinds whose results are imagined: the env is built on ``real``
#: and wrapped in ``SelfRehearsalEnv`` (`envace_gym.make_env` does this).
_MODE_OF_KIND = {"self": "prompted", SELF_INLINE: "inline", "simulator": "prompted"}
IMAGINED_KINDS = tuple(_MODE_OF_KIND)
#: Imagined kinds where the policy imagines its own results (EnvACE); ``simulator`` is a separate model.
SELF_KINDS = ("self", SELF_INLINE)
_WITH_TARGET = ("replay", "cache", "mcp")
_TARGET_OF = {"replay": "PATH", "cache": "PATH", "mcp": "COMMAND"}

_USAGE = "use real, replay:PATH, cache:PATH, mcp:COMMAND, mcp:http://127.0.0.1:PORT/mcp, self, self-inline or simulator"


@dataclass(frozen=True)
class BackendSpec:
    """A parsed backend spec: ``kind`` and, for ``replay``/``cache``/``mcp``, its ``target``."""

    kind: str
    target: str = ""

    @property
    def imagined(self) -> bool:
        """Tool results are imagined (by the policy or a simulator), not produced by a backend."""
        return self.kind in IMAGINED_KINDS

    @property
    def self_imagined(self) -> bool:
        """The policy imagines its own tool results (``self``, ``self-inline``)."""
        return self.kind in SELF_KINDS

    @property
    def imagination_mode(self) -> str | None:
        """``prompted`` or ``inline`` (``SelfRehearsalEnv``'s ``mode``) for an imagined kind, else None."""
        return _MODE_OF_KIND.get(self.kind)

    @property
    def env_backend(self) -> str:
        """The backend string the env itself is built with: ``real`` under imagination (the wrapper replaces
        it episode by episode and keeps it for grounding), else this spec."""
        return "real" if self.imagined else str(self)

    @classmethod
    def self_imagined_as(cls, mode: str) -> BackendSpec:
        """The self-imagined spec whose results are written in ``mode`` (``prompted``: ``self``; ``inline``:
        ``self-inline``)."""
        kinds = {m: k for k, m in _MODE_OF_KIND.items() if k in SELF_KINDS}
        if mode not in kinds:
            raise ValueError(f"imagination mode must be one of {tuple(kinds)}, got {mode!r}")
        return cls(kinds[mode])

    def __str__(self) -> str:
        return f"{self.kind}:{self.target}" if self.target else self.kind


def parse_backend_spec(value: str | BackendSpec) -> BackendSpec:
    """Parse a spec string (a `BackendSpec` is returned as is); a bad one raises ``ValueError`` with a
    one-line message."""
    if isinstance(value, BackendSpec):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a backend spec is a string, got {type(value).__name__}")
    return _parse_spec_text(value)


@lru_cache(maxsize=256)  # an env reads its spec at every reset; a spec is frozen, so one can be shared
def _parse_spec_text(value: str) -> BackendSpec:
    if value in REAL_KINDS[:1] + IMAGINED_KINDS:
        return BackendSpec(value)
    kind, sep, target = value.partition(":")
    if kind in _WITH_TARGET and sep and target.strip():
        return BackendSpec(kind, target.strip())
    if kind in _WITH_TARGET:
        raise ValueError(f"backend {value!r} needs a target after the colon ({kind}:...); {_USAGE}")
    close = did_you_mean(kind, REAL_KINDS + IMAGINED_KINDS)  # 'replya:x' -> 'replay:x', 'rael' -> 'real'
    suggestions = [f"{k}:{target.strip() or _TARGET_OF[k]}" if k in _WITH_TARGET else k for k in close]
    raise ValueError(unknown_message("backend", value, suggestions, _USAGE))
