"""BFCL v4 inside EnvACE (EnvACE-BFCL-v0): tasks from bfcl-eval, scored as BFCL's own checker scores them.

Offline: bfcl-eval's data, API classes and checkers are local files. A few tasks per category keep it fast.
"""

import builtins
import importlib.util
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envace_gym  # noqa: F401  (registers EnvACE-BFCL-v0)
from envace_gym import SelfRehearsalEnv, TaskSuite, ToolCall, format_calls
from envace_gym.agents.scripted import OraclePolicy, play_episode
from envace_gym.envs.bfcl import CATEGORIES, UNSUPPORTED, BFCLEnv, category_kind, upstream
from envace_gym.envs.bfcl.backend import BFCLBackend
from envace_gym.envs.bfcl.convert import build_tasks
from envace_gym.envs.bfcl.ground_truth import GroundTruthError, parse_call_string, reference_arguments
from envace_gym.envs.bfcl.hostlang import encode
from envace_gym.envs.bfcl.perturb import PERTURBATIONS, perturb, play, reference_turns
from envace_gym.imagination import RealResultImaginer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("bfcl_eval") is None, reason="bfcl-eval is not installed")

PER_CATEGORY = 3
AST = [c for c in CATEGORIES if category_kind(c) == "ast"]
MULTI_TURN = [c for c in CATEGORIES if category_kind(c) == "multi_turn"]


@pytest.fixture(scope="module")
def suites():
    return {c: TaskSuite(build_tasks(c, PER_CATEGORY), f"bfcl/{c}") for c in CATEGORIES}


def make_env(suites, category, **kwargs):
    return gym.make("EnvACE-BFCL-v0", category=category, tasks=suites[category], **kwargs)


