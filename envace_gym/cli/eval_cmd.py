"""``envace eval``: evaluate a scripted or LM policy on an env, with real or imagined tool backends."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import (
    LM_POLICY_USAGE,
    BackendArgs,
    EnvArgs,
    RunArgs,
    SamplingArgs,
    is_lm_policy,
    load_lm,
    make_env,
    make_imaginer,
)

__all__ = ["CONFIGS", "EvalArgs", "run"]


@dataclass
class EvalArgs:
    _argument_group_name = "eval"

    policy: str = field(default="oracle", metadata={"help": f"oracle | random | noop | {LM_POLICY_USAGE}"})
    simulator: str = field(default="default", metadata={"help": "the env-role model for --backend simulator"})
    episodes: int | None = field(default=None, metadata={"help": "episodes to run; default: every task once"})
    out: str | None = field(
        default=None, metadata={"help": "folder for episodes.jsonl and summary.json (and trajectories.jsonl)"}
    )
    batch_size: int = field(default=8, metadata={"help": "envs stepped in lockstep for LM policies"})

    def __post_init__(self) -> None:
        from envace_gym.agents.scripted import SCRIPTED_POLICIES

        if self.policy not in SCRIPTED_POLICIES and not is_lm_policy(self.policy):
            raise ValueError(f"unknown policy {self.policy!r}; use {' | '.join(SCRIPTED_POLICIES)} | {LM_POLICY_USAGE}")
        if self.episodes is not None and self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1 (leave it out to run every task once), got {self.episodes}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")


CONFIGS = (EnvArgs, BackendArgs, EvalArgs, RunArgs, SamplingArgs)


def run(env_args: EnvArgs, backend_args: BackendArgs, args: EvalArgs, run_args: RunArgs, sampling: SamplingArgs) -> int:
    from envace_gym.agents.eval.evaluate import evaluate
    from envace_gym.agents.scripted import SCRIPTED_POLICIES, make_scripted_policy

    backend = backend_args.spec
    lm = load_lm(args.policy, sampling, run_args.seed) if is_lm_policy(args.policy) else None
    imaginer = make_imaginer(backend, lm, args.simulator, sampling, run_args.seed)
    env = make_env(env_args, backend, imaginer)
    pool = env.unwrapped.pool
    episodes = args.episodes or len(pool)
    desc = f"eval {args.policy}"
    if args.policy in SCRIPTED_POLICIES:
        policy = make_scripted_policy(args.policy, env.unwrapped.suite, seed=run_args.seed)
        report = evaluate(env, policy, episodes, seed=run_args.seed, progress=run_args.progress, desc=desc)
    else:
        # LM policies step a batch of envs in lockstep (one batched generation per step).
        envs = [env] + [make_env(env_args, backend, imaginer) for _ in range(args.batch_size - 1)]
        try:
            report = evaluate(envs, lm, episodes, seed=run_args.seed, progress=run_args.progress, desc=desc)
        finally:
            for extra in envs[1:]:
                extra.close()
    env.close()  # stops what backends started (MCP servers)
    summary = {
        "env": env_args.env,
        "suite": env.unwrapped.suite.name,
        "split": env_args.split,
        "policy": args.policy,
        "backend": backend_args.backend,
        "seed": run_args.seed,
        **report.summary(),
    }
    if args.out:
        report.save(args.out)
        if args.policy not in SCRIPTED_POLICIES:
            from envace_gym.agents.rollout import save_trajectories

            save_trajectories(report.trajectories, Path(args.out) / "trajectories.jsonl")
        summary["out"] = str(Path(args.out))
    if run_args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 0


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    table = Table(title=f"{summary['policy']} on {summary['suite']} ({summary['split']}, backend={summary['backend']})")
    for col in ("domain", "episodes", "success", "mean reward", "valid calls", "mean turns"):
        table.add_column(col, justify="right" if col != "domain" else "left")
    rows = [*summary["by_domain"].items(), ("all", summary)]
    for name, s in rows:
        table.add_row(
            name,
            str(s["episodes"]),
            pct(s["success_rate"]),
            f"{s['mean_reward']:.3f}",
            pct(s["valid_call_rate"]),
            f"{s['mean_turns']:.1f}",
        )
    Console().print(table)
    if "out" in summary:
        Console().print(f"episodes written to {summary['out']}/episodes.jsonl")
