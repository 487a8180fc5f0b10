"""Builtin task suites: stateful, deterministic pure-Python domains with generated tasks.

Each domain module defines a `Toolkit`, ``make_backend(**kwargs)`` and
``generate(split, count, exclude=()) -> list[Task]``. Suites are generated from fixed seeds, so every process sees the
same tasks; ``val`` and ``test-id`` are fresh instances of the train split's phrasings and pools, ``test``
uses held-out entities and phrasings (``_common``).
"""

from __future__ import annotations

import importlib
from functools import cache, partial

from envace_gym.suites import SuiteInfo
from envace_gym.tasks import TaskSuite

from ._common import HELD_IN

DOMAINS = ("bank", "files", "retail", "travel")
#: Tasks per domain and split (_common.SPLITS). val and test-id are in-distribution held-out tasks: the learning
#: benchmark's task pool (tasks of at most two calls, about 64% of bank's) needs >= 96 distinct test-id tasks
#: per seed for 3 seeds, and a val pool to choose settings on.
SPLIT_SIZES = {"train": 600, "val": 200, "test-id": 480, "test": 150}


@cache
def load_domain(domain: str) -> TaskSuite:
    """All splits of one builtin domain."""
    if domain not in DOMAINS:
        raise KeyError(f"unknown builtin domain {domain!r}; choose from {', '.join(DOMAINS)}")
    module = importlib.import_module(f"envace_gym.envs.builtin.{domain}")
    tasks: list = []
    for split, n in SPLIT_SIZES.items():
        # a held-in split (val, test-id) avoids train's texts and world ids, and test-id val's too
        exclude = [t for t in tasks if t.split != "test"] if split in HELD_IN else ()
        tasks += module.generate(split, n, exclude)
    return TaskSuite(tasks, name=f"builtin/{domain}")


def load_mix() -> TaskSuite:
    """Every builtin domain, interleaved by index so that any prefix is a balanced mix."""
    suites = [load_domain(d) for d in DOMAINS]
    mixed = []
    for split in SPLIT_SIZES:
        per_domain = [s.filter(split=split) for s in suites]
        for i in range(max(len(s) for s in per_domain)):
            mixed.extend(s[i] for s in per_domain if i < len(s))
    return TaskSuite(mixed, name="builtin")


def suite_info(domain: str | None = None) -> SuiteInfo:
    """The info of ``builtin/<domain>`` (``None``: of the ``builtin`` mix) without generating its tasks."""
    domains = DOMAINS if domain is None else (domain,)
    return SuiteInfo(tuple(sorted(domains)), {s: n * len(domains) for s, n in sorted(SPLIT_SIZES.items())})


def _domain_loader(domain: str):
    def load() -> TaskSuite:
        return load_domain(domain)

    load.__name__ = f"load_{domain}"
    return load


def info_mix() -> SuiteInfo:
    return suite_info()


for _d in DOMAINS:
    globals()[f"load_{_d}"] = _domain_loader(_d)
    globals()[f"info_{_d}"] = partial(suite_info, _d)  # the suite's info, registered by name
