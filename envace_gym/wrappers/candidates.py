"""``CandidateActions``: a text-action env as ``Discrete(k)``, for RL libraries without text spaces (SB3).

At every step the wrapper builds ``k`` candidate assistant messages from what the agent can see: the
task's tool schemas (``info["tools"]``) and the conversation (``info["messages"]``). Index ``i`` is the
``i``-th candidate, listed in ``info["candidates"]``; ``info["action_mask"]`` marks the real ones (the rest
are padding, a harmless apology answer). The layout is stable, so an index means the same kind of action
from one state to the next:

* slots ``0..n_answers-1``: answers. 0 quotes the latest tool results' values, 1 echoes the values of the
  latest user turn, then single values of the latest results, one per slot;
* then one block of equal size per tool, in schema order: calls whose required arguments are filled with
  visible values of a matching shape, best-ranked first (see `build_calls`).

Candidates are a deterministic function of the schemas and the visible messages, never of the task's
reference (the oracle's calls are what the coverage figure measures against).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ..calls import ToolCall, format_calls
from .values import Value, result_values, shape_of, user_values, visible_values

__all__ = ["CandidateActions", "build_candidates", "build_calls", "param_shape", "PAD_ANSWER"]

#: What padding slots say: an answer that calls nothing and changes no state.
PAD_ANSWER = "I'm sorry, I cannot help with that."
_EXAMPLE = re.compile(r"e\.g\.,?\s*[\"“']([^\"”']+)[\"”']")
# Parameter-name words that tell a string's shape when the description gives no example.
_NAME_HINTS = (
    ("email", "email"),
    ("path", "path"),
    ("dir", "path"),
    ("date", "date"),
    ("start", "time"),
    ("end", "time"),
    ("time", "time"),
    ("currency", "code"),
    ("code", "code"),
    ("owner", "name"),
    ("name", "name"),
    ("id", "id"),
    ("account", "id"),
    ("order", "id"),
    ("booking", "id"),
)


def param_shape(name: str, schema: dict[str, Any]) -> str:
    """The value shape a parameter wants: ``number`` for numeric types, else the shape of the description's
    ``e.g. "..."`` example, else a hint from the parameter's name, else ``text``."""
    kind = schema.get("type")
    if kind in ("number", "integer"):
        return "number"
    example = _EXAMPLE.search(str(schema.get("description", "")))
    if example:
        return shape_of(example.group(1))
    words = re.split(r"[_\W]+", name.lower())
    for hint, shape in _NAME_HINTS:
        if hint in words:
            return shape
    return "text"


def _options(name: str, schema: dict[str, Any], values: Sequence[Value], per_param: int) -> list[Any]:
    """Visible values fit for one required parameter, best first: a result value found under the same key,
    then values of the wanted shape in `visible_values` order."""
    if "enum" in schema:
        enum = list(schema["enum"])
        seen = [v.value for v in values if v.value in enum]
        return (seen + [e for e in enum if e not in seen])[:per_param]
    kind = schema.get("type")
    if kind not in ("string", "number", "integer", None):
        return []  # arrays and objects are not guessed
    shape = param_shape(name, schema)
    fit = [v for v in values if v.shape == shape or (shape == "text" and v.shape != "number")]
    if kind == "integer":
        fit = [v for v in fit if float(v.value) == int(float(v.value))]
    example = _EXAMPLE.search(str(schema.get("description", "")))
    words = len(example.group(1).split()) if example else None

    def rank(v: Value) -> tuple[bool, bool, int]:
        # Same-key results first; for free text, plain text before values of a sharper shape; then the
        # word count closest to the example's (a city, "Lisbon", vs a person, "Ana Silva"); stable otherwise.
        closeness = abs(len(str(v.value).split()) - words) if words and v.shape != "number" else 0
        return v.key != name, shape == "text" and v.shape != "text", closeness

    fit.sort(key=rank)
    out: list[Any] = []
    for v in fit:
        value = int(float(v.value)) if kind == "integer" else v.value
        if kind == "string":
            value = str(value)
        if value not in out:
            out.append(value)
    return out[:per_param]


def build_calls(tool: dict[str, Any], values: Sequence[Value], limit: int, per_param: int = 3) -> list[ToolCall]:
    """Up to ``limit`` calls of one tool (an OpenAI schema): every required parameter filled from its top
    ``per_param`` options, no value used twice in one call, the best-ranked combination first. An optional
    integer parameter is left out or set to 1 (the smallest count: "the latest ..."); other optional
    parameters are left out."""
    fn = tool.get("function", tool)
    params = fn.get("parameters", {}) or {}
    props: dict[str, Any] = params.get("properties", {}) or {}
    required = [p for p in params.get("required", []) if p in props]
    options = [_options(p, props[p], values, per_param) for p in required]
    if any(not o for o in options):
        return []
    optional = [p for p in props if p not in required and props[p].get("type") == "integer"]
    variants = [dict(zip(optional, combo, strict=True)) for combo in itertools.product((None, 1), repeat=len(optional))]
    calls: list[ToolCall] = []
    for combo in itertools.product(*options):
        if len({json.dumps(v) for v in combo}) < len(combo):
            continue
        for extra in variants:
            args = dict(zip(required, combo, strict=True))
            args.update({k: v for k, v in extra.items() if v is not None})
            calls.append(ToolCall(fn["name"], args))
            if len(calls) >= limit:
                return calls
    return calls


