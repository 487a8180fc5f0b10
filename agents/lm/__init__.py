"""The language-model side: :class:`LMPolicy` (actor and env role), its engines, chat rendering, model loading."""

from .engine import Generation, HFEngine, SamplingConfig, VLLMEngine
from .models import ModelLoadError, load_model_and_tokenizer, tiny_model
from .policy import LMPolicy, tiny_policy

__all__ = [
    "Generation",
    "HFEngine",
    "LMPolicy",
    "ModelLoadError",
    "SamplingConfig",
    "VLLMEngine",
    "load_model_and_tokenizer",
    "tiny_model",
    "tiny_policy",
]
