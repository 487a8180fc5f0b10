"""Training: the supervised warm start and the EnvACE trainer (role-wise GRPO), with its checkpoints.

Modules load on first use (``from envace_gym.agents.train import EnvACETrainer`` imports torch then), so
that e.g. :mod:`.checklist` or :mod:`.config` alone stay light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "SFTConfig": ".sft",
    "SFTExample": ".sft",
    "build_sft_examples": ".sft",
    "train_sft": ".sft",
    "EnvACEConfig": ".config",
    "load_config": ".config",
    "EnvACETrainer": ".envace",
    "train_envace": ".envace",
    "ChecklistJudge": ".checklist",
    "save_checkpoint": ".checkpoint",
    "load_checkpoint": ".checkpoint",
    "latest_checkpoint": ".checkpoint",
    "plot_learning_curve": ".plots",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
