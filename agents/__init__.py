"""Agents: scripted policies, the language-model policy and its engines, rollouts, warm start, demo.

Heavy modules (torch, transformers) load on first use, so ``import envace_gym.agents`` stays cheap.
"""

from __future__ import annotations

from envace_gym.agents._lazy import lazy_getattr

_LAZY = {
    "LMPolicy": ".lm.policy",
    "ImagineRequest": ".lm.policy",
    "Generation": ".lm.engine",
    "SamplingConfig": ".lm.engine",
    "HFEngine": ".lm.engine",
    "VLLMEngine": ".lm.engine",
    "Trajectory": ".rollout",
    "EnvRoleSample": ".rollout",
    "collect": ".rollout",
    "save_trajectories": ".rollout",
    "load_trajectories": ".rollout",
    "SFTConfig": ".train.sft",
    "train_sft": ".train.sft",
    "EnvACEConfig": ".train.config",
    "EnvACETrainer": ".train.envace",
    "tiny_policy": ".lm.policy",
    "OraclePolicy": ".scripted",
    "RandomPolicy": ".scripted",
    "NoopPolicy": ".scripted",
    "evaluate": ".eval.evaluate",
    "PrivateRehearsal": ".rehearsal",
    "VerifiedCalls": ".rehearsal",
    "PolicyNote": ".rollout",
    "PolicyChoice": ".rollout",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
