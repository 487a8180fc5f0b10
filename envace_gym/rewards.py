"""Verifiable rewards: ``call_match`` (BFCL-style), ``state_match`` (tau2-style) and ``answer_match``.

Each basis scores an episode 0.0 or 1.0; a task lists the bases it is graded on and its reward is their
product, so reward 1.0 means success. Components are reported separately in ``info``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .calls import ToolCall

if TYPE_CHECKING:
    from .tasks import Task

__all__ = [
    "EpisodeRecord",
    "call_match",
    "call_fits",
    "expected_calls_from_reference",
    "values_match",
    "state_match",
    "answer_match",
    "normalize_answer",
    "score_episode",
    "RewardContext",
    "register_reward_basis",
    "reward_bases",
]

OPTIONAL = ""  # BFCL's marker in a list of allowed values: the argument may be omitted


@dataclass
class EpisodeRecord:
    """What the rewards look at: successful calls, each user turn's answer, the final state hash, and the
    result shown for each call (``results[i]`` for ``calls[i]``: what a checklist bound to observations
    reads; last, so that records built positionally keep their meaning)."""

    calls: list[ToolCall] = field(default_factory=list)
    turn_answers: list[str | None] = field(default_factory=list)
    final_state_hash: str | None = None
    results: list[Any] = field(default_factory=list)


# ---------------------------------------------------------------------------- call_match
def expected_calls_from_reference(task: Task) -> list[dict[str, dict[str, list[Any]]]]:
    """BFCL-style possible answers ``[{name: {arg: [allowed values]}}]`` from the reference calls.

    Optional parameters the reference leaves out may be omitted or given their default.
    """
    specs = {s.name: s for s in task.tool_specs}
    expected = []
    for ref in task.reference_calls:
        allowed: dict[str, list[Any]] = {k: [v] for k, v in ref.arguments.items()}
        spec = specs.get(ref.name)
        if spec is not None:
            required = set(spec.parameters.get("required", []))
            for pname, pschema in spec.parameters.get("properties", {}).items():
                if pname not in allowed and pname not in required:
                    allowed[pname] = [OPTIONAL] + ([pschema["default"]] if "default" in pschema else [])
        expected.append({ref.name: allowed})
    return expected


def _norm_str(s: str) -> str:
    # BFCL's string normalisation: case- and punctuation-insensitive.
    return re.sub(r"[ ,./\-_*^]", "", s).lower()


def values_match(value: Any, allowed: Any) -> bool:
    """BFCL value semantics: int accepted for float, strings normalised, lists/dicts compared deeply."""
    if isinstance(allowed, bool) or isinstance(value, bool):
        return type(value) is type(allowed) and value == allowed
    if isinstance(allowed, float) and isinstance(value, (int, float)):
        return float(value) == allowed
    if isinstance(allowed, int) and isinstance(value, int):
        return value == allowed
    if isinstance(allowed, str) and isinstance(value, str):
        return _norm_str(value) == _norm_str(allowed)
    if isinstance(allowed, list) and isinstance(value, list):
        return len(value) == len(allowed) and all(values_match(v, a) for v, a in zip(value, allowed, strict=True))
    if isinstance(allowed, dict) and isinstance(value, dict):
        return value.keys() == allowed.keys() and all(values_match(value[k], allowed[k]) for k in allowed)
    return value == allowed and type(value) is type(allowed)


def call_fits(call: ToolCall, expected: Mapping[str, Mapping[str, list[Any]]]) -> bool:
    """Whether ``call`` is one of ``expected``'s possible answers (``{name: {arg: [allowed values]}}``)."""
    ((name, args),) = expected.items()
    if call.name != name:
        return False
    for arg in call.arguments:
        if arg not in args:
            return False
    for arg, allowed in args.items():
        if arg not in call.arguments:
            if OPTIONAL not in allowed:
                return False
        elif not any(values_match(call.arguments[arg], a) for a in allowed if a != OPTIONAL):
            return False
    return True


