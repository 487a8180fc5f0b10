"""Shared machinery for the builtin domains: per-task RNGs, held-out name pools and phrasings, the splits.

Four splits (`SPLITS`):

* ``train``: what training draws from;
* ``val``: the train split's phrasings and name pools, fresh task instances (own RNG streams, so new worlds,
  amounts and ids), no task sharing its user text or a world id with a train task: where settings are chosen;
* ``test-id``: the same as ``val``, disjoint from train and val too: in-distribution held-out tasks, read once
  for final figures (what RL on train phrasings can be expected to reach);
* ``test``: held-out phrasings, names and entities (`POOL` maps it to its own pools): the
  generalisation figure.

A "world id" (`world_ids`) is an identifier of four or more digits in a task's initial state (account,
customer, order and booking ids); short ids (a product's ``P-123``, a flight's ``LH123``, a transaction's
``T-3``) come from small pools shared by every world, as the names of the train pool do.

A domain generator builds a small world (the initial state), then plays the solution through
`envace_gym.recording.ReferenceRecorder`, which executes every call on a real `PythonBackend` so that
the reference results are the real ones (and a generator bug that makes an invalid call fails loudly).
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar

from envace_gym.recording import ReferenceRecorder
from envace_gym.tasks import Task

__all__ = [
    "ReferenceRecorder",
    "task_rng",
    "pick_template",
    "generate_tasks",
    "world_ids",
    "taken_ids",
    "SPLITS",
    "POOL",
]

SPLITS = ("train", "val", "test-id", "test")
#: The name pools and phrasings a split draws from: ``val`` and ``test-id`` are in-distribution (train's).
POOL = {"train": "train", "val": "train", "test-id": "train", "test": "test"}
#: The held-in splits, in the order they are generated: each is kept disjoint from train and the ones before.
HELD_IN = ("val", "test-id")

_WORLD_ID = re.compile(r"\b[A-Z]{1,3}-?\d{4,}\b")
# The world ids a held-in split's generation must not draw (train's, val's): set by generate_tasks, read by the
# domains' id draws (taken_ids), so a world is rarely drawn only to be skipped. Empty for train and test, whose
# draws are therefore exactly what they were before the held-in splits existed.
_TAKEN: ContextVar[frozenset[str]] = ContextVar("taken_world_ids", default=frozenset())


def taken_ids() -> frozenset[str]:
    """The world ids the split being generated must avoid (`generate_tasks`' ``exclude``)."""
    return _TAKEN.get()


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


def world_ids(task: Task) -> set[str]:
    """The identifiers of four or more digits in ``task``'s initial state (keys and values, at any depth)."""
    return set(_WORLD_ID.findall(json.dumps(task.initial_state, sort_keys=True)))


def generate_tasks(
    domain: str,
    split: str,
    count: int,
    kinds: Sequence[str],
    weights: Sequence[float],
    make: Callable[[str, random.Random, str, str], Task],
    exclude: Sequence[Task] = (),
) -> list[Task]:
    """The generation loop every domain shares: task ``i`` gets its own RNG (so it does not depend on
    ``count``), a kind drawn by weight, and ``make(kind, rng, pool, task_id)`` builds it from the split's
    pool (`POOL`).

    ``exclude``: tasks a held-in split must not overlap (train's, and val's for test-id). A candidate whose
    user text or any world id (`world_ids`) one of them has is skipped and the next RNG stream is tried,
    so task ``i`` is still the same whatever ``count`` is."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    texts = {turn for t in exclude for turn in t.user_turns}
    ids = set().union(*(world_ids(t) for t in exclude)) if exclude else set()
    tasks: list[Task] = []
    candidate = 0
    token = _TAKEN.set(frozenset(ids))
    try:
        while len(tasks) < count:
            rng = task_rng(domain, split, candidate)
            candidate += 1
            kind = rng.choices(list(kinds), list(weights))[0]
            task = make(kind, rng, POOL[split], f"{domain}-{split}-{len(tasks):04d}")
            if exclude and (texts.intersection(task.user_turns) or ids & world_ids(task)):
                continue
            tasks.append(task if task.split == split else dataclasses.replace(task, split=split))
    finally:
        _TAKEN.reset(token)
    return tasks


def pick_template(rng: random.Random, templates: dict[str, Sequence[str]], split: str) -> str:
    """Phrasings are held out by pool: ``templates = {"train": [...], "test": [...]}``; ``split`` is a pool
    (`POOL`: val and test-id draw train's)."""
    return rng.choice(list(templates[POOL[split]]))
