"""A Unicode text space: Gymnasium's ``Text`` only admits its charset (alphanumerics by default).

Importing this module also teaches Gymnasium's vector utilities to keep a `UnicodeText` value in
shared memory (``AsyncVectorEnv``'s default), as code points, not as charset indices: any string
round-trips (JSON, quotes, braces, non-ASCII); one longer than ``max_length`` is cut with a visible marker.
``AsyncVectorEnv`` reads its shared memory once, at construction, and expects a live view (numpy arrays
are); Gymnasium's own ``Text`` reader returns a frozen tuple, so async observations never change. Ours
returns `SharedTexts`, a live view whose copy (``AsyncVectorEnv(copy=True)``, the default) is a
plain tuple of strings. Batching, concatenation and iteration use Gymnasium's ``Text`` rules (a tuple of
strings), which hold for any string already.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

__all__ = ["UnicodeText", "SharedTexts", "fit_shared_text", "TRUNCATION_MARKER"]

# Characters used when *sampling*; membership accepts any string.
_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n" + "äéßøπλжшक中文✓🙂"


class UnicodeText(Text):
    """Any Python ``str`` of ``min_length..max_length`` characters, any code points.

    Samples are drawn from a mixed ASCII/non-ASCII alphabet so fuzzing exercises Unicode handling.
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length, min_length=min_length, charset=_SAMPLE_CHARSET, seed=seed)

    #: Samples are at most this long, so fuzzing a 1 MB-capable space stays cheap.
    sample_max_length = 512

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            upper = min(self.max_length, max(self.min_length, self.sample_max_length))
            length = int(self.np_random.integers(self.min_length, upper + 1))
            mask = (length, None)
        return super().sample(mask=mask, probability=probability)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )


# ------------------------------------------------------------------ shared memory (AsyncVectorEnv)
#: Appended (with the count of dropped characters) to a string cut to fit its shared-memory slot.
TRUNCATION_MARKER = "...[truncated {n} chars]"


def fit_shared_text(text: str, capacity: int) -> str:
    """``text`` if it has at most ``capacity`` characters, else its head plus a visible marker, within
    ``capacity`` (a value longer than its space's ``max_length`` is cut, never an error)."""
    if len(text) <= capacity:
        return text
    for keep in range(capacity, -1, -1):  # the marker's digits depend on how much is dropped
        marker = TRUNCATION_MARKER.format(n=len(text) - keep)
        if keep + len(marker) <= capacity:
            return text[:keep] + marker
    return text[:capacity]  # a slot too small even for the marker


# One slot per env: [length, code point 0, code point 1, ...] as int32 (a code point fits: <= 0x10FFFF).
@create_shared_memory.register(UnicodeText)
def _create_unicode_shared_memory(space: UnicodeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * (space.max_length + 1))


class SharedTexts(Sequence):
    """A live, read-only view of ``n`` strings in shared memory: indexing decodes the current value;
    ``copy.deepcopy`` (what ``AsyncVectorEnv`` returns by default) and ``tuple()`` give a frozen tuple."""

    def __init__(self, data: np.ndarray) -> None:
        self._data = data  # (n, max_length + 1) int32: [length, code points...]

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._data[index]
        return row[1 : 1 + int(row[0])].tobytes().decode("utf-32-le", "surrogatepass")

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_from_shared_memory(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length + 1)))


@write_to_shared_memory.register(UnicodeText)
def _write_unicode_to_shared_memory(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
    size = space.max_length + 1
    points = np.frombuffer(
        fit_shared_text(str(value), space.max_length).encode("utf-32-le", "surrogatepass"), dtype=np.int32
    )
    slot = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)[index * size : (index + 1) * size]
    slot[0] = len(points)
    slot[1 : 1 + len(points)] = points
