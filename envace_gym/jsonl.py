"""JSONL files that runs append to (trajectories, metrics, replay caches): one reader for all of them.

A run killed while writing leaves at most one torn line: the last one, without its newline. Every reader of
such a file goes through `read_jsonl`, which skips that line with a warning and names ``file:line`` for
any other line that cannot be read. Task files are written by people, not appended by runs: they stay strict
(``TaskSuite.load_jsonl``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["read_jsonl", "TornLineWarning", "MAX_LINE_BYTES"]


class TornLineWarning(UserWarning):
    """A JSONL file's last line was cut short (a write a killed run did not finish) and was skipped."""


#: The longest line read (bytes): a longer one is an error, not an unbounded allocation.
MAX_LINE_BYTES = 256 * 1024 * 1024


def read_jsonl(path: str | Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of ``path``.

    A last line with no newline that is not valid JSON is skipped with a `TornLineWarning`; any other
    line that is not UTF-8 or not JSON raises ``ValueError("file:line: why")`` (a JSON bomb included), and so
    does a line longer than ``max_line_bytes`` (read no further than that).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: not a file" if path.exists() else f"{path}: no such file")
    with path.open("rb") as fh:

        def next_line(lineno: int) -> bytes | None:
            raw = fh.readline(max_line_bytes + 1)
            if len(raw) > max_line_bytes:
                raise ValueError(f"{path}:{lineno}: line longer than {max_line_bytes} bytes")
            return raw or None

        lineno = 0
        raw = next_line(1)
        while raw is not None:
            lineno += 1
            following = next_line(lineno + 1)
            torn = following is None and not raw.endswith(b"\n")
            try:
                text = raw.decode("utf-8")
                value = json.loads(text) if text.strip() else None
            except (ValueError, RecursionError) as exc:
                if torn:
                    warnings.warn(
                        f"{path}:{lineno}: skipped a torn last line ({len(raw)} bytes; a write cut short)",
                        TornLineWarning,
                        stacklevel=2,
                    )
                    return
                if isinstance(exc, UnicodeDecodeError):
                    why = f"not UTF-8 (byte {exc.start + 1})"
                elif isinstance(exc, RecursionError):
                    why = "JSON nested too deeply"
                else:
                    why = f"not JSON ({exc})"
                raise ValueError(f"{path}:{lineno}: {why}") from None
            if text.strip():
                yield lineno, value
            raw = following
