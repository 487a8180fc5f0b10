"""Test helpers: a tiny randomly initialised model with the real SmolLM2 tokenizer."""

from __future__ import annotations

from functools import lru_cache

import torch

from .engine import SamplingConfig
from .models import ensure_default_model
from .policy import LMPolicy

__all__ = ["tiny_policy", "default_tokenizer"]


@lru_cache(maxsize=1)
def default_tokenizer():
    """The embedded model's tokenizer (from the local cache; converted once if missing)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_default_model()), local_files_only=True)


def tiny_policy(seed: int = 0, sampling: SamplingConfig | None = None, layers: int = 2, hidden: int = 64) -> LMPolicy:
    """A 2-layer Llama with random weights (seeded) and the real tokenizer: fast tests and smoke runs.

    Its outputs are gibberish, but every code path (chat template, batching, caches, logprobs, training)
    is the one the real model takes.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = default_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return LMPolicy(
        model.eval(), tok, sampling or SamplingConfig(temperature=1.0, max_new_tokens=24, seed=seed), name="tiny"
    )
