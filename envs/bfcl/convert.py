"""BFCL test entries -> `envace_gym.tasks.Task` objects (tools, user turns, reference trajectory).

Single-turn entries become one user turn; their reference is one parallel step of the ground-truth calls
(the first allowed value of every argument; host-language literals in Java/JavaScript) and then an answer.
Irrelevance entries' reference answers without a call. Multi-turn entries keep BFCL's turns; their
reference runs the parsed ground-truth calls on a fresh `BFCLBackend`, so each call
carries its real result (the grounding that imagined tool results are given).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from jsonschema import Draft202012Validator

from envace_gym.backends import validate_call
from envace_gym.calls import ToolCall
from envace_gym.task_checks import OFF_SCHEMA
from envace_gym.tasks import RefCall, RefTurn, Task
from envace_gym.tools import ToolSpec

from . import upstream
from .backend import ACKNOWLEDGEMENT, BFCLBackend
from .categories import REWARD_BASIS, category_kind
from .ground_truth import parse_call_string, reference_arguments
from .hostlang import encode, host_language, string_typed_doc
from .world import BFCLWorld

__all__ = [
    "build_tasks",
    "single_turn_task",
    "multi_turn_task",
    "ground_truth_turns",
    "placeholder_call",
    "IRRELEVANCE_ANSWER",
    "TURN_ANSWER",
]

IRRELEVANCE_ANSWER = "None of the available functions can do this, so I did not call any."
TURN_ANSWER = "Done."
MAX_CALLS_PER_STEP = 16  # ToolCallEnv's default max_calls_per_step
SINGLE_TURN_BACKEND = "bfcl/single_turn"
MULTI_TURN_BACKEND = "bfcl/multi_turn"


def build_tasks(category: str, limit: int | None = None) -> list[Task]:
    """The entries of ``category`` (the first ``limit`` of them) as Tasks (split ``"test"``, domain
    ``"bfcl/<category>"``, ``metadata["bfcl_id"]`` the BFCL id)."""
    build = multi_turn_task if category_kind(category) == "multi_turn" else single_turn_task
    return [build(entry, category) for entry in upstream.test_entries(category)[:limit]]


# ---------------------------------------------------------------------------------------- single turn
def _tool_doc(doc: dict[str, Any], language: str | None = None) -> dict[str, Any]:
    doc = string_typed_doc(doc, language) if language else doc
    # No result schema: single-turn calls return an acknowledgement, and the multi-turn classes' results do
    # not follow their documented "response" (message_id is {"new_id": ...} where the doc says integer),
    # so that schema would refuse the real results when they are imagined.
    doc = {k: v for k, v in doc.items() if k != "response"}
    return ToolSpec.from_bfcl(doc).to_openai()


def _split_messages(turn: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]], str]:
    """(system text, earlier conversation, last user message) of one BFCL turn."""
    system = "\n\n".join(m["content"] for m in turn if m["role"] == "system")
    rest = [{"role": m["role"], "content": m["content"]} for m in turn if m["role"] != "system"]
    last = max((i for i, m in enumerate(rest) if m["role"] == "user"), default=None)
    if last is None:
        return system, [], ""
    return system, rest[:last], rest[last]["content"]


def single_turn_task(entry: dict[str, Any], category: str) -> Task:
    """One single-turn BFCL entry as a Task."""
    language = host_language(category)
    docs = entry["function"]
    system, history, user = _split_messages(entry["question"][0])
    kind = category_kind(category)
    if kind == "irrelevance":
        reference = RefTurn(answer=IRRELEVANCE_ANSWER)
    else:
        calls = _relevance_calls(docs) if kind == "relevance" else _ground_truth_calls(entry, category, language)
        refs = [RefCall(c.name, c.arguments, dict(ACKNOWLEDGEMENT)) for c in calls]
        reference = RefTurn(steps=_steps(refs), answer=TURN_ANSWER)
    metadata: dict[str, Any] = {"bfcl_id": entry["id"], "bfcl_category": category}
    tools = tuple(_tool_doc(d, language) for d in docs)
    if kind != "irrelevance" and _off_schema(tools, calls):
        # A few of BFCL's ground truths break BFCL's own schemas (an int where the enum lists strings); its
        # checker grades them anyway, so the task keeps them, marked, instead of failing the suite's load.
        metadata[OFF_SCHEMA] = True
    if system:
        metadata["system"] = system
    if history:
        metadata["history"] = history
    return Task(
        id=entry["id"],
        user_turns=(user,),
        tools=tools,
        backend=SINGLE_TURN_BACKEND,
        reference=(reference,),
        reward=(REWARD_BASIS,),
        domain=f"bfcl/{category}",
        split="test",
        metadata=metadata,
    )


def _off_schema(tools: tuple[dict[str, Any], ...], calls: list[ToolCall]) -> bool:
    called = {c.name for c in calls}
    specs = {t["function"]["name"]: ToolSpec.from_openai(t) for t in tools if t["function"]["name"] in called}
    return any(c.name in specs and validate_call(c, specs) is not None for c in calls)


def _ground_truth_calls(entry: dict[str, Any], category: str, language: str | None) -> list[ToolCall]:
    docs = {d["name"]: d for d in entry["function"]}
    calls = []
    for answer in upstream.ground_truth(category, entry["id"]) or []:
        ((name, allowed),) = answer.items()
        params = docs.get(name, {}).get("parameters", {})
        props = params.get("properties", {})
        args = reference_arguments(allowed, props, params.get("required", []))
        if language:
            args = {
                k: encode(
                    v, props.get(k, {}).get("type", "any"), (props.get(k, {}).get("items") or {}).get("type"), language
                )
                for k, v in args.items()
            }
        calls.append(ToolCall(name, args))
    return calls


_PLACEHOLDERS = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}


def placeholder_call(spec: ToolSpec) -> ToolCall:
    """A schema-valid call of ``spec``: each required parameter gets its default, its first enum value or a
    placeholder of its type."""
    args = {}
    for name in spec.parameters.get("required", []):
        schema = spec.parameters.get("properties", {}).get(name, {})
        kind = schema.get("type")
        value = schema.get("default", (schema.get("enum") or [None])[0])
        args[name] = (
            value if value is not None else _PLACEHOLDERS.get(kind if isinstance(kind, str) else "string", "example")
        )
    return ToolCall(spec.name, args)


def _relevance_calls(docs: list[dict[str, Any]]) -> list[ToolCall]:
    # live_relevance has no ground truth: BFCL passes any call, so the reference calls the first function.
    return [placeholder_call(ToolSpec.from_bfcl(docs[0]))]


# ---------------------------------------------------------------------------------------- multi turn
def multi_turn_task(entry: dict[str, Any], category: str) -> Task:
    """One multi-turn BFCL entry as a Task; held-out functions (miss_func) are listed by the turn that adds them."""
    classes = list(entry["involved_classes"])
    docs = [d for c in classes for d in upstream.func_docs(c)]
    holdout = {str(t): list(names) for t, names in (entry.get("missed_function") or {}).items()}
    user_turns = []
    for turn in entry["question"]:
        _, _, user = _split_messages(turn)
        user_turns.append(user if turn else upstream.added_functions_prompt())
    long_context = "long_context" in category
    metadata: dict[str, Any] = {
        "bfcl_id": entry["id"],
        "bfcl_category": category,
        "involved_classes": classes,
        "long_context": long_context,
    }
    if holdout:
        metadata["holdout"] = holdout
    task = Task(
        id=entry["id"],
        user_turns=tuple(user_turns),
        tools=tuple(_tool_doc(d) for d in docs),
        backend=MULTI_TURN_BACKEND,
        initial_state=copy.deepcopy(entry.get("initial_config", {})),  # the entry stays bfcl-eval's cached data
        reward=(REWARD_BASIS,),
        domain=f"bfcl/{category}",
        split="test",
        max_turns=(upstream.max_steps_per_turn() + 1) * len(user_turns),
        metadata=metadata,
    )
    gt_turns = ground_truth_turns(task)
    task = dataclasses.replace(task, tools=_admit_ground_truth(task.tools, [c for turn in gt_turns for c in turn]))
    return dataclasses.replace(task, reference=_multi_turn_reference(task, gt_turns))


def _admit_ground_truth(tools: tuple[dict[str, Any], ...], calls: list[ToolCall]) -> tuple[dict[str, Any], ...]:
    # BFCL runs a ground-truth call whatever its argument types (one passes a string ticket id where the doc
    # says integer). Widening that parameter's type keeps such a task solvable here, where arguments are
    # schema-checked before a call runs.
    tools = copy.deepcopy(tools)
    props_of = {t["function"]["name"]: t["function"]["parameters"].get("properties", {}) for t in tools}
    for call in calls:
        for arg, value in call.arguments.items():
            schema = props_of.get(call.name, {}).get(arg)
            if not schema or "type" not in schema or Draft202012Validator({"type": schema["type"]}).is_valid(value):
                continue
            declared = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            schema["type"] = declared + [_json_type(value)]
    return tools


def _json_type(value: Any) -> str:
    for kind, types in (
        ("boolean", bool),
        ("integer", int),
        ("number", float),
        ("string", str),
        ("array", list),
        ("object", dict),
    ):
        if isinstance(value, types):
            return kind
    return "null"


def ground_truth_turns(task: Task, world: BFCLWorld | None = None) -> list[list[ToolCall]]:
    """The task's BFCL ground truth as calls with keyword arguments, per turn."""
    meta = task.metadata
    world = world or BFCLWorld(meta["involved_classes"], task.initial_state, bool(meta.get("long_context")))
    turns = upstream.ground_truth(meta["bfcl_category"], meta["bfcl_id"]) or []
    out = []
    for turn in turns:
        calls = []
        for text in turn:
            name, args, kwargs = parse_call_string(text)
            calls.append(ToolCall(name, _jsonable(world.bind(name, args, kwargs))))
        out.append(calls)
    return out


def _multi_turn_reference(task: Task, gt_turns: list[list[ToolCall]]) -> tuple[RefTurn, ...]:
    backend = BFCLBackend(timeout=None)
    backend.reset(task)
    turns = []
    for calls in gt_turns:
        refs = [RefCall(c.name, c.arguments, backend.execute(c).payload()) for c in calls]
        turns.append(RefTurn(steps=_steps(refs), answer=TURN_ANSWER))
    return tuple(turns)


def _steps(calls: list[RefCall]) -> tuple[tuple[RefCall, ...], ...]:
    # Calls of one step run in order, so splitting a long turn changes nothing but keeps each step within
    # the env's default max_calls_per_step.
    return tuple(tuple(calls[i : i + MAX_CALLS_PER_STEP]) for i in range(0, len(calls), MAX_CALLS_PER_STEP))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value
