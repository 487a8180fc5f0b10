"""The ``envace`` command: ``list``, ``eval``, ``sft`` and ``demo``."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from ..suites import load_suite, suite_names
from ..tasks import TaskFormatError

__all__ = ["main"]


LM_POLICIES = ("default", "tiny")
LM_POLICY_KINDS = ("ckpt", "hf", "gguf")


class UserError(Exception):
    """A mistake in the command line or its inputs: reported as one line, exit status 2."""


def _env_ids() -> list[str]:
    import envace_gym  # noqa: F401  (registers the envs)

    return sorted(k for k in gym.registry if k.startswith("EnvACE-"))


def cmd_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    rows = []
    for name in suite_names():
        try:
            suite = load_suite(name)
        except Exception as exc:  # a benchmark whose upstream package is missing must not hide the others
            rows.append(
                {"suite": name, "domains": [], "tasks": 0, "splits": {}, "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        sizes = {split: len(suite.filter(split=split)) for split in suite.splits}
        rows.append({"suite": name, "domains": suite.domains, "tasks": len(suite), "splits": sizes})
    if args.json:
        print(json.dumps({"envs": _env_ids(), "suites": rows}))
        return 0
    console = Console()
    console.print("[bold]Environments:[/bold] " + ", ".join(_env_ids()))
    table = Table(title="Task suites")
    for col in ("suite", "domains", "tasks", "splits"):
        table.add_column(col)
    for r in rows:
        splits = (
            ", ".join(f"{k}={v}" for k, v in r["splits"].items()) or f"[red]unavailable: {r.get('error', '')}[/red]"
        )
        table.add_row(r["suite"], ", ".join(r["domains"]), str(r["tasks"]), splits)
    console.print(table)
    return 0


IMAGINED_BACKENDS = ("self", "self-inline", "simulator")
BENCHMARK_KWARGS = ("category", "domain")


def _backend_arg(value: str) -> str:
    kind = value.partition(":")[0]
    if value in ("real", *IMAGINED_BACKENDS) or (kind in ("replay", "cache", "mcp") and value.partition(":")[2]):
        return value
    raise argparse.ArgumentTypeError(
        f"unknown backend {value!r}; use real, self, self-inline, simulator, replay:PATH, cache:PATH or mcp:COMMAND"
    )


def _make_env(args: argparse.Namespace, imaginer: Any = None) -> gym.Env:
    """The env of ``args``; with an imagined backend, wrapped so that ``imaginer`` answers tool calls."""
    if args.env not in _env_ids():
        raise UserError(f"unknown env id {args.env!r}; available: {', '.join(_env_ids())}")
    backend = args.backend if args.backend not in IMAGINED_BACKENDS else "real"
    kwargs: dict[str, Any] = {"split": args.split, "backend": backend}
    if args.suite:
        kwargs["suite"] = args.suite
    for name in BENCHMARK_KWARGS:  # EnvACE-BFCL-v0 category=..., EnvACE-Tau2-v0 domain=...
        if getattr(args, name, None):
            kwargs[name] = getattr(args, name)
    if args.max_turns:
        kwargs["max_turns"] = args.max_turns
    env = gym.make(args.env, **kwargs)
    if args.backend in IMAGINED_BACKENDS:
        from ..rehearsal import SelfRehearsalEnv

        env = SelfRehearsalEnv(env, imaginer, mode="inline" if args.backend == "self-inline" else "prompted")
    return env


def _imaginer(args: argparse.Namespace, actor: Any) -> Any:
    """Who imagines tool results: the actor itself (``self``) or a separate frozen model (``simulator``)."""
    if args.backend in ("self", "self-inline"):
        if actor is None:
            raise UserError(
                f"--backend {args.backend} needs an LM policy (it imagines its own tool results); "
                "for a scripted actor use --backend simulator --simulator SPEC"
            )
        return actor
    if args.backend == "simulator":
        return _load_lm(args.simulator, args)
    return None


def _lm_sampling(args: argparse.Namespace):
    from envace_gym.agents.lm.engine import SamplingConfig

    return SamplingConfig(
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed
    )


def _load_lm(spec: str, args: argparse.Namespace):
    from envace_gym.agents.lm.models import ModelLoadError
    from envace_gym.agents.lm.policy import LMPolicy

    try:
        return LMPolicy.from_spec(spec, sampling=_lm_sampling(args))
    except ModelLoadError as exc:
        raise UserError(str(exc)) from None


def cmd_eval(args: argparse.Namespace) -> int:
    from envace_gym.agents.eval.evaluate import EvalReport, evaluate
    from envace_gym.agents.scripted import SCRIPTED_POLICIES, make_scripted_policy

    is_lm = args.policy in LM_POLICIES or args.policy.partition(":")[0] in LM_POLICY_KINDS
    if args.policy not in SCRIPTED_POLICIES and not is_lm:
        raise UserError(
            f"unknown policy {args.policy!r}; choose from {', '.join(SCRIPTED_POLICIES + LM_POLICIES)} or ckpt:DIR, hf:PATH, gguf:PATH"
        )
    lm = _load_lm(args.policy, args) if is_lm else None
    imaginer = _imaginer(args, lm)
    env = _make_env(args, imaginer)
    pool = env.unwrapped.pool
    episodes = args.episodes or len(pool)
    if args.policy in SCRIPTED_POLICIES:
        policy = make_scripted_policy(args.policy, env.unwrapped.suite, seed=args.seed)
        report = evaluate(
            env, policy, episodes, seed=args.seed, progress=not args.no_progress, desc=f"eval {args.policy}"
        )
        trajectories = None
    else:
        from envace_gym.agents.rollout import collect, save_trajectories

        envs = [env] + [_make_env(args, imaginer) for _ in range(max(1, args.batch_size) - 1)]
        order = list(range(len(pool)))
        random.Random(args.seed).shuffle(order)
        task_ids = [pool[order[i % len(order)]].id for i in range(episodes)]
        trajectories = collect(
            envs,
            lm,
            episodes,
            task_ids=task_ids,
            seed=args.seed,
            progress=not args.no_progress,
            desc=f"eval {args.policy}",
        )
        report = EvalReport([t.to_result() for t in trajectories])
        for extra in envs[1:]:
            extra.close()
    env.close()  # stops what backends started (MCP servers)
    summary = {
        "env": args.env,
        "suite": env.unwrapped.suite.name,
        "split": args.split,
        "policy": args.policy,
        "backend": args.backend,
        "seed": args.seed,
        **report.summary(),
    }
    if args.out:
        report.save(args.out)
        if trajectories is not None:
            save_trajectories(trajectories, Path(args.out) / "trajectories.jsonl")
        summary["out"] = str(Path(args.out))
    if args.json:
        print(json.dumps(summary))
    else:
        _print_summary(summary)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft

    if not args.steps and not args.minutes:
        raise UserError("give --steps N or --minutes M")
    args.split = "train"
    env = _make_env(args)
    policy = _load_lm(args.policy, args)
    cfg = SFTConfig(
        steps=args.steps or None,
        minutes=args.minutes or None,
        lr=args.lr,
        batch_size=args.batch_size,
        lora=args.lora,
        seed=args.seed,
        max_examples=args.max_examples or None,
    )
    roles = [r.strip() for r in args.roles.split(",") if r.strip()]
    examples = build_sft_examples(
        env, policy, cfg.max_examples, seed=args.seed, progress=not args.no_progress, roles=roles
    )
    summary = train_sft(policy, examples, cfg, args.out, progress=not args.no_progress)
    summary["out"] = args.out
    print(
        json.dumps(summary)
        if args.json
        else f"saved checkpoint to {args.out} (load it with --policy ckpt:{args.out}): {summary}"
    )
    return 0


def cmd_fidelity(args: argparse.Namespace) -> int:
    from envace_gym.agents.eval.fidelity import fidelity_report, fidelity_table, save_report

    args.backend = "real"
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(IMAGINED_BACKENDS)
    if unknown or not backends:
        raise UserError(
            f"--backends takes a comma-separated list of {', '.join(IMAGINED_BACKENDS)}; got {args.backends!r}"
        )
    if args.simulator and "simulator" not in backends:
        backends.append("simulator")
    policy = _load_lm(args.policy, args)
    imaginers: dict[str, Any] = {}
    for name in backends:
        if name == "simulator":
            imaginers[name] = _load_lm(args.simulator or "default", args)
        else:
            imaginers[name] = (policy, "inline" if name == "self-inline" else "prompted")
    report = fidelity_report(
        lambda: _make_env(args),
        imaginers,
        args.episodes,
        seed=args.seed,
        progress=not args.no_progress,
        grounding=args.grounding,
        batch_size=args.batch_size,
    )
    report.update({"policy": args.policy, "simulator": args.simulator or None, "split": args.split})
    out = Path(args.out or f"runs/fidelity-{time.strftime('%Y%m%d-%H%M%S')}")
    save_report(report, out)
    report["out"] = str(out)
    if args.json:
        print(json.dumps(report))
    else:
        from rich.console import Console

        Console().print(fidelity_table(report))
        Console().print(f"report: {out}/fidelity.json, plot: {out}/fidelity.png")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from envace_gym.agents.demo import DemoConfig, run_demo

    run_demo(
        DemoConfig(policy=args.policy, minutes=args.minutes, episodes=args.episodes, out_root=args.out, seed=args.seed)
    )
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


def _add_benchmark_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--category", default=None, help="BFCL category for --env EnvACE-BFCL-v0 (e.g. multi_turn_base)")
    p.add_argument(
        "--domain", default=None, help="tau2 domain for --env EnvACE-Tau2-v0 (airline, retail, telecom, mock)"
    )


def _add_lm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.0, help="LM sampling temperature (0 = greedy)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=96)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envace", description="EnvACE gym: tool-calling environments for RL.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="list env ids and task suites with their sizes")
    p_list.add_argument("--json", action="store_true", help="print one JSON object")
    p_list.set_defaults(func=cmd_list)

    p_eval = sub.add_parser("eval", help="evaluate a policy on an env")
    p_eval.add_argument("--env", default="EnvACE-ToolCall-v0", help="a registered env id")
    p_eval.add_argument("--suite", default=None, help="suite name (see `envace list`) or a .jsonl task file")
    _add_benchmark_args(p_eval)
    p_eval.add_argument("--split", default="test", help="task split to draw from (default: test)")
    p_eval.add_argument(
        "--policy", default="oracle", help="oracle | random | noop | default | tiny | ckpt:DIR | hf:PATH | gguf:PATH"
    )
    p_eval.add_argument(
        "--backend",
        default="real",
        type=_backend_arg,
        help="real | self (the LM policy imagines results from a simulator prompt) | self-inline (it writes them "
        "inside its own context) | simulator (a separate model does) | replay:PATH | cache:PATH | mcp:COMMAND",
    )
    p_eval.add_argument("--simulator", default="default", help="the env-role model for --backend simulator")
    p_eval.add_argument("--episodes", type=int, default=0, help="episodes to run (default: every task once)")
    p_eval.add_argument("--seed", type=int, default=0)
    p_eval.add_argument("--max-turns", type=int, default=0, help="assistant messages per episode before truncation")
    p_eval.add_argument("--out", default=None, help="folder for episodes.jsonl and summary.json")
    p_eval.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    p_eval.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_lm_args(p_eval)
    p_eval.add_argument("--batch-size", type=int, default=8, help="envs stepped in lockstep for LM policies")
    p_eval.set_defaults(func=cmd_eval)

    p_sft = sub.add_parser("sft", help="supervised warm start on the train split's reference trajectories")
    p_sft.add_argument("--env", default="EnvACE-ToolCall-v0")
    p_sft.add_argument("--suite", default=None)
    _add_benchmark_args(p_sft)
    p_sft.add_argument("--policy", default="default", help="default | tiny | ckpt:DIR | hf:PATH | gguf:PATH")
    p_sft.add_argument("--steps", type=int, default=0)
    p_sft.add_argument("--minutes", type=float, default=0.0)
    p_sft.add_argument("--out", required=True, help="checkpoint folder (loads as --policy ckpt:DIR)")
    p_sft.add_argument("--lora", action="store_true", help="train LoRA adapters (merged into the checkpoint)")
    p_sft.add_argument("--roles", default="actor", help="what to warm-start: actor, env_role, or actor,env_role")
    p_sft.add_argument("--lr", type=float, default=5e-5)
    p_sft.add_argument("--batch-size", type=int, default=4)
    p_sft.add_argument("--max-examples", type=int, default=0, help="train tasks to use (default: all)")
    p_sft.add_argument("--seed", type=int, default=0)
    p_sft.add_argument("--max-turns", type=int, default=0)
    p_sft.add_argument("--backend", default="real", choices=["real"], help="reference episodes always use real tools")
    p_sft.add_argument("--json", action="store_true")
    p_sft.add_argument("--no-progress", action="store_true")
    _add_lm_args(p_sft)
    p_sft.set_defaults(func=cmd_sft)

    p_fid = sub.add_parser("fidelity", help="how close imagined tool results are to the real ones")
    p_fid.add_argument("--env", default="EnvACE-ToolCall-v0")
    p_fid.add_argument("--suite", default=None)
    _add_benchmark_args(p_fid)
    p_fid.add_argument("--split", default="test")
    p_fid.add_argument("--policy", default="default", help="the model whose env role is measured (backend self)")
    p_fid.add_argument(
        "--backends",
        default="self,self-inline",
        help="imagined backends to measure: self (prompted), self-inline, simulator (comma-separated)",
    )
    p_fid.add_argument("--simulator", default="", help="the separate simulator model (adds backend simulator)")
    p_fid.add_argument("--episodes", type=int, default=20)
    p_fid.add_argument(
        "--grounding",
        default="reference",
        choices=["reference", "none"],
        help="few-shot examples from the reference trajectory in the simulator prompt, or none",
    )
    p_fid.add_argument(
        "--batch-size", type=int, default=8, help="episodes played at once (their env-role calls are batched)"
    )
    p_fid.add_argument("--seed", type=int, default=0)
    p_fid.add_argument("--max-turns", type=int, default=0)
    p_fid.add_argument("--out", default=None, help="folder for fidelity.json and fidelity.png")
    p_fid.add_argument("--json", action="store_true")
    p_fid.add_argument("--no-progress", action="store_true")
    _add_lm_args(p_fid)
    p_fid.set_defaults(func=cmd_fidelity, max_new_tokens=160)

    p_demo = sub.add_parser("demo", help="the main job: evaluate, warm-start and re-evaluate the embedded model")
    p_demo.add_argument("--policy", default="default")
    p_demo.add_argument("--minutes", type=float, default=3.0, help="warm-start budget")
    p_demo.add_argument("--episodes", type=int, default=32, help="test episodes per evaluation")
    p_demo.add_argument("--out", default="runs", help="parent folder of the run folder")
    p_demo.add_argument("--seed", type=int, default=0)
    p_demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UserError, TaskFormatError, KeyError, ValueError) as exc:
        if os.environ.get("ENVACE_DEBUG"):
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"envace: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
