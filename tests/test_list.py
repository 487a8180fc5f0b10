"""``envace list``: sizes from the suites' info functions (no suite is loaded, neither torch nor transformers
is imported), agreeing with the loaded suites, and a table readable at 80 columns."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys

import pytest
from rich.console import Console

from envace_gym.cli import list_cmd, main, parse
from envace_gym.cli.common import env_ids
from envace_gym.envs.builtin import SPLIT_SIZES
from envace_gym.suites import SuiteInfo, load_suite, register_suite, register_suite_family, suite_info, suite_names
from envace_gym.tasks import TaskSuite


@pytest.mark.parametrize(
    "name",
    [
        "builtin",
        "builtin/bank",
        "builtin/travel",
        "tau2/airline",
        "tau2/retail",
        "tau2/telecom",
        "tau2/mock",
        "bfcl/live_parallel",
        "bfcl/simple_javascript",
        "bfcl/multi_turn_miss_param",
    ],
)
def test_registered_info_agrees_with_the_loaded_suite(name):
    assert suite_info(name) == SuiteInfo.of(load_suite(name))


def test_every_registered_suite_of_ours_has_a_cheap_info():
    from envace_gym.suites import _INFOS

    assert [n for n in suite_names() if n.startswith(("builtin", "bfcl/", "tau2/")) and n not in _INFOS] == []


def test_info_of_a_suite_registered_without_one_loads_it_and_a_failing_one_is_a_row_with_its_error(capsys, monkeypatch):
    import envace_gym.suites as suites

    suite_names()  # (families expanded) the registrations below are undone after the test
    monkeypatch.setattr(suites._SUITES, "_entries", dict(suites._SUITES._entries))
    monkeypatch.setattr(suites._INFOS, "_entries", dict(suites._INFOS._entries))
    tasks = list(load_suite("builtin/bank"))[:3]
    register_suite("test-list/plain", lambda: TaskSuite(tasks, name="test-list/plain"), overwrite=True)
    assert suite_info("test-list/plain") == SuiteInfo(("bank",), {"train": 3})

    def broken(name: str) -> SuiteInfo:
        raise ImportError(f"no package for {name}")

    register_suite_family("test-list-broken", ["x"], lambda name: TaskSuite([]), broken)
    assert main(["list", "--json"]) == 0
    rows = {r["suite"]: r for r in json.loads(capsys.readouterr().out)["suites"]}
    assert rows["test-list/plain"] == {
        "suite": "test-list/plain",
        "domains": ["bank"],
        "tasks": 3,
        "splits": {"train": 3},
    }
    assert rows["test-list-broken/x"]["error"] == "ImportError: no package for x"
    assert rows["builtin/bank"]["splits"] == SPLIT_SIZES  # the others are still listed


def test_the_table_shows_every_suite_name_and_env_id_in_full_at_80_columns():
    out = io.StringIO()
    rows = list_cmd.rows()
    list_cmd.render(Console(file=out, width=80, color_system=None), env_ids(), rows)
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    for env_id in env_ids():
        assert env_id in text
    names = [line.split()[0] for line in lines if line.split() and line.split()[0] in {r["suite"] for r in rows}]
    assert names == [r["suite"] for r in rows]  # one line each, in order, never cut or wrapped
    bank = next(line for line in lines if line.split()[:1] == ["builtin/bank"])
    sizes = [str(SPLIT_SIZES[s]) for s in list_cmd.SPLIT_ORDER]  # train, val, test-id, test
    assert bank.split() == ["builtin/bank", str(sum(SPLIT_SIZES.values())), *sizes, "bank"]


LIST_IN_A_FRESH_PROCESS = """
import json, sys
from envace_gym.cli import main
assert main(["list", "--json"]) == 0
print(json.dumps({m: m in sys.modules for m in ("torch", "transformers", "bfcl_eval", "tau2")}))
"""


def test_list_imports_neither_torch_nor_transformers_nor_a_benchmark():
    done = subprocess.run([sys.executable, "-c", LIST_IN_A_FRESH_PROCESS], capture_output=True, text=True, check=True)
    listing, imported = done.stdout.strip().splitlines()
    assert json.loads(imported) == {"torch": False, "transformers": False, "bfcl_eval": False, "tau2": False}
    suites = {r["suite"]: r for r in json.loads(listing)["suites"]}
    assert suites["tau2/airline"] == {
        "suite": "tau2/airline",
        "domains": ["tau2/airline"],
        "tasks": 50,
        "splits": {"test": 20, "train": 30},
    }


PARSE_IN_A_FRESH_PROCESS = """
import dataclasses, json, sys
from envace_gym.cli import parse
_, configs = parse(sys.argv[1:])
print(json.dumps([dataclasses.asdict(c) for c in configs]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--out", "o", "--bf16", "auto", "--lora", "--lr", "1e-4", "--no-train-env-role", "--json"],
        ["train", "--out", "o", "--bf16", "false", "--detach-prompt", "false"],
    ],
)
def test_flags_parse_the_same_with_the_standalone_hf_argparser(argv):
    """A fresh process parses with hf_argparser.py loaded on its own (transformers is not imported yet):
    the configs are the ones this process (transformers loaded) parses."""
    import transformers  # noqa: F401  (this process: the ordinary module)

    done = subprocess.run(
        [sys.executable, "-c", PARSE_IN_A_FRESH_PROCESS, *argv], capture_output=True, text=True, check=True
    )
    _, configs = parse(argv)
    assert json.loads(done.stdout) == [dataclasses.asdict(c) for c in configs]
