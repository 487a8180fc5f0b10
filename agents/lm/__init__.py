"""The language-model side: `LMPolicy` (actor and env role), its engines, chat rendering, model loading.

torch and transformers load on first use of a name below, so the episode loop (which needs only
`chat`) runs scripted policies without them.
"""

from __future__ import annotations

from envace_gym.agents._lazy import lazy_getattr

_LAZY = {
    "Generation": ".engine",
    "HFEngine": ".engine",
    "SamplingConfig": ".engine",
    "VLLMEngine": ".engine",
    "ModelLoadError": ".models",
    "load_model_and_tokenizer": ".models",
    "tiny_model": ".models",
    "LMPolicy": ".policy",
    "Engine": ".protocols",
    "LMPolicyLike": ".protocols",
    "WeightSyncingEngine": ".protocols",
    "is_lm_policy": ".protocols",
    "tiny_policy": ".policy",
}

__all__ = sorted(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
