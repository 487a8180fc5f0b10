"""Shared machinery for the builtin domains: per-task RNGs, held-out name pools and phrasings.

A domain generator builds a small world (the initial state), then plays the solution through
:class:`envace_gym.ReferenceRecorder`, which executes every call on a real :class:`PythonBackend` so that
the reference results are the real ones (and a generator bug that makes an invalid call fails loudly).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from envace_gym.recording import ReferenceRecorder
from envace_gym.tasks import Task

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
