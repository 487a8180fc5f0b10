"""A reward that is right in an imagined world: the reference as a checklist bound to what the episode showed.

The task reward (`call_match`, `answer_match`) compares the agent's calls and answer with the reference's
*real* values. Under imagination the env role writes other ids and amounts than the real world holds, and an
actor that reads its observation and acts on it (calls ``get_balance`` on the id it was shown, reports the
balance it was shown) would score 0. `checklist_of` turns a task's reference into steps whose values are

* **given** by the task: the value appears in the user's (or system) text, so it is compared literally;
* **bound** to an earlier observation *of this episode*: "the ``account_id`` of the element of the list
  ``find_accounts`` returned whose ``type`` is the one the user named", "the ``balance`` ``get_balance``
  returned", half of it, a line of a file's content, a folder path joined with a listed file name;
* **constant**: in neither (an enum the agent maps the text to, a sum it computes): compared literally, as
  today. `Checklist.constants` names them; under imagination a constant that depends on the world (a
  computed time, an argmax across calls) is still scored against the real world.

`bound_score` scores an episode's record against the checklist, reading each bound value from the result
the agent was shown for the call that fills the source step. It never reads a backend, and of the reference
only what the checklist holds (given and constant values, where to read bound ones). On a real backend the
shown results are the real ones, so it equals today's reward (a test checks every builtin domain);
`ToolCallEnv` uses it for episodes whose results were imagined.

How a source is found (`checklist_of`): a value that is not in the text is searched among the results of the
reference calls before it (an argument: earliest first; an answer: latest first); a path through a list picks
its element the way the task's text does: by a field whose value the user named and no other element has, by
the least or greatest field the text asks for ("cheapest", "earliest", ...), else by position.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .calls import ToolCall
from .rewards import EpisodeRecord, call_fits, call_match, normalize_answer, values_match

if TYPE_CHECKING:
    from .tasks import RefCall, Task

__all__ = ["Value", "Source", "CheckedCall", "Checklist", "checklist_of", "bound_score", "BOUND_BASES"]

#: The reward bases a checklist can score: a task graded on others (tau2's, BFCL's) keeps its own checker.
BOUND_BASES = frozenset({"call_match", "answer_match", "state_match"})

_POSSESSIVE = re.compile(r"'s\b")

# "the cheapest flight", "the first departure": which least/greatest field a list element is picked by.
_EXTREME_HINTS: tuple[tuple[re.Pattern[str], tuple[str, ...], str], ...] = (
    (re.compile(r"\b(cheap\w*|lowest|least expensive)\b"), ("price", "total", "amount", "fare"), "min"),
    (re.compile(r"\b(first|earliest)\b"), ("depart", "start", "time", "date"), "min"),
    (re.compile(r"\b(latest|last|newest|most recent)\b"), ("date", "start", "time", "depart"), "max"),
    (re.compile(r"\b(biggest|largest|most expensive|highest)\b"), ("price", "size", "total", "amount"), "max"),
)


# ------------------------------------------------------------------------------------------ the checklist
@dataclass(frozen=True)
class Source:
    """Where a bound value is read: the call that filled reference step ``call`` (its index among the task's
    reference calls); ``path`` leads into the result the agent was shown for it: ``("key", name)``,
    ``("at", index)``, ``("where", field, value)`` (the list element whose field equals the value, normalised)
    or ``("extreme", field, "min"|"max")``; or, as ``(("arg", name),)``, to the argument the agent sent."""

    call: int
    path: tuple[tuple[Any, ...], ...]

    def read(self, filled: tuple[ToolCall, Any]) -> Any:
        """The value at ``path`` in ``filled`` (the agent's call and the result it was shown), or `_MISSING`."""
        call, value = filled
        if self.path and self.path[0][0] == "arg":
            return call.arguments.get(self.path[0][1], _MISSING)
        for step in self.path:
            value = _step(value, step)
            if value is _MISSING:
                break
        return value


@dataclass(frozen=True)
class Value:
    """One checked value: ``kind`` is ``given`` or ``constant`` (compare ``literal``), ``read`` (``source``),
    ``half`` (half the number at ``source``, to the cent), ``line`` (line ``index`` of the text at
    ``source``), ``dir`` (the folder of the path at ``source``) or ``join`` (``parts[0] + "/" + parts[1]``,
    each a `Value`: a folder and a file name)."""

    kind: str
    literal: Any = None
    source: Source | None = None
    index: int = 0
    parts: tuple[Value, ...] = ()

    @property
    def bound(self) -> bool:
        return self.kind not in ("given", "constant") and not (
            self.kind == "join" and not any(p.bound for p in self.parts)
        )

    def resolve(self, shown: dict[int, tuple[ToolCall, Any]]) -> Any:
        """The value in this episode: literal, or read from ``shown`` (reference call index -> the agent's call
        that filled it and the result it was shown); `_MISSING` where the source was not filled or lacks it."""
        if self.kind in ("given", "constant"):
            return self.literal
        if self.kind == "join":
            head, base = (p.resolve(shown) for p in self.parts)
            if not isinstance(head, str) or not isinstance(base, str):
                return _MISSING
            return f"{head.rstrip('/')}/{base.rsplit('/', 1)[-1]}"
        assert self.source is not None
        if self.source.call not in shown:
            return _MISSING
        value = self.source.read(shown[self.source.call])
        if self.kind == "half":
            return round(value / 2, 2) if _is_number(value) else _MISSING
        if self.kind == "line":
            lines = value.splitlines() if isinstance(value, str) else []
            return lines[self.index] if self.index < len(lines) else _MISSING
        if self.kind == "dir":
            return value.rsplit("/", 1)[0] if isinstance(value, str) and "/" in value else _MISSING
        return value


@dataclass(frozen=True)
class CheckedCall:
    """A reference call as a checklist step: its tool, the turn it belongs to, and its arguments as values."""

    index: int
    turn: int
    name: str
    arguments: dict[str, Value]


@dataclass(frozen=True)
class Checklist:
    """A task's reference as steps bound to what the episode shows (see the module docstring)."""

    calls: tuple[CheckedCall, ...]
    answers: tuple[tuple[Value, ...], ...]  # per user turn: the strings its answer must contain
    constants: tuple[str, ...] = field(default=())  # "tool.arg" / "answer[t]" values neither given nor bound

    @property
    def bound_values(self) -> int:
        """How many of its values are read from an observation."""
        return sum(v.bound for c in self.calls for v in c.arguments.values()) + sum(
            v.bound for turn in self.answers for v in turn
        )


def checklist_of(task: Task) -> Checklist:
    """``task``'s reference as a `Checklist` (cached on the task: `Task.checklist`)."""
    words = " ".join([task.system or "", *task.user_turns])
    # "Ana Silva's account" names "Ana Silva": the text is read with and without the possessive.
    text = normalize_answer(words) + " | " + normalize_answer(_POSSESSIVE.sub("", words))
    refs = [(t, c) for t, turn in enumerate(task.reference) for c in turn.calls]
    constants: list[str] = []
    calls = []
    for i, (turn, ref) in enumerate(refs):
        earlier = [(j, refs[j][1]) for j in range(i)]  # an argument is read from a result seen before the call
        arguments = {}
        for name, value in ref.arguments.items():
            checked = _bind(value, text, earlier, answer=False)
            if checked.kind == "constant":
                constants.append(f"{ref.name}.{name}")
            arguments[name] = checked
        calls.append(CheckedCall(i, turn, ref.name, arguments))
    answers = []
    for t, turn in enumerate(task.reference):
        before = [(i, c) for i, (u, c) in enumerate(refs) if u <= t][::-1]  # an answer reports the latest first
        checked_turn = []
        for s in turn.answer_contains:
            checked = _bind(s, text, before, answer=True)
            if checked.kind == "constant":
                constants.append(f"answer[{t}]")
            checked_turn.append(checked)
        answers.append(tuple(checked_turn))
    return Checklist(tuple(calls), tuple(answers), tuple(constants))


# ------------------------------------------------------------------------------------------- scoring
def bound_score(task: Task, record: EpisodeRecord) -> tuple[float, dict[str, float]]:
    """The episode's reward against ``task``'s checklist, and its components (one per basis of the task):
    ``call_match`` pairs the calls one-to-one with the steps, each bound argument equal to the value the
    episode showed; ``answer_match`` reads each bound string from the result that filled its source step;
    ``state_match`` (an imagined world has no state to compare) is the bound ``call_match``: the writes are
    among the checked calls. Raises ValueError for a basis no checklist can score (`BOUND_BASES`)."""
    unknown = [b for b in task.reward if b not in BOUND_BASES]
    if unknown:
        raise ValueError(f"task {task.id!r}: reward basis {unknown[0]!r} cannot be bound to observations")
    checklist = task.checklist
    shown, calls_ok = _fill(task, checklist, record)
    components = {}
    for basis in task.reward:
        if basis == "answer_match":
            components[basis] = _answers_ok(checklist, shown, record.turn_answers)
        else:
            components[basis] = calls_ok
    reward = 1.0
    for value in components.values():
        reward *= value
    return reward, components


def _fill(task: Task, checklist: Checklist, record: EpisodeRecord) -> tuple[dict[int, tuple[ToolCall, Any]], float]:
    """Pair the episode's calls with the checklist's steps, in reference order, each step taking the first
    unpaired call that fits it once its bound arguments are read from the results of the steps filled so far:
    (step index -> the result shown for its call, bound ``call_match``)."""
    if not any(v.bound for c in checklist.calls for v in c.arguments.values()):
        # Nothing to read: today's matching (any order, one-to-one), and the results for the answers.
        ok = call_match(record.calls, task.expected_calls)
        return _shown_by_first_fit(task, record), ok
    shown: dict[int, tuple[ToolCall, Any]] = {}
    used: set[int] = set()
    for step, expected in zip(checklist.calls, task.expected_calls, strict=True):
        allowed = _bound_allowed(step, expected, shown)
        if allowed is None:
            continue
        for j, call in enumerate(record.calls):
            if j not in used and call_fits(call, allowed):
                used.add(j)
                shown[step.index] = (call, _result(record, j))
                break
    complete = len(shown) == len(checklist.calls) == len(record.calls)
    return shown, 1.0 if complete else 0.0


def _shown_by_first_fit(task: Task, record: EpisodeRecord) -> dict[int, tuple[ToolCall, Any]]:
    shown: dict[int, tuple[ToolCall, Any]] = {}
    used: set[int] = set()
    for i, expected in enumerate(task.expected_calls):
        for j, call in enumerate(record.calls):
            if j not in used and call_fits(call, expected):
                used.add(j)
                shown[i] = (call, _result(record, j))
                break
    return shown


def _bound_allowed(
    step: CheckedCall, expected: dict[str, dict[str, list[Any]]], shown: dict[int, tuple[ToolCall, Any]]
) -> dict[str, dict[str, list[Any]]] | None:
    """``expected`` (call_match's allowed values for this step) with each bound argument's value read from
    ``shown``; None when a source step was not filled or its result lacks the value."""
    ((name, allowed),) = expected.items()
    allowed = dict(allowed)
    for arg, value in step.arguments.items():
        if value.bound:
            resolved = value.resolve(shown)
            if resolved is _MISSING:
                return None
            allowed[arg] = [resolved]
    return {name: allowed}


def _answers_ok(
    checklist: Checklist, shown: dict[int, tuple[ToolCall, Any]], turn_answers: Sequence[str | None]
) -> float:
    for t, required in enumerate(checklist.answers):
        if not required:
            continue
        answer = turn_answers[t] if t < len(turn_answers) else None
        if answer is None:
            return 0.0
        haystack = f" {normalize_answer(answer)} "
        for value in required:
            resolved = value.resolve(shown)
            if resolved is _MISSING or f" {normalize_answer(_as_text(resolved))} " not in haystack:
                return 0.0
    return 1.0


def _result(record: EpisodeRecord, j: int) -> Any:
    return record.results[j] if j < len(record.results) else None


# ------------------------------------------------------------------------------------------- binding
def _bind(value: Any, text: str, sources: list[tuple[int, RefCall]], answer: bool) -> Value:
    """How ``value`` is checked: given (in ``text``); read from one of ``sources`` (reference calls, in the
    order to search them): an answer from the argument the agent sent, any value from a result, directly,
    as half a number, a line of a text or a path's folder; a folder joined with a file name; or constant."""
    if _in_text(value, text):
        return Value("given", value)
    if not _bindable(value, answer):
        return Value("constant", value)
    if answer:  # "Moved 207.75": the amount the agent sent, itself read from a result
        for i, ref in sources:
            for name, arg in ref.arguments.items():
                if _same(value, arg, answer) and not _in_text(arg, text):
                    return Value("read", source=Source(i, (("arg", name),)))
    for i, ref in sources:
        for path, leaf in _leaves(ref.result):
            if _same(value, leaf, answer):
                return Value("read", source=Source(i, _selectors(ref.result, path, text)))
    for i, ref in sources:
        for path, leaf in _leaves(ref.result):
            derived = _derive(value, leaf)
            if derived is not None:
                kind, index = derived
                return Value(kind, source=Source(i, _selectors(ref.result, path, text)), index=index)
    if isinstance(value, str) and "/" in value.strip("/"):
        head, base = value.rsplit("/", 1)
        parts = (_bind(head, text, sources, answer), _bind(base, text, sources, answer))
        if any(p.bound for p in parts):
            return Value("join", parts=parts)
        if all(p.kind == "given" for p in parts):  # a folder and a name the user both named
            return Value("given", value)
    return Value("constant", value)


def _derive(value: Any, leaf: Any) -> tuple[str, int] | None:
    """``(kind, index)`` when ``value`` is half of the number ``leaf`` (rounded to the cent, as a payment is),
    a line of the text ``leaf`` or the folder of the path ``leaf``; else None."""
    if _is_number(value) and _is_number(leaf) and leaf != value and round(leaf / 2, 2) == value:
        return "half", 0
    if isinstance(value, str) and isinstance(leaf, str):
        lines = leaf.splitlines()
        if len(lines) > 1 and value in lines:
            return "line", lines.index(value)
        if "/" in leaf and leaf.rsplit("/", 1)[0] == value:
            return "dir", 0
    return None


def _bindable(value: Any, answer: bool) -> bool:
    # Booleans and small counts (a ``limit`` of 1) match too many leaves by chance to be read from one.
    if isinstance(value, bool) or value is None or value == "":
        return False
    if isinstance(value, int) and not answer and abs(value) < 10:
        return False
    return isinstance(value, (str, int, float))


def _in_text(value: Any, text: str) -> bool:
    if isinstance(value, (dict, list)) or value is None:
        return False
    needle = normalize_answer(_as_text(value))
    return bool(needle) and f" {needle} " in f" {text} "


def _same(value: Any, leaf: Any, answer: bool) -> bool:
    if answer:
        return (
            isinstance(leaf, (str, int, float))
            and not isinstance(leaf, bool)
            and (normalize_answer(_as_text(leaf)) == normalize_answer(_as_text(value)))
        )
    return values_match(value, leaf) or (isinstance(value, float) and _is_number(leaf) and float(leaf) == value)


def _leaves(value: Any, path: tuple[tuple[Any, ...], ...] = ()) -> Iterator[tuple[tuple[tuple[Any, ...], ...], Any]]:
    """(path, leaf) of a JSON value, in document order; paths of ``("key", k)`` and ``("at", i)`` steps."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, ("key", k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, ("at", i)))
    else:
        yield path, value


def _selectors(result: Any, path: tuple[tuple[Any, ...], ...], text: str) -> tuple[tuple[Any, ...], ...]:
    """``path`` with each list position replaced by how the task's text picks that element."""
    out: list[tuple[Any, ...]] = []
    node = result
    for step in path:
        if step[0] == "at":
            out.append(_pick(node, step[1], text))
        else:
            out.append(step)
        node = _step(node, step)
    return tuple(out)


def _pick(items: list[Any], index: int, text: str) -> tuple[Any, ...]:
    """How ``text`` picks ``items[index]``: by a field whose value it names (no other element has it), by
    the least or greatest field it asks for, else by position."""
    element = items[index]
    if len(items) > 1 and isinstance(element, dict):
        for name, value in element.items():
            if isinstance(value, str) and _in_text(value, text):
                same = [e for e in items if isinstance(e, dict) and _norm(e.get(name)) == _norm(value)]
                if len(same) == 1:
                    return ("where", name, value)
        for pattern, names, how in _EXTREME_HINTS:
            if not pattern.search(text):
                continue
            for name in names:
                if name in element and _extreme(items, name, how) is element:
                    return ("extreme", name, how)
    return ("at", index)


def _step(node: Any, step: tuple[Any, ...]) -> Any:
    kind = step[0]
    if kind == "key":
        return node.get(step[1], _MISSING) if isinstance(node, dict) else _MISSING
    if not isinstance(node, list):
        return _MISSING
    if kind == "at":
        return node[step[1]] if step[1] < len(node) else _MISSING
    if kind == "where":
        name, value = step[1], _norm(step[2])
        return next((e for e in node if isinstance(e, dict) and _norm(e.get(name)) == value), _MISSING)
    if kind == "extreme":
        found = _extreme(node, step[1], step[2])
        return _MISSING if found is None else found
    return _MISSING


def _extreme(items: list[Any], name: str, how: str) -> Any:
    """The element with the least (``min``) or greatest (``max``) ``name``, the first on a tie; None when an
    element lacks it or values do not compare."""
    keyed = [(e.get(name), k) for k, e in enumerate(items) if isinstance(e, dict)]
    if not keyed or any(v is None or isinstance(v, (bool, dict, list)) for v, _ in keyed):
        return None
    try:
        best = min(keyed, key=lambda p: (p[0] if how == "min" else _Reverse(p[0]), p[1]))
    except TypeError:
        return None
    return items[best[1]]


class _Reverse:
    """Sorts the other way round (the greatest first), for `_extreme`'s ``max`` with ties going to the first."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __lt__(self, other: _Reverse) -> bool:
        return other.value < self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reverse) and other.value == self.value


def _norm(value: Any) -> str:
    return normalize_answer(_as_text(value)) if value is not None else ""


def _as_text(value: Any) -> str:
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