def _agreement_module():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bfcl_agreement.py"
    spec = importlib.util.spec_from_file_location("bfcl_agreement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------ loading
def test_importing_the_package_does_not_import_bfcl_eval():
    code = "import sys, envace_gym.envs.bfcl; print(any(m.startswith('bfcl_eval') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("category", CATEGORIES)
def test_tasks_load(suites, category):
    suite = suites[category]
    assert len(suite) == PER_CATEGORY
    for task in suite:
        assert task.split == "test" and task.domain == f"bfcl/{category}"
        assert task.metadata["bfcl_id"] == task.id and task.metadata["bfcl_category"] == category
        assert task.tools and all(t["type"] == "function" for t in task.tools)
        assert len(task.reference) == len(task.user_turns) and all(task.user_turns)
        if category_kind(category) != "irrelevance":
            assert task.reference_calls
        json.dumps(task.to_dict())  # a task is plain JSON


def test_multi_turn_reference_carries_real_results(suites):
    task = suites["multi_turn_base"][0]
    results = [c.result for c in task.reference_calls]
    assert results and all(isinstance(r, (dict, list)) and r for r in results)
    assert any("current_working_directory" in r for r in results if isinstance(r, dict))


def test_unknown_and_unsupported_categories_say_why():
    with pytest.raises(ValueError, match="simple_python"):
        BFCLEnv(category="no_such_category")
    with pytest.raises(ValueError, match="SerpAPI"):
        BFCLEnv(category="web_search")
    assert set(UNSUPPORTED) >= {"web_search", "memory"}


def test_registered_suite_and_env_pass_check_env():
    env = gym.make("EnvACE-BFCL-v0", category="multi_turn_base")
    assert len(env.unwrapped.pool) == 200 and env.unwrapped.suite.name == "bfcl/multi_turn_base"
    check_env(env.unwrapped, skip_render_check=True)


# ------------------------------------------------------------------------------------------ oracle
@pytest.mark.parametrize("category", CATEGORIES)
def test_oracle_scores_one(suites, category):
    env = make_env(suites, category)
    oracle = OraclePolicy(suites[category])
    for task in suites[category]:
        info = play_episode(env, oracle, task.id)
        assert info["success"], (task.id, info.get("bfcl"))
        assert info["reward_components"] == {"bfcl": 1.0} and info["bfcl"] == {"valid": True}


@pytest.mark.parametrize("category", ["multi_turn_base", "multi_turn_miss_func"])
def test_oracle_scores_one_with_imagined_results(suites, category):
    base = make_env(suites, category)
    env = SelfRehearsalEnv(base, RealResultImaginer(base))
    oracle = OraclePolicy(suites[category])
    for task in suites[category]:
        info = play_episode(env, oracle, task.id)
        assert info["success"], (task.id, info.get("bfcl"), info.get("aborted"))
        assert info["env_role_samples"] == [] or all(s.valid for s in info["env_role_samples"])


# ------------------------------------------------------------------------------------------ perturbations
@pytest.mark.parametrize("category", AST)
def test_ast_perturbations_fail(suites, category):
    env = make_env(suites, category)
    for task in suites[category]:
        for name in ("drop_call", "wrong_argument", "extra_call", "missing_turn"):
            reward, info = play(env, task.id, perturb(task, name))
            assert reward == 0.0 and not info["bfcl"]["valid"], (task.id, name)


@pytest.mark.parametrize("category", ["parallel", "parallel_multiple", "live_parallel"])
def test_parallel_calls_are_matched_in_any_order(suites, category):
    env = make_env(suites, category)
    task = suites[category][0]
    assert play(env, task.id, perturb(task, "swapped_order"))[0] == 1.0


@pytest.mark.parametrize("category", ["irrelevance", "live_irrelevance"])
def test_irrelevance_means_no_call(suites, category):
    env = make_env(suites, category)
    task = suites[category][0]
    assert play(env, task.id, [[]])[0] == 1.0
    reward, info = play(env, task.id, perturb(task, "extra_call"))
    assert reward == 0.0 and info["bfcl"]["error_type"] == "irrelevance_error:decoder_success"


def test_relevance_means_some_call(suites):
    env = make_env(suites, "live_relevance")
    task = suites["live_relevance"][0]
    assert play(env, task.id, reference_turns(task))[0] == 1.0
    assert play(env, task.id, [[]])[0] == 0.0


@pytest.mark.parametrize("category", MULTI_TURN)
def test_multi_turn_perturbations_fail(suites, category):
    env = make_env(suites, category)
    task = suites[category][0]
    for name in ("drop_call", "wrong_argument", "swapped_order", "missing_turn"):
        reward, info = play(env, task.id, perturb(task, name))
        assert reward == 0.0 and info["bfcl"]["error_type"].startswith("multi_turn:"), (task.id, name)
    assert play(env, task.id, reference_turns(task)[:-1])[0] == 0.0  # never answers the last turn


@pytest.mark.parametrize("category", CATEGORIES)
def test_reward_agrees_with_bfcls_own_checker(suites, category):
    agreement = _agreement_module()
    env = make_env(suites, category)
    for task in list(suites[category])[:2]:
        for name in PERTURBATIONS:
            turns = perturb(task, name)
            if turns is None:
                continue
            ours = play(env, task.id, turns)[0] == 1.0
            assert ours == bool(agreement.official_verdict(task, turns, name)["valid"]), (task.id, name)


# ------------------------------------------------------------------------------------------ episodes
def test_fresh_state_every_episode(suites):
    env = make_env(suites, "multi_turn_base")
    task = suites["multi_turn_base"][0]
    env.reset(options={"task_id": task.id})
    initial = env.unwrapped.backend.state_hash()
    first = play(env, task.id, reference_turns(task))
    changed = env.unwrapped.backend.state_hash()
    second = play(env, task.id, reference_turns(task))
    assert first[0] == second[0] == 1.0 and first[1]["bfcl"] == second[1]["bfcl"]
    assert env.unwrapped.backend.state_hash() == changed != initial
    env.reset(options={"task_id": task.id})
    assert env.unwrapped.backend.state_hash() == initial


def test_invalid_calls_get_the_fixed_error_codes(suites):
    env = make_env(suites, "multi_turn_base")
    task = suites["multi_turn_base"][0]
    env.reset(options={"task_id": task.id})
    before = env.unwrapped.backend.state_hash()
    cases = [
        (format_calls([ToolCall("no_such_tool", {})]), "TOOL_NOT_AVAILABLE"),
        (format_calls([ToolCall("cd", {"folder": 7})]), "INVALID_PARAMETERS"),
        (format_calls([ToolCall("cd", {})]), "INVALID_PARAMETERS"),
        ('<tool_call>{"name": "cd", "arguments": {', "INVALID_TOOL_CALL_FORMAT"),
    ]
    for action, code in cases:
        obs, _, terminated, _, info = env.step(action)
        assert [e["code"] for e in info["errors"]] == [code] and code in obs and not terminated
    assert env.unwrapped.backend.state_hash() == before
    _, _, _, _, info = env.step(format_calls([ToolCall("cd", {"folder": "no_such_folder"})]))
    assert info["tool_results"][0]["ok"] and "error" in info["tool_results"][0]["content"]  # the API's own answer


def test_a_hanging_call_times_out_and_the_world_is_rebuilt(suites):
    task = suites["multi_turn_base"][0]
    backend = BFCLBackend(timeout=0.2)
    backend.reset(task)
    assert backend.execute(task.reference_calls[0].call).ok
    state = backend.state_hash()
    backend.world.methods["pwd"] = lambda: time.sleep(1)
    result = backend.execute(ToolCall("pwd", {}))
    assert result.error is not None and result.error.code.value == "TOOL_TIMEOUT"
    assert backend.state_hash() == state and backend.execute(ToolCall("pwd", {})).ok  # fresh instances, replayed


def test_single_turn_calls_with_dotted_names_and_python_syntax(suites):
    task = next(t for t in suites["simple_python"] if "." in t.reference_calls[0].name)
    call = task.reference_calls[0]
    env = make_env(suites, "simple_python")
    env.reset(options={"task_id": task.id})
    python_syntax = f"{call.name}(" + ", ".join(f"{k}={v!r}" for k, v in call.arguments.items()) + ")"
    _, _, _, _, info = env.step(python_syntax)
    assert info["tool_results"][0]["ok"] and info["tool_results"][0]["name"] == call.name
    _, reward, terminated, _, info = env.step("Here is the result.")
    assert terminated and reward == 1.0


def test_miss_func_offers_held_out_tools_only_from_their_turn(suites):
    task = next(t for t in suites["multi_turn_miss_func"] if t.metadata.get("holdout"))
    ((turn, names),) = task.metadata["holdout"].items()
    env = make_env(suites, "multi_turn_miss_func")
    oracle = OraclePolicy(suites["multi_turn_miss_func"])
    oracle.reset()
    obs, info = env.reset(options={"task_id": task.id})
    assert not {t["function"]["name"] for t in info["tools"]} & set(names)
    _, _, _, _, refused = env.step(format_calls([ToolCall(names[0], {})]))
    assert refused["errors"][0]["code"] == "TOOL_NOT_AVAILABLE"
    env.reset(options={"task_id": task.id})
    while info["user_turn"] < int(turn):
        obs, _, _, _, info = env.step(oracle.act(obs, info))
    assert obs == upstream.added_functions_prompt()
    assert set(names) <= {t["function"]["name"] for t in info["tools"]}


def test_force_quit_after_too_many_steps_in_a_turn(suites):
    env = make_env(suites, "multi_turn_base", max_steps_per_turn=2)
    env.reset(options={"task_id": suites["multi_turn_base"][0].id})
    action = format_calls([ToolCall("pwd", {})])
    for _ in range(2):
        assert env.step(action)[3] is False
    _, reward, terminated, truncated, info = env.step(action)
    assert truncated and not terminated and reward == 0.0
    assert info["bfcl"]["error_type"] == "multi_turn:force_terminated"


def test_history_and_system_messages_of_live_entries():
    tasks = build_tasks("live_irrelevance")
    task = next(t for t in tasks if t.metadata.get("history") and t.metadata.get("system"))
    env = gym.make("EnvACE-BFCL-v0", category="live_irrelevance", tasks=[task])
    _, info = env.reset(options={"task_id": task.id})
    roles = [m["role"] for m in info["messages"]]
    assert roles[0] == "system" and task.metadata["system"] in info["messages"][0]["content"]
    assert roles[1:] == [m["role"] for m in task.metadata["history"]] + ["user"]


# ------------------------------------------------------------------------------------------ no eval, no network
def test_episodes_and_scoring_never_eval_or_reach_the_network(suites, monkeypatch):
    used = []

    def refuse(*args, **kwargs):
        used.append(args[:1])
        raise AssertionError("eval/exec/network used")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    for category in ("multi_turn_base", "simple_python", "simple_java"):
        env = make_env(suites, category)
        task = suites[category][0]
        assert play(env, task.id, reference_turns(task))[0] == 1.0
        assert play(env, task.id, perturb(task, "wrong_argument"))[0] == 0.0
    assert used == []  # BFCL's own runner would have eval'd every call (and swallowed the refusal)


# ------------------------------------------------------------------------------------------ helpers
def test_ground_truth_strings_are_read_as_literals_only():
    assert parse_call_string("sort('a.txt', reverse=True)") == ("sort", ("a.txt",), {"reverse": True})
    assert parse_call_string("f(x=[1, (2, 3)], y=-1.5)") == ("f", (), {"x": [1, (2, 3)], "y": -1.5})
    for bad in ("f(x=open('p'))", "__import__('os').system('x')", "f(**k)", "not a call"):
        with pytest.raises(GroundTruthError):
            parse_call_string(bad)


def test_reference_arguments_follow_bfcl_optional_rules():
    props = {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "dict"}, "d": {"type": "string"}}
    allowed = {"a": [1, 2], "b": ["", "x"], "c": [{"k": ["v"], "o": ["", 3]}], "d": [""], "zz": ["y"]}
    assert reference_arguments(allowed, props) == {"a": 1, "c": {"k": "v"}}
    assert reference_arguments(allowed, props, required=["b", "d"]) == {"a": 1, "b": "x", "c": {"k": "v"}, "d": ""}


