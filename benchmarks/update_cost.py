"""What a training step's update costs with LoRA against full-weight updates, on the same samples.

One rollout of the learning benchmark's step (its recipe: 4 tasks x group 8, temperature 1.0, 96 new tokens,
plain GRPO on the real tools) is played once; its samples are then given, alternately, to a full-weight
trainer and a LoRA trainer (both from the same warm start), ``--repeats`` times each. It prints the median
update time of each and their ratio, measured in one run, and writes JSON (every timing kept). The rollout's
own time and its split into prompt encoding and decoding are printed too: the step's other half.

    python benchmarks/update_cost.py --out runs/update_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents import recipe
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.provenance import run_environment
from envace_gym.agents.train.envace import EnvACETrainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the benchmark's task pool and envs: one definition)


def trainer(args: argparse.Namespace, lora: bool) -> EnvACETrainer:
    policy = LMPolicy.from_spec(args.policy, sampling=SamplingConfig(0.0, 1.0, 96, 0), progress=False)
    if args.policy == "default":  # the shipped adapter fits the embedded model only
        recipe.load_warm_adapter(policy, scale=recipe.WARM_SCALE)
    # Full weights at the earlier benchmark's rate (2e-5); the rate does not change an update's cost.
    settings = {**recipe.RL_SETTINGS, "lora": lora, "lr": recipe.RL_SETTINGS["lr"] if lora else 2e-5}
    cfg = learning.EnvACEConfig(backend="real", steps=1, seed=0, **settings)
    return EnvACETrainer(policy, learning.env_factory(args, "train"), cfg, None, progress=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="runs/update_cost.json")
    args = parser.parse_args(argv)
    args.suite, args.max_calls, args.max_turns = learning.DEFAULT["suite"], learning.DEFAULT["max_calls"], 3
    full, lora = trainer(args, False), trainer(args, True)
    stats = full.policy.engine.stats
    before = dict(stats)
    t0 = time.monotonic()
    trajs, groups = full.rollout(1)
    rollout = {
        "seconds": round(time.monotonic() - t0, 2),
        "prefill_s": round(stats["prefill_s"] - before["prefill_s"], 2),
        "decode_s": round(stats["decode_s"] - before["decode_s"], 2),
        "generated_tokens": stats["generated_tokens"] - before["generated_tokens"],
    }
    samples = full.samples(trajs, groups, full.score(trajs))
    timings: dict[str, list[float]] = {"full": [], "lora": []}
    for _ in range(args.repeats):  # alternated, so a load change touches both alike
        for name, t in (("full", full), ("lora", lora)):
            t0 = time.monotonic()
            t.update(samples)
            timings[name].append(round(time.monotonic() - t0, 4))
    medians = {k: statistics.median(v) for k, v in timings.items()}
    result = {
        "rollout": rollout,
        "samples": len(samples),
        "trained_rows": sum(1 for s in samples if s.advantage != 0.0),
        "update_s": timings,
        "median_update_s": medians,
        "lora_over_full": round(medians["lora"] / max(medians["full"], 1e-9), 3),
        "environment": run_environment(full.policy),
        "trainable_parameters": {
            "full": sum(p.numel() for p in full.model.parameters() if p.requires_grad),
            "lora": sum(p.numel() for p in lora.model.parameters() if p.requires_grad),
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(
        f"rollout {rollout['seconds']:.0f} s (prefill {rollout['prefill_s']:.0f} s, decode "
        f"{rollout['decode_s']:.0f} s, {rollout['generated_tokens']} tokens); update, median of {args.repeats}: "
        f"full {medians['full']:.1f} s, "
        f"LoRA {medians['lora']:.1f} s: LoRA/full = {result['lora_over_full']:.2f}"
    )
    return result


if __name__ == "__main__":
    main()
