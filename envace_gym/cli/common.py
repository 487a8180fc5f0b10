"""What the commands share: the flags declared once (as dataclasses) and the helpers that act on them.

``EnvArgs`` (which env and tasks), ``BackendArgs`` (who answers tool calls), ``RunArgs`` (seed, output),
``SamplingArgs`` (how an LM policy samples) and ``ImportArgs`` (user modules to import first) are each
declared here once; a command lists the ones it takes
in its ``CONFIGS``. Every field carries its help text in ``metadata["help"]`` and its checks in
``__post_init__`` (a ``ValueError`` with a one-line message, reported as ``envace: error: ...``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from argparse import SUPPRESS, ArgumentParser, Namespace, _StoreFalseAction
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, get_type_hints

import gymnasium as gym

from .._registry import did_you_mean, unknown_message
from ..backends.spec import BackendSpec, parse_backend_spec
from ..compose import env_role_for, make_env
from ..imagination.protocol import Imaginer

if TYPE_CHECKING:  # the agents load torch: imported where a command runs
    from transformers import HfArgumentParser

    from envace_gym.agents.lm.policy import LMPolicy

__all__ = [
    "BackendArgs",
    "EnvArgs",
    "ImportArgs",
    "RunArgs",
    "SamplingArgs",
    "TrainEnvArgs",
    "UserError",
    "adjust_parser",
    "check_lm_policy",
    "configs_from_namespace",
    "env_ids",
    "import_user_modules",
    "hf_argparser",
    "is_lm_spec",
    "load_lm",
    "make_imaginer",
]

LM_POLICIES = ("default", "tiny")
LM_POLICY_KINDS = ("ckpt", "hf", "gguf")
LM_POLICY_USAGE = "default | tiny | ckpt:DIR | hf:PATH | gguf:PATH"


class UserError(Exception):
    """A mistake in the command line or its inputs: reported as one line, exit status 2."""


def env_ids() -> list[str]:
    import envace_gym  # noqa: F401  (registers the envs)

    return sorted(k for k in gym.registry if k.startswith("EnvACE-"))


def is_lm_spec(spec: str) -> bool:
    """Whether a ``--policy`` string names a language model (``default``, ``tiny``, ``ckpt:``, ``hf:``, ``gguf:``)."""
    return spec in LM_POLICIES or spec.partition(":")[0] in LM_POLICY_KINDS


def check_lm_policy(spec: str, flag: str = "--policy") -> None:
    if not is_lm_spec(spec):
        raise ValueError(f"{flag} {spec!r} is not a language model; use {LM_POLICY_USAGE}")


def _positive(obj: Any, *names: str, allow_none: bool = False, strict: bool = True) -> None:
    """Check that each named field is > 0 (``strict``) or >= 0; ``None`` passes where ``allow_none``."""
    for name in names:
        value = getattr(obj, name)
        if value is None and allow_none:
            continue
        if value is None or (value <= 0 if strict else value < 0):
            raise ValueError(f"--{name.replace('_', '-')} must be {'> 0' if strict else '>= 0'}, got {value}")


# ------------------------------------------------------------------------------------------ shared flags
@dataclass
class EnvArgs:
    """Which env and which of its tasks."""

    _argument_group_name = "env"

    env: str = field(default="EnvACE-ToolCall-v0", metadata={"help": "a registered env id (see `envace list`)"})
    suite: str | None = field(
        default=None, metadata={"help": "suite name (see `envace list`) or a .jsonl task file; default: the env's"}
    )
    split: str = field(default="test", metadata={"help": "task split to draw from"})
    category: str | None = field(
        default=None, metadata={"help": "BFCL category for --env EnvACE-BFCL-v0 (e.g. multi_turn_base)"}
    )
    domain: str | None = field(
        default=None, metadata={"help": "tau2 domain for --env EnvACE-Tau2-v0 (airline, retail, telecom, mock)"}
    )
    max_turns: int | None = field(
        default=None, metadata={"help": "assistant messages per episode before truncation; default: the env's"}
    )

    def __post_init__(self) -> None:
        if self.env not in env_ids():
            ids = env_ids()
            raise ValueError(
                unknown_message("env id", self.env, did_you_mean(self.env, ids), f"available: {', '.join(ids)}")
            )
        if not self.split:
            raise ValueError("--split must not be empty")
        _positive(self, "max_turns", allow_none=True)

    def env_kwargs(self) -> dict[str, Any]:
        """``gym.make``'s kwargs of these flags (the ones given: an env keeps its own defaults)."""
        kwargs: dict[str, Any] = {"split": self.split}
        # EnvACE-BFCL-v0 takes category=..., EnvACE-Tau2-v0 domain=...
        for name in ("suite", "category", "domain", "max_turns"):
            if getattr(self, name):
                kwargs[name] = getattr(self, name)
        return kwargs

    def make_env(self, backend: BackendSpec | None = None, imaginer: Imaginer | None = None) -> gym.Env:
        """The env of these flags on ``backend`` (default: real), composed by `envace_gym.make_env`."""
        return make_env(self.env, backend=backend or BackendSpec("real"), imaginer=imaginer, **self.env_kwargs())