@pytest.mark.parametrize(
    "value, kind, items, language",
    [
        (True, "boolean", None, "java"),
        (42, "long", None, "java"),
        (2.5, "float", None, "java"),
        ([1, 2], "Array", "integer", "java"),
        (["a", "b"], "ArrayList", "String", "java"),
        ({"limit": 50, "name": "x"}, "HashMap", None, "java"),
        (7, "Bigint", None, "javascript"),
        (1e-05, "float", None, "javascript"),
        (["a", "b"], "array", "String", "javascript"),
        ({"k": "v", "n": 3}, "dict", None, "javascript"),
    ],
)
def test_host_language_literals_read_back_by_bfcls_converters(value, kind, items, language):
    if language == "java":
        from bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter import java_type_converter as convert
    else:
        from bfcl_eval.eval_checker.ast_eval.type_convertor.js_type_converter import js_type_converter as convert
    text = encode(value, kind, items, language)
    assert isinstance(text, str) and convert(text, kind, items) == value


# ------------------------------------------------------------------------------------------ private rehearsal
class _Seeing(OraclePolicy):
    """The oracle, recording the tools it is offered at each user turn (class-level: rehearsals act through
    deep copies)."""

    offered: list = []

    def act(self, observation, info):
        _Seeing.offered.append((info["user_turn"], {t["function"]["name"] for t in info["tools"]}))
        return super().act(observation, info)


