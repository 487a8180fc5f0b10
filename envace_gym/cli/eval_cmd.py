"""``envace eval``: evaluate a scripted or LM policy on an env, with real or imagined tool backends."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envace_gym.agents.rehearsal.private import (  # no torch: the policy loads it
    REHEARSAL_CHOICES,
    REHEARSAL_MODES,
    REHEARSAL_USES,
)

from .._registry import did_you_mean, unknown_message
from .common import (
    LM_POLICIES,
    LM_POLICY_USAGE,
    BackendArgs,
    EnvArgs,
    ImportArgs,
    RunArgs,
    SamplingArgs,
    is_lm_spec,
    load_lm,
    make_imaginer,
)

__all__ = ["CONFIGS", "PLOT_FILE", "EvalArgs", "run"]

#: ``--plot``'s chart, in ``--out``.
PLOT_FILE = "eval_by_domain.png"

if TYPE_CHECKING:  # the agents load torch: imported where the command runs
    from envace_gym.agents.lm.policy import LMPolicy
    from envace_gym.agents.rehearsal import PrivateRehearsal, VerifiedCalls


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
    rehearsal_budget: str | None = field(
        default=None,
        metadata={
            "help": "test-time private rehearsal: N imagined episodes of each task (no reference, no real calls) "
            "before the real one, or 'adaptive' (until two agree, at most --rehearsal-max-budget); LM policies"
        },
    )
    rehearsal_mode: str = field(
        default="parallel", metadata={"help": "parallel (independent, batched) | sequential (each sees the memory)"}
    )
    rehearsal_max_budget: int = field(
        default=4, metadata={"help": "the most rehearsals of --rehearsal-budget adaptive"}
    )
    rehearsal_memory_tokens: int = field(default=256, metadata={"help": "the rehearsal memory's bound, in tokens"})
    rehearsal_use: str = field(
        default="memory",
        metadata={
            "help": "memory (rehearse before the task; the agent reads a memory of it) | select (rehearse before "
            "every turn; commit the chosen rehearsal's first message for real, no rehearsal text in context)"
        },
    )
    rehearsal_choose: str = field(
        default="agreement",
        metadata={
            "help": "(select) agreement (the most frequent first message; a tie goes to the policy's verdict) | "
            "draft (the policy's own next message is a vote and wins ties) | outcome (the first message whose "
            "rehearsals reached an answer with no error result; the draft wins ties) | judge (the policy's own "
            "verdict among the rehearsals)"
        },
    )
    plot: bool = field(
        default=False,
        metadata={
            "help": f"write a bar chart of the success rate by domain and overall, with 95 percent Wilson "
            f"intervals, to OUT/{PLOT_FILE} (needs --out)"
        },
    )
    verify_calls: bool = field(
        default=False,
        metadata={
            "help": "before a state-changing call is sent for real, the policy's env role predicts its result; a "
            "call predicted to fail is revised once (VerifiedCalls); LM policies"
        },
    )

    def __post_init__(self) -> None:
        from envace_gym.agents.scripted import SCRIPTED_POLICIES

        if self.policy not in SCRIPTED_POLICIES and not is_lm_spec(self.policy):
            close = did_you_mean(self.policy, (*SCRIPTED_POLICIES, *LM_POLICIES))
            usage = f"use {' | '.join(SCRIPTED_POLICIES)} | {LM_POLICY_USAGE}"
            raise ValueError(unknown_message("policy", self.policy, close, usage))
        if self.episodes is not None and self.episodes < 1:
            raise ValueError(f"--episodes must be >= 1 (leave it out to run every task once), got {self.episodes}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.rehearsal_budget is not None:
            if self.rehearsal_budget != "adaptive" and not self.rehearsal_budget.isdigit():
                raise ValueError(
                    f"--rehearsal-budget must be an integer >= 0 or adaptive, got {self.rehearsal_budget!r}"
                )
            if not is_lm_spec(self.policy):
                raise ValueError("--rehearsal-budget needs a language-model --policy (it imagines the tool results)")
        if self.rehearsal_mode not in REHEARSAL_MODES:
            modes = " or ".join(REHEARSAL_MODES)
            raise ValueError(f"--rehearsal-mode must be {modes}, got {self.rehearsal_mode!r}")
        if self.rehearsal_max_budget < 2:
            raise ValueError(f"--rehearsal-max-budget must be >= 2, got {self.rehearsal_max_budget}")
        if self.rehearsal_memory_tokens < 16:
            raise ValueError(f"--rehearsal-memory-tokens must be >= 16, got {self.rehearsal_memory_tokens}")
        if self.rehearsal_use not in REHEARSAL_USES:
            raise ValueError(f"--rehearsal-use must be {' or '.join(REHEARSAL_USES)}, got {self.rehearsal_use!r}")
        if self.rehearsal_choose not in REHEARSAL_CHOICES:
            choices = " or ".join(REHEARSAL_CHOICES)
            raise ValueError(f"--rehearsal-choose must be {choices}, got {self.rehearsal_choose!r}")
        if self.rehearsal_use == "select" and self.rehearsal_budget is None:
            raise ValueError("--rehearsal-use select needs --rehearsal-budget (rehearsals to choose from)")
        if self.rehearsal_choose != "agreement" and self.rehearsal_use != "select":
            raise ValueError("--rehearsal-choose applies to --rehearsal-use select")
        if self.plot and not self.out:
            raise ValueError(f"--plot writes {PLOT_FILE} into the --out folder: give --out DIR")
        if self.verify_calls and not is_lm_spec(self.policy):
            raise ValueError("--verify-calls needs a language-model --policy (it drafts, predicts and revises calls)")
        if self.verify_calls and self.rehearsal_budget is not None:
            raise ValueError("--verify-calls cannot be combined with --rehearsal-budget (both choose the message)")

    def rehearsal(self, policy: LMPolicy, seed: int) -> LMPolicy | PrivateRehearsal | VerifiedCalls:
        """``policy`` wrapped in `PrivateRehearsal` when a budget is given, or
        in `VerifiedCalls` with ``--verify-calls``."""
        if self.verify_calls:
            from envace_gym.agents.rehearsal import VerifiedCalls

            return VerifiedCalls(policy)
        if self.rehearsal_budget is None:
            return policy
        from envace_gym.agents.rehearsal import PrivateRehearsal

        budget = "adaptive" if self.rehearsal_budget == "adaptive" else int(self.rehearsal_budget)
        return PrivateRehearsal(
            policy,
            budget=budget,
            mode=self.rehearsal_mode,
            max_budget=self.rehearsal_max_budget,
            memory_tokens=self.rehearsal_memory_tokens,
            seed=seed,
            use=self.rehearsal_use,
            choose=self.rehearsal_choose,
        )


CONFIGS = (EnvArgs, BackendArgs, EvalArgs, RunArgs, SamplingArgs, ImportArgs)


def run(
    env_args: EnvArgs,
    backend_args: BackendArgs,
    args: EvalArgs,
    run_args: RunArgs,
    sampling: SamplingArgs,
    imports: ImportArgs,  # imported by cli.parse
) -> int:
    from envace_gym.agents.eval.evaluate import evaluate
    from envace_gym.agents.scripted import SCRIPTED_POLICIES, make_scripted_policy

    backend = backend_args.spec
    t0 = time.monotonic()
    quiet, device = run_args.quiet, run_args.device
    lm = load_lm(args.policy, sampling, run_args.seed, quiet=quiet, device=device) if is_lm_spec(args.policy) else None
    imaginer = make_imaginer(backend, lm, args.simulator, sampling, run_args.seed, quiet=quiet, device=device)
    env = env_args.make_env(backend, imaginer)
    pool = env.unwrapped.pool
    episodes = args.episodes or len(pool)
    desc = f"eval {args.policy}"
    if args.policy in SCRIPTED_POLICIES:
        policy = make_scripted_policy(args.policy, env.unwrapped.suite, seed=run_args.seed)
        report = evaluate(env, policy, episodes, seed=run_args.seed, progress=run_args.progress, desc=desc)
    else:
        # LM policies step a batch of envs in lockstep (one batched generation per step).
        envs = [env] + [env_args.make_env(backend, imaginer) for _ in range(args.batch_size - 1)]
        try:
            actor = args.rehearsal(lm, run_args.seed)
            report = evaluate(envs, actor, episodes, seed=run_args.seed, progress=run_args.progress, desc=desc)
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
        "max_turns": env.unwrapped.max_turns,
        **report.summary(),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    if args.rehearsal_budget is not None:
        budget = args.rehearsal_budget
        summary.setdefault("rehearsal", {}).update(
            budget=int(budget) if budget.isdigit() else budget,
            mode=args.rehearsal_mode,
            use=args.rehearsal_use,
            choose=args.rehearsal_choose if args.rehearsal_use == "select" else None,
        )
        summary["per_episode"] = report.per_episode()
    if args.verify_calls:
        summary["verify_calls"] = True
        summary["per_episode"] = report.per_episode()
    if args.out:
        report.save(args.out)
        if args.policy not in SCRIPTED_POLICIES:
            from envace_gym.agents.rollout import save_trajectories

            save_trajectories(report.trajectories, Path(args.out) / "trajectories.jsonl")
        summary["out"] = str(Path(args.out))
        if args.plot:
            from envace_gym.agents.eval.plots import plot_by_domain

            plot_by_domain(summary, Path(args.out) / PLOT_FILE)
            summary["plot"] = str(Path(args.out) / PLOT_FILE)
    if run_args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 0


def calls_line(summary: dict[str, Any]) -> str:
    """The summary's calls per episode by what answered them, in the call ledger's names: ``live`` (ran on a
    real backend), ``logged`` (from a recorded log or replay cache), ``imagined`` (the env role), ``rejected``
    (did not parse or failed the checks; reached no backend)."""
    kinds = ("live", "logged", "imagined", "rejected")
    return "calls per episode: " + ", ".join(f"{summary[f'{k}_calls_per_episode']:.2f} {k}" for k in kinds)


def outcome_warnings(summary: dict[str, Any]) -> list[str]:
    """What the table's rates alone would hide: every episode truncated (it ran out of turns, not of ideas),
    and episodes the env aborted (an unusable imagined result, a benchmark's own limit)."""
    n, out = summary["episodes"], []
    if n and summary["truncated"] == n:
        limit = f" (--max-turns {summary['max_turns']})" if summary.get("max_turns") else ""
        out.append(
            f"every episode was truncated: all {n} hit the turn limit{limit} before they ended; raise --max-turns"
        )
    if summary["aborted"]:
        where = f" (why: 'aborted' in {summary['out']}/episodes.jsonl)" if "out" in summary else ""
        out.append(f"{summary['aborted']} of {n} episodes were aborted by the env, reward 0{where}")
    return out


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    table = Table(title=f"{summary['policy']} on {summary['suite']} ({summary['split']}, backend={summary['backend']})")
    # two-word headers on two lines, so that the table fits 80 columns
    columns = ("domain", "episodes", "success", "truncated", "aborted", "valid\ncalls", "mean\nreward", "mean\nturns")
    for col in columns:
        table.add_column(col, justify="right" if col != "domain" else "left")
    rows = [*summary["by_domain"].items(), ("all", summary)]
    for name, s in rows:
        table.add_row(
            name,
            str(s["episodes"]),
            pct(s["success_rate"]),
            str(s["truncated"]),
            str(s["aborted"]),
            pct(s["valid_call_rate"]),
            f"{s['mean_reward']:.3f}",
            f"{s['mean_turns']:.1f}",
        )
    Console().print(table)
    for warning in outcome_warnings(summary):
        Console().print(f"[yellow]{warning}[/yellow]")
    line = f"{calls_line(summary)}; wall {summary['wall_s']:.1f} s"
    if "rehearsal" in summary:
        r = summary["rehearsal"]
        line += (
            f"; rehearsal {r['use']} {r['mode']} budget {r['budget']}: {r.get('rehearsals_per_episode', 0):.2f} "
            "rehearsals and "
            f"{r.get('rehearsal_tokens_per_episode', 0):.0f} tokens per episode"
        )
    if "verified_calls" in summary:
        v = summary["verified_calls"]
        line += (
            f"; verifier: {v['predicted_per_episode']:.2f} calls predicted and {v['fired_per_episode']:.2f} "
            f"revisions per episode ({100 * v['episodes_fired']:.0f}% of episodes), "
            f"{v['verifier_tokens_per_episode']:.0f} tokens per episode"
        )
    Console().print(line)
    if "out" in summary:
        Console().print(f"episodes written to {summary['out']}/episodes.jsonl")
    if "plot" in summary:
        Console().print(f"success by domain plotted in {summary['plot']}")