def call_match(calls: Sequence[ToolCall], expected: Sequence[Mapping[str, Mapping[str, list[Any]]]]) -> float:
    """1.0 when the calls and the expected calls pair up one-to-one, in any order; else 0.0."""
    if len(calls) != len(expected):
        return 0.0
    fits = [[j for j, exp in enumerate(expected) if call_fits(c, exp)] for c in calls]
    match_of: dict[int, int] = {}  # expected index -> call index

    def augment(i: int, seen: set[int]) -> bool:  # Kuhn's bipartite matching
        for j in fits[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in match_of or augment(match_of[j], seen):
                match_of[j] = i
                return True
        return False

    return 1.0 if all(augment(i, set()) for i in range(len(calls))) else 0.0


# ---------------------------------------------------------------------------- answer_match
_NUMBER = re.compile(r"^-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
# Quotes, brackets and markdown emphasis around a value do not change it ("`/a/b.txt`", "**32**").
_STRIP_LEAD = "$€£(\"'[{`*_"
_STRIP_TRAIL = ".,;:!?)%\"']}`*_"


def _canonical_number(token: str) -> str:
    value = float(token.replace(",", ""))
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{round(value, 6):.6f}".rstrip("0").rstrip(".")


@lru_cache(maxsize=4096)  # every episode normalises its task's required strings again, and answers repeat
def normalize_answer(text: str) -> str:
    """Lower-case, punctuation-trimmed tokens with numbers in one canonical form ("1,200.50" -> "1200.5")."""
    tokens = []
    for raw in text.lower().split():
        tok = raw.lstrip(_STRIP_LEAD).rstrip(_STRIP_TRAIL)
        if not tok:
            continue
        tokens.append(_canonical_number(tok) if _NUMBER.match(tok) else tok)
    return " ".join(tokens)


def answer_match(turn_answers: Sequence[str | None], task: Task) -> float:
    """1.0 when every user turn's answer contains each of that turn's required strings (normalised)."""
    for t, ref in enumerate(task.reference):
        if not ref.answer_contains:
            continue
        answer = turn_answers[t] if t < len(turn_answers) else None
        if answer is None:
            return 0.0
        haystack = f" {normalize_answer(answer)} "
        if not all(f" {normalize_answer(s)} " in haystack for s in ref.answer_contains):
            return 0.0
    return 1.0


# ---------------------------------------------------------------------------- state_match
def state_match(final_state_hash: str | None, expected_hash: str) -> float:
    return 1.0 if final_state_hash is not None and final_state_hash == expected_hash else 0.0


# ---------------------------------------------------------------------------- the registry
@dataclass
class RewardContext:
    """What a reward basis may look at: the task, the episode's record, and the env that ran it (benchmark
    bases read their own env's state, e.g. BFCL's attempted calls)."""

    task: Task
    record: EpisodeRecord
    env: Any = None
    expected_state_hash: Callable[[], str] | None = None
    expected_calls: Sequence[Mapping[str, Mapping[str, list[Any]]]] | None = None
    final_state_hash: Callable[[], str | None] | None = None

    def final_hash(self) -> str | None:
        """The episode's final state hash: ``record.final_state_hash``, or computed on demand by the env."""
        if self.record.final_state_hash is None and self.final_state_hash is not None:
            return self.final_state_hash()
        return self.record.final_state_hash


RewardBasis = Callable[[RewardContext], float]
_BASES: dict[str, RewardBasis] = {}


def register_reward_basis(name: str, score: RewardBasis, *, overwrite: bool = False) -> None:
    """Register ``score(ctx) -> float`` (0.0 to 1.0) under ``name``; tasks list it in ``Task.reward``."""
    if not callable(score):
        raise TypeError(f"reward basis {name!r}: score must be callable, got {type(score).__name__}")
    if name in _BASES and not overwrite and _BASES[name] is not score:
        raise ValueError(f"reward basis {name!r} is already registered (pass overwrite=True to replace it)")
    _BASES[name] = score


def reward_bases() -> tuple[str, ...]:
    """The registered names: the three builtin ones first, then the benchmarks' in registration order."""
    return tuple(_BASES)


def _call_match_basis(ctx: RewardContext) -> float:
    exp = ctx.expected_calls if ctx.expected_calls is not None else ctx.task.expected_calls
    return call_match(ctx.record.calls, exp)


def _state_match_basis(ctx: RewardContext) -> float:
    if ctx.expected_state_hash is None:
        raise ValueError(f"task {ctx.task.id!r} is graded on state_match but no reference state is available")
    return state_match(ctx.final_hash(), ctx.expected_state_hash())


def _answer_match_basis(ctx: RewardContext) -> float:
    return answer_match(ctx.record.turn_answers, ctx.task)


register_reward_basis("call_match", _call_match_basis)
register_reward_basis("state_match", _state_match_basis)
register_reward_basis("answer_match", _answer_match_basis)


# ---------------------------------------------------------------------------- composition
def score_episode(
    task: Task,
    record: EpisodeRecord,
    expected_state_hash: Callable[[], str] | None = None,
    expected_calls: Iterable[Mapping[str, Mapping[str, list[Any]]]] | None = None,
    env: Any = None,
    final_state_hash: Callable[[], str | None] | None = None,
) -> tuple[float, dict[str, float]]:
    """Reward (product of the task's bases, each scored by its registered function) and the components.
    ``final_state_hash`` computes the final state's hash when ``record`` has none and a basis needs it."""
    exp = list(expected_calls) if expected_calls is not None else None
    ctx = RewardContext(task, record, env, expected_state_hash, exp, final_state_hash)
    components: dict[str, float] = {}
    for basis in task.reward:
        score = _BASES.get(basis)
        if score is None:
            raise ValueError(f"task {task.id!r}: reward basis {basis!r} is not registered; known: {list(_BASES)}")
        components[basis] = float(score(ctx))
    reward = 1.0
    for value in components.values():
        reward *= value
    return reward, components
