"""The tutorial's command-line route runs as written: its ``library_tools.py`` block is saved in an empty
folder and each of its ``envace ...`` commands runs there (the page's own text: the two cannot drift).

The page's Python blocks run in tests/test_docs.py; the commands run here, in-process through
``envace_gym.cli.main``, with the tiny model and the budgets the page gives.
"""

import json
import re
import shlex
from pathlib import Path

from test_docs import FILE_MARKER, python_blocks

from envace_gym.cli import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def page_commands() -> list[list[str]]:
    """The ``envace`` command lines of the page's bash blocks (continuation lines joined), split as a shell
    would."""
    lines = [cmd for block in BASH_BLOCK.findall(PAGE.read_text()) for cmd in block.replace("\\\n", " ").splitlines()]
    return [shlex.split(cmd, comments=True) for cmd in lines if cmd.startswith("envace ")]


def page_files() -> dict[str, str]:
    return {m.group(1): code for _, code in python_blocks(PAGE) if (m := FILE_MARKER.match(code))}


def test_the_page_has_the_module_and_every_command():
    commands = page_commands()
    assert [argv[1] for argv in commands] == ["sft", "train", "eval", "fidelity"]
    assert all(argv[2:4] == ["--import", "library_tools"] for argv in commands)
    assert "--policy tiny" in shlex.join(commands[0])  # the tiny model: this test's budget
    assert 'register_suite("my/library"' in page_files()["library_tools.py"]


def test_the_tutorials_commands_run_as_written(isolated_registries, tmp_path, capsys):
    for name, code in page_files().items():
        (tmp_path / name).write_text(code)
    isolated_registries.chdir(tmp_path)
    outputs = []
    for argv in page_commands():
        code = main([*argv[1:], "--no-progress"])
        out, err = capsys.readouterr()
        assert code == 0, f"{shlex.join(argv)} exited {code}:\n{err[-3000:]}"
        outputs.append(out)
    sft_out, train_out, eval_out, fidelity_out = outputs
    assert (tmp_path / "runs/cli-warm/model.safetensors").exists() and "saved checkpoint" in sft_out
    assert "tool calls: 0 live" in train_out  # imagination only: the tutorial's claim
    records = [json.loads(x) for x in (tmp_path / "runs/cli-envace/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and (tmp_path / "runs/cli-envace/ckpt-2").is_dir()
    assert "library" in eval_out  # the summary table's domain row: the user's suite, on its real backend
    assert "self" in fidelity_out
