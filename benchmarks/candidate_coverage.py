"""How often the oracle's first call is among ``CandidateActions``' candidates, per builtin domain and ``k``.

The candidates are built from a copy of each task with its reference removed (so nothing of the
reference can reach the builder); the reference is read afterwards only to score. Prints one line per
(domain, k): covered / test tasks that need a call.

    python benchmarks/candidate_coverage.py [--split test] [--k 16,32]
"""

from __future__ import annotations

import argparse
import dataclasses

import gymnasium as gym

import envace_gym
from envace_gym.calls import parse_calls
from envace_gym.rewards import call_match
from envace_gym.wrappers import CandidateActions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test")
    parser.add_argument("--k", default="16,32", help="comma-separated candidate counts")
    args = parser.parse_args()
    for domain in envace_gym.registration.BUILTIN_DOMAINS:
        tasks = [t for t in envace_gym.load_suite(f"builtin/{domain}").filter(split=args.split) if t.reference_calls]
        for k in (int(x) for x in args.k.split(",")):
            hits = 0
            for task in tasks:
                blind = dataclasses.replace(task, reference=())
                env = CandidateActions(gym.make("EnvACE-ToolCall-v0", tasks=[blind], split=None), k=k)
                _, info = env.reset(options={"task_id": task.id})
                expected = [task.expected_calls[0]]
                hits += any(call_match(parse_calls(c).calls, expected) == 1.0 for c in info["candidates"])
            print(f"{domain:<8} k={k:<3} {hits:>3}/{len(tasks):<3} = {hits / len(tasks):.3f}")


if __name__ == "__main__":
    main()
