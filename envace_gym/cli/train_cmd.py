"""``envace train``: EnvACE training (role-wise GRPO) of an LM policy, under imagination or on real tools.

Its flags are the shared env and run flags, `TrainArgs` (which model, where the run goes, resume,
a TOML config) and every field of `EnvACEConfig`. With
``--config FILE.toml`` the file's keys are the defaults and flags given on the command line win.
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Any

from envace_gym.agents.train.config import EnvACEConfig, read_config_values

from .common import LM_POLICY_USAGE, ImportArgs, RunArgs, SamplingArgs, TrainEnvArgs, check_lm_policy, load_lm

__all__ = ["CONFIGS", "FLAG_GROUPS", "TrainArgs", "TrainEnvArgs", "file_defaults", "run"]


@dataclass
class TrainArgs:
    _argument_group_name = "train"

    out: str = field(metadata={"help": "run folder: config.toml, metrics.jsonl, ckpt-N/, learning_curve.png"})
    policy: str = field(default="default", metadata={"help": f"the model to train: {LM_POLICY_USAGE}"})
    resume: bool = field(default=False, metadata={"help": "continue from the newest complete checkpoint in --out"})
    config: str | None = field(
        default=None, metadata={"help": "a TOML file of EnvACEConfig keys (command-line flags override it)"}
    )
    engine: str = field(
        default="hf", metadata={"help": "generation engine: hf, or vllm (CUDA + vllm installed; weights synced)"}
    )

    def __post_init__(self) -> None:
        check_lm_policy(self.policy)
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"--engine must be hf or vllm, got {self.engine!r}")


CONFIGS = (TrainEnvArgs, TrainArgs, EnvACEConfig, RunArgs, ImportArgs)

#: ``--help`` groups of `EnvACEConfig`'s flags (its ``seed`` is the run group's ``--seed``).
FLAG_GROUPS = {
    "imagination (who answers tool calls)": (
        "backend", "simulator", "train_env_role", "real_fraction", "grounding_coef", "grounding", "tool_log",
        "log_targets", "env_role_reward", "env_role_coef", "env_role_kl_coef", "on_invalid",
    ),
    "reward": ("reward", "judge", "imagined_reward"),
    "schedule": ("steps", "tasks_per_step", "group_size", "filter_groups", "rehearsal_fraction", "rehearsal_budget"),
    "objective (role-wise GRPO)": (
        "lr", "warmup_steps", "weight_decay", "grad_clip", "scale_rewards", "clip_low", "clip_high", "dual_clip",
        "ppo_epochs", "kl_coef", "invalid_penalty", "micro_batch_tokens", "detach_prompt", "bf16", "lora", "lora_rank",
        "lora_alpha",
    ),
    "rollout sampling": ("temperature", "top_p", "max_new_tokens"),
    "checkpoints and diagnostics": ("save_every", "keep_last", "log_trajectories_every", "sim_to_real"),
}  # fmt: skip


def file_defaults(ns: Namespace) -> dict[str, Any]:
    """``--config FILE.toml``'s EnvACEConfig as flag defaults: `envace_gym.cli.parse` parses again with
    them, so the flags given on the command line win over the file (an unknown key is an error that names
    the file; the values are checked together with the flags, by EnvACEConfig)."""
    return read_config_values(ns.config) if ns.config else {}


def run(env_args: TrainEnvArgs, args: TrainArgs, cfg: EnvACEConfig, run_args: RunArgs, imports: ImportArgs) -> int:
    from envace_gym.agents.train.envace import EnvACETrainer

    sampling = SamplingArgs(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens)
    quiet, device = run_args.quiet, run_args.device
    policy = load_lm(args.policy, sampling, cfg.seed, engine=args.engine, quiet=quiet, device=device)
    simulator = load_lm(cfg.simulator, sampling, cfg.seed, quiet=quiet, device=device) if cfg.simulator else None
    # The env on real backends: the trainer composes it with cfg.backend (envace_gym.make_env).
    trainer = EnvACETrainer(
        policy, env_args.make_env, cfg, args.out, simulator=simulator, resume=args.resume, progress=run_args.progress
    )
    if trainer.lr_choice and trainer.is_main:
        # stderr under --json: stdout holds the one JSON object
        print(
            f"lr {trainer.cfg.lr:g} ({trainer.lr_choice}; set --lr to override)",
            file=sys.stderr if run_args.json else sys.stdout,
        )
    records = trainer.train()
    last = records[-1] if records else {}
    summary = {
        "out": args.out,
        "steps": trainer.step_done,
        "lr": trainer.cfg.lr,
        "checkpoint": f"{args.out}/ckpt-{trainer.step_done}",
        "reward_actor": last.get("reward_actor"),
        "success_actor": last.get("success_actor"),
        # the run's tool calls by kind (see envace_gym.backends.ledger): pure imagination spends no live one
        **{f"{name}_total": n for name, n in trainer.call_totals.items()},
    }
    if run_args.json:
        print(json.dumps(summary))
    elif trainer.is_main:
        print(
            f"trained {trainer.step_done} steps; checkpoint {summary['checkpoint']} "
            f"(evaluate it with --policy ckpt:{summary['checkpoint']}); curve in {args.out}/learning_curve.png"
        )
        totals = trainer.call_totals
        print(
            f"tool calls: {totals['live_calls']} live, {totals['logged_calls_used']} logged, "
            f"{totals['verifier_calls']} verifier (reward only), {totals['diagnostic_calls']} diagnostic"
        )
    return 0
