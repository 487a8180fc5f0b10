"""Scripted policies for tests and baselines: ``oracle``, ``random`` and ``noop``.

A policy here is anything with ``act(observation, info) -> str`` (the assistant's message) and
``reset()`` called at the start of each episode. ``info`` is what the env returned last.
"""

from __future__ import annotations

import json
import random
from typing import Any

from envace_gym.agents.lm.protocols import TextPolicy
from envace_gym.agents.rollout.loop import collect
from envace_gym.calls import ToolCall, format_calls
from envace_gym.tasks import Task, TaskSuite

__all__ = [
    "TextPolicy",
    "OraclePolicy",
    "RandomPolicy",
    "NoopPolicy",
    "make_scripted_policy",
    "play_episode",
    "SCRIPTED_POLICIES",
]


class OraclePolicy:
    """Replays each task's reference trajectory: every step's calls (in parallel), then the turn's answer.

    Args:
        suite: where to look tasks up by ``info["task_id"]``.
        style: the call format to write (``tool_call``, ``json`` or ``python``).
    """

    def __init__(self, suite: TaskSuite, style: str = "tool_call") -> None:
        self.suite = suite
        self.style = style
        self._plan: list[str] = []
        self._task_id: str | None = None

    def reset(self) -> None:
        self._plan, self._task_id = [], None

    def plan(self, task: Task) -> list[str]:
        """The whole episode's assistant messages, in order."""
        actions = []
        for turn in task.reference:
            actions.extend(format_calls([c.call for c in step], self.style) for step in turn.steps)
            actions.append(turn.answer or "Done.")
        return actions

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if info.get("task_id") != self._task_id or info.get("turn") == 0:
            self._task_id = info["task_id"]
            self._plan = self.plan(self.suite.get(self._task_id))
        return self._plan.pop(0) if self._plan else "Done."


class NoopPolicy:
    """Always answers without using a tool."""

    answer = "I'm sorry, I cannot help with that."

    def reset(self) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return self.answer


#: The strings `RandomPolicy` writes where a schema asks for one (one of them JSON text).
_STRINGS = ("", "x", "A-1234", "/home", "2026-03-14", json.dumps({"a": 1}))


class RandomPolicy:
    """Random behaviour over the declared tools: schema-valid calls with random values, invalid calls
    (unknown tools, wrong types, broken JSON), and random answers. A floor baseline and a fuzzer."""

    def __init__(self, seed: int = 0, p_call: float = 0.7, max_calls: int = 4) -> None:
        self.rng = random.Random(seed)
        self.p_call = p_call
        self.max_calls = max_calls
        self._calls = 0

    def reset(self) -> None:
        self._calls = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        tools = [t["function"] for t in info.get("tools", [])]
        if not tools or self._calls >= self.max_calls or self.rng.random() > self.p_call:
            self._calls = 0
            return self.rng.choice(["OK.", "Here you go.", "The answer is 42.", "Done, anything else?", "Hello."])
        self._calls += 1
        roll = self.rng.random()
        if roll < 0.1:
            return '<tool_call>{"name": "' + self.rng.choice(tools)["name"] + '", "arguments": {'
        if roll < 0.2:
            return format_calls([ToolCall("no_such_tool", {"x": 1})])
        fn = self.rng.choice(tools)
        props = fn.get("parameters", {}).get("properties", {})
        valid = roll < 0.8
        args = {k: self._value(s if valid else {"type": "object"}) for k, s in props.items()}
        return format_calls([ToolCall(fn["name"], args)])

    def _value(self, schema: dict[str, Any], depth: int = 0) -> Any:
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = self.rng.choice(kind)
        if kind == "integer":
            return self.rng.randint(-5, 100)
        if kind == "number":
            return round(self.rng.uniform(-10, 1000), 2)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "array":
            return [
                self._value(schema.get("items", {"type": "string"}), depth + 1) for _ in range(self.rng.randint(0, 2))
            ]
        if kind == "object":
            return {} if depth > 1 else {"k": self._value({"type": "string"}, depth + 1)}
        return self.rng.choice(_STRINGS)


def play_episode(env: Any, policy: TextPolicy, task_id: str) -> dict[str, Any]:
    """Play one whole episode of ``task_id`` through the episode loop (`collect`, with an
    unseeded reset); returns the episode's last ``info`` (with the full ``messages`` and the ``tools``)."""
    last: dict[str, Any] = {}
    collect(
        [env], policy, 1, task_ids=[task_id], seed=None, progress=False, on_episode=lambda _, info: last.update(info)
    )
    return last


SCRIPTED_POLICIES = ("oracle", "random", "noop")


def make_scripted_policy(name: str, suite: TaskSuite, seed: int = 0) -> TextPolicy:
    """Build a scripted policy by name: ``oracle``, ``random`` or ``noop``."""
    if name == "oracle":
        return OraclePolicy(suite)
    if name == "random":
        return RandomPolicy(seed=seed)
    if name == "noop":
        return NoopPolicy()
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(SCRIPTED_POLICIES)}")
