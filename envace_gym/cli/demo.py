"""``envace demo`` (what ``make demo`` runs): the embedded model before and after a supervised warm start.

Its flags are exactly the fields of `DemoConfig`.
"""

from __future__ import annotations

from envace_gym.agents.demo import DemoConfig, run_demo

__all__ = ["CONFIGS", "run"]

CONFIGS = (DemoConfig,)


def run(cfg: DemoConfig) -> int:
    run_demo(cfg)
    return 0
