"""Perturbed gold-action lists, for checking that the reward tells right from wrong (tests and
``benchmarks/tau2_agreement.py``).

Each perturbation touches a state-changing (``WRITE``) action and is kept only if it changes the end state
(the agent-side and user-side databases after the actions, computed like tau2's gold environment): some gold
actions fail by design (e.g. a second return of the same order), and changing those changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from . import _runtime
from .scoring import gold_hashes
from .tasks import GoldAction, gold_actions

__all__ = ["PERTURBATIONS", "perturbations", "end_state"]

#: Names, in report order: drop a write action, change one of its arguments, append a write action
#: borrowed from another task, swap two write actions where the order matters.
PERTURBATIONS = ("dropped_action", "wrong_argument", "extra_write", "swapped_order")
_MAX_TRIES = 4  # candidates tried per perturbation (each costs one fresh environment)


def end_state(domain: str, task: Any, actions: Sequence[GoldAction]) -> tuple[str | None, str | None]:
    """(agent DB hash, user DB hash) after ``actions`` from ``task``'s initial state (cached)."""
    data = task.model_dump(mode="json", exclude_none=True)
    data.setdefault("evaluation_criteria", {})["actions"] = [
        {"action_id": f"a{i}", "requestor": req, "name": name, "arguments": args}
        for i, (req, name, args) in enumerate(actions)
    ]
    return gold_hashes(domain, data)


def _writes(domain: str, actions: Sequence[GoldAction]) -> list[int]:
    kinds = _runtime.write_tools(domain)
    return [i for i, (req, name, _) in enumerate(actions) if (req, name) in kinds]


def _mutate(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "-x"
    if isinstance(value, list) and value:
        return value[:-1] if len(value) > 1 else [_mutate(value[0])]
    return None


def _dropped(actions: list[GoldAction], writes: list[int]) -> Iterator[list[GoldAction]]:
    for w in writes:
        yield [a for i, a in enumerate(actions) if i != w]


def _wrong_arguments(actions: list[GoldAction], writes: list[int]) -> Iterator[list[GoldAction]]:
    for w in writes:
        req, name, args = actions[w]
        for key, value in args.items():
            new = _mutate(value)
            if new is not None and new != value:
                out = copy.deepcopy(actions)
                out[w] = (req, name, {**args, key: new})
                yield out
                break


def _extra_writes(
    domain: str, actions: list[GoldAction], task: Any, others: Sequence[Any]
) -> Iterator[list[GoldAction]]:
    own = {repr(a) for a in actions}
    for other in others:
        if other.id != task.id:
            theirs = gold_actions(other)
            for w in _writes(domain, theirs):
                if repr(theirs[w]) not in own:
                    yield actions + [theirs[w]]
                    break


def _swaps(actions: list[GoldAction], writes: list[int]) -> Iterator[list[GoldAction]]:
    for n, i in enumerate(writes):
        for j in writes[n + 1 :]:
            if actions[i] != actions[j]:
                out = list(actions)
                out[i], out[j] = out[j], out[i]
                yield out


def perturbations(domain: str, task: Any, others: Sequence[Any]) -> dict[str, list[GoldAction]]:
    """The perturbations of ``task``'s gold actions that change its end state (``others``: the domain's
    tasks, the source of borrowed write actions). A kind with no such candidate is left out."""
    actions = gold_actions(task)
    writes = _writes(domain, actions)
    gold = end_state(domain, task, actions)
    candidates = {
        "dropped_action": _dropped(actions, writes),
        "wrong_argument": _wrong_arguments(actions, writes),
        "extra_write": _extra_writes(domain, actions, task, others),
        "swapped_order": _swaps(actions, writes),
    }
    out: dict[str, list[GoldAction]] = {}
    for kind, found in candidates.items():
        for _, variant in zip(range(_MAX_TRIES), found, strict=False):
            if end_state(domain, task, variant) != gold:
                out[kind] = variant
                break
    return out
