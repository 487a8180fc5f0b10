"""``envace demo`` (what ``make demo`` runs): the embedded model before and after a supervised warm start.

Its flags are exactly the fields of `DemoConfig`.
"""

from __future__ import annotations

from dataclasses import fields

from envace_gym.agents.demo import DemoConfig, run_demo

__all__ = ["CONFIGS", "FLAG_GROUPS", "run"]

CONFIGS = (DemoConfig,)
#: ``--help`` group of `DemoConfig`'s flags.
FLAG_GROUPS = {"demo": tuple(f.name for f in fields(DemoConfig))}


def run(cfg: DemoConfig) -> int:
    run_demo(cfg)
    return 0
