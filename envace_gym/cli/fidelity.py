"""``envace fidelity``: how close imagined tool results are to the real ones, on oracle episodes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..backends.spec import IMAGINED_KINDS, parse_backend_spec
from .common import LM_POLICY_USAGE, EnvArgs, ImportArgs, RunArgs, SamplingArgs, check_lm_policy, load_lm

__all__ = ["CONFIGS", "FidelityArgs", "FidelitySamplingArgs", "run"]


@dataclass
class FidelityArgs:
    _argument_group_name = "fidelity"

    policy: str = field(
        default="default",
        metadata={"help": f"the model whose env role is measured (backends self, self-inline): {LM_POLICY_USAGE}"},
    )
    backends: str = field(
        default="self,self-inline",
        metadata={"help": "imagined backends to measure, comma-separated: self (prompted), self-inline, simulator"},
    )
    simulator: str | None = field(
        default=None, metadata={"help": "the separate simulator model (adds backend simulator; default model: default)"}
    )
    episodes: int = field(default=20, metadata={"help": "oracle episodes (with tool calls) to compare on"})
    grounding: Literal["reference", "none"] = field(
        default="reference",
        metadata={"help": "few-shot examples from the reference trajectory in the env-role prompt, or none"},
    )
    batch_size: int = field(default=8, metadata={"help": "episodes played at once (their env-role calls are batched)"})
    out: str | None = field(
        default=None, metadata={"help": "folder for fidelity.json and fidelity.png; default: runs/fidelity-<time>"}
    )

    def __post_init__(self) -> None:
        check_lm_policy(self.policy)
        if self.simulator is not None:
            check_lm_policy(self.simulator, "--simulator")
        if not self.backend_list or set(self.backend_list) - set(IMAGINED_KINDS):
            raise ValueError(
                f"--backends takes a comma-separated list of {', '.join(IMAGINED_KINDS)}; got {self.backends!r}"
            )
        if self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {self.episodes}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")

    @property
    def backend_list(self) -> list[str]:
        names = [b.strip() for b in self.backends.split(",") if b.strip()]
        return names + ["simulator"] if self.simulator and "simulator" not in names else names


@dataclass
class FidelitySamplingArgs(SamplingArgs):
    max_new_tokens: int = field(default=160, metadata={"help": "tokens generated per imagined result at most"})


CONFIGS = (EnvArgs, FidelityArgs, RunArgs, FidelitySamplingArgs, ImportArgs)


def run(
    env_args: EnvArgs, args: FidelityArgs, run_args: RunArgs, sampling: FidelitySamplingArgs, imports: ImportArgs
) -> int:
    from envace_gym.agents.eval.fidelity import fidelity_report, fidelity_table, save_report

    policy = load_lm(args.policy, sampling, run_args.seed, quiet=run_args.quiet, device=run_args.device)
    imaginers: dict[str, Any] = {}
    for name in args.backend_list:
        spec = parse_backend_spec(name)
        imaginer = (
            policy
            if spec.self_imagined
            else load_lm(
                args.simulator or "default", sampling, run_args.seed, quiet=run_args.quiet, device=run_args.device
            )
        )
        imaginers[name] = (imaginer, spec.imagination_mode)
    report = fidelity_report(
        env_args.make_env,  # the reference: real backends
        imaginers,
        args.episodes,
        seed=run_args.seed,
        progress=run_args.progress,
        grounding=args.grounding,
        batch_size=args.batch_size,
    )
    report.update({"policy": args.policy, "simulator": args.simulator, "split": env_args.split})
    out = Path(args.out or f"runs/fidelity-{time.strftime('%Y%m%d-%H%M%S')}")
    save_report(report, out)
    report["out"] = str(out)
    if run_args.json:
        print(json.dumps(report))
    else:
        from rich.console import Console

        Console().print(fidelity_table(report))
        Console().print(f"report: {out}/fidelity.json, plot: {out}/fidelity.png")
    return 0
