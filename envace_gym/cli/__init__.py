"""The ``envace`` command: ``list``, ``eval``, ``sft``, ``train``, ``fidelity`` and ``demo``.

The CLI is the one place allowed to import the core (``envace_gym``), the envs (``envace_gym.envs``) and
the agents (``envace_gym.agents``) together: the core knows neither, the envs do not import the agents, and
the agents reach envs only through ``gymnasium.make``.

Configs drive the CLI. A command is a module here with

* ``CONFIGS``: a tuple of config dataclasses. Their fields are the command's flags, made by
  ``transformers.HfArgumentParser`` (``--max_turns`` and ``--max-turns``; ``metadata={"help": ...}`` is the
  help text, ``metadata={"aliases": [...]}`` adds spellings; bools take no value); defaults and checks live
  in the dataclass (``__post_init__`` raises ``ValueError`` with a one-line message). Flags shared by
  several commands are declared once in `common` (``EnvArgs``, ``BackendArgs``, ``RunArgs``,
  ``SamplingArgs``, ``ImportArgs``); a field in two of a command's dataclasses is one flag filling both.
  A command that lists ``ImportArgs`` takes ``--import MODULE``: `parse` imports the modules right
  after reading the flags and before any config check, so the names they register pass those checks;
* ``run(*configs) -> int``: called with one instance of each of ``CONFIGS``, in order; returns the exit
  status;
* optionally ``FLAG_GROUPS``: ``{title: field names}``, the ``--help`` groups of a config dataclass that
  names none (``_argument_group_name``), so no flag is left under the untitled ``options:``;
* optionally ``file_defaults(ns) -> dict``: flag defaults read from a file the parsed flags name (``envace
  train --config FILE.toml``); `parse` parses again with them as defaults, so a flag given in ``argv``
  wins over the file and the file over the dataclass default.

and one line in `COMMANDS` (name -> module, one-line help). Modules are imported only when their
command runs, so ``envace list`` imports neither torch nor transformers (`common.hf_argparser`).
For example ``envace train`` is ``train_cmd.py`` with ``CONFIGS = (TrainEnvArgs, TrainArgs, EnvACEConfig,
RunArgs)`` and a ``run``.

User errors (an unknown env, suite, policy or backend, a bad task file, a ``ValueError`` from a config
check) print one ``envace: error: ...`` line on stderr and exit with status 2; ``ENVACE_DEBUG=1`` re-raises
them. Bad or unknown flags exit with status 2 and argparse's message. An unknown name suggests the close
ones (``_registry.unknown_message``). A command that takes ``RunArgs`` runs inside
`output`: ``--no-progress`` turns the libraries' progress bars off too, ``--quiet``
also their warnings and logs below ERROR, and both are put back when it returns.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import os
import sys
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from ..tasks import TaskFormatError
from .common import RunArgs, UserError, adjust_parser, configs_from_namespace, hf_argparser, import_user_modules

__all__ = ["COMMANDS", "build_parser", "command_parser", "main", "parse"]

#: command -> (module in this package, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("list_cmd", "list env ids and task suites with their sizes"),
    "eval": ("eval_cmd", "evaluate a policy on an env"),
    "sft": ("sft", "supervised warm start on the train split's reference trajectories"),
    "train": ("train_cmd", "EnvACE training (role-wise GRPO) under imagination or on real tools"),
    "fidelity": ("fidelity", "how close imagined tool results are to the real ones"),
    "demo": ("demo", "the main job: evaluate, warm-start and re-evaluate the embedded model"),
}


def command_module(name: str) -> ModuleType:
    return importlib.import_module(f".{COMMANDS[name][0]}", __name__)


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``envace`` parser; the flags of ``commands`` (default: all) are built, the others are names only."""
    HfArgumentParser = hf_argparser().HfArgumentParser  # noqa: N806  (a class)

    built = set(COMMANDS if commands is None else commands)
    parser = argparse.ArgumentParser(prog="envace", description="EnvACE gym: tool-calling environments for RL.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=HfArgumentParser)
    for name, (_, help_) in COMMANDS.items():
        module = command_module(name) if name in built else None
        p = sub.add_parser(
            name,
            help=help_,
            description=help_,
            dataclass_types=module.CONFIGS if module else (),
            conflict_handler="resolve",
        )
        adjust_parser(p, getattr(module, "FLAG_GROUPS", None))
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


def command_parser(name: str) -> argparse.ArgumentParser:
    """The parser of one command (``envace NAME``): for ``--help`` texts and tests."""
    return _subparser(build_parser([name]), name)


def parse(argv: Sequence[str]) -> tuple[ModuleType, tuple[Any, ...]]:
    """The command module of ``argv`` and its configs (a bad flag exits with status 2, as argparse does; a
    failed config check raises ``ValueError``). Nothing runs but the ``--import`` modules, imported before
    the file defaults are read and the configs checked."""
    argv = list(argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser([command] if command else [])
    ns = parser.parse_args(argv)
    import_user_modules(getattr(ns, "imports", ()))
    module = command_module(ns.command)
    file_defaults = getattr(module, "file_defaults", None)
    defaults = file_defaults(ns) if file_defaults else None
    if defaults:
        # argparse fills a flag that ``argv`` lacks from its default: the file's value, while one given wins.
        _subparser(parser, ns.command).set_defaults(**defaults)
        ns = parser.parse_args(argv)
    return module, configs_from_namespace(module.CONFIGS, ns)


def _return_freed_memory_to_the_os() -> None:
    """glibc keeps memory freed by other threads in their malloc arenas: in ``benchmarks/soak.py`` an
    imagined run's RSS grew by half in 200 episodes without any object leaking. Trimming on every free
    (``M_TRIM_THRESHOLD`` = 0, what ``MALLOC_TRIM_THRESHOLD_=0`` sets) kept it flat at no measured cost."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-1, 0)  # -1: M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _return_freed_memory_to_the_os()
    from envace_gym.backends.mcp import MCPError  # light: the mcp package itself loads on first use

    try:
        module, configs = parse(argv)
        run_args = next((c for c in configs if isinstance(c, RunArgs)), None)
        with run_args.output() if run_args is not None else contextlib.nullcontext():  # --no-progress, --quiet
            return module.run(*configs)
    except (UserError, TaskFormatError, KeyError, ValueError, OSError, MCPError) as exc:
        # OSError: a path that exists, is missing or is a directory (--out on a file, say); one line too.
        if os.environ.get("ENVACE_DEBUG"):
            raise
        msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"envace: error: {' '.join(msg.splitlines())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
