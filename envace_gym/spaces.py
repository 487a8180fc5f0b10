"""A Unicode text space: Gymnasium's ``Text`` only admits its charset (alphanumerics by default)."""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Text

__all__ = ["UnicodeText"]

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
