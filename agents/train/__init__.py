"""Training: the supervised warm start (and the RL trainer that builds on it)."""

from .sft import SFTConfig, SFTExample, build_sft_examples, train_sft

__all__ = ["SFTConfig", "SFTExample", "build_sft_examples", "train_sft"]
