"""Values an agent can see in a conversation (ids, names, codes, amounts), each with a coarse *shape*.

`CandidateActions` fills tool arguments from these. They come only from what
the agent sees: the user turns (read with regular expressions) and the tool results (JSON leaves, with
the key they were found under). Nothing here reads a task's reference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Value", "SHAPES", "shape_of", "user_values", "result_values", "visible_values"]

#: Shapes a string value can have; ``number`` is for JSON numbers and numerals in text.
SHAPES = ("email", "path", "file", "date", "time", "id", "code", "name", "text", "number")

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_PATH = re.compile(r"(?<![\w/])/[\w.\-/]+")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_FILE = re.compile(r"\b[\w-]+\.[A-Za-z]\w{0,4}\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_ID = re.compile(r"\b[A-Za-z]{1,4}-?\d[\w-]*\b")
_CODE = re.compile(r"\b[A-Z]{3}\b")
_NAME = re.compile(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)+\b")
# One capitalised word (a city) counts only mid-sentence, so "Could" or "Hello" is not a name.
_WORD_NAME = re.compile(r"(?:(?<=[a-z,>:] )|(?<=[a-z]-))[A-Z][a-z]+\b")
_QUOTED = re.compile(r"[\"“']([^\"”'\n]{1,60})[\"”']")
_NUMBER = re.compile(r"(?<![\w.\-/])\d+(?:,\d{3})*(?:\.\d+)?(?![\w\-/])")
# Longest-first, so "A-5247" is one id and not the number 5247.
_TEXT_PATTERNS = (
    ("email", _EMAIL),
    ("path", _PATH),
    ("date", _DATE),
    ("time", _TIME),
    ("file", _FILE),
    ("id", _ID),
    ("code", _CODE),
    ("name", _NAME),
    ("name", _WORD_NAME),
)


@dataclass(frozen=True)
class Value:
    """A value seen in the conversation: ``value`` (str or number), its ``shape``, the JSON ``key`` it was
    found under in a tool result (``""`` for the user's text) and ``source`` (``"user"`` or ``"result"``)."""

    value: Any
    shape: str
    key: str = ""
    source: str = "user"


def shape_of(value: Any) -> str:
    """The shape of one value (a JSON scalar)."""
    if isinstance(value, bool):
        return "text"
    if isinstance(value, (int, float)):
        return "number"
    text = str(value)
    for shape, pattern in _TEXT_PATTERNS[:-1]:
        if pattern.fullmatch(text):
            return shape
    return "name" if re.fullmatch(r"[A-Z][a-z]+", text) else "text"


def _number(token: str) -> int | float:
    cleaned = token.replace(",", "")
    return float(cleaned) if "." in cleaned else int(cleaned)


def user_values(text: str) -> list[Value]:
    """Values in a user message, in order of appearance (spans already taken by a longer shape are skipped)."""
    found: list[tuple[int, Value]] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    for shape, pattern in _TEXT_PATTERNS:
        for m in pattern.finditer(text):
            start, word = m.start(), m.group(0)
            if shape == "name" and word.count(" ") >= 2 and not text[:start].rstrip().endswith((",", ":")):
                # "Get Anouk Petrov": a sentence's first word is capitalised anyway, so it is dropped
                first = word.split(" ", 1)[0]
                if not text[:start].strip() or text[:start].rstrip()[-1] in ".!?":
                    start, word = start + len(first) + 1, word[len(first) + 1 :]
            if free(start, start + len(word)):
                taken.append((start, start + len(word)))
                found.append((start, Value(word, shape)))
    for m in _QUOTED.finditer(text):  # a quoted phrase is a value of whatever shape it has
        if free(*m.span(1)):
            taken.append(m.span(1))
            found.append((m.start(1), Value(m.group(1), shape_of(m.group(1)))))
    for m in _NUMBER.finditer(text):
        if free(*m.span()):
            found.append((m.start(), Value(_number(m.group(0)), "number")))
    return [v for _, v in sorted(found, key=lambda p: p[0])]


def _leaves(data: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, str(k))
    elif isinstance(data, list):
        for item in data:
            yield from _leaves(item, key)
    elif data is not None and not isinstance(data, bool):
        yield key, data


def result_values(content: str) -> list[Value]:
    """The scalar leaves of one tool message's JSON content (errors carry none), in document order."""
    try:
        data = json.loads(content)
    except (TypeError, ValueError):
        return []
    if isinstance(data, dict) and "error" in data:
        return []
    return [Value(v, shape_of(v), k, "result") for k, v in _leaves(data) if not (isinstance(v, str) and not v)]


def visible_values(messages: Sequence[dict[str, Any]]) -> list[Value]:
    """Every value the agent has seen, most relevant first: the latest user turn, then tool results from
    newest to oldest, then earlier user turns; each value once (first place kept)."""
    users = [m for m in messages if m.get("role") == "user"]
    tools = [m for m in messages if m.get("role") == "tool"]
    ordered: list[Value] = []
    if users:
        ordered += user_values(str(users[-1].get("content") or ""))
    for message in reversed(tools):
        ordered += result_values(str(message.get("content") or ""))
    for message in reversed(users[:-1]):
        ordered += user_values(str(message.get("content") or ""))
    seen: set[tuple[str, str]] = set()
    unique = []
    for v in ordered:
        marker = (type(v.value).__name__ if v.shape == "number" else "s", str(v.value))
        if marker not in seen:
            seen.add(marker)
            unique.append(v)
    return unique
