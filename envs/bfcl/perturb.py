"""Ground-truth trajectories of BFCL tasks and systematic perturbations of them.

Used by ``benchmarks/bfcl_agreement.py`` (our reward vs BFCL's own checker on the same calls) and by the
tests. A trajectory is the agent's calls per user turn (``list[list[ToolCall]]``); a perturbation returns a
changed copy, or ``None`` where it does not apply (nothing to swap, no argument to change...).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from envace_gym.calls import ToolCall, format_calls
from envace_gym.tasks import Task

from .convert import placeholder_call

__all__ = ["PERTURBATIONS", "reference_turns", "perturb", "mutate_value", "play"]

Turns = list[list[ToolCall]]


def reference_turns(task: Task) -> Turns:
    """The calls of the task's reference trajectory, per user turn."""
    return [[c.call for c in turn.calls] for turn in task.reference]


def mutate_value(value: Any, schema: dict[str, Any]) -> Any:
    """A different value of the same JSON type (another enum member where there is one); ``None`` if none."""
    others = [e for e in schema.get("enum", []) if e != value]
    if others:
        return others[0]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value + "_x" if value else "x"
    if isinstance(value, list) and value:
        return value[:-1]
    return None


def _first_nonempty(turns: Turns) -> int | None:
    return next((i for i, calls in enumerate(turns) if calls), None)


def _drop_call(turns: Turns, task: Task) -> Turns | None:
    i = _first_nonempty(turns)
    if i is None:
        return None
    turns[i].pop()
    return turns


def _wrong_argument(turns: Turns, task: Task) -> Turns | None:
    props = {s.name: s.parameters.get("properties", {}) for s in task.tool_specs}
    for calls in turns:
        for j, call in enumerate(calls):
            for arg, value in call.arguments.items():
                new = mutate_value(value, props.get(call.name, {}).get(arg, {}))
                if new is not None:
                    calls[j] = ToolCall(call.name, {**call.arguments, arg: new})
                    return turns
    return None


def _extra_call(turns: Turns, task: Task) -> Turns | None:
    i = _first_nonempty(turns)
    if i is None:  # e.g. irrelevance: call the first tool
        if not task.tool_specs:
            return None
        turns[0].append(placeholder_call(task.tool_specs[0]))
        return turns
    turns[i].append(turns[i][-1])
    return turns


def _swapped_order(turns: Turns, task: Task) -> Turns | None:
    for calls in turns:
        for j in range(1, len(calls)):
            if calls[j].key() != calls[0].key():
                calls[0], calls[j] = calls[j], calls[0]
                return turns
    return None


def _missing_turn(turns: Turns, task: Task) -> Turns | None:
    i = _first_nonempty(turns)
    if i is None:
        return None
    turns[i] = []
    return turns


PERTURBATIONS: dict[str, Callable[[Turns, Task], Turns | None]] = {
    "ground_truth": lambda turns, task: turns,
    "drop_call": _drop_call,
    "wrong_argument": _wrong_argument,
    "extra_call": _extra_call,
    "swapped_order": _swapped_order,
    "missing_turn": _missing_turn,
}


def perturb(task: Task, name: str, turns: Turns | None = None) -> Turns | None:
    """The reference trajectory (or ``turns``) changed by perturbation ``name``; ``None`` if it does not apply."""
    if name not in PERTURBATIONS:
        raise ValueError(f"unknown perturbation {name!r}; choose from {', '.join(PERTURBATIONS)}")
    base = copy.deepcopy(turns if turns is not None else reference_turns(task))
    return PERTURBATIONS[name](base, task)


def play(
    env: Any, task_id: str, turns: Turns, step_size: int = 16, answer: str = "Done."
) -> tuple[float, dict[str, Any]]:
    """Play ``turns`` in ``env`` (a BFCLEnv, maybe wrapped): each turn's calls in steps of ``step_size``, then
    ``answer``. Returns the final reward and info (``info["bfcl"]`` holds the verdict)."""
    env.reset(options={"task_id": task_id})
    reward, info, done = 0.0, {}, False
    for calls in turns:
        for i in range(0, len(calls), step_size):
            _, reward, terminated, truncated, info = env.step(format_calls(calls[i : i + step_size]))
            if terminated or truncated:
                return float(reward), info
        _, reward, terminated, truncated, info = env.step(answer)
        done = terminated or truncated
        if done:
            break
    return float(reward), info
