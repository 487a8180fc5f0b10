"""``envace list``: env ids and task suites with their domains and sizes by split.

Sizes come from each suite's registered info function (`envace_gym.suites.suite_info`: counted from
its data files, or known from how it is generated), so listing loads no suite and imports no benchmark
package: it takes about a second where loading every BFCL and tau2 suite took over ten. A suite registered
without one is loaded to be counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..suites import suite_info, suite_names
from .common import ImportArgs, env_ids

__all__ = ["CONFIGS", "ListArgs", "render", "rows", "run"]

#: Split columns shown first, in this order (the builtin suites' splits; tau2's and BFCL's are train and test);
#: any other split gets a column after them.
SPLIT_ORDER = ("train", "val", "test-id", "test")


@dataclass
class ListArgs:
    _argument_group_name = "output"

    json: bool = field(default=False, metadata={"help": "print one JSON object"})


CONFIGS = (ListArgs, ImportArgs)


def rows() -> list[dict[str, Any]]:
    """One dict per registered suite: ``suite``, ``domains``, ``tasks``, ``splits`` (and ``error`` where its
    benchmark package is missing: that must not hide the others)."""
    out = []
    for name in suite_names():
        try:
            info = suite_info(name)
        except Exception as exc:
            out.append(
                {"suite": name, "domains": [], "tasks": 0, "splits": {}, "error": f"{type(exc).__name__}: {exc}"}
            )
            continue
        out.append({"suite": name, "domains": list(info.domains), "tasks": info.tasks, "splits": dict(info.splits)})
    return out


def render(console: Any, envs: list[str], suites: list[dict[str, Any]]) -> None:
    """Print the env ids and a table of ``suites`` on a rich ``console``; a suite's name is never cut (its
    column is as wide as the longest name), the domains column wraps."""
    from rich import box
    from rich.table import Table

    console.print("[bold]Environments:[/bold] " + ", ".join(envs))
    seen = {split for r in suites for split in r["splits"]}
    splits = [s for s in SPLIT_ORDER if s in seen] + sorted(seen - set(SPLIT_ORDER))
    table = Table(title="Task suites", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    table.add_column("suite", no_wrap=True, min_width=max((len(r["suite"]) for r in suites), default=5))
    table.add_column("tasks", justify="right", no_wrap=True)
    for split in splits:
        table.add_column(split, justify="right", no_wrap=True)
    table.add_column("domains", overflow="fold")
    for r in suites:
        if "error" in r:
            cells = ["-"] * (1 + len(splits)) + [f"[red]unavailable: {r['error']}[/red]"]
        else:
            # A suite whose one domain is its own name (bfcl/..., tau2/...) shows none: nothing to add.
            domains = "" if r["domains"] == [r["suite"]] else ", ".join(r["domains"])
            cells = [str(r["tasks"]), *(str(r["splits"].get(s, "-")) for s in splits), domains]
        table.add_row(r["suite"], *cells)
    console.print(table)


def run(args: ListArgs, imports: ImportArgs) -> int:  # imports: done by cli.parse
    suites = rows()
    if args.json:
        print(json.dumps({"envs": env_ids(), "suites": suites}))
        return 0
    from rich.console import Console

    render(Console(), env_ids(), suites)
    return 0
