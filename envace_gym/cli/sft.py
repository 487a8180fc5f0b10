"""``envace sft``: supervised warm start of an LM policy on the train split's reference trajectories.

Its flags are every field of `SFTConfig`, the shared env, backend, run
and sampling flags, and `SFTArgs` (what is not part of the training run: which model, which roles,
where the checkpoint goes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

from envace_gym.agents.lm.chat import GENERATED_ROLES
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft

from .common import (
    LM_POLICY_USAGE,
    BackendArgs,
    ImportArgs,
    RunArgs,
    SamplingArgs,
    TrainEnvArgs,
    check_lm_policy,
    load_lm,
)

__all__ = ["CONFIGS", "FLAG_GROUPS", "SFTArgs", "SFTEnvArgs", "run"]


SFTEnvArgs = TrainEnvArgs  # the split whose reference trajectories are learned


@dataclass
class SFTArgs:
    _argument_group_name = "sft"

    out: str = field(metadata={"help": "checkpoint folder (load it with --policy ckpt:DIR)"})
    policy: str = field(default="default", metadata={"help": f"the model to warm-start: {LM_POLICY_USAGE}"})
    roles: str = field(
        default="actor", metadata={"help": "what to warm-start, comma-separated: actor, env_role or actor,env_role"}
    )

    def __post_init__(self) -> None:
        check_lm_policy(self.policy)
        unknown = [r for r in self.role_list if r not in GENERATED_ROLES]
        if unknown or not self.role_list:
            raise ValueError(
                f"--roles takes a comma-separated list of {', '.join(GENERATED_ROLES)}; got {self.roles!r}"
            )

    @property
    def role_list(self) -> list[str]:
        return [r.strip() for r in self.roles.split(",") if r.strip()]


CONFIGS = (SFTEnvArgs, BackendArgs, SFTArgs, SFTConfig, RunArgs, SamplingArgs, ImportArgs)
#: ``--help`` group of `SFTConfig`'s flags (its ``seed`` is the run group's ``--seed``).
FLAG_GROUPS = {"warm-start run (SFTConfig)": tuple(f.name for f in fields(SFTConfig))}


def run(
    env_args: SFTEnvArgs,
    backend_args: BackendArgs,
    args: SFTArgs,
    cfg: SFTConfig,
    run_args: RunArgs,
    sampling: SamplingArgs,
    imports: ImportArgs,  # imported by cli.parse
) -> int:
    if backend_args.backend != "real":
        raise ValueError(
            f"sft plays the reference episodes with real tools: --backend must be real, got {backend_args.backend!r}"
        )
    env = env_args.make_env()
    policy = load_lm(args.policy, sampling, run_args.seed, quiet=run_args.quiet, device=run_args.device)
    examples = build_sft_examples(
        env, policy, cfg.max_examples, seed=cfg.seed, progress=run_args.progress, roles=args.role_list
    )
    summary = train_sft(policy, examples, cfg, args.out, progress=run_args.progress)
    summary["out"] = args.out
    print(
        json.dumps(summary)
        if run_args.json
        else f"saved checkpoint to {args.out} (load it with --policy ckpt:{args.out}): {summary}"
    )
    return 0
