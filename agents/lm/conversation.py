"""One episode's conversation as an LM policy acts in it (the rollout loop keeps one per env).

`Conversation` owns what the LM side of a rollout does to the tokens: it encodes the prompt, takes
the actor's sampled tokens, commits a message a hook chose instead, splices the env role's inline answers in
where they continue the actor's own tokens, and re-renders what the env added since. The loop never touches
a token itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envace_gym.imagination import EnvRoleAnswer, EnvRoleSample

from .chat import ChatFormat, TokenStream, assistant_text

if TYPE_CHECKING:
    from .engine import Generation
    from .policy import LMPolicy

__all__ = ["ActorContext", "Conversation"]


@dataclass(frozen=True)
class ActorContext:
    """What an actor's context holds when its env role is asked inline: the exact token ids (as sampled,
    which re-tokenising the text need not reproduce), their text, and the engine's KV-cache key. The agent
    side's, never the env's: `LMPolicy.imagine_batch` takes it beside the request."""

    ids: tuple[int, ...]
    text: str
    key: str | None = None


class Conversation:
    """The role-tagged token stream of one episode as ``policy`` sees it (prompt, its own turns, spliced
    env-role answers, what the env added), the engine cache ``key`` it is generated under, and its ``tools``.

    Messages passed in are the conversation as the policy sees it (the rollout loop inserts its notes)."""

    def __init__(self, policy: LMPolicy, key: str, tools: Sequence[dict[str, Any]]) -> None:
        self.policy, self.key, self.tools = policy, key, list(tools)
        self.stream = TokenStream()
        self.prefix_len = 0  # the shared system+tools head of the first prompt (the engine may share its cache)
        self._heard: ActorContext | None = None  # this step's last inline answer: the next call continues it

    def begin(self, messages: list[dict[str, Any]]) -> None:
        """The episode's prompt, up to the actor's first turn."""
        ids, self.prefix_len = self.policy.encode_prompt(messages, self.tools)
        self.stream.extend(ids, "prompt", self.policy.prompt_text(messages, self.tools))

    def fits(self, max_new_tokens: int) -> bool:
        """Whether a turn of ``max_new_tokens`` more still fits the model's context."""
        return len(self.stream.ids) + max_new_tokens <= self.policy.max_context

    def take(self, gen: Generation) -> str:
        """The actor's sampled turn, as sampled; its text (the env's action)."""
        self.stream.extend(gen.token_ids, "actor", gen.text + gen.stop_text, gen.logprobs)
        self._heard = None
        return gen.text

    def commit(self, messages: list[dict[str, Any]], text: str) -> None:
        """A message a hook chose instead of one the policy generates: the actor tokens of an assistant
        message of ``text`` (`assistant_text`), with logprobs 0.0."""
        chosen = [*messages, {"role": "assistant", "content": text}]
        actor_text = assistant_text(self.policy.chat, chosen, self.tools, self.stream.text)
        self.stream.extend(self.policy.chat.encode(actor_text), "actor", actor_text)
        self._heard = None

    def context(self) -> ActorContext:
        """Where an inline env-role answer of this step continues the actor's context: after the step's
        previous answer (`heard`), else after the actor's turn; under this episode's cache key."""
        if self._heard is not None:
            return self._heard
        return ActorContext(tuple(self.stream.ids), self.stream.text, self.key)

    def heard(self, answer: EnvRoleAnswer) -> None:
        """An inline answer of this step: the step's next call continues from its tokens (the policy uses
        them only where the rendered conversation still starts with their text)."""
        if answer.prompt_ids and answer.prompt_text:
            ids = (*answer.prompt_ids, *answer.token_ids)
            self._heard = ActorContext(ids, answer.prompt_text + answer.text + answer.stop_text, self.key)

    def splice(self, samples: Sequence[EnvRoleSample]) -> None:
        """The step's inline env-role answers continue the stream as generated, up to one that does not (the
        next `render` then encodes the rest)."""
        for sample in samples:
            if sample.mode == "inline" and sample.valid and not _splice_inline(self.stream, sample, self.policy.chat):
                return

    def render(self, messages: list[dict[str, Any]], role: str) -> None:
        """What the env added since the actor's turn (tool results, the next user turn: ``role``), encoded
        from a full render of ``messages``."""
        self.stream.append_render(self.policy.chat, self.policy.prompt_text(messages, self.tools), role)


def _splice_inline(stream: TokenStream, sample: EnvRoleSample, fmt: ChatFormat) -> bool:
    """Append an inline env-role answer to the actor's stream as generated: the tool-message header the
    policy encoded (``external``), then the sampled result tokens (``env_role``). False (nothing appended)
    when the sample does not continue the stream, or spells a control token (its message renders escaped);
    the next render then re-encodes that message."""
    ids, text = sample.prompt_ids, sample.prompt_text
    n = len(stream.ids)
    if not text.startswith(stream.text) or ids[:n] != stream.ids or not sample.completion_ids:
        return False
    if fmt.spells_control_token(sample.completion_text):
        return False
    stream.extend(ids[n:], "external", text[len(stream.text) :])
    stream.extend(sample.completion_ids, "env_role", sample.completion_text, sample.logprobs)
    return True
