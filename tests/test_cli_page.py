"""docs/cli.md matches the CLI: every flag each command's ``--help`` lists is in the page's flag reference,
in the Markdown itself, with its real default, and the synopsis shows no value as a default that is not."""

import argparse
import importlib.util
import re
from pathlib import Path

import pytest

from envace_gym.cli import COMMANDS, command_parser

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
REGENERATE = "run `python docs/hooks/cli_reference.py`"


def reference(command: str) -> dict[str, str]:
    """``{flag spelling: default cell}`` of the page's table of ``command`` (between its markers)."""
    match = re.search(rf"<!-- envace-flags-{command}:begin -->\n(.*?)<!-- envace-flags-{command}:end -->", PAGE, re.S)
    assert match, f"docs/cli.md has no flag table for envace {command}; {REGENERATE}"
    rows = {}
    for line in match.group(1).splitlines()[2:]:
        flags, default, _ = (cell.strip() for cell in line.strip("|").split(" | ", 2))
        rows.update({flag.strip("`"): default for flag in flags.split(", ")})
    return rows


def shown_default(action: argparse.Action) -> str:
    """What ``--help`` says of a flag's default, as the table writes it."""
    if action.required:
        return "required"
    if action.default is None or action.default == argparse.SUPPRESS:
        return "-"  # --help: "(default: None)" or nothing
    return f"`{action.default}`"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_flag_of_help_is_on_the_cli_page_with_its_default(command):
    rows = reference(command)
    parser = command_parser(command)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for flag in action.option_strings:
            assert flag in parser.format_help()  # what --help lists
            assert flag in rows, f"docs/cli.md lacks envace {command} {flag}; {REGENERATE}"
            assert rows[flag] == shown_default(action), (
                f"docs/cli.md gives envace {command} {flag} the default {rows[flag]}, the code "
                f"{shown_default(action)}; {REGENERATE}"
            )
    known = {flag for action in parser._actions for flag in action.option_strings}
    assert set(rows) <= known, f"docs/cli.md lists flags envace {command} lacks: {set(rows) - known}"


def test_the_flag_tables_are_the_generated_ones():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "hooks" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.stale(PAGE) == [], REGENERATE


def synopsis() -> str:
    return PAGE.split("```text\n", 1)[1].split("```", 1)[0]


def test_the_synopsis_shows_a_number_only_where_it_is_the_default():
    """A number after a flag in the synopsis (``--batch-size 8``) is that flag's default; a flag with no
    numeric default is shown with a placeholder (``--episodes N``)."""
    for command in COMMANDS:
        block = re.search(rf"^envace {command}\b.*?(?=^envace |\Z)", synopsis(), re.S | re.M).group(0)
        defaults = {opt: a.default for a in command_parser(command)._actions for opt in a.option_strings}
        for flag, value in re.findall(r"(--[a-z-]+) (\d[\w.-]*)", block):
            default = defaults.get(flag)
            assert isinstance(default, int | float) and float(value) == default, (
                f"cli.md's synopsis shows envace {command} {flag} {value}; its default is {default}"
            )


def test_the_choices_the_page_lists_are_the_ones_help_offers():
    """Where the page lists a flag's choices (``--flag a|b``), they are every word its ``--help`` offers."""
    action = next(a for a in command_parser("eval")._actions if a.dest == "rehearsal_choose")
    # "(select) agreement (...) | draft (...) | ...": the first word of each alternative
    offered = {re.sub(r"^\(\w+\)\s*", "", part).split()[0] for part in action.help.split(" | ")}
    listed = re.findall(r"`--rehearsal-choose ([a-z|]+)`", PAGE)
    assert listed and all(set(choices.split("|")) == offered for choices in listed), (listed, offered)
