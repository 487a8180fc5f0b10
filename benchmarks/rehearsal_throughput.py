"""Imagined-backend throughput: env-role calls one at a time vs batched across episodes, prompted vs inline.

One process, one model, the same oracle episodes (the actor is scripted, so only the env role generates),
greedy decoding, the same token budget. Prints env-role calls per second and generated tokens per second
for each setting, and the ratios:

* batched / one-by-one (prompted): what ``BatchingImaginer`` buys (``envace fidelity --batch-size``,
  ``collect`` with several envs);
* inline / prompted (both batched): what writing the result inside the actor's context saves over a fresh
  simulator prompt per call.

    python benchmarks/rehearsal_throughput.py [--policy default|ckpt:DIR] [--episodes 8] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the env)
from envace_gym.agents.eval.fidelity import fidelity_report
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy


class Counting:
    """Counts the env role's calls and generated tokens; passes everything to the policy."""

    def __init__(self, policy: LMPolicy) -> None:
        self.policy = policy
        self.calls = self.tokens = 0

    def imagine_batch(self, requests, sampling=None):
        gens = self.policy.imagine_batch(requests, sampling)
        self.calls += len(gens)
        self.tokens += sum(len(g.token_ids) for g in gens)
        return gens

    def imagine(self, request):
        return self.imagine_batch([request])[0]


def run(policy: LMPolicy, args, mode: str, batch_size: int) -> dict:
    counting = Counting(policy)
    entry = counting if mode == "prompted" else (counting, mode)
    policy.engine.clear()
    start = time.perf_counter()
    report = fidelity_report(
        lambda: gym.make("EnvACE-ToolCall-v0", suite=args.suite, split="test"),
        {"b": entry},
        args.episodes,
        seed=args.seed,
        progress=False,
        batch_size=batch_size,
    )
    elapsed = time.perf_counter() - start
    return {
        "mode": mode,
        "batch_size": batch_size,
        "seconds": round(elapsed, 1),
        "calls": counting.calls,
        "calls_per_s": round(counting.calls / elapsed, 3),
        "tokens_per_s": round(counting.tokens / elapsed, 1),
        "parse_valid_rate": report["backends"]["b"]["parse_valid_rate"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="default")
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    policy = LMPolicy.from_spec(
        args.policy, sampling=SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens, seed=0)
    )
    run(policy, argparse.Namespace(**{**vars(args), "episodes": 1}), "prompted", 1)  # warm-up, not reported
    rows = [
        run(policy, args, "prompted", 1),
        run(policy, args, "prompted", args.episodes),
        run(policy, args, "inline", args.episodes),
    ]
    single, batched, inline = rows
    ratios = {
        "batched_over_single": round(batched["calls_per_s"] / single["calls_per_s"], 2),
        "inline_over_prompted": round(inline["calls_per_s"] / batched["calls_per_s"], 2),
    }
    if args.json:
        print(json.dumps({"policy": args.policy, "episodes": args.episodes, "rows": rows, "ratios": ratios}))
        return
    print(f"{'mode':10} {'batch':>5} {'calls':>6} {'seconds':>8} {'calls/s':>8} {'tok/s':>7} {'parse-valid':>11}")
    for r in rows:
        print(
            f"{r['mode']:10} {r['batch_size']:>5} {r['calls']:>6} {r['seconds']:>8} {r['calls_per_s']:>8} "
            f"{r['tokens_per_s']:>7} {r['parse_valid_rate']:>11.0%}"
        )
    print(
        f"batched / one-by-one: {ratios['batched_over_single']}x   inline / prompted: {ratios['inline_over_prompted']}x"
    )


if __name__ == "__main__":
    main()