@dataclass
class TrainEnvArgs(EnvArgs):
    """``EnvArgs`` of the training commands (``sft``, ``train``): they draw from the train split."""

    split: str = field(default="train", metadata={"help": "task split trained on (evaluate on another one)"})


@dataclass
class BackendArgs:
    """Who answers the tool calls."""

    _argument_group_name = "backend"

    backend: str = field(
        default="real",
        metadata={
            "help": "real | self (the LM policy imagines results from an env-role prompt) | self-inline (it writes "
            "them inside its own context) | simulator (a separate model does) | replay:PATH | cache:PATH | "
            "mcp:COMMAND | mcp:URL"
        },
    )

    def __post_init__(self) -> None:
        parse_backend_spec(self.backend)  # a ValueError with a one-line message

    @property
    def spec(self) -> BackendSpec:
        return parse_backend_spec(self.backend)


@dataclass
class RunArgs:
    """Seed, output and the device LM policies run on."""

    _argument_group_name = "run"

    seed: int = field(default=0, metadata={"help": "seed of the task order, the policy and sampling"})
    device: str = field(
        default="auto",
        metadata={
            "help": "where LM policies run: auto (CUDA when present, else the CPU), cpu, cuda or cuda:N; "
            "bf16 autocast on a CUDA device that supports it, float32 on every CPU"
        },
    )
    json: bool = field(default=False, metadata={"help": "print one JSON object on stdout"})
    no_progress: bool = field(
        default=False, metadata={"help": "hide progress bars: ours and those of transformers / huggingface_hub"}
    )
    quiet: bool = field(
        default=False,
        metadata={
            "help": "print the result and errors only: no progress bars (implies --no-progress), no info lines "
            "(which checkpoint a run folder gave), no warnings or info logs from the libraries"
        },
    )

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu"):  # torch is imported only to check a GPU that is asked for
            from envace_gym.agents.lm.device import resolve_device

            resolve_device(self.device, "--device")

    @property
    def progress(self) -> bool:
        return not (self.no_progress or self.quiet)

    @contextmanager
    def output(self) -> Iterator[None]:
        """While a command runs: the libraries' progress bars off unless `progress`; under ``--quiet``
        also their warnings and every log record below ERROR (`library_output`)."""
        from envace_gym.agents.quiet import library_output

        with library_output(self.progress, self.quiet):
            yield


@dataclass
class SamplingArgs:
    """How an LM policy samples (ignored by scripted policies)."""

    _argument_group_name = "LM sampling"

    temperature: float = field(default=0.0, metadata={"help": "LM sampling temperature (0 = greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling: the probability mass drawn from"})
    max_new_tokens: int = field(default=96, metadata={"help": "tokens generated per LM turn at most"})

    def __post_init__(self) -> None:
        _positive(self, "temperature", strict=False)
        _positive(self, "max_new_tokens")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"--top-p must be in (0, 1], got {self.top_p}")

    def config(self, seed: int):
        from envace_gym.agents.lm.engine import SamplingConfig

        return SamplingConfig(
            temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens, seed=seed
        )


@dataclass
class ImportArgs:
    """User code that registers backends, suites or env ids: imported before the other flags are checked."""

    _argument_group_name = "user code"

    imports: list[str] = field(
        default_factory=list,
        metadata={
            "aliases": ["--import"],
            "action": "extend",  # --import a --import b, and --import a b
            "metavar": "MODULE",
            "help": "import MODULE first (repeatable), from the current directory or sys.path: its "
            "register_backend / register_suite calls make those names usable in the other flags",
        },
    )