class _World:
    """A scripted env role that records every prompt: which candidate tools it listed, and whether the turn
    that adds the held-out functions had begun."""

    def __init__(self):
        self.seen = []

    def imagine(self, request):
        text = request.messages[-1]["content"]
        candidates = text.split("## Candidate tools\n")[1].split("\n\n## ")[0]
        names = {line[2:].split("(")[0] for line in candidates.splitlines()}
        self.seen.append((upstream.added_functions_prompt() in text, names))
        return '<execution_result>\n{"result": "ok"}\n</execution_result>'


def test_miss_func_rehearsal_offers_held_out_tools_only_from_their_turn(suites):
    from envace_gym.agents.rehearsal import PrivateRehearsal

    suite = suites["multi_turn_miss_func"]
    task = next(t for t in suite if t.metadata.get("holdout") and t.reference[0].steps)
    ((turn, names),) = task.metadata["holdout"].items()
    env = make_env(suites, "multi_turn_miss_func")
    _, info = env.reset(options={"task_id": task.id})
    world = _World()
    _Seeing.offered = []
    (note,) = PrivateRehearsal(_Seeing(suite), budget=1, imaginer=world).prepare_turns([env], [info])
    assert note.stats["rehearsals"] == 1
    # The actor's tool list: without them before their turn, with them from it (the rehearsal got there).
    assert {t for t, _ in _Seeing.offered} >= {0, int(turn)}
    for at, offered in _Seeing.offered:
        assert (set(names) <= offered) if at >= int(turn) else not (set(names) & offered), (at, offered)
    # The env role's prompts: the same.
    assert {added for added, _ in world.seen} == {False, True}
    for added, listed in world.seen:
        assert (set(names) <= listed) if added else not (set(names) & listed), (added, listed)
    # Only the schedule was kept: no reference, no reward bases, no other metadata.
    fork_task = env.unwrapped.task.blind(keep=env.unwrapped.rehearsal_metadata)
    assert fork_task.metadata == {"holdout": task.metadata["holdout"]} and not fork_task.reference
    assert not set(names) & {t["function"]["name"] for t in info["tools"]}  # the live episode: as it was


def test_a_held_out_tool_is_refused_in_an_imagined_half_step_before_its_turn(suites):
    task = next(t for t in suites["multi_turn_miss_func"] if t.metadata.get("holdout"))
    ((turn, names),) = task.metadata["holdout"].items()
    call = next(c for step in task.reference[int(turn)].steps for c in step if c.name in names)  # valid arguments
    world = _World()
    env = SelfRehearsalEnv(make_env(suites, "multi_turn_miss_func"), world, grounding="none")
    env.reset(options={"task_id": task.id})
    action = format_calls([ToolCall(call.name, call.arguments)])
    pending = env.unwrapped.begin_step(action)
    assert pending.requests == [] and world.seen == []  # refused before the env role is asked
    _, _, _, _, info = env.step(action)
    assert info["errors"][0]["code"] == "TOOL_NOT_AVAILABLE"
