"""``LMPolicy``: one causal LM playing the actor (tool-calling assistant) and the environment role.

>>> policy = LMPolicy.default()                      # embedded SmolLM2-135M-Instruct, offline
>>> gen = policy.act(info["messages"], info["tools"])  # Generation(text, token_ids, logprobs, ...)
>>> obs, reward, *_ = env.step(gen.text)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from envace_gym.agents.quiet import library_bars_off
from envace_gym.imagination import ImagineRequest

from .chat import ChatFormat
from .conversation import ActorContext
from .device import resolve_device
from .engine import Generation, HFEngine, SamplingConfig
from .models import load_model_and_tokenizer, tiny_model
from .protocols import Engine

__all__ = [
    "LMPolicy",
    "tiny_policy",
    "ImagineRequest",
    "Generation",
    "SamplingConfig",
    "bf16_supported",
    "bf16_by_default",
]


def bf16_supported(device: str | torch.device = "cpu") -> bool:
    """Whether ``device`` runs bfloat16 matmuls natively, where autocast pays off: on the CPU, AVX512-BF16/AMX;
    on a CUDA device, what ``torch.cuda.is_bf16_supported()`` says (Ampere and newer)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if kind != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bf16_by_default(device: str | torch.device = "cpu") -> bool:
    """What ``bf16="auto"`` picks on ``device``: bfloat16 autocast on a CUDA device that supports it, float32
    on every CPU, whatever its instructions. One precision on every CPU keeps greedy outcomes comparable across
    machines (a 135M model's greedy decoding flips on the last bits), and bf16 autocast did not pay on the CPUs
    measured (``benchmarks/decode_precision.py``); ask for it with ``bf16=True``."""
    return torch.device(device).type == "cuda" and bf16_supported(device)


