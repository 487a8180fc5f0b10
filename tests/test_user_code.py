"""User code in the CLI: ``--import MODULE`` and installed packages' entry points (``envace_gym.backends``,
``envace_gym.suites``) make their backends and suites usable wherever a registered name is."""

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

from envace_gym import backends, suites
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.backends import backend_names, make_backend, register_backend
from envace_gym.cli import main, parse
from envace_gym.suites import load_suite, suite_names

# A user's module: a toolkit, its backend and a suite whose references are recorded on the real tools.
# NAME is replaced per test, so each module registers names no other test has.
USER_MODULE = '''
from envace_gym import TaskSuite, Toolkit, register_backend, register_suite, tool
from envace_gym.backends import PythonBackend
from envace_gym.recording import ReferenceRecorder


class Counter(Toolkit):
    run_inline = True

    @tool
    def add(self, n: int) -> dict:
        """Add to the counter.

        Args:
            n: How much to add.
        """
        self.state["total"] += n
        return {"total": self.state["total"]}


def make_backend(**kwargs):
    return PythonBackend(Counter, **kwargs)


def load_suite():
    tasks = []
    for split, count in (("train", 4), ("test", 2)):
        for i in range(count):
            rec = ReferenceRecorder(Counter, {"total": i}, backend_name="NAME")
            (res,) = rec.step(("add", {"n": 3}))
            rec.turn(f"The total is {res['total']}.", [str(res["total"])])
            tasks.append(rec.build(id=f"counter-{split}-{i}", user_turns=["Add 3, please."],
                                   reward=["call_match", "state_match"], domain="counter", split=split))
    return TaskSuite(tasks, name="NAME")
'''


def write_user_module(folder, module, name, register=True):
    code = USER_MODULE.replace("NAME", name)
    if register:
        code += f"\nregister_backend({name!r}, make_backend)\nregister_suite({name!r}, load_suite)\n"
    (folder / f"{module}.py").write_text(textwrap.dedent(code))


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------------------------- --import
def test_import_is_repeatable_and_takes_several_modules(isolated_registries, tmp_path, capsys):
    isolated_registries.chdir(tmp_path)  # --import finds ./MODULE.py
    for i in range(3):
        (tmp_path / f"usermod_rep{i}.py").write_text(f"import builtins\nbuiltins.usermod_rep{i} = True\n")
    _, configs = parse(["list", "--import", "usermod_rep0", "--import", "usermod_rep1", "usermod_rep2"])
    assert configs[-1].imports == ["usermod_rep0", "usermod_rep1", "usermod_rep2"]
    assert {f"usermod_rep{i}" for i in range(3)} <= set(sys.modules)
    _, configs = parse(["eval", "--import=usermod_rep0", "--suite", "builtin/bank"])
    assert configs[-1].imports == ["usermod_rep0"]


def test_a_user_module_trains_and_evaluates_from_the_cli(isolated_registries, tmp_path, capsys):
    write_user_module(tmp_path, "usermod_train", "user/counter")
    isolated_registries.chdir(tmp_path)
    # Without --import the names are unknown...
    code, _, err = cli(capsys, "eval", "--suite", "user/counter", "--policy", "oracle")
    assert code == 2 and "unknown suite 'user/counter'" in err
    # ...with it, the oracle replays the recorded references on the user's real backend.
    code, out, _ = cli(
        capsys, "eval", "--import", "usermod_train", "--suite", "user/counter", "--policy", "oracle", "--json",
        "--no-progress",
    )  # fmt: skip
    summary = json.loads(out)
    assert code == 0 and summary["episodes"] == 2 and summary["success_rate"] == 1.0
    code, out, _ = cli(capsys, "list", "--import", "usermod_train", "--json")
    row = next(s for s in json.loads(out)["suites"] if s["suite"] == "user/counter")
    assert row["splits"] == {"train": 4, "test": 2}
    # One training step of the tiny model on the real tools of the user's backend, then its checkpoint evaluated.
    run = tmp_path / "run"
    argv = ["train", "--import", "usermod_train", "--suite", "user/counter", "--policy", "tiny", "--backend", "real"]
    argv += ["--steps", "1", "--tasks-per-step", "1", "--group-size", "2", "--max-new-tokens", "8", "--max-turns", "2"]
    code, _, err = cli(capsys, *argv, "--out", str(run), "--no-progress")
    assert code == 0, err
    (record,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert record["step"] == 1
    argv = ["eval", "--import", "usermod_train", "--suite", "user/counter", "--policy", f"ckpt:{run / 'ckpt-1'}"]
    argv += ["--episodes", "2", "--max-new-tokens", "8", "--max-turns", "2", "--json", "--no-progress"]
    code, out, err = cli(capsys, *argv)
    assert code == 0 and json.loads(out)["episodes"] == 2, err


def test_a_missing_or_failing_module_is_one_line(isolated_registries, tmp_path, capsys):
    isolated_registries.chdir(tmp_path)
    code, _, err = cli(capsys, "eval", "--import", "usermod_missing", "--suite", "builtin/bank")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("envace: error: --import usermod_missing: no module named 'usermod_missing'")
    code, _, err = cli(capsys, "list", "--import", "sub/usermod_path.py")
    assert code == 2 and "--import takes a module name (usermod_path), not a path (sub/usermod_path.py)" in err
    (tmp_path / "usermod_raises.py").write_text("raise ValueError('bad config\\nsecond line')\n")
    code, _, err = cli(capsys, "train", "--import", "usermod_raises", "--out", str(tmp_path / "o"))
    assert code == 2 and err == "envace: error: cannot import usermod_raises: ValueError: bad config second line\n"
    (tmp_path / "usermod_dep.py").write_text("import usermod_not_installed\n")
    code, _, err = cli(capsys, "sft", "--import", "usermod_dep", "--out", str(tmp_path / "o"))
    assert (
        code == 2 and "cannot import usermod_dep: ModuleNotFoundError: No module named 'usermod_not_installed'" in err
    )
    with pytest.raises(SystemExit):  # demo runs no user code: argparse refuses the flag
        main(["demo", "--import", "usermod_dep"])
    assert "unrecognized arguments: --import" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------- entry points
def write_fake_distribution(folder):
    """An installed package as importlib.metadata sees one: a .dist-info folder and its module."""
    write_user_module(folder, "envace_fake_plugin", "fake/counter", register=False)
    info = folder / "envace_fake_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: envace-fake-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[envace_gym.backends]\nfake/counter = envace_fake_plugin:make_backend\n\n"
        "[envace_gym.suites]\nfake/counter = envace_fake_plugin:load_suite\n"
        "fake/broken = envace_fake_plugin:no_such_loader\n"
    )


