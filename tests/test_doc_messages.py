"""The error messages the docs quote are the ones the code prints: each ``envace: error: ...`` that the
own-tools guide and the tutorial show is produced here from the code (``...`` and ``DIR`` stand for any
text), and each of the messages the code prints for those mistakes is on the page."""

import re
from pathlib import Path

import pytest

from envace_gym.cli import main

DOCS = Path(__file__).resolve().parent.parent / "docs"
# page -> the module and suite of its example
PAGES = {"own-tools.md": ("my_tools", "my/notes"), "tutorial.md": ("library_tools", "my/library")}


def documented(page: str) -> list[str]:
    """The ``envace: error: ...`` code spans of ``page``, one line each (a span may wrap)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [" ".join(m.group(2).split()) for m in re.finditer(r"(`+)(envace: error: .*?)\1", text, re.DOTALL)]


def printed(capsys, module: str, suite: str, folder: Path) -> dict[str, str]:
    """What the CLI prints, in ``folder``, for each mistake the pages describe."""

    def err(*argv: str) -> str:
        assert main(list(argv)) == 2
        return capsys.readouterr().err.strip()

    said = {"missing": err("eval", "--import", module, "--suite", suite)}
    (folder / f"{module}.py").write_text(f'raise ValueError("broken")\n# register_suite("{suite}", load_suite)\n')
    said["no --import"] = err("eval", "--suite", suite)
    said["raises"] = err("eval", "--import", module, "--suite", suite)
    return said


def pattern(message: str) -> re.Pattern[str]:
    return re.compile(re.escape(message).replace(re.escape("..."), ".+").replace("DIR", ".+"))


@pytest.mark.parametrize("page", sorted(PAGES))
def test_the_docs_show_the_messages_the_code_prints(isolated_registries, tmp_path, capsys, page):
    isolated_registries.chdir(tmp_path)
    said = printed(capsys, *PAGES[page], tmp_path)
    shown = documented(page)
    for message in shown:
        assert any(pattern(message).fullmatch(s) for s in said.values()), f"{page} shows {message!r}; the code: {said}"
    for mistake, message in said.items():
        assert any(pattern(m).fullmatch(message) for m in shown), f"{page} lacks the {mistake} message: {message!r}"


def test_the_concepts_rewards_section_says_how_imagined_episodes_are_scored():
    """The rewards section names the scoring of imagined episodes the code uses by default, and the other."""
    import inspect

    from envace_gym.env import IMAGINED_REWARDS, ToolCallEnv

    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    section = " ".join(text.split("\n## Rewards\n", 1)[1].split("\n## ", 1)[0].split())
    default = inspect.signature(ToolCallEnv).parameters["imagined_reward"].default
    assert f'ToolCallEnv(imagined_reward="{default}")' in section
    for choice in IMAGINED_REWARDS:
        assert f'imagined_reward="{choice}"' in section, choice
    assert "envace_gym.binding" in section and 'info["reward_reference"]' in section
