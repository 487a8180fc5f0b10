"""The one narrow bridge to the installed ``bfcl-eval`` package: data files, function docs, API classes and
checker functions. Everything else in ``envace_gym.envs.bfcl`` goes through here.

Only leaf modules of ``bfcl_eval`` are imported (its data constants, the stateful API classes, the
multi-turn checker and its helpers). Two modules are avoided on purpose: ``bfcl_eval.constants.eval_config``
(creates result folders on import) and ``bfcl_eval.constants.model_config`` (imports every model handler,
and with them ``anthropic``, ``openai``...). The AST checker module needs the latter only to look up
whether a model's handler renames dotted function names; `ast_checker` loads that module file by
path with a stand-in mapping that keeps names as written, which is what this env does.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "BFCLUnavailable",
    "package_dir",
    "test_entries",
    "entry",
    "ground_truth",
    "func_docs",
    "api_class",
    "is_stateless",
    "ast_checker",
    "multi_turn_checker",
    "language",
    "added_functions_prompt",
    "max_steps_per_turn",
    "CHECKER_MODEL_NAME",
]

#: The model name handed to BFCL's checkers (they only use it to name cached instances and to look up
#: name conventions, which the stand-in below answers with "keep dotted names").
CHECKER_MODEL_NAME = "envace"


class BFCLUnavailable(RuntimeError):
    """bfcl-eval is missing or does not have the files this env needs."""


@cache
def package_dir() -> Path:
    """Where the installed ``bfcl_eval`` package lives (found without importing it)."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BFCLUnavailable(
            "bfcl-eval is not installed; install it with `pip install --no-deps bfcl-eval==2026.3.23` "
            "(plus mpmath for MathAPI)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _data_file(*parts: str) -> Path:
    path = package_dir().joinpath("data", *parts)
    if not path.is_file():
        raise BFCLUnavailable(f"bfcl-eval has no data file {path}; is the installed release 2026.3.23?")
    return path


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def count_entries(category: str) -> int:
    """How many test entries a category has (its data file's non-blank lines), without parsing them."""
    with _data_file(f"BFCL_v4_{category}.json").open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


@cache
def test_entries(category: str) -> tuple[dict[str, Any], ...]:
    """The test entries of one category (``BFCL_v4_<category>.json``, JSON Lines), in file order."""
    return tuple(_read_jsonl(_data_file(f"BFCL_v4_{category}.json")))


@cache
def _entries_by_id(category: str) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in test_entries(category)}


def entry(category: str, entry_id: str) -> dict[str, Any]:
    """One test entry by id (shared, read-only: copy before changing it)."""
    try:
        return _entries_by_id(category)[entry_id]
    except KeyError:
        raise KeyError(f"BFCL category {category!r} has no entry {entry_id!r}") from None


@cache
def _ground_truth_by_id(category: str) -> dict[str, Any]:
    path = package_dir() / "data" / "possible_answer" / f"BFCL_v4_{category}.json"
    if not path.is_file():  # relevance and irrelevance categories have none
        return {}
    return {row["id"]: row["ground_truth"] for row in _read_jsonl(path)}


def ground_truth(category: str, entry_id: str) -> Any:
    """The possible answer of one entry, or ``None`` where the category has no ground truth."""
    return _ground_truth_by_id(category).get(entry_id)


def _backend_config() -> types.ModuleType:
    return importlib.import_module("bfcl_eval.constants.executable_backend_config")


@cache
def func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The function docs of one stateful API class (``multi_turn_func_doc/<file>.json``)."""
    mapping = _backend_config().MULTI_TURN_FUNC_DOC_FILE_MAPPING
    if class_name not in mapping:
        raise BFCLUnavailable(f"bfcl-eval has no function docs for class {class_name!r}")
    return tuple(_read_jsonl(_data_file("multi_turn_func_doc", mapping[class_name])))


@cache
def api_class(class_name: str) -> type:
    """The stateful API class (plain Python) behind a multi-turn ``involved_classes`` name."""
    mapping = _backend_config().CLASS_FILE_PATH_MAPPING
    if class_name not in mapping:
        raise BFCLUnavailable(f"bfcl-eval has no API class {class_name!r}")
    return getattr(importlib.import_module(mapping[class_name]), class_name)


def is_stateless(class_name: str) -> bool:
    """Stateless classes (MathAPI) take no scenario."""
    return class_name in _backend_config().STATELESS_CLASSES


class _KeepDottedNames(dict):
    # Stand-in for MODEL_CONFIG_MAPPING: every model keeps dotted function names as written.
    def __missing__(self, key: str) -> Any:
        return types.SimpleNamespace(underscore_to_dot=False)


@cache
def ast_checker() -> types.ModuleType:
    """BFCL's own AST checker module (``ast_checker``, ``simple_function_checker``...), loaded by path."""
    path = package_dir() / "eval_checker" / "ast_eval" / "ast_checker.py"
    if not path.is_file():
        raise BFCLUnavailable(f"bfcl-eval has no AST checker at {path}")
    stub_name = "bfcl_eval.constants.model_config"
    stub = types.ModuleType(stub_name)
    stub.MODEL_CONFIG_MAPPING = _KeepDottedNames()  # type: ignore[attr-defined]
    importlib.import_module("bfcl_eval.constants")  # the real parent package (its __init__ is empty)
    previous = sys.modules.get(stub_name)
    sys.modules[stub_name] = stub  # only while the module body runs; restored below
    try:
        spec = importlib.util.spec_from_file_location("_envace_bfcl_ast_checker", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if previous is None:
            sys.modules.pop(stub_name, None)
        else:
            sys.modules[stub_name] = previous
    return module


def multi_turn_checker() -> types.ModuleType:
    """BFCL's multi-turn checker module (``state_checker``, ``response_checker``, ``multi_turn_checker``)."""
    return importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")


def language(category: str) -> Any:
    """BFCL's ``Language`` enum member for a category (what its AST checker type-checks against)."""
    enum = importlib.import_module("bfcl_eval.constants.enums").Language
    if "javascript" in category:
        return enum.JAVASCRIPT
    if "java" in category:
        return enum.JAVA
    return enum.PYTHON


def added_functions_prompt() -> str:
    """The user message BFCL sends at a miss_func turn, when the held-out functions are added back."""
    return importlib.import_module("bfcl_eval.constants.default_prompts").DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC


def max_steps_per_turn() -> int:
    """BFCL's step limit per user turn in multi-turn inference (beyond it the entry is force-quit)."""
    return int(importlib.import_module("bfcl_eval.constants.default_prompts").MAXIMUM_STEP_LIMIT)
