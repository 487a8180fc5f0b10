"""MkDocs hook: defects a reader would see in the built pages fail the strict build (``make test``).

Each page's HTML is searched for two defects, and a page that has one is a warning, which
``mkdocs build --strict`` turns into a failed build naming the page:

- a Sphinx role left in a docstring (``:meth:`x```), which mkdocstrings shows as raw text;
- a line of a code block (``<pre><code>``) wider than :data:`CODE_WIDTH` characters, which the page shows
  cut off behind a horizontal scroll. ``docs/ruff.toml`` formats the pages' Python blocks at that width;
  shell commands and output are wrapped by hand. A block of class ``wide-source`` is not checked: a
  repository file shown verbatim and collapsed (the examples gallery), whose lines follow the project's
  own line length.
"""

from __future__ import annotations

import html as html_lib
import logging
import re

log = logging.getLogger("mkdocs.plugins.render_checks")

#: A Sphinx cross-reference role as it appears in rendered HTML text.
RAW_ROLE = re.compile(r":(?:meth|class|func|mod|attr|data|exc|obj):(?:`|<code>)")
#: The widest code line the page shows whole: Material's content column at a 1280 px desktop width holds
#: about 90 characters of its code font (checked with ``make docs-shots``).
CODE_WIDTH = 88
#: A code block: the classes of the ``<div>`` around it, and its content (pymdownx.highlight writes
#: ``<div class="language-python highlight"><pre><span></span><code>...</code></pre></div>``).
_CODE_BLOCK = re.compile(r'(?:<div class="([^"]*)">\s*)?<pre\b[^>]*>(.*?)</pre>', re.DOTALL)
#: The class of a block the width check skips.
UNCHECKED_CLASS = "wide-source"
_TAG = re.compile(r"<[^>]+>")


def raw_roles(html: str) -> list[str]:
    """The raw Sphinx roles in ``html``, each with a little context."""
    return [html[max(0, m.start() - 30) : m.end() + 30] for m in RAW_ROLE.finditer(html)]


def wide_code_lines(html: str, width: int = CODE_WIDTH) -> list[str]:
    """The lines of ``html``'s code blocks wider than ``width`` characters, as the reader sees them."""
    lines = []
    for block in _CODE_BLOCK.finditer(html):
        if UNCHECKED_CLASS in (block.group(1) or "").split():
            continue
        text = html_lib.unescape(_TAG.sub("", block.group(2)))
        lines += [line for line in text.split("\n") if len(line.rstrip()) > width]
    return lines


def on_post_page(output: str, page, config) -> str:
    found = raw_roles(output)
    if found:
        log.warning(f"{page.file.src_path}: {len(found)} raw Sphinx role(s) in the page, e.g. {found[0]!r}")
    wide = wide_code_lines(output)
    for line in wide:
        log.warning(f"{page.file.src_path}: a code line of {len(line.rstrip())} > {CODE_WIDTH} characters: {line!r}")
    return output
