"""The language-model side: :class:`LMPolicy` (actor and env role), its engines, chat rendering, model loading.

torch and transformers load on first use of a name below, so the episode loop (which needs only
:mod:`.chat`) runs scripted policies without them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "Generation": ".engine",
    "HFEngine": ".engine",
    "SamplingConfig": ".engine",
    "VLLMEngine": ".engine",
    "ModelLoadError": ".models",
    "load_model_and_tokenizer": ".models",
    "tiny_model": ".models",
    "LMPolicy": ".policy",
    "tiny_policy": ".policy",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
