"""A scripted env role: its answers as data or text, formatted for the mode, read the same way by a direct
step and by the rollout loop's batched half-steps; the unusable-result message; the example runs."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.imagination import format_execution_result, format_result, read_answer

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "scripted_env_role.py"
BALANCE = {"account_id": "A-1", "balance": 12.5, "currency": "EUR"}
CALL = format_calls([ToolCall("get_balance", {"account_id": "A-1"})])
EXPECTED = "expected the result inside <execution_result>...</execution_result>"


def _example():
    spec = importlib.util.spec_from_file_location("scripted_env_role", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bank(answer, mode="prompted", **kw):
    """The bank's test split with an env role that always answers ``answer``."""
    role = SimpleNamespace(imagine=lambda request: answer)
    return SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test"), role, mode=mode, **kw)


class Batched:
    """A batching env role (the rollout loop's path) that answers every request with ``answer``."""

    def __init__(self, answer):
        self.answer, self.batches = answer, 0

    def imagine(self, request):
        raise AssertionError("the loop batches")

    def imagine_batch(self, requests, sampling=None, generator=None, contexts=None):
        self.batches += 1
        return [self.answer for _ in requests]


class Caller:
    """Calls get_balance(A-1) at every step."""

    def reset(self):
        pass

    def act(self, observation, info):
        return CALL


def _stepped(answer, mode):
    """One get_balance step, direct: (the result the actor was shown, the step's info)."""
    env = _bank(answer, mode)
    env.reset(seed=1)
    obs, reward, term, trunc, info = env.step(CALL)
    return info["messages"][-1]["content"], info


def _batched(answer, mode):
    """The same step, its answer sent by the rollout loop (``answer_requests``): (result shown, last info)."""
    role = Batched(answer)
    env = SelfRehearsalEnv(
        gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=2), role, mode=mode
    )
    last = {}
    collect([env], Caller(), 1, progress=False, on_episode=lambda _, info: last.update(info))
    assert role.batches >= 1
    tool = next(m for m in last["messages"] if m["role"] == "tool")
    return tool["content"], last


# What a script may answer where the mode's own format was once required (text in the mode's format still is).
NEW_ANSWERS = [
    ("dict", BALANCE, "prompted"),
    ("dict", BALANCE, "inline"),
    ("json text", json.dumps(BALANCE), "prompted"),
    ("tagged text", format_execution_result(BALANCE), "inline"),
    ("text-only generation", SimpleNamespace(text=json.dumps(BALANCE)), "prompted"),
]


@pytest.mark.parametrize("path", [_stepped, _batched], ids=["direct", "batched"])
@pytest.mark.parametrize("kind, answer, mode", NEW_ANSWERS, ids=[f"{k}-{m}" for k, _, m in NEW_ANSWERS])
def test_a_script_answers_with_data_or_text_in_either_mode(kind, answer, mode, path):
    shown, info = path(answer, mode)
    assert "aborted" not in info, info.get("aborted")
    assert json.loads(shown) == BALANCE


@pytest.mark.parametrize("mode", ["prompted", "inline"])
def test_data_is_written_in_the_modes_format(mode):
    _, info = _stepped(BALANCE, mode)
    (sample,) = info["env_role_samples"]
    assert sample.valid and sample.text == format_result(BALANCE, mode)
    assert format_result(BALANCE, "inline") == json.dumps(BALANCE)
    assert format_result(BALANCE, "prompted") == format_execution_result(BALANCE)


def test_a_models_generation_keeps_the_format_rule():
    """An answer with token ids is what training samples: bare JSON in prompted mode stays unusable."""
    generation = SimpleNamespace(text='{"balance": 1}', token_ids=[1, 2], logprobs=[-0.1, -0.2], prompt_ids=[3])
    _, info = _stepped(generation, "prompted")
    assert info["aborted"] == f"imagined result unusable: {EXPECTED}, got: '{{\"balance\": 1}}'"
    assert read_answer(generation, "prompted").text == generation.text


@pytest.mark.parametrize("path", [_stepped, _batched], ids=["direct", "batched"])
def test_an_unusable_scripted_answer_says_what_was_expected_once(path):
    _, info = path("the balance is 12", "prompted")
    assert info["aborted"] == (
        "imagined result unusable: expected the result inside <execution_result>...</execution_result> "
        "(or return the value as data from your imaginer), got: 'the balance is 12'"
    )
    long = "x" * 100
    _, info = path(long, "prompted")
    assert info["aborted"].endswith(f"got: '{'x' * 60}'...")


@pytest.mark.parametrize("path", [_stepped, _batched], ids=["direct", "batched"])
def test_an_answer_that_is_no_answer_is_named(path):
    _, info = path(None, "inline")
    assert info["aborted"] == (
        "imagined result unusable: the imaginer returned None: return the result as data (a dict or a list) or text"
    )
    _, info = path({1, 2}, "prompted")
    assert info["aborted"] == (
        "imagined result unusable: the imaginer's answer is neither data (a JSON value), text nor a generation "
        "(.text): Object of type set is not JSON serializable"
    )


def test_data_that_is_no_result_is_unusable_as_text_would_be():
    _, info = _stepped({}, "prompted")
    assert info["aborted"] == "imagined result unusable: execution result must be a non-empty JSON object or an array"


def test_the_wrapper_takes_an_imaginer():
    base = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")
    role = SimpleNamespace(imagine=lambda request: BALANCE)
    assert SelfRehearsalEnv(base, imaginer=role).imaginer is role
    with pytest.raises(TypeError):
        SelfRehearsalEnv(base, policy=role)


@pytest.mark.parametrize("mode", ["prompted", "inline"])
def test_the_examples_imaginer_earns_the_reward_in_both_modes_through_the_loop(mode):
    tiny = _example()
    env = SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", suite="builtin/bank"), tiny.TinyBank(), mode=mode)
    (traj,) = collect([env], OraclePolicy(env.unwrapped.suite), 1, task_ids=[tiny.TASK], progress=False)
    assert traj.reward == 1.0 and traj.success and len(traj.env_role_samples) == 2


def test_the_example_runs():
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("prompted: reward 1.0; ") and "<execution_result>" in lines[0]
    assert lines[1].startswith("inline: reward 1.0; ") and "<execution_result>" not in lines[1]


def test_the_docs_show_how_to_script_an_env_role():
    docs = ROOT / "docs"
    api = (docs / "api.md").read_text()
    for name in ("format_execution_result", "format_result", "read_answer"):
        assert f"::: envace_gym.imagination.{name}\n" in api, name
    backends = (docs / "backends.md").read_text()
    for page in (backends, (docs / "own-tools.md").read_text()):
        assert "## Script your own env role\n" in page and "examples/scripted_env_role.py" in page
    # The message the page shows (wrapped there) is the one the env writes.
    shown = backends.split("it is this one line (wrapped here):\n\n```text\n", 1)[1].split("\n```", 1)[0]
    _, info = _stepped("the balance is 12", "prompted")
    assert " ".join(shown.split()) == info["aborted"]
    assert "`SelfRehearsalEnv(env, imaginer, mode=" in backends
    # the changelog's entry of the day it landed (newer days' entries come before it)
    day = next(part for part in (docs / "changelog.md").read_text().split("\n## ") if part.startswith("2026-12-07"))
    assert "`SelfRehearsalEnv(env, imaginer, ...)`" in day
