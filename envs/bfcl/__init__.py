"""BFCL v4 (Berkeley Function Calling Leaderboard) inside EnvACE, scored as BFCL's own checker scores it.

Data, stateful API classes and checker functions come from the installed ``bfcl-eval`` package at run time
(nothing of it is copied here); importing this package does not import ``bfcl_eval``.

* `load_suite` (suites ``bfcl/<category>``): a category's entries as `Task`.
* `BFCLEnv` (``gym.make("EnvACE-BFCL-v0", category=...)``): the env that scores them.
* Backends ``bfcl/multi_turn`` (`BFCLBackend`) and ``bfcl/single_turn``
  (`RecordingBackend`); reward basis ``bfcl``.
"""

from __future__ import annotations

from functools import cache

from envace_gym.backends import register_backend
from envace_gym.rewards import register_reward_basis
from envace_gym.suites import SuiteInfo
from envace_gym.tasks import TaskSuite

from .categories import CATEGORIES, REWARD_BASIS, UNSUPPORTED, category_kind, check_category
from .env import BFCL_SYSTEM_PROMPT, BFCLEnv, bfcl_basis

__all__ = [
    "load_suite",
    "suite_info",
    "BFCLEnv",
    "BFCL_SYSTEM_PROMPT",
    "CATEGORIES",
    "UNSUPPORTED",
    "REWARD_BASIS",
    "category_kind",
]

register_reward_basis(REWARD_BASIS, bfcl_basis, overwrite=True)
register_backend("bfcl/multi_turn", "envace_gym.envs.bfcl.backend:make_multi_turn_backend", overwrite=True)
register_backend("bfcl/single_turn", "envace_gym.envs.bfcl.backend:make_single_turn_backend", overwrite=True)


def suite_info(category: str) -> SuiteInfo:
    """The info of ``bfcl/<category>`` without building its tasks: one test task per entry (non-blank line)
    of the category's data file."""
    check_category(category)
    from .upstream import count_entries

    return SuiteInfo((f"bfcl/{category}",), {"test": count_entries(category)})


@cache
def load_suite(category: str) -> TaskSuite:
    """All tasks of one BFCL category (built once per process); raises ``ValueError`` for an unknown one."""
    check_category(category)
    from .convert import build_tasks

    return TaskSuite(build_tasks(category), name=f"bfcl/{category}")
