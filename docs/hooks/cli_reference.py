"""The CLI reference in ``docs/cli.md``, generated from the config dataclasses the ``envace`` command is built from.

``python docs/hooks/cli_reference.py`` writes each command's flag table into the page, between the lines
``<!-- envace-flags-COMMAND:begin -->`` and ``<!-- envace-flags-COMMAND:end -->`` (``benchmarks/_docs.py``'s
``write_block``): each flag's spellings, its default and its help text, read from the parser that ``envace
COMMAND --help`` prints (``HfArgumentParser`` over the command's ``CONFIGS``, whose ``metadata={"help":
...}`` is the help). The Markdown itself carries the tables, so they read the same on GitHub as on the
site; ``tests/test_docs.py`` fails when a table no longer matches the code (change a field, run the script).
As a MkDocs hook it stops the build on such a page.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent
PAGE = DOCS / "cli.md"
#: the commands whose tables the page holds, in order
COMMANDS = ("list", "eval", "sft", "train", "fidelity", "demo")


def block_name(command: str) -> str:
    return f"envace-flags-{command}"


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def default_text(action: argparse.Action) -> str:
    """A flag's default as its table shows it: ``required``, ``-`` (none) or what ``--help`` prints."""
    if action.required:
        return "required"
    if action.default is None or action.default == argparse.SUPPRESS:
        return "-"
    return f"`{_cell(action.default)}`"


def flags(command: str) -> list[argparse.Action]:
    """The flags ``envace COMMAND --help`` lists (``--help`` aside)."""
    from envace_gym.cli import command_parser

    actions = command_parser(command)._actions
    return [a for a in actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def flag_table(command: str) -> str:
    """A Markdown table of ``envace COMMAND``'s flags (help excluded)."""
    rows = ["| flag | default | what it does |", "|---|---|---|"]
    for action in flags(command):
        spellings = ", ".join(f"`{opt}`" for opt in action.option_strings)
        rows.append(f"| {spellings} | {default_text(action)} | {_cell(action.help or '')} |")
    return "\n".join(rows)


def _write_block():
    spec = importlib.util.spec_from_file_location("_docs", DOCS.parent / "benchmarks" / "_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_block


def stale(markdown: str) -> list[str]:
    """The commands whose table in ``markdown`` (the page's text) is missing or differs from the code's."""
    return [
        c
        for c in COMMANDS
        if f"<!-- {block_name(c)}:begin -->\n{flag_table(c)}\n<!-- {block_name(c)}:end -->" not in markdown
    ]


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """MkDocs hook: the CLI page must carry the code's tables."""
    if page.file.src_uri == PAGE.name and (old := stale(markdown)):
        raise ValueError(f"docs/cli.md: the flag tables of {', '.join(old)} are stale; run {Path(__file__).name}")
    return markdown


def main() -> int:
    write_block = _write_block()
    changed = [c for c in COMMANDS if write_block(PAGE, block_name(c), flag_table(c))]
    print(f"{PAGE}: {'rewrote ' + ', '.join(changed) if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
