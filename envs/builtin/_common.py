"""Shared machinery for the builtin domains: recording reference trajectories on the real backend.

A domain generator builds a small world (the initial state), then plays the solution through
:class:`ReferenceRecorder`, which executes every call on a real :class:`PythonBackend` so that the
reference results are the real ones (and a generator bug that makes an invalid call fails loudly).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

from envace_gym.backends import PythonBackend, Toolkit
from envace_gym.calls import ToolCall
from envace_gym.tasks import RefCall, RefTurn, Task

__all__ = ["ReferenceRecorder", "task_rng", "pick_template", "generate_tasks", "SPLITS"]

SPLITS = ("train", "test")


# Disjoint name pools shared by the domains, so the test split only has people never seen in training.
FIRST_NAMES = {
    "train": [
        "Ana",
        "Bruno",
        "Carla",
        "Diego",
        "Elena",
        "Farid",
        "Greta",
        "Hugo",
        "Ines",
        "Jonas",
        "Kira",
        "Luis",
        "Mona",
        "Nils",
        "Olga",
        "Pavel",
        "Rosa",
        "Sami",
        "Tara",
        "Umar",
    ],
    "test": ["Vera", "Wim", "Xenia", "Yusuf", "Zoe", "Anouk", "Bilal", "Chiara"],
}

LAST_NAMES = {
    "train": [
        "Silva",
        "Costa",
        "Novak",
        "Berg",
        "Duarte",
        "Kowalski",
        "Moreau",
        "Haddad",
        "Lind",
        "Ferreira",
        "Rossi",
        "Weber",
    ],
    "test": ["Okafor", "Tanaka", "Petrov", "Lindqvist", "Mendes"],
}


def task_rng(domain: str, split: str, index: int, seed: int = 0) -> random.Random:
    """A per-task RNG, so each task is reproducible on its own and independent of the suite size."""
    return random.Random(f"envace/{domain}/{split}/{index}/{seed}")


def generate_tasks(
    domain: str,
    split: str,
    count: int,
    kinds: Sequence[str],
    weights: Sequence[float],
    make: Callable[[str, random.Random, str, str], Task],
) -> list[Task]:
    """The generation loop every domain shares: task ``i`` gets its own RNG (so it does not depend on
    ``count``), a kind drawn by weight, and ``make(kind, rng, split, task_id)`` builds it."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    tasks = []
    for i in range(count):
        rng = task_rng(domain, split, i)
        kind = rng.choices(list(kinds), list(weights))[0]
        tasks.append(make(kind, rng, split, f"{domain}-{split}-{i:04d}"))
    return tasks


def pick_template(rng: random.Random, templates: dict[str, Sequence[str]], split: str) -> str:
    """Phrasings are held out by split: ``templates = {"train": [...], "test": [...]}``."""
    return rng.choice(list(templates[split]))


class ReferenceRecorder:
    """Plays a reference solution on a real backend and turns it into a :class:`Task`.

    Usage::

        rec = ReferenceRecorder(RetailToolkit, state)
        (customer,) = rec.step(("find_customer", {"email": email}))
        rec.answer("Your order ... ", contains=["O-1234"])  # closes the turn; later steps belong to the next
        task = rec.build(id=..., domain=..., split=..., user_turns=[...], reward=[...])
    """

    def __init__(self, toolkit: type[Toolkit], initial_state: dict[str, Any], backend_name: str) -> None:
        self.toolkit = toolkit
        self.initial_state = copy.deepcopy(initial_state)  # later edits by the generator must not leak in
        self.backend_name = backend_name
        self._backend = PythonBackend(toolkit, timeout=None)
        self._backend.reset(Task(id="draft", user_turns=("draft",), initial_state=initial_state))
        self._turns: list[RefTurn] = []
        self._steps: list[tuple[RefCall, ...]] = []

    def step(self, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
        """Execute one assistant step (several calls = parallel); returns their real results."""
        recorded, results = [], []
        for name, arguments in calls:
            result = self._backend.execute(ToolCall(name, arguments))
            if not result.ok:
                raise RuntimeError(f"reference call {name}({arguments}) failed: {result.error}")
            recorded.append(RefCall(name, arguments, result.content))
            results.append(result.content)
        self._steps.append(tuple(recorded))
        return results

    def answer(self, text: str, contains: Sequence[str] = ()) -> None:
        """Close the current user turn with the reference answer and the strings it must contain."""
        self._turns.append(RefTurn(tuple(self._steps), text, tuple(contains)))
        self._steps = []

    @property
    def state(self) -> dict[str, Any]:
        return self._backend.state()

    def build(
        self,
        *,
        id: str,
        domain: str,
        split: str,
        user_turns: Sequence[str],
        reward: Sequence[str],
        system: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task:
        if self._steps:
            raise RuntimeError("steps recorded after the last answer(); every turn must end with an answer")
        return Task(
            id=id,
            user_turns=tuple(user_turns),
            tools=tuple(spec.to_openai() for spec in self.toolkit.tool_specs()),
            backend=self.backend_name,
            initial_state=self.initial_state,
            reference=tuple(self._turns),
            reward=tuple(reward),
            domain=domain,
            split=split,
            system=system,
            metadata=metadata or {},
        )