def import_user_modules(names: Sequence[str]) -> None:
    """Import each of ``names`` (``--import``), with the current directory first on ``sys.path`` as ``python
    -m`` has it. A missing module or one that raises is a `UserError` (one line)."""
    if not names:
        return
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()  # a module file written since the last import (tests, notebooks)
    for name in names:
        if name.endswith(".py") or os.sep in name or "/" in name:
            stem = os.path.splitext(os.path.basename(name))[0]
            raise UserError(f"--import takes a module name ({stem}), not a path ({name}); run from its folder")
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(f"{exc.name}.")):  # the module itself
                raise UserError(
                    f"--import {name}: no module named {exc.name!r} in the current directory ({cwd}) or on sys.path"
                ) from None
            raise UserError(f"cannot import {name}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # the module's own error, in one line
            raise UserError(f"cannot import {name}: {type(exc).__name__}: {exc}") from exc


# ------------------------------------------------------------------------------------- dataclass <-> flags
def hf_argparser() -> ModuleType:
    """``transformers.hf_argparser`` (``HfArgumentParser``, ``string_to_bool``), without importing
    ``transformers`` where it is not loaded yet.

    Importing the ``transformers`` package takes 0.5-0.9 s here (its ``__init__`` and dependency version
    checks), longer than ``envace list`` has to run; ``hf_argparser.py`` itself needs only the standard
    library and PyYAML, so it is loaded from its file on its own. Once ``transformers`` is loaded (any
    command that loads a model), its own module is used."""
    if "transformers" in sys.modules:
        return importlib.import_module("transformers.hf_argparser")
    return _standalone_hf_argparser()


@cache
def _standalone_hf_argparser() -> ModuleType:
    spec = importlib.util.find_spec("transformers")  # a top-level package: found, not imported
    locations = list(spec.submodule_search_locations or []) if spec else []
    path = next((f"{loc}/hf_argparser.py" for loc in locations), None)
    file_spec = importlib.util.spec_from_file_location("envace_gym.cli._hf_argparser", path) if path else None
    if file_spec is None or file_spec.loader is None:  # an unusual install: the ordinary import
        return importlib.import_module("transformers.hf_argparser")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[file_spec.name] = module  # dataclasses and typing look the module up by name
    file_spec.loader.exec_module(module)
    return module


def _is_string_to_bool(converter: Any) -> bool:
    """Whether ``converter`` is ``string_to_bool`` of either copy of ``hf_argparser`` (see `hf_argparser`)."""
    return getattr(converter, "__name__", None) == "string_to_bool" and "hf_argparser" in getattr(
        converter, "__module__", ""
    )


def _bool_or_str(value: str) -> bool | str:
    """For ``bool | str`` fields (``SFTConfig.bf16 = "auto"``): yes/no-like words are booleans, others stay text."""
    try:
        return hf_argparser().string_to_bool(value)
    except Exception:
        return value


def adjust_parser(
    parser: HfArgumentParser, groups: dict[str, Sequence[str]] | None = None, before: str = "run"
) -> HfArgumentParser:
    """Fix up a parser built by ``HfArgumentParser(dtypes, conflict_handler="resolve")``.

    ``groups`` (a command's ``FLAG_GROUPS``: title -> field names) labels the flags of a dataclass without
    an ``_argument_group_name`` (``EnvACEConfig``, ``SFTConfig``), which would otherwise be listed under the
    untitled ``options:``: each group is shown before the ``before`` group (else last).

    ``HfArgumentParser`` names a field ``--name`` and, with underscores, ``--na-me`` too; a bool is ``--flag``
    (no value: true; or ``--flag false``) and a True default adds ``--no-flag``; ``metadata`` goes to
    ``add_argument`` (``help``, ``aliases``). Some of its behaviours are adjusted:

    * a field in two dataclasses (``seed`` in ``RunArgs`` and ``SFTConfig``) would be two conflicting flags;
      with "resolve" the last one stays, and `configs_from_namespace` gives its value to every dataclass
      that has the field (``parse_args_into_dataclasses`` would delete it after the first). Such fields must
      have the same default, checked here;
    * a ``bool | str`` field is parsed as a bool, whose converter rejects a text default ("auto") even when
      the flag is absent: it gets a converter that keeps other words as text (the dataclass checks them);
    * help and usage list the dashed spelling first and no "(default: ...)" for required flags and the
      ``--no-flag`` twins.
    """
    seen: dict[str, Any] = {}
    text_bools = set()
    for dtype in parser.dataclass_types:
        for f in dataclasses.fields(dtype):
            if f.name in seen and seen[f.name] != f.default:
                raise TypeError(f"field {f.name!r} has two defaults: {seen[f.name]!r} and {f.default!r}")
            seen[f.name] = f.default
        hints = get_type_hints(dtype)
        text_bools |= {name for name, hint in hints.items() if getattr(hint, "__args__", None) == (bool, str)}
    for action in parser._actions:
        if action.dest in text_bools and _is_string_to_bool(action.type):
            action.type = _bool_or_str
        # Usage and help show the README's spelling first (--max-turns; --max_turns works too).
        action.option_strings.sort(key=lambda opt: "_" in opt)
        if action.required:
            action.default = SUPPRESS  # not "(default: None)" in --help
        elif isinstance(action, _StoreFalseAction):  # the --no-flag twin of a bool that defaults to true
            action.default = SUPPRESS
            action.help = f"the same as {action.option_strings[0].replace('--no-', '--', 1)} false"
    _group_flags(parser, groups or {}, before)
    return parser


def _group_flags(parser: ArgumentParser, groups: dict[str, Sequence[str]], before: str) -> None:
    """Move the flags of ``groups``' fields out of the untitled ``options:`` group into titled ones."""
    untitled = parser._optionals._group_actions
    titles = [g.title for g in parser._action_groups]
    at = titles.index(before) if before in titles else len(titles)
    for title, names in groups.items():
        group = parser.add_argument_group(title)
        parser._action_groups.insert(at, parser._action_groups.pop())  # shown before ``before``
        at += 1
        for action in [a for a in untitled if a.dest in names]:
            untitled.remove(action)
            group._group_actions.append(action)


def configs_from_namespace(dtypes: tuple[type, ...], ns: Namespace) -> tuple[Any, ...]:
    """One instance of each of ``dtypes`` from the parsed flags (a shared field goes to each that has it);
    their ``__post_init__`` checks raise ``ValueError``."""
    values = vars(ns)
    return tuple(
        dtype(**{f.name: values[f.name] for f in dataclasses.fields(dtype) if f.init and f.name in values})
        for dtype in dtypes
    )


def flag_dests(parser: ArgumentParser) -> dict[str, str]:
    """``{option string: field name}`` for every flag of ``parser`` except ``--help``."""
    return {opt: a.dest for a in parser._actions if a.dest != "help" for opt in a.option_strings}


# ------------------------------------------------------------------------------------------ env and models
def load_lm(
    spec: str, sampling: SamplingArgs, seed: int, engine: str = "hf", quiet: bool = False, device: str = "auto"
) -> LMPolicy:
    """The LM policy of ``spec``, on ``device`` (``--device``); ``quiet``: without the info lines (a first
    conversion, which checkpoint a run folder gave)."""
    from envace_gym.agents.lm.models import ModelLoadError
    from envace_gym.agents.lm.policy import LMPolicy

    try:
        policy = LMPolicy.from_spec(spec, sampling=sampling.config(seed), engine=engine, progress=not quiet)
    except ModelLoadError as exc:
        raise UserError(str(exc)) from None
    return policy.to(device)


def make_imaginer(
    backend: BackendSpec,
    actor: LMPolicy | None,
    simulator: str,
    sampling: SamplingArgs,
    seed: int,
    quiet: bool = False,
    device: str = "auto",
) -> Imaginer | None:
    """Who imagines tool results (`env_role_for` decides): the actor itself
    (``self``, ``self-inline``) or a separate frozen model (``simulator``, loaded from ``simulator`` only
    then); ``None`` for the backends an env builds itself."""
    needs_frozen = backend.imagined and not backend.self_imagined
    frozen = load_lm(simulator, sampling, seed, quiet=quiet, device=device) if needs_frozen else None
    try:
        return env_role_for(backend, actor, frozen)
    except ValueError:
        raise UserError(
            f"--backend {backend} needs an LM policy (it imagines its own tool results); "
            "for a scripted actor use --backend simulator --simulator SPEC"
        ) from None
