"""The ``envace`` command: ``envace list`` and ``envace eval``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym

from .suites import load_suite, suite_names
from .tasks import TaskFormatError

__all__ = ["main"]


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
        suite = load_suite(name)
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
        splits = ", ".join(f"{k}={v}" for k, v in r["splits"].items())
        table.add_row(r["suite"], ", ".join(r["domains"]), str(r["tasks"]), splits)
    console.print(table)
    return 0


def _make_env(args: argparse.Namespace) -> gym.Env:
    if args.env not in _env_ids():
        raise UserError(f"unknown env id {args.env!r}; available: {', '.join(_env_ids())}")
    kwargs: dict[str, Any] = {"split": args.split, "backend": args.backend}
    if args.suite:
        kwargs["suite"] = args.suite
    if args.max_turns:
        kwargs["max_turns"] = args.max_turns
    return gym.make(args.env, **kwargs)


def cmd_eval(args: argparse.Namespace) -> int:
    from envace_gym.agents.evaluate import evaluate
    from envace_gym.agents.scripted import SCRIPTED_POLICIES, make_scripted_policy

    if args.policy not in SCRIPTED_POLICIES:
        raise UserError(f"unknown policy {args.policy!r}; choose from {', '.join(SCRIPTED_POLICIES)}")
    env = _make_env(args)
    policy = make_scripted_policy(args.policy, env.unwrapped.suite, seed=args.seed)
    episodes = args.episodes or len(env.unwrapped.pool)
    report = evaluate(env, policy, episodes, seed=args.seed, progress=not args.no_progress, desc=f"eval {args.policy}")
    summary = {"env": args.env, "suite": env.unwrapped.suite.name, "split": args.split, "policy": args.policy,
               "backend": args.backend, "seed": args.seed, **report.summary()}
    if args.out:
        report.save(args.out)
        summary["out"] = str(Path(args.out))
    if args.json:
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
        table.add_row(name, str(s["episodes"]), pct(s["success_rate"]), f"{s['mean_reward']:.3f}",
                      pct(s["valid_call_rate"]), f"{s['mean_turns']:.1f}")
    Console().print(table)
    if "out" in summary:
        Console().print(f"episodes written to {summary['out']}/episodes.jsonl")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="envace", description="EnvACE gym: tool-calling environments for RL.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="list env ids and task suites with their sizes")
    p_list.add_argument("--json", action="store_true", help="print one JSON object")
    p_list.set_defaults(func=cmd_list)

    p_eval = sub.add_parser("eval", help="evaluate a policy on an env")
    p_eval.add_argument("--env", default="EnvACE-ToolCall-v0", help="a registered env id")
    p_eval.add_argument("--suite", default=None, help="suite name (see `envace list`) or a .jsonl task file")
    p_eval.add_argument("--split", default="test", help="task split to draw from (default: test)")
    p_eval.add_argument("--policy", default="oracle", help="oracle | random | noop")
    p_eval.add_argument("--backend", default="real", choices=["real"], help="tool backend (default: real)")
    p_eval.add_argument("--episodes", type=int, default=0, help="episodes to run (default: every task once)")
    p_eval.add_argument("--seed", type=int, default=0)
    p_eval.add_argument("--max-turns", type=int, default=0, help="assistant messages per episode before truncation")
    p_eval.add_argument("--out", default=None, help="folder for episodes.jsonl and summary.json")
    p_eval.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    p_eval.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p_eval.set_defaults(func=cmd_eval)
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