def test_entry_points_register_backends_and_suites_lazily(isolated_registries, tmp_path, capsys):
    write_fake_distribution(tmp_path)
    isolated_registries.syspath_prepend(str(tmp_path))
    for registry in (backends._BACKENDS, suites._SUITES):
        registry._group_read = False  # as in a fresh process (the fixture restores it)
    assert "fake/counter" in backend_names() and {"fake/counter", "fake/broken"} <= set(suite_names())
    assert "envace_fake_plugin" not in sys.modules  # listed, not imported
    suite = load_suite("fake/counter")
    assert "envace_fake_plugin" in sys.modules and len(suite) == 6
    env = gym.make("EnvACE-ToolCall-v0", tasks=suite, split="test")
    obs, info = env.reset(seed=0)
    policy, done = OraclePolicy(suite), False
    policy.reset()
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        done = terminated or truncated
    assert reward == 1.0  # the entry point's backend ran the calls: state_match holds
    code, out, _ = cli(capsys, "eval", "--suite", "fake/counter", "--policy", "oracle", "--json", "--no-progress")
    assert code == 0 and json.loads(out)["success_rate"] == 1.0
    with pytest.raises(ValueError, match=r"suite 'fake/broken' \(entry point 'envace_fake_plugin:no_such_loader'"):
        load_suite("fake/broken")
    code, _, err = cli(capsys, "eval", "--suite", "fake/broken", "--policy", "oracle")
    assert code == 2 and "envace-fake-plugin" in err and err.count("\n") == 1
    # A name registered in code wins over an installed package's entry point of the same name.
    register_backend("fake/counter", lambda **kw: "from code")
    assert make_backend("fake/counter") == "from code"


def test_importing_envace_gym_reads_no_entry_point(tmp_path):
    code = (
        "import envace_gym\n"
        "from envace_gym import backends, suites\n"
        "print(backends._BACKENDS._group_read, suites._SUITES._group_read)\n"
        "suites.suite_names()\n"
        "print(suites._SUITES._group_read)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False", "True"]  # read on the first listing


# ------------------------------------------------------------------------- an unknown suite names --import
SUITE_TAIL = "; `envace list` shows all; or give a path to a .jsonl task file)"


@pytest.mark.parametrize(
    ("files", "suite", "says"),
    [
        # a .py file of the current directory spells the name: the module to import
        ({"usermod_notes.py": 'register_suite("my/notes", load)\n'}, "my/notes",
         "(usermod_notes.py in the current directory names it: add --import usermod_notes"),
        # a module named as a part of the name
        ({"usermod_weather.py": "x = 1\n"}, "my/usermod_weather",
         "(if usermod_weather.py in the current directory registers it, add --import usermod_weather"),
        ({"usermod_pkg/__init__.py": ""}, "usermod_pkg",
         "(if usermod_pkg/__init__.py in the current directory registers it, add --import usermod_pkg"),
        # nothing on disk, but a prefix nothing registers: the flag in general
        ({}, "my/weather", "(a suite your own code registers needs its module imported first: add --import MODULE"),
    ],
)  # fmt: skip
def test_an_unknown_suite_of_the_users_own_names_the_import_flag(
    isolated_registries, tmp_path, capsys, files, suite, says
):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    isolated_registries.chdir(tmp_path)
    code, _, err = cli(capsys, "eval", "--suite", suite, "--policy", "oracle")
    assert code == 2 and err == f"envace: error: unknown suite {suite!r} {says}{SUITE_TAIL}\n", err


def test_an_unknown_suite_of_a_builtin_family_or_a_close_name_has_no_import_hint(isolated_registries, tmp_path, capsys):
    isolated_registries.chdir(tmp_path)
    for suite in ("builtin/weather", "zzz"):
        code, _, err = cli(capsys, "eval", "--suite", suite)
        assert code == 2 and "--import" not in err, err


def test_a_module_imported_that_registers_no_such_suite_says_so(isolated_registries, tmp_path, capsys):
    (tmp_path / "usermod_empty.py").write_text("x = 1\n")
    isolated_registries.chdir(tmp_path)
    code, _, err = cli(capsys, "eval", "--import", "usermod_empty", "--suite", "usermod_empty/x")
    assert code == 2 and err.startswith(
        "envace: error: unknown suite 'usermod_empty/x' (module usermod_empty is imported and registers no such suite;"
    ), err
