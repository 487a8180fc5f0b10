"""MkDocs hook: the examples gallery (``docs/examples.md``), generated from ``examples/`` at build time.

The page line ``<!-- examples-gallery -->`` becomes one section per entry of ``examples/`` (a script, or a
folder of config files): what it is (a script's module docstring, first paragraph; a config file's leading
comment, first paragraph), how to run it (the ``python examples/...`` lines of the docstring), the docs
pages that mention it, and each file's source in a collapsed block. A new example appears on the page
with no edit to it (``tests/test_docs.py`` checks that every file of ``examples/`` does).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

MARKER = "<!-- examples-gallery -->"
#: The class that marks a verbatim source file's block: the code-width check (render_checks) skips it.
SOURCE_CLASS = "wide-source"
_LANGUAGES = {".py": "python", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".sh": "bash"}
_NOT_GUIDES = {"examples.md", "changelog.md", "layout.md"}
_COMMAND = re.compile(r"^\s+(python|accelerate|envace|make) ")


def example_files(root: Path) -> list[Path]:
    """Every file under ``root`` (``examples/``), caches and hidden files left out, in order."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith((".", "__")) for part in p.relative_to(root).parts)
    )


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def description(path: Path) -> tuple[str, str]:
    """(what the file is, its whole description text): a script's module docstring, or the leading
    ``#`` comment of another file; the first is its first paragraph, joined into one line."""
    text = path.read_text()
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
    else:
        lines = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            lines.append(line[2:] if line.startswith("# ") else line[1:])
        doc = "\n".join(lines)
    paragraphs = _paragraphs(doc)
    return (" ".join(paragraphs[0].split()) if paragraphs else ""), doc


def _escape(text: str) -> str:
    """Prose from a ``#`` comment as Markdown shows it: ``_``, ``*`` and ``<`` outside backticks escaped."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = re.sub(r"([\\_*])", r"\\\1", parts[i]).replace("<", "&lt;")
    return "`".join(parts)


def commands(doc: str) -> list[str]:
    """The command lines of a docstring (indented, starting with ``python``, ``envace``...), each
    trailing comment put on a line of its own above its command."""
    out = []
    for line in doc.splitlines():
        if not _COMMAND.match(line):
            continue
        command, *comment = re.split(r"\s+#\s+", line.strip(), maxsplit=1)
        if comment:
            out.append("# " + comment[0])
        out.append(command)
    return out


def _mentions(docs_dir: Path, name: str) -> list[str]:
    """Links to the docs pages that name ``examples/NAME`` (not the gallery, the changelog or the code
    layout, which name every example)."""
    pages = []
    for page in sorted(docs_dir.glob("*.md")):
        if page.name not in _NOT_GUIDES and f"examples/{name}" in page.read_text():
            title = next((line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# ")), "")
            pages.append(f"[{title or page.stem}]({page.name})")
    return pages


def _source(path: Path, root: Path) -> list[str]:
    shown = f"examples/{path.relative_to(root).as_posix()}"
    language = _LANGUAGES.get(path.suffix, "text")
    body = path.read_text().rstrip("\n").replace("\t", "    ")
    fence = "````" if "```" in body else "```"
    return [
        f'??? example "Source: `{shown}`"',
        "",
        f"    {fence}{{.{language} .{SOURCE_CLASS}}}",
        *[f"    {line}" if line else "" for line in body.split("\n")],
        f"    {fence}",
        "",
    ]


def gallery(root: Path, docs_dir: Path) -> str:
    """The gallery's Markdown: one section per top-level entry of ``root``."""
    files = example_files(root)
    entries = sorted({p.relative_to(root).parts[0] for p in files})
    out: list[str] = []
    for entry in entries:
        members = [p for p in files if p.relative_to(root).parts[0] == entry]
        is_dir = (root / entry).is_dir()
        out += [f"## `examples/{entry}{'/' if is_dir else ''}`", ""]
        if is_dir:
            for p in members:
                summary, _ = description(p)
                out.append(f"* `{p.relative_to(root).as_posix()}`: {_escape(summary) or 'no leading comment'}")
            out.append("")
        else:
            summary, doc = description(members[0])
            out += [summary, ""]
            run = commands(doc)
            if run:
                out += ["Run it from the repository root:", "", "```bash", *run, "```", ""]
        pages = _mentions(docs_dir, entry)
        if pages:
            out += ["Described in: " + ", ".join(pages) + ".", ""]
        for p in members:
            out += _source(p, root)
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    docs_dir = Path(config["docs_dir"])
    root = Path(config["config_file_path"]).parent / "examples"
    return markdown.replace(MARKER, gallery(root, docs_dir))
