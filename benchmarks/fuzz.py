"""Fuzz every env with hostile actions and count what goes wrong (``envace_gym.fuzz``).

    python benchmarks/fuzz.py [--actions 2000] [--seed 0] [--slow 2.0]

For each builtin domain, BFCL multi-turn (``multi_turn_base``) and tau2 retail: actions tried, uncaught
exceptions (crashes), steps slower than ``--slow`` seconds, rejected actions without an error code, rejected
calls that changed backend state, and the slowest step, at Python's default recursion limit. The test suite
runs the same fuzzer with fewer actions (``tests/test_reliability.py``).
"""

from __future__ import annotations

import argparse
import sys
import time

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.fuzz import fuzz_env

ENVS = {
    **{
        f"builtin/{d}": ("EnvACE-ToolCall-v0", {"suite": f"builtin/{d}"}) for d in ("bank", "files", "retail", "travel")
    },
    "bfcl/multi_turn_base": ("EnvACE-BFCL-v0", {"category": "multi_turn_base", "split": None}),
    "tau2/retail": ("EnvACE-Tau2-v0", {"domain": "retail", "split": None}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actions", type=int, default=2000, help="hostile actions per env (tau2: a tenth)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slow", type=float, default=2.0, help="a step slower than this many seconds is reported")
    args = parser.parse_args()
    sys.setrecursionlimit(1000)  # the default: what a user's process has
    print(
        f"{'env':<22} {'actions':>8} {'crashes':>8} {'slow':>6} {'no code':>8} {'state moved':>12} {'max step s':>11}"
    )
    total_crashes = 0
    for name, (env_id, kwargs) in ENVS.items():
        env = gym.make(env_id, **kwargs)
        n = max(10, args.actions // 10) if name.startswith("tau2") else args.actions
        t0 = time.perf_counter()
        report = fuzz_env(env, n, seed=args.seed, slow_s=args.slow)
        env.close()
        row = report.as_row()
        total_crashes += row["crashes"]
        print(
            f"{name:<22} {row['actions']:>8} {row['crashes']:>8} {row['slow_steps']:>6} {row['unexplained']:>8} "
            f"{row['state_changes']:>12} {row['max_step_s']:>11.3f}   ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        for crash in report.crashes[:3]:
            print("   crash:", crash.splitlines()[0])
    print("no crashes" if total_crashes == 0 else f"{total_crashes} crashes")


if __name__ == "__main__":
    main()
