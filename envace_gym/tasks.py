"""Tasks and task suites, with a JSON Lines round trip whose errors name the file, line and field.

A `Task` holds everything an episode needs: the user turns, the tool schemas, which registered
backend serves them and from what initial state, the reward bases, and a reference trajectory (the calls
that solve it, with their real results) used by the oracle, by ``state_match`` and as grounding for
imagined tool results.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import random
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator

from .calls import ToolCall
from .rewards import reward_bases
from .task_checks import check_listed_tools, check_task_shape
from .tools import SchemaError, ToolSpec

if TYPE_CHECKING:
    from .binding import Checklist

__all__ = [
    "RefCall",
    "RefTurn",
    "Task",
    "TaskSuite",
    "TaskFormatError",
]


class TaskFormatError(ValueError):
    """A task file or task dict that does not describe a valid task."""


@dataclass(frozen=True)
class RefCall:
    """One call of the reference trajectory with the result the real backend gave."""

    name: str
    arguments: dict[str, Any]
    result: Any = None

    @property
    def call(self) -> ToolCall:
        return ToolCall(self.name, self.arguments)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "result": self.result}


@dataclass(frozen=True)
class RefTurn:
    """The reference for one user turn: assistant steps (each a list of parallel calls), then the answer.

    ``answer_contains`` lists strings that the agent's answer to this turn must contain (after
    normalisation) for ``answer_match``.
    """

    steps: tuple[tuple[RefCall, ...], ...] = ()
    answer: str = ""
    answer_contains: tuple[str, ...] = ()

    @property
    def calls(self) -> list[RefCall]:
        return [c for step in self.steps for c in step]

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": [[c.to_dict() for c in step] for step in self.steps],
            "answer": self.answer,
            "answer_contains": list(self.answer_contains),
        }


@dataclass(frozen=True)
class Task:
    """One episode's specification. See the module docstring.

    A task is checked when it is made (`envace_gym.task_checks`), each failure a `TaskFormatError` of one
    line naming the task, the field and the fix: always, that ``user_turns`` is a sequence of strings and
    ``reference`` a sequence of `RefTurn` whose steps are sequences of `RefCall` (the result inside the
    call); when it lists ``tools``, that each reference call names one of them with arguments that validate
    against its schema. A task that lists no tools takes its backend's, and is checked against those at its
    first ``reset`` in a `envace_gym.ToolCallEnv`. `TaskSuite` and ``.jsonl`` task files build tasks here,
    so they are checked the same way (a file's message starts with ``file:line:``).
    """

    id: str
    user_turns: tuple[str, ...]
    tools: tuple[dict[str, Any], ...] = ()
    backend: str = ""
    initial_state: dict[str, Any] = field(default_factory=dict)
    reference: tuple[RefTurn, ...] = ()
    reward: tuple[str, ...] = ("call_match",)
    domain: str = ""
    split: str = "train"
    system: str | None = None
    max_turns: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The checks of `envace_gym.task_checks` (shapes always; reference calls against the tools when the
        # task lists them): a task built wrong fails here, not episodes later in the oracle or the reward.
        problem = check_task_shape(self)
        if problem is None and self.tools and self.reference:
            problem = check_listed_tools(self)
        if problem is not None:
            raise TaskFormatError(f"task {self.id!r}: {problem}")
        if self.reference and len(self.reference) != len(self.user_turns):
            raise TaskFormatError(
                f"task {self.id!r}: reference has {len(self.reference)} turns but there are "
                f"{len(self.user_turns)} user turns"
            )
        for basis in self.reward:
            if basis not in reward_bases():
                raise TaskFormatError(f"task {self.id!r}: unknown reward basis {basis!r}; use {reward_bases()}")

    @cached_property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        return tuple(ToolSpec.from_openai(t) for t in self.tools)

    @cached_property
    def expected_calls(self) -> tuple[dict[str, dict[str, list[Any]]], ...]:
        """``call_match``'s possible answers from the reference calls, built once per task
        (`envace_gym.rewards.expected_calls_from_reference`)."""
        from .rewards import expected_calls_from_reference  # rewards imports tasks only for typing

        return tuple(expected_calls_from_reference(self))

    @cached_property
    def checklist(self) -> Checklist:
        """The reference as steps bound to what an episode shows (`envace_gym.binding.checklist_of`), built
        once per task: the reward of an episode whose results were imagined."""
        from .binding import checklist_of  # binding imports tasks only for typing

        return checklist_of(self)

    @property
    def reference_calls(self) -> list[RefCall]:
        return [c for turn in self.reference for c in turn.calls]

    def blind(self, keep: Collection[str] = ()) -> Task:
        """This task as test time sees it: the same conversation, tools and initial state, without the
        reference trajectory, the reward bases (which read the reference) or the metadata (benchmarks keep
        ground truth there). Private rehearsal runs on it.

        Args:
            keep: metadata keys to keep, for those that only schedule what the agent is shown and hold no
                answer (an env names them in ``ToolCallEnv.rehearsal_metadata``, e.g. BFCL's ``holdout``:
                which tools are offered from which user turn, as the live agent is offered them)."""
        kept = {k: copy.deepcopy(self.metadata[k]) for k in keep if k in self.metadata}
        return dataclasses.replace(self, reference=(), reward=(), metadata=kept)

    # ------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "domain": self.domain,
            "split": self.split,
            "user_turns": list(self.user_turns),
            "tools": list(self.tools),
            "backend": self.backend,
            "initial_state": self.initial_state,
            "reference": [t.to_dict() for t in self.reference],
            "reward": list(self.reward),
        }
        if self.system is not None:
            out["system"] = self.system
        if self.max_turns is not None:
            out["max_turns"] = self.max_turns
        if self.metadata:
            out["metadata"] = self.metadata
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Task:
        """Build a task from its dict form; raises `TaskFormatError` naming the bad field."""
        errors = sorted(_TASK_VALIDATOR.iter_errors(data), key=lambda e: (len(e.path), list(e.path)))
        if errors:
            err = errors[0]
            where = "/".join(str(p) for p in err.path) or "(task)"
            raise TaskFormatError(f"field {where!r}: {err.message}")
        for i, basis in enumerate(data.get("reward", [])):
            if basis not in reward_bases():
                raise TaskFormatError(
                    f"field 'reward/{i}': {basis!r} is not a reward basis; use one of {list(reward_bases())}"
                )
        # Before the task is built: its checks read the tools, and a bad tool is the error to report.
        for i, spec in enumerate(data.get("tools", [])):
            try:
                ToolSpec.from_openai(spec)
            except SchemaError as exc:
                raise TaskFormatError(f"field 'tools/{i}': {exc}") from None
        reference = tuple(
            RefTurn(
                steps=tuple(
                    tuple(RefCall(c["name"], c.get("arguments", {}), c.get("result")) for c in step)
                    for step in turn.get("steps", [])
                ),
                answer=turn.get("answer", ""),
                answer_contains=tuple(turn.get("answer_contains", [])),
            )
            for turn in data.get("reference", [])
        )
        return cls(
            id=data["id"],
            user_turns=tuple(data["user_turns"]),
            tools=tuple(data.get("tools", [])),
            backend=data.get("backend", ""),
            initial_state=data.get("initial_state", {}),
            reference=reference,
            reward=tuple(data.get("reward", ["call_match"])),
            domain=data.get("domain", ""),
            split=data.get("split", "train"),
            system=data.get("system"),
            max_turns=data.get("max_turns"),
            metadata=data.get("metadata", {}),
        )


_REF_CALL = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string", "minLength": 1}, "arguments": {"type": "object"}},
}
_TASK_SCHEMA = {
    "type": "object",
    "required": ["id", "user_turns"],
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "domain": {"type": "string"},
        "split": {"type": "string", "minLength": 1},
        "user_turns": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "backend": {"type": "string"},
        "initial_state": {"type": "object"},
        "reference": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "steps": {"type": "array", "items": {"type": "array", "items": _REF_CALL}},
                    "answer": {"type": "string"},
                    "answer_contains": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "reward": {"type": "array", "items": {"type": "string"}},  # names checked by Task against reward_bases()
        "system": {"type": ["string", "null"]},
        "max_turns": {"type": ["integer", "null"], "minimum": 1},
        "metadata": {"type": "object"},
    },
}
_TASK_VALIDATOR = Draft202012Validator(_TASK_SCHEMA)


class TaskSuite(Sequence[Task]):
    """An ordered, id-indexed collection of tasks (one or more domains and splits)."""

    def __init__(self, tasks: Iterable[Task], name: str = "custom") -> None:
        self.name = name
        self._tasks = list(tasks)
        self._by_id: dict[str, Task] = {}
        for task in self._tasks:
            if task.id in self._by_id:
                raise TaskFormatError(f"suite {name!r}: duplicate task id {task.id!r}")
            self._by_id[task.id] = task

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return TaskSuite(self._tasks[index], self.name)
        return self._tasks[index]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._by_id

    def get(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"no task {task_id!r} in suite {self.name!r}") from None

    def filter(self, split: str | None = None, domain: str | None = None) -> TaskSuite:
        """Tasks of one split and/or domain, keeping order."""
        kept = [
            t for t in self._tasks if (split is None or t.split == split) and (domain is None or t.domain == domain)
        ]
        return TaskSuite(kept, self.name if split is None else f"{self.name}:{split}")

    @property
    def splits(self) -> list[str]:
        return sorted({t.split for t in self._tasks})

    @property
    def domains(self) -> list[str]:
        return sorted({t.domain for t in self._tasks})

    def episode_order(self, episodes: int | None = None, seed: int = 0) -> list[Task]:
        """The tasks of ``episodes`` evaluation episodes (default: each task once), the one seeded order that
        every evaluation uses: each domain's tasks shuffled by ``seed``, domains interleaved, so any prefix
        is balanced across domains and no task repeats before every task has run once."""
        rng = random.Random(seed)
        by_domain: dict[str, list[Task]] = {}
        for task in self._tasks:
            by_domain.setdefault(task.domain, []).append(task)
        for tasks in by_domain.values():
            rng.shuffle(tasks)
        order = [t for round_ in itertools.zip_longest(*by_domain.values()) for t in round_ if t is not None]
        if not order:
            return []
        n = len(order) if episodes is None else episodes
        return [order[i % len(order)] for i in range(n)]

    def __add__(self, other: TaskSuite) -> TaskSuite:
        return TaskSuite([*self._tasks, *other._tasks], f"{self.name}+{other.name}")

    # ------------------------------------------------------------- JSONL
    def save_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as fh:
            for task in self._tasks:
                fh.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
        return path

    @classmethod
    def load_jsonl(cls, path: str | Path, name: str | None = None) -> TaskSuite:
        """Read one task per line; a bad line raises ``TaskFormatError("file:line: field ...")``."""
        path = Path(path)
        if not path.exists():
            raise TaskFormatError(f"{path}: no such task file")
        if not path.is_file():
            raise TaskFormatError(f"{path}: not a file (a task file is JSONL, one task per line)")
        tasks = []
        with path.open("rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise TaskFormatError(f"{path}:{lineno}: not UTF-8 (byte {exc.start + 1})") from None
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskFormatError(
                        f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
                    ) from None
                except RecursionError:
                    raise TaskFormatError(f"{path}:{lineno}: JSON nested too deeply") from None
                try:
                    tasks.append(Task.from_dict(data))
                except TaskFormatError as exc:
                    raise TaskFormatError(f"{path}:{lineno}: {exc}") from None
        try:
            return cls(tasks, name or path.stem)
        except TaskFormatError as exc:
            raise TaskFormatError(f"{path}: {exc}") from None