class LMPolicy:
    """A tool-calling policy over a transformers causal LM and its tokenizer.

    Args:
        model: the causal LM (its weights are what training updates).
        tokenizer: its tokenizer, with a chat template.
        sampling: default sampling settings for `act` and `imagine`.
        name: how reports refer to this policy.
        engine: a generation engine (an `Engine`); default `HFEngine` over ``model``.
    """

    #: What makes it an LM policy for the episode loop (see `is_lm_policy`).
    drives_engine = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        sampling: SamplingConfig | None = None,
        name: str = "custom",
        engine: Engine | None = None,
        bf16: bool | str = False,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.name = name
        self.chat = ChatFormat(tokenizer)
        self._bf16 = bf16  # "auto" is decided again where the model moves (see to())
        bf16 = bf16_by_default(next(model.parameters()).device) if bf16 == "auto" else bool(bf16)
        self.engine: Engine = engine or HFEngine(model, tokenizer, bf16=bf16)
        self._env_role_rng: torch.Generator | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_spec(
        cls,
        spec: str,
        sampling: SamplingConfig | None = None,
        progress: bool = True,
        bf16: bool | str = "auto",
        engine: str = "hf",
    ) -> LMPolicy:
        """``default`` | ``tiny`` | ``ckpt:DIR`` | ``hf:PATH_OR_ID`` | ``gguf:PATH`` (see `models`).

        ``bf16="auto"`` decodes in float32 on the CPU and under bfloat16 autocast on a CUDA device that has it
        (`bf16_by_default`); ``True`` asks for bf16 anywhere (the tiny test model always runs in float32).
        ``engine="vllm"`` generates with vLLM (GPU only; the transformers model is still loaded, for training).
        """
        if spec == "tiny":
            return tiny_policy(sampling=sampling)
        model, tokenizer = load_model_and_tokenizer(spec, progress=progress)
        policy = cls(model, tokenizer, sampling, name=spec, bf16=bf16)
        if engine == "vllm":
            from .engine import VLLMEngine

            path = getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")
            policy.engine = VLLMEngine(path, tokenizer, policy.engine.stop_token_ids)
        elif engine != "hf":
            raise ValueError(f"engine must be 'hf' or 'vllm', got {engine!r}")
        return policy

    @classmethod
    def default(cls, sampling: SamplingConfig | None = None) -> LMPolicy:
        """The embedded SmolLM2-135M-Instruct (converted to a local safetensors cache on first use)."""
        return cls.from_spec("default", sampling)

    def to(self, device: str | torch.device = "auto") -> LMPolicy:
        """Move the model, and generation with it, to ``device``: ``auto`` (CUDA when present), ``cpu``,
        ``cuda``, ``cuda:N`` or a torch device (no CUDA device: a one-line ``ValueError``). Cached keys and
        values are dropped; a policy made with ``bf16="auto"`` decodes under bf16 autocast where the new
        device is a CUDA device that supports it (`bf16_by_default`), in float32 elsewhere. Returns the policy."""
        device = resolve_device(device)
        self.model.to(device)
        self.engine.clear()
        if isinstance(self.engine, HFEngine):  # it runs self.model, so it follows it (vLLM has its own copy)
            self.engine.device = next(self.model.parameters()).device
            if self._bf16 == "auto":
                self.engine.bf16 = bf16_by_default(self.engine.device)
        return self

    def save(self, out_dir: str | Path) -> Path:
        """Write a safetensors checkpoint that loads back with ``LMPolicy.from_spec("ckpt:DIR")``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with library_bars_off():
            self.model.save_pretrained(out, safe_serialization=True)
        self.tokenizer.save_pretrained(out)
        return out

    # ------------------------------------------------------------------ prompting
    def prompt_text(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()) -> str:
        return self.chat.render(messages, tools, add_generation_prompt=True)

    def encode_prompt(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> tuple[list[int], int]:
        """Prompt token ids and the length of their shared head (the system message with the tool list).

        The head is encoded on its own, so it is a token prefix of every prompt that shares it and the
        engine can encode it once for all of them.
        """
        return self._encode_with_head(self.prompt_text(messages, tools), messages, tools)

    def _encode_with_head(
        self, text: str, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> tuple[list[int], int]:
        head = (
            self.chat.render(messages[:1], tools, add_generation_prompt=False)
            if messages and messages[0]["role"] == "system"
            else ""
        )
        if not head or not text.startswith(head):
            return self.chat.encode(text), 0
        head_ids = self.chat.encode(head)
        return head_ids + self.chat.encode(text[len(head) :]), len(head_ids)

    # ------------------------------------------------------------------ the two roles
    def act(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        sampling: SamplingConfig | None = None,
    ) -> Generation:
        """The actor's next assistant message for one conversation."""
        return self.act_batch([(messages, tools)], sampling)[0]

    def act_batch(
        self,
        conversations: Sequence[tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]],
        sampling: SamplingConfig | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """The next message for each ``(messages, tools)`` pair, in one batched engine call, drawn from
        ``generator`` where given (a rollout's stream: how a model user or judge samples in the loop)."""
        encoded = [self.encode_prompt(m, t) for m, t in conversations]
        return self.generate_ids(
            [e[0] for e in encoded], sampling=sampling, generator=generator, prefix_lens=[e[1] for e in encoded]
        )

    def imagine(self, request: ImagineRequest, sampling: SamplingConfig | None = None) -> Generation:
        """The environment role's answer to one env-role prompt."""
        return self.imagine_batch([request], sampling)[0]

    def imagine_batch(
        self,
        requests: Sequence[ImagineRequest],
        sampling: SamplingConfig | None = None,
        generator: torch.Generator | None = None,
        contexts: Sequence[ActorContext | None] | None = None,
    ) -> list[Generation]:
        """Env-role answers: prompted requests from their env-role prompt; inline ones continue the actor's
        conversation with a tool message (from the actor's exact tokens and KV cache, ``contexts[i]``, where
        the rollout loop knows them; else re-encoded from the messages). They draw from ``generator`` (the
        rollout's env-role stream, which ``collect`` keeps); without one, from this policy's own stream
        (seeded from ``sampling.seed + 1`` on first use, or by `reseed`)."""
        sampling = sampling or self.sampling
        if generator is None and self._env_role_rng is None and sampling.seed is not None:
            # One stream for all env-role calls: re-seeding per call would repeat the same draws.
            self._env_role_rng = torch.Generator().manual_seed(sampling.seed + 1)
        contexts = list(contexts) if contexts is not None else [None] * len(requests)
        encoded = [
            self._inline_prompt(r, c) if r.mode == "inline" else (*self.encode_prompt(r.messages), "", "")
            for r, c in zip(requests, contexts, strict=True)
        ]
        gens = self.generate_ids(
            [e[0] for e in encoded],
            keys=[c.key if c is not None else None for c in contexts],
            sampling=sampling,
            generator=generator if generator is not None else self._env_role_rng,
            prefix_lens=[e[1] for e in encoded],
        )
        return [_env_role_answer(gen, e[2], e[3]) for gen, e in zip(gens, encoded, strict=True)]

    def reseed(self, seed: int) -> None:
        """Restart the env role's sampling stream at ``seed`` (the actor's stream is seeded per
        `collect` call), e.g. at each training step, so a resumed run draws
        what an uninterrupted one did."""
        self._env_role_rng = torch.Generator().manual_seed(seed + 1)

    def _inline_prompt(self, request: ImagineRequest, ctx: ActorContext | None) -> tuple[list[int], int, str, str]:
        text, closing = self.chat.tool_turn(request.messages, request.tools, request.tool)
        if ctx is not None and text.startswith(ctx.text):
            # The actor's sampled tokens stay as they are; only the tool-message header is encoded.
            return list(ctx.ids) + self.chat.encode(text[len(ctx.text) :]), 0, text, closing
        return (*self._encode_with_head(text, request.messages, request.tools), text, closing)

    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[str | None] | None = None,
        sampling: SamplingConfig | None = None,
        generator: torch.Generator | None = None,
        prefix_lens: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue token-id prompts with the engine (the rollout engine's entry point)."""
        return self.engine.generate(
            prompts, sampling or self.sampling, keys=keys, generator=generator, prefix_lens=prefix_lens
        )

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 4096))


def _env_role_answer(gen: Generation, prompt_text: str, closing: str) -> Generation:
    """``gen`` with the prompt text it continued; a template's closing text (e.g. ``"\n</tool_response>"``
    before the end-of-turn token) is template, not content: it moves to ``stop_text``, so that ``text +
    stop_text`` still spells the tokens."""
    text, stop_text = gen.text, gen.stop_text
    if closing and text.endswith(closing):
        text, stop_text = text[: -len(closing)], closing + stop_text
    return dataclasses.replace(gen, prompt_text=prompt_text, text=text, stop_text=stop_text)


def tiny_policy(seed: int = 0, sampling: SamplingConfig | None = None, layers: int = 2, hidden: int = 64) -> LMPolicy:
    """An `LMPolicy` over `tiny_model` (random weights, real tokenizer), float32."""
    model, tok = tiny_model(seed, layers, hidden)
    return LMPolicy(model, tok, sampling or SamplingConfig(temperature=1.0, max_new_tokens=24, seed=seed), name="tiny")
