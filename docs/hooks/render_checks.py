"""MkDocs hook: defects a reader would see in the built pages fail the strict build (``make test``).

A Sphinx role left in a docstring (``:meth:`x```) is shown by mkdocstrings as raw text; each page's HTML is
searched for one, and a page that has one is a warning, which ``mkdocs build --strict`` turns into a
failed build naming the page.
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger("mkdocs.plugins.render_checks")

#: A Sphinx cross-reference role as it appears in rendered HTML text.
RAW_ROLE = re.compile(r":(?:meth|class|func|mod|attr|data|exc|obj):(?:`|<code>)")


def raw_roles(html: str) -> list[str]:
    """The raw Sphinx roles in ``html``, each with a little context."""
    return [html[max(0, m.start() - 30) : m.end() + 30] for m in RAW_ROLE.finditer(html)]


def on_post_page(output: str, page, config) -> str:
    found = raw_roles(output)
    if found:
        log.warning(f"{page.file.src_path}: {len(found)} raw Sphinx role(s) in the page, e.g. {found[0]!r}")
    return output
