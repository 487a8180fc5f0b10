"""Our EnvACETrainer against TRL's GRPOTrainer (with our rollout function), on the real backend.

    python benchmarks/trainer_vs_trl.py --policy default --steps 3

Both arms train the same model (loaded fresh in each), on the same tasks (a fixed pool of
``--tasks-per-step`` train tasks, all played every step), with the same group size, batch, learning rate,
clip, no KL and no std scaling; both roll out through our ``collect()``, so what differs is the update and
the trainer around it. Each arm runs in its own subprocess, so its peak RSS is its own. Reported, over the
steps after the first (warm-up), with a reward that differs inside groups (see ``_transcript_coin``: our
trainer skips the forward pass of rows whose advantage is 0, TRL does not, so the tasks' own sparse reward
would flatter ours; ``--env-reward`` uses it anyway): model tokens per second of the whole step and of the
update alone (model tokens: the actor's generated tokens, the ones both losses train), and the peak RSS;
ratios are ours / TRL (higher is better for tokens/s, lower for memory).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _transcript_coin(ctx) -> float:
    """0 or 1 from a hash of the transcript: almost every group then has rewards that differ, so both trainers
    run a full update on every row (a speed benchmark; nothing is learnt from this reward)."""
    text = json.dumps(ctx.env.messages, sort_keys=True, ensure_ascii=False)
    return float(hashlib.sha256(text.encode()).digest()[0] & 1)


def task_pool(args) -> list:
    """The first ``tasks_per_step`` train tasks of the suite, rewarded by :func:`_transcript_coin` unless
    ``--env-reward``."""
    import envace_gym
    from envace_gym.rewards import register_reward_basis

    tasks = list(envace_gym.load_suite(args.suite).filter(split="train"))[: args.tasks_per_step]
    if args.env_reward:
        return tasks
    register_reward_basis("bench_transcript_coin", _transcript_coin, overwrite=True)
    return [dataclasses.replace(t, reward=("bench_transcript_coin",)) for t in tasks]


def run_ours(args, policy, tasks) -> list[dict]:
    import gymnasium as gym

    from envace_gym.agents.train import EnvACEConfig, EnvACETrainer

    def make() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", tasks=tasks, split=None, max_turns=args.max_turns)

    cfg = EnvACEConfig(
        backend="real",
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        max_new_tokens=args.max_new_tokens,
        temperature=1.0,
        bf16=False,  # TRL's CPU run is float32 too
        detach_prompt=not args.no_detach_prompt,
        save_every=10_000,
        log_trajectories_every=0,
    )
    records = EnvACETrainer(policy, make, cfg, progress=False).train()
    return [
        {"tokens": r["actor_tokens"], "step_s": r["rollout_s"] + r["update_s"], "update_s": r["update_s"]}
        for r in records
    ]


def run_trl(args, policy, tasks) -> list[dict]:
    from transformers import TrainerCallback

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from trl_grpo import build_trainer

    from envace_gym.agents.integrations.trl import make_rollout_func, task_dataset

    ids = {t.id for t in tasks}
    rollout = make_rollout_func(max_new_tokens=args.max_new_tokens, tasks=tasks, split=None, max_turns=args.max_turns)
    dataset = task_dataset(args.suite, "train").filter(lambda r: r["task_id"] in ids)
    steps: list[dict] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0, self.n = time.perf_counter(), len(rollout.timings)

        def on_step_end(self, *a, **k):
            total = time.perf_counter() - self.t0
            rollout_s = sum(rollout.timings[self.n :])
            tokens = sum(t.actor_tokens for t in rollout.last)
            steps.append({"tokens": tokens, "step_s": total, "update_s": total - rollout_s})

    trainer = build_trainer(
        policy,
        rollout,
        dataset,
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        max_completion_length=100_000,  # episodes are bounded by max_turns, as in our trainer
    )
    trainer.add_callback(Clock())
    trainer.train()
    return steps


def arm(args) -> None:
    """One arm, in this process; prints one JSON line."""
    from envace_gym.agents.lm.policy import LMPolicy

    policy = LMPolicy.from_spec(args.policy, progress=False, bf16=False)
    tasks = task_pool(args)
    steps = (run_ours if args.arm == "ours" else run_trl)(args, policy, tasks)
    timed = steps[1:] or steps  # the first step warms up
    tokens = sum(s["tokens"] for s in timed)
    out = {
        "arm": args.arm,
        "steps": steps,
        "tokens": tokens,
        "step_tok_s": tokens / sum(s["step_s"] for s in timed),
        "update_tok_s": tokens / max(sum(s["update_s"] for s in timed), 1e-9),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="default", help="LMPolicy spec (default: the embedded SmolLM2-135M)")
    parser.add_argument("--suite", default="builtin/bank")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument(
        "--env-reward", action="store_true", help="the tasks' own reward (default: a transcript hash, see above)"
    )
    parser.add_argument(
        "--no-detach-prompt",
        action="store_true",
        help="ours computes the exact gradient through the prompt, as TRL does (default: our default, detached)",
    )
    parser.add_argument("--arm", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if args.arm:
        return arm(args)

    results = {}
    for name in ("ours", "trl"):
        cmd = [sys.executable, __file__, "--arm", name] + [a for a in sys.argv[1:] if a != "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"trainer_vs_trl: the {name} arm failed:\n{proc.stderr[-3000:]}")
        results[name] = json.loads(lines[-1][len("RESULT ") :])
    ours, trl = results["ours"], results["trl"]
    ratios = {
        "step_tok_s": ours["step_tok_s"] / trl["step_tok_s"],
        "update_tok_s": ours["update_tok_s"] / trl["update_tok_s"],
        "peak_rss": ours["peak_rss_mb"] / trl["peak_rss_mb"],
    }
    if args.json:
        print(json.dumps({"args": vars(args), **results, "ratios_ours_over_trl": ratios}))
        return
    print(
        f"policy {args.policy}, {args.suite}, {args.tasks_per_step} tasks x group {args.group_size}, "
        f"{args.steps} steps (first one not timed), real backend, max {args.max_turns} turns, "
        f"ours with {'the exact gradient' if args.no_detach_prompt else 'the prompt detached'}"
    )
    print(f"{'':8}{'step tok/s':>12}{'update tok/s':>14}{'peak RSS MB':>13}{'model tokens':>14}")
    for name, r in results.items():
        print(f"{name:8}{r['step_tok_s']:12.1f}{r['update_tok_s']:14.1f}{r['peak_rss_mb']:13.0f}{r['tokens']:14d}")
    print(
        f"{'ours/TRL':8}{ratios['step_tok_s']:11.2f}x{ratios['update_tok_s']:13.2f}x{ratios['peak_rss']:12.2f}x"
        "  (tokens/s: higher is better; RSS: lower is better)"
    )


if __name__ == "__main__":
    main()
