"""The seams of the policy side, as protocols: what a generation engine offers (`Engine`), what
makes a policy an LM policy (`LMPolicyLike`) and what a text policy offers (`TextPolicy`).
No torch here: the episode loop checks a policy without loading it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from .engine import Generation, SamplingConfig

__all__ = ["Engine", "WeightSyncingEngine", "LMPolicyLike", "TextPolicy", "is_lm_policy"]


@runtime_checkable
class Engine(Protocol):
    """What `LMPolicy` generates through: batched continuation of token-id prompts, with
    the logprob of every sampled token. `HFEngine` and `VLLMEngine`
    implement it."""

    tokenizer: Any
    stop_token_ids: list[int]  # tokens that end a turn
    pad_id: int
    bf16: bool  # forward passes under bfloat16 autocast
    # Token counters: prompt_tokens, reused_tokens, repacked_tokens, generated_tokens, prefix_tokens.
    stats: dict[str, int]

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        keys: Sequence[str | None] | None = None,
        generator: torch.Generator | None = None,
        prefix_lens: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue each prompt; ``keys`` name conversations whose caches may be reused on their next turn,
        ``prefix_lens`` the length of a head shared with other prompts."""
        ...

    def drop(self, key: str) -> None:
        """Forget a conversation's cache (at the end of its episode)."""
        ...

    def clear(self) -> None:
        """Forget all caches (after the weights change)."""
        ...


@runtime_checkable
class WeightSyncingEngine(Engine, Protocol):
    """An engine that holds its own copy of the weights (vLLM): a trainer pushes each update to it."""

    def sync_weights(self, model: Any) -> None: ...


@runtime_checkable
class LMPolicyLike(Protocol):
    """A policy that works on tokens: the rollout loop encodes its prompts and drives its engine itself
    (one batched call for all envs), where a text policy gets ``act(obs, info)`` per env.
    `LMPolicy` is one. A class says it is one with the class attribute ``drives_engine =
    True`` (see `is_lm_policy`)."""

    drives_engine: bool

    def encode_prompt(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> tuple[list[int], int]: ...

    def generate_ids(
        self,
        prompts: Sequence[Sequence[int]],
        keys: Sequence[str | None] | None = None,
        sampling: SamplingConfig | None = None,
        generator: torch.Generator | None = None,
        prefix_lens: Sequence[int] | None = None,
    ) -> list[Generation]: ...


class TextPolicy(Protocol):
    """A policy over text. It keeps per-episode state, so the episode loop
    (`collect`) takes one per env: ``collect([env], policy, ...)`` or
    ``collect(envs, [OraclePolicy(suite) for _ in envs], ...)``."""

    def reset(self) -> None: ...

    def act(self, observation: str, info: dict[str, Any]) -> str: ...


def is_lm_policy(policy: Any) -> bool:
    """Whether ``policy`` is driven through its engine (`LMPolicyLike`) rather than acting on text:
    its class declares ``drives_engine = True``. Read from the class, not the instance, so the answer is the
    same on every Python and an object that forwards attributes cannot pass for a policy it holds (hooks are
    held explicitly: `PolicyHooks`)."""
    return getattr(type(policy), "drives_engine", False) is True
