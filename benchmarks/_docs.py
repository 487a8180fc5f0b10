"""Benchmark figures in the docs pages are written by the benchmark scripts, not by hand.

A page holds each generated table between two marker lines, ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``; :func:`write_block` replaces what lies between them (the markers stay). A script
renders its table from its JSON results (those kept under ``docs/`` are the raw data of the figures
shown), so ``python benchmarks/SCRIPT.py --write-docs RESULTS.json ...`` rewrites the page's table from
the file without running anything.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["DOCS", "write_block"]

#: The docs folder of this repository.
DOCS = Path(__file__).resolve().parent.parent / "docs"


def write_block(page: str | Path, name: str, markdown: str) -> bool:
    """Replace the text between ``<!-- {name}:begin -->`` and ``<!-- {name}:end -->`` in ``page`` (a path, or
    a file name under ``docs/``) with ``markdown``; return whether the page changed.

    Raises ``ValueError`` naming the page and the markers when they are missing, out of order or not
    one of each."""
    path = Path(page)
    if not path.is_absolute() and not path.exists():
        path = DOCS / path
    text = path.read_text(encoding="utf-8")
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    counts = (text.count(begin), text.count(end))
    if counts != (1, 1) or text.index(begin) > text.index(end):
        raise ValueError(
            f"{path}: needs one {begin!r} line and then one {end!r} line around the block to write "
            f"(found {counts[0]} and {counts[1]})"
        )
    match = re.search(rf"^{re.escape(begin)}\n(.*?)^{re.escape(end)}$", text, re.DOTALL | re.MULTILINE)
    if match is None:
        raise ValueError(f"{path}: {begin!r} and {end!r} must each be a line of their own")
    new = text[: match.start()] + f"{begin}\n{markdown.strip()}\n{end}" + text[match.end() :]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
