"""The README's quick start runs as written and prints what it says; the README stays a short front page."""

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"


def test_quick_start_runs_and_matches_its_comments():
    readme = README.read_text()
    section = readme.split("## Quick start (Python)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # our own documentation, not model output
    printed = out.getvalue()
    for comment in re.findall(r"print\([^)]*\)[ \t]+# (.+)", code):  # a comment on the print's own line
        if comment.startswith("the ") or comment.startswith("<tool_response>"):
            continue  # prose, or an escaped multi-line value
        assert comment.strip() in printed, comment
    assert '"balance": 2215.7' in printed and "[assistant]" in printed


def test_readme_is_a_front_page_of_at_most_200_lines():
    # The docs live under docs/ (the site); the README keeps what it is, the set-up and a map.
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "the README links no docs page"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, missing


def test_the_readmes_map_of_the_docs_links_every_page_of_the_site():
    """Every page in mkdocs.yml's nav (the home page aside) is on the README's map of the docs."""
    section = README.read_text().split("## Map of the docs", 1)[1].split("\n## ", 1)[0]
    linked = set(re.findall(r"\(docs/([^)#]+)", section))
    nav = set(re.findall(r":\s*([\w.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    assert nav - {"index.md"} <= linked, f"the README's map leaves out {sorted(nav - {'index.md'} - linked)}"
