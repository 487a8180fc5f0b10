"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs alone, in a fresh interpreter whose working folder is an empty temporary one, so a block
must be self-contained (its own imports, no file it does not write) and cannot lean on an earlier block,
with one exception: a block whose first line is ``# file: NAME`` is a file the page tells the reader to
save (the tutorial's ``library_tools.py``); it runs alone too, and the page's later blocks find it in
their working folder as NAME. Blocks of other languages (```bash, ```text, ...) are shown, not run.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A fence at the start of a line, its language, then everything up to the closing fence.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# A block that is a file the page has the reader save: `# file: library_tools.py` on its first line.
FILE_MARKER = re.compile(r"# file: (\S+)\n")
# The slowest blocks take about a minute on 2 quiet cores; this bounds a hang, not speed (a loaded machine
# can be many times slower).
BLOCK_TIMEOUT_S = 1800


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(first line number, code) of each ```python block of a Markdown file."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in PYTHON_BLOCK.finditer(text)]


def saved_files(path: Path, before: int) -> dict[str, str]:
    """NAME -> code of the page's ``# file: NAME`` blocks that start before line ``before``."""
    files = {}
    for line, code in python_blocks(path):
        match = FILE_MARKER.match(code)
        if match and line < before:
            files[match.group(1)] = code
    return files


BLOCKS = [(path, line, code) for path in DOC_FILES for line, code in python_blocks(path)]


def test_the_docs_have_python_blocks_to_run():
    # Guards the collection itself: a changed fence style would otherwise make every test below vanish.
    assert len(BLOCKS) >= 15
    assert {p.name for p, _, _ in BLOCKS} >= {"README.md", "getting-started.md", "tutorial.md"}


@pytest.mark.parametrize(
    ("path", "line", "code"), BLOCKS, ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _ in BLOCKS]
)
def test_python_block_runs_as_written(path, line, code, tmp_path):
    script = tmp_path / "block.py"
    # Blank lines up to the block's start, so a traceback's line number is the Markdown file's.
    script.write_text("\n" * (line - 1) + code)
    for name, saved in saved_files(path, line).items():
        (tmp_path / name).write_text(saved)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    where = f"{path.relative_to(ROOT)}:{line}"
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def test_the_render_check_finds_a_raw_sphinx_role_and_the_docstrings_have_none():
    """The build hook that fails ``mkdocs build --strict`` on a raw role sees one (and plain code does not
    trip it); no docstring the API page renders uses one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_checks", ROOT / "docs" / "hooks" / "render_checks.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert len(hook.raw_roles("<p>see :meth:`reset` and :class:<code>Env</code></p>")) == 2
    assert hook.raw_roles("<p>see <code>reset</code>: the env's method</p>") == []
    sources = [p for d in ("envace_gym", "agents", "envs") for p in (ROOT / d).rglob("*.py")]
    assert not [p for p in sources if hook.RAW_ROLE.search(p.read_text().replace(":`", ":<code>"))]


def test_the_render_check_finds_a_code_line_wider_than_the_page():
    """A code block's line over the width fails the build, counted as the reader sees it (tags stripped,
    entities unescaped: ``&lt;`` is one character); prose and a line at the width do not trip it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_checks", ROOT / "docs" / "hooks" / "render_checks.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    width = hook.CODE_WIDTH
    fits = "&lt;" + "x" * (width - 2) + "&gt;"  # <xx...x>: exactly the width
    wide = '<span class="n">' + "y" * (width + 1) + "</span>"
    page = f'<p>{"z" * 200}</p><div class="highlight"><pre><span></span><code>{fits}\n{wide}\n</code></pre></div>'
    assert hook.wide_code_lines(page) == ["y" * (width + 1)]
    assert hook.wide_code_lines(page.replace(wide, "short")) == []
    assert hook.wide_code_lines(page, width=width + 1) == []
    # a repository file shown verbatim (the examples gallery's source blocks) is not held to the width
    source = page.replace('<div class="highlight">', f'<div class="{hook.UNCHECKED_CLASS} highlight">')
    assert hook.wide_code_lines(source) == []


def test_the_examples_gallery_shows_every_file_of_examples():
    """docs/examples.md is generated from examples/ (docs/hooks/examples_gallery.py): every file there has
    its source block, and every script its docstring's first paragraph, so a new example cannot be left off."""
    import importlib.util

    import yaml

    spec = importlib.util.spec_from_file_location("examples_gallery", ROOT / "docs" / "hooks" / "examples_gallery.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)  # tags read as text
    assert "docs/hooks/examples_gallery.py" in config["hooks"]
    assert any("examples.md" in str(section) for section in config["nav"])
    page = hook.on_page_markdown(
        (ROOT / "docs" / "examples.md").read_text(),
        page=None,
        config={"docs_dir": str(ROOT / "docs"), "config_file_path": str(ROOT / "mkdocs.yml")},
        files=None,
    )
    assert hook.MARKER not in page
    files = hook.example_files(ROOT / "examples")
    assert {"sb3_ppo.py", "trl_grpo.py"} <= {p.name for p in files} and len(files) >= 7
    for path in files:
        assert f'Source: `{path.relative_to(ROOT).as_posix()}`"' in page, path
        if path.suffix == ".py":
            assert hook.description(path)[0] in page and f"python {path.relative_to(ROOT).as_posix()}" in page


def test_every_registered_env_has_a_card_with_its_spaces_reward_and_info():
    import gymnasium as gym

    import envace_gym  # noqa: F401  (registers the envs)

    text = (ROOT / "docs" / "environments.md").read_text()
    cards = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE))
    for env_id in sorted(k for k in gym.registry if k.startswith("EnvACE-")):
        card = cards.get(env_id, "")
        for part in ("Action space", "Observation space", "Reward", "Termination", "Truncation", "`info` keys"):
            assert part in card, (env_id, part)
        assert "Version history" in card and "`gym.make` arguments" in card, env_id


def test_tables_wider_than_a_page_are_collapsed_and_narrow_ones_are_not():
    import importlib.util

    spec = importlib.util.spec_from_file_location("wide_tables", ROOT / "docs" / "hooks" / "wide_tables.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)

    def table(columns: int) -> str:
        row = "|" + "|".join(f" c{i} " for i in range(columns)) + "|"
        return "\n".join([row, "|" + "---|" * columns, row])

    narrow, wide = table(7), table(8)
    assert hook.collapse_wide_tables(f"text\n\n{narrow}\n\nmore") == f"text\n\n{narrow}\n\nmore"
    collapsed = hook.collapse_wide_tables(f"text\n\n{wide}\n\nmore")
    assert '??? note "The full table (8 columns, 1 rows): open it"' in collapsed
    assert all(line.startswith("    |") for line in collapsed.split("\n") if "c0" in line or "---" in line)
