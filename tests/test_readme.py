"""The README's quick start runs as written and prints what it says."""

import contextlib
import io
import re
from pathlib import Path


def test_quick_start_runs_and_matches_its_comments():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Quick start (Python)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})  # our own documentation, not model output
    printed = out.getvalue()
    for comment in re.findall(r"print\([^)]*\)\s+# (.+)", code):
        if comment.startswith("the ") or comment.startswith("<tool_response>"):
            continue  # prose, or an escaped multi-line value
        assert comment.strip() in printed, comment
    assert '"balance": 2215.7' in printed and "[assistant]" in printed
