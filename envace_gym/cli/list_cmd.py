"""``envace list``: env ids and task suites with their sizes by split."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..suites import load_suite, suite_names
from .common import ImportArgs, env_ids

__all__ = ["CONFIGS", "ListArgs", "run"]


@dataclass
class ListArgs:
    json: bool = field(default=False, metadata={"help": "print one JSON object"})


CONFIGS = (ListArgs, ImportArgs)


def run(args: ListArgs, imports: ImportArgs) -> int:  # imports: done by cli.parse
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
        print(json.dumps({"envs": env_ids(), "suites": rows}))
        return 0
    console = Console()
    console.print("[bold]Environments:[/bold] " + ", ".join(env_ids()))
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
