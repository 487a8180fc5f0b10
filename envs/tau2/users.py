"""Simulated users for tau2 episodes: a scripted user and a language-model user.

The protocol is small. A user is any object with

* ``reply(messages, tools) -> str`` (or an object with ``.text``): the user's next message, given the
  conversation from the *user's* point of view (``system``: tau2's user-simulator guidelines and the task's
  scenario; ``user``: the agent's messages; ``assistant``: the user's own earlier messages; ``tool``: results
  of the user's own tool calls) and the user's tool schemas (telecom's device tools; empty elsewhere). A
  reply may call those tools with ``<tool_call>`` blocks: the env runs them and asks again. A reply that
  contains a stop token (``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``) ends the episode;
* optionally ``reset(task)``, called with the `envace_gym.Task` at the start of every episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from envace_gym.calls import ToolCall, format_calls
from envace_gym.imagination.protocol import UserRequest
from envace_gym.tasks import Task

__all__ = [
    "STOP_TOKENS",
    "User",
    "ScriptedUser",
    "LMUser",
    "make_user",
    "is_stop",
    "user_system_prompt",
    "IMAGINED_USER_PROMPT",
    "imagined_user_view",
]

#: tau2's user stop tokens (``tau2.user.base``): the user ends the conversation, asks for a transfer, or
#: declares the request out of scope.
STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")


def is_stop(text: str | None) -> bool:
    """Whether a user message ends the conversation (tau2's ``UserSimulator.is_stop``)."""
    return bool(text) and any(token in text for token in STOP_TOKENS)


class User(Protocol):
    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any: ...


def user_system_prompt(scenario: str, with_tools: bool) -> str:
    """tau2's user-simulator system prompt: its guidelines, then the task's scenario."""
    from ._runtime import user_guidelines

    return f"{user_guidelines(with_tools)}\n\n<scenario>\n{scenario}\n</scenario>"


#: The system prompt of the user a private rehearsal imagines (``envace_gym.rehearsal.ImaginedUser``): tau2's
#: role and stop convention, with no scenario. What the user knows is the conversation that follows it.
IMAGINED_USER_PROMPT = (
    "You are playing the role of a customer contacting a customer service representative. You know only "
    "what you have said in the conversation below; do not make up new requests or details. Write the "
    "customer's next message only, one short message in plain text. When your request has been handled, "
    "or cannot be, write '###STOP###' to end the conversation."
)


def imagined_user_view(agent_messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The imagined user's conversation, built only from the messages the agent saw (``env.messages``):
    `IMAGINED_USER_PROMPT`, then the texts the two sides exchanged with roles flipped (``user``: the
    agent's messages, ``assistant``: the customer's). The agent's system prompt, its tool calls and their
    results are not the customer's to see (as in tau2, where the user sees only the agent's text)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": IMAGINED_USER_PROMPT}]
    for m in agent_messages:
        if m["role"] == "assistant" and not m.get("tool_calls") and m.get("content"):
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "user" and m.get("content"):
            out.append({"role": "assistant", "content": m["content"]})
    return out


class ScriptedUser:
    """A deterministic user that follows the task's script (for tests, baselines and the oracle).

    It opens with the scenario's reason for calling and known information (``task.user_turns[0]``). To each
    later agent message it answers, in order: the next step of its script (telecom: it runs that step's
    user-side gold actions as tool calls, then reports their results with ``task.user_turns[k]``); once the
    script is done, "yes, go ahead" to a message that asks something (contains ``?``), at most ``patience``
    times; otherwise it ends the conversation with ``###STOP###``.
    """

    def __init__(self, patience: int = 2) -> None:
        self.patience = patience
        self.reset(None)

    def reset(self, task: Task | None) -> None:
        self.task = task
        self._step = 0  # replies given so far (0: the opening is next)
        self._patience = self.patience
        self._pending: list[ToolCall] = []

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        if self.task is None:
            raise RuntimeError("ScriptedUser.reset(task) must be called before reply()")
        turns = self.task.user_turns
        script = self.task.metadata.get("tau2", {}).get("user_script", [])
        if self._pending and messages and messages[-1]["role"] == "tool":  # results of the calls we just made
            results = [m["content"] for m in messages if m["role"] == "tool"][-len(self._pending) :]
            done = "; ".join(f"{c.name} -> {r}" for c, r in zip(self._pending, results, strict=False))
            self._pending = []
            return f"{turns[self._step - 1]} ({done})"
        if self._step == 0:
            self._step = 1
            return turns[0]
        if self._step < len(turns):
            actions = script[self._step - 1] if self._step - 1 < len(script) else []
            self._step += 1
            if actions:
                self._pending = [ToolCall(a["name"], a["arguments"]) for a in actions]
                return format_calls(self._pending)
            return turns[self._step - 1]
        last = messages[-1].get("content", "") if messages else ""
        if "?" in last and self._patience > 0:
            self._patience -= 1
            return "Yes, please go ahead."
        return "Thank you, that is all I needed. ###STOP###"


class LMUser:
    """A language-model user: ``policy.act(messages, tools)`` plays the customer (any object with that
    method and a ``.text`` result, e.g. `envace_gym.agents.LMPolicy`). A
    `ModelUser`: the rollout loop batches its turns across envs (one
    ``act_batch`` call per round where the model has one)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    @property
    def model(self) -> Any:
        return self.policy

    def __deepcopy__(self, memo: dict[int, Any]) -> LMUser:  # a forked env shares the model
        return LMUser(self.policy)

    def conversation(self, request: UserRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return list(request.messages), list(request.tools)

    def read(self, generation: Any) -> str:
        return getattr(generation, "text", generation)

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return self.read(self.policy.act(*self.conversation(UserRequest(messages, tools))))


def make_user(spec: Any) -> Any:
    """``"scripted"`` | an object with ``reply(messages, tools)`` | an object with ``act`` (e.g. an
    ``LMPolicy``: the language-model user is given its model, this package never loads one)."""
    if spec == "scripted":
        return ScriptedUser()
    if hasattr(spec, "reply"):
        return spec
    if hasattr(spec, "act"):
        return LMUser(spec)
    if isinstance(spec, str) and (spec == "lm" or spec.startswith("lm:")):
        raise ValueError(
            f"user={spec!r}: pass the model itself, e.g. user=LMPolicy.from_spec('default') "
            "(from envace_gym.agents import LMPolicy)"
        )
    raise ValueError(f"unknown user {spec!r}; use 'scripted', an object with reply(messages, tools) or an LMPolicy")