def _quote(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def _answers(messages: Sequence[dict[str, Any]], n: int) -> list[str | None]:
    tail: list[dict[str, Any]] = []  # the tool messages since the latest user turn
    for message in reversed(messages):
        if message.get("role") == "tool":
            tail.append(message)
        elif message.get("role") == "user":
            break
    results = [v for m in reversed(tail) for v in result_values(str(m.get("content") or ""))]
    users = [m for m in messages if m.get("role") == "user"]
    said = user_values(str(users[-1].get("content") or "")) if users else []
    slots: list[str | None] = [
        ("Here is what I found: " + ", ".join(_quote(v.value) for v in results[:24]) + ".") if results else None,
        ("Noted: " + ", ".join(_quote(v.value) for v in said) + ".") if said else None,
    ]
    slots += [f"The answer is {_quote(v.value)}." for v in results[: max(0, n - 2)]]
    return (slots + [None] * n)[:n]


def build_candidates(
    tools: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]], k: int, n_answers: int = 4
) -> tuple[list[str], np.ndarray]:
    """The ``k`` candidate messages for a state (see the module docstring) and their mask (``True`` = real,
    ``False`` = padding). Deterministic given ``tools`` and ``messages``."""
    if k < n_answers + 1:
        raise ValueError(f"k must be at least n_answers + 1 = {n_answers + 1}, got {k}")
    values = visible_values(messages)
    slots: list[str | None] = _answers(messages, n_answers)
    per_tool = (k - n_answers) // max(1, len(tools))
    for tool in tools:
        calls = build_calls(tool, values, per_tool) if per_tool else []
        slots += [format_calls([c]) for c in calls] + [None] * (per_tool - len(calls))
    slots += [None] * (k - len(slots))
    mask = np.array([s is not None for s in slots], dtype=bool)
    return [s if s is not None else PAD_ANSWER for s in slots], mask


class CandidateActions(gym.ActionWrapper):
    """Turns the text action space into ``Discrete(k)`` over candidate messages (module docstring).

    Args:
        env: an env whose ``info`` carries ``tools`` and ``messages`` (``EnvACE-ToolCall-v0`` and its
            wrappers, e.g. ``SelfRehearsalEnv``).
        k: the number of candidates (at least ``n_answers + 1``).
        n_answers: how many leading slots are answers.

    ``info["candidates"]`` lists the ``k`` texts for the *next* action, ``info["action_mask"]`` which are real;
    after a step ``info["action_text"]`` is the text that was sent. `action_masks` serves
    sb3-contrib's ``MaskablePPO``. The wrapped env is not changed. A ``gym.ActionWrapper``: `action`
    maps an index to its text, so a half-step (a rollout loop batching the env role) maps it on the way in.
    """

    def __init__(self, env: gym.Env, k: int = 16, n_answers: int = 4) -> None:
        super().__init__(env)
        if k < n_answers + 1:
            raise ValueError(f"k must be at least n_answers + 1 = {n_answers + 1}, got {k}")
        self.k, self.n_answers = k, n_answers
        self.action_space = gym.spaces.Discrete(k)
        self._candidates: list[str] = [PAD_ANSWER] * k
        self._mask = np.zeros(k, dtype=bool)

    def _refresh(self, info: dict[str, Any]) -> dict[str, Any]:
        self._candidates, self._mask = build_candidates(
            info.get("tools", []), info.get("messages", []), self.k, self.n_answers
        )
        return {**info, "candidates": list(self._candidates), "action_mask": self._mask.copy()}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, self._refresh(info)

    def action(self, action: Any) -> str:
        """The candidate text of index ``action`` (of the candidates offered by the last reset or step)."""
        index = int(action)
        if not 0 <= index < self.k:
            raise ValueError(f"action {action!r} is outside Discrete({self.k})")
        return self._candidates[index]

    def step(self, action: Any):
        text = self.action(action)
        obs, reward, terminated, truncated, info = self.env.step(text)
        info = self._refresh(info) if not (terminated or truncated) else dict(info)
        info["action_text"] = text
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Which of the current candidates are real (``MaskablePPO`` calls this)."""
        return self._mask.copy()
