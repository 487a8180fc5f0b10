"""MkDocs hook: a table wider than a page can show (more than 7 columns) is put in a collapsible block.

The benchmark scripts write some tables with up to 12 columns (every arm's figures in one row); at page
width a reader would see 7 of them and a hidden horizontal scroll. Here each such table is rendered as a
closed ``??? note`` block (pymdownx.details) titled with its column count, which opens to the whole
table; the page source, which the scripts write and the tests compare, is unchanged.
"""

from __future__ import annotations

import re

#: Most columns a table shows in the page's flow.
MAX_COLUMNS = 7
_SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")


def collapse_wide_tables(markdown: str, max_columns: int = MAX_COLUMNS) -> str:
    """``markdown`` with each table of more than ``max_columns`` columns indented under a ``???`` block."""
    lines = markdown.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        header = lines[i]
        if header.startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            columns = lines[i + 1].count("|") - 1
            if columns > max_columns:
                out += [f'??? note "The full table ({columns} columns, {end - i - 2} rows): open it"', ""]
                out += ["    " + line for line in lines[i:end]]
                i = end
                continue
        out.append(header)
        i += 1
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return collapse_wide_tables(markdown)
