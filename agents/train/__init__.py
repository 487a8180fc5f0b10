"""Training: the supervised warm start and the EnvACE trainer (role-wise GRPO), with its checkpoints.

Modules load on first use (``from envace_gym.agents.train import EnvACETrainer`` imports torch then), so
that e.g. `checklist` or `config` alone stay light.
"""

from __future__ import annotations

from envace_gym.agents._lazy import lazy_getattr

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

__getattr__ = lazy_getattr(__name__, _LAZY)
