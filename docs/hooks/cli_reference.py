"""MkDocs hook: the CLI reference, generated from the config dataclasses the `envace` command is built from.

A page line ``<!-- envace-flags: COMMAND -->`` becomes a table of that command's flags: each flag's
spellings, its default and its help text, read from the parser that ``envace COMMAND --help`` prints
(``HfArgumentParser`` over the command's ``CONFIGS``, whose ``metadata={"help": ...}`` is the help). So the
reference cannot drift from the dataclasses: change a field, and the page changes with it.
"""

from __future__ import annotations

import argparse
import re

MARKER = re.compile(r"^<!-- envace-flags: ([a-z]+) -->$", re.MULTILINE)


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def flag_table(command: str) -> str:
    """A Markdown table of ``envace COMMAND``'s flags (help excluded)."""
    from envace_gym.cli import command_parser

    rows = ["| flag | default | what it does |", "|---|---|---|"]
    for action in command_parser(command)._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        spellings = ", ".join(f"`{opt}`" for opt in action.option_strings)
        if action.required:
            default = "required"
        elif action.default is None or action.default == argparse.SUPPRESS:
            default = "-"
        else:
            default = f"`{_cell(action.default)}`"
        rows.append(f"| {spellings} | {default} | {_cell(action.help or '')} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs) -> str:
    return MARKER.sub(lambda m: flag_table(m.group(1)), markdown)
