"""The checks a `Task` passes when it is made, each failing with one line that names the task, the field and
the fix.

When each check runs:

* Always, in ``Task.__post_init__`` (so also for `TaskSuite` and ``.jsonl`` task files, whose tasks are
  built the same way): ``user_turns`` is a sequence of strings, not one string; ``reference`` is a
  sequence of `RefTurn`, each ``steps`` a sequence of steps and each step a sequence of `RefCall` (the
  result inside the call, not beside it).
* When the task lists its ``tools``, also in ``Task.__post_init__``: every reference call names one of
  those tools and its arguments validate against that tool's schema.
* When the task lists no tools (its tools are its backend's), at the first ``reset`` on that task: the same
  two checks against the tools of the episode's backend (`check_reference_calls`, called by
  `envace_gym.ToolCallEnv`). Only then are those tools known.

A task that fails a check never reaches an episode, where it would otherwise crash the oracle or score 0
forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .backends.base import validate_call
from .calls import ErrorCode
from .tools import SchemaError, ToolSpec, compact_signature

if TYPE_CHECKING:
    from .tasks import Task

__all__ = ["OFF_SCHEMA", "check_task_shape", "check_listed_tools", "check_reference_calls"]

#: Task metadata key: true when the reference's arguments may break the tools' schemas on purpose (see
#: `check_reference_calls`).
OFF_SCHEMA = "reference_off_schema"

_SHOWN = 40  # characters of a user turn quoted in a message


def _kind(value: Any) -> str:
    return type(value).__name__


def check_task_shape(task: Task) -> str | None:
    """What is wrong with the types of ``task``'s user turns and reference, as ``"field: fix"``; None if
    nothing. Runs before the other checks: they read the fields it checks."""
    from .tasks import RefCall, RefTurn  # tasks imports this module

    turns = task.user_turns
    if isinstance(turns, str):
        quoted = turns if len(turns) <= _SHOWN else turns[: _SHOWN - 3] + "..."
        return f"user_turns is a string, not a sequence of turns; write user_turns=({quoted!r},)"
    if not isinstance(turns, (tuple, list)):
        return f"user_turns is a {_kind(turns)}; give a tuple of strings, one per user turn"
    for i, turn in enumerate(turns):
        if not isinstance(turn, str):
            return f"user_turns[{i}] is a {_kind(turn)}, not a string; each user turn is the text of one message"
    reference = task.reference
    if isinstance(reference, RefTurn) or not isinstance(reference, (tuple, list)):
        return (
            f"reference is a {_kind(reference)}; give a tuple of RefTurn, one per user turn: reference=(RefTurn(...),)"
        )
    for t, ref_turn in enumerate(reference):
        if not isinstance(ref_turn, RefTurn):
            return f"reference[{t}] is a {_kind(ref_turn)}, not a RefTurn; write RefTurn(steps=..., answer=...)"
        steps = ref_turn.steps
        if isinstance(steps, RefCall) or not isinstance(steps, (tuple, list)):
            return (
                f"reference[{t}].steps is a {_kind(steps)}; give a tuple of steps, each a tuple of parallel "
                "calls: steps=((RefCall(name, arguments, result),),)"
            )
        for s, step in enumerate(steps):
            if not isinstance(step, (tuple, list)):
                return (
                    f"reference[{t}].steps[{s}] is a {_kind(step)}, not a step; a step is a tuple of parallel "
                    "calls: steps=((RefCall(name, arguments, result),),)"
                )
            for c, call in enumerate(step):
                if not isinstance(call, RefCall):
                    # The usual slip: a result written beside its call, as its own item of the step.
                    prev = step[c - 1] if c else None
                    name = repr(prev.name) if isinstance(prev, RefCall) else "name"
                    return (
                        f"reference[{t}].steps[{s}][{c}] is a {_kind(call)}, not a RefCall; put each call's "
                        f"result inside it: RefCall({name}, arguments, result)"
                    )
    return None


def check_listed_tools(task: Task) -> str | None:
    """`check_reference_calls` against the tools ``task`` lists, as ``"field: fix"``; None if all are good.
    Only the tools the reference calls are built into `ToolSpec` (building every tool of every task would
    add a third to a builtin suite's load time)."""
    called = {ref.name for ref in task.reference_calls}
    declared: list[str] = []
    specs: dict[str, ToolSpec] = {}
    for i, tool in enumerate(task.tools):
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if name not in called and isinstance(name, str):
            declared.append(name)
            continue
        try:
            spec = ToolSpec.from_openai(tool)
        except SchemaError as exc:
            return f"field 'tools/{i}': {exc}"
        declared.append(spec.name)
        specs[spec.name] = spec
    return check_reference_calls(task, specs, declared=declared)


def check_reference_calls(
    task: Task, specs: Mapping[str, ToolSpec], owner: str = "the task's tools", declared: Iterable[str] | None = None
) -> str | None:
    """The first reference call of ``task`` that names a tool not in ``specs`` or whose arguments do not
    validate against its schema, as ``"field: fix"``; None if all are good. ``owner`` says whose tools
    ``specs`` are, for the message; ``declared``: every tool name they have, where ``specs`` holds only
    those the reference calls (default: ``specs``'s names). Uses `validate_call`, the check every
    episode's calls go through.

    A task whose metadata sets `OFF_SCHEMA` has its calls' names checked but not their arguments: an
    imported benchmark's ground truth that breaks the benchmark's own schemas (BFCL's grader, not the
    schema, decides such a task)."""
    names_only = bool(task.metadata.get(OFF_SCHEMA)) if isinstance(task.metadata, dict) else False
    for t, ref_turn in enumerate(task.reference):
        for s, step in enumerate(ref_turn.steps):
            for c, ref in enumerate(step):
                error = validate_call(ref.call, specs)
                if error is None or (names_only and error.code is not ErrorCode.TOOL_NOT_AVAILABLE):
                    continue
                where = f"reference[{t}].steps[{s}][{c}]"
                if error.code is ErrorCode.TOOL_NOT_AVAILABLE:
                    names = ", ".join(sorted(specs if declared is None else set(declared))) or "none"
                    return f"{where} calls {ref.name!r}, which {owner} do not declare; call one of: {names}"
                # validate_call's message starts with the tool's name; the fix is the tool's signature.
                problem = error.message.removeprefix(f"{ref.name}: ")
                spec = specs[ref.name]
                wanted = compact_signature({"name": spec.name, "parameters": spec.parameters}).removeprefix("- ")
                return f"{where} has arguments that do not fit {ref.name!r}: {problem}; the tool takes {wanted}"
    return None
