"""Which warm start leaves GRPO something to learn: the shipped adapter merged at several scales, measured on
``val`` (never test) and on the training pool.

For each merge scale of the shipped LoRA warm start (``recipe.load_warm_adapter(scale=...)``; 1.0 is the
adapter as trained, 0 the base model) it measures

* greedy success on the ``val`` pool, overall and by task kind (what the start can already do);
* on train tasks, groups of ``--group`` episodes sampled at the training temperature: the share of groups
  whose rewards differ (GRPO learns only from those) and the mean success (room left to learn).

It writes JSON (every outcome kept, by task id) and prints a table; ``--write-docs`` renders the table into
docs/learning.md's ``warm-start`` block from a kept JSON.

    python benchmarks/warm_start.py --scales 1.0,0.6,0.4 --out runs/warm_start.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents import recipe
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rollout.loop import collect

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the benchmark's task pool, envs and kinds: one definition)

from envace_gym.agents.provenance import run_environment  # noqa: E402


def spread(trajectories: list[Any], group: int) -> dict[str, Any]:
    """Groups of ``group`` consecutive episodes of one task: the share whose rewards differ, mean success."""
    groups = [trajectories[i : i + group] for i in range(0, len(trajectories), group)]
    differ = [len({round(t.reward, 6) for t in g}) > 1 for g in groups]
    return {
        "groups": len(groups),
        "groups_with_spread": sum(differ),
        "share_with_spread": sum(differ) / len(groups) if groups else 0.0,
        "success": sum(t.success for t in trajectories) / len(trajectories) if trajectories else 0.0,
        "outcomes": {g[0].episode.task_id: [int(t.success) for t in g] for g in groups},
    }


def measure_scale(scale: float, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    policy = LMPolicy.from_spec(args.policy, sampling=SamplingConfig(0.0, 1.0, args.max_new_tokens, 0), progress=False)
    recipe.load_warm_adapter(policy, scale=scale)
    pool = learning.task_pool(args)
    val = [t.id for t in pool if t.split == "val"][: args.val_episodes]
    envs = [learning.env_factory(args, "val")() for _ in range(min(16, len(val)))]
    greedy = collect(envs, policy, len(val), task_ids=val, seed=0, progress=False, desc="val")
    kinds = {t.id: t.metadata.get("kind", t.domain) for t in pool}
    by_kind: dict[str, list[int]] = {}
    for t in greedy:
        tally = by_kind.setdefault(kinds[t.episode.task_id], [0, 0])
        tally[0] += int(t.success)
        tally[1] += 1
    train = [t.id for t in pool if t.split == "train"]
    picked = random.Random(0).sample(train, args.spread_tasks)
    ids = [tid for tid in picked for _ in range(args.group)]
    envs = [learning.env_factory(args, "train")() for _ in range(min(16, len(ids)))]
    sampled = collect(
        envs,
        policy,
        len(ids),
        task_ids=ids,
        seed=0,
        progress=False,
        desc="groups",
        sampling=SamplingConfig(args.temperature, 1.0, args.max_new_tokens, 0),
    )
    return {
        "scale": scale,
        "val_success": sum(t.success for t in greedy) / len(greedy),
        "val_episodes": len(greedy),
        "val_by_kind": dict(sorted(by_kind.items())),
        "val_outcomes": {t.episode.task_id: int(t.success) for t in greedy},
        "train_groups": spread(sampled, args.group),
        "seconds": round(time.monotonic() - t0, 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    kinds = sorted({k for r in rows for k in r["val_by_kind"]})
    head = (
        "| merge scale | val success (greedy) | " + " | ".join(kinds) + " | train groups with spread | train success |"
    )
    lines = [head, "|---" * (len(kinds) + 4) + "|"]
    for r in rows:
        g = r["train_groups"]
        cells = [f"{r['val_by_kind'][k][0]}/{r['val_by_kind'][k][1]}" if k in r["val_by_kind"] else "-" for k in kinds]
        lines.append(
            f"| {r['scale']:g} | {100 * r['val_success']:.1f}% of {r['val_episodes']} | " + " | ".join(cells)
            + f" | {g['groups_with_spread']}/{g['groups']} | {100 * g['success']:.0f}% |"
        )  # fmt: skip
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="1.0,0.6,0.4", help="merge scales of the shipped adapter")
    parser.add_argument("--policy", default="default")
    parser.add_argument("--suite", default=learning.DEFAULT["suite"])
    parser.add_argument("--max-calls", type=int, default=learning.DEFAULT["max_calls"])
    parser.add_argument("--max-turns", type=int, default=learning.DEFAULT["max_turns"])
    parser.add_argument("--max-new-tokens", type=int, default=learning.DEFAULT["max_new_tokens"])
    parser.add_argument("--temperature", type=float, default=learning.DEFAULT["temperature"])
    parser.add_argument("--val-episodes", type=int, default=64)
    parser.add_argument("--spread-tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--out", default="runs/warm_start.json")
    parser.add_argument("--write-docs", metavar="RESULTS.json", help="render docs/learning.md's block; run nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    if args.write_docs:
        from _docs import write_block

        rows = json.loads(Path(args.write_docs).read_text())["rows"]
        write_block("learning.md", "warm-start", table(rows))
        return rows
    rows: list[dict[str, Any]] = []
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for scale in (float(s) for s in args.scales.split(",")):
        rows.append(measure_scale(scale, args))
        kept = {"settings": vars(args), "rows": rows, "environment": run_environment(device=args.device)}
        out.write_text(json.dumps(kept, indent=1))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
