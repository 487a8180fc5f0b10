import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from kv_domain import kv_task

import envace_gym
from envace_gym.calls import ToolCall, format_calls
from envace_gym.env import ToolCallEnv
from envace_gym.tasks import TaskSuite


@pytest.fixture
def env():
    return ToolCallEnv(tasks=TaskSuite([kv_task("kv-1"), kv_task("kv-2", turns=2)]), split="test", tool_timeout=0.3)


def put(key, value):
    return format_calls([ToolCall("put", {"key": key, "value": value})])


def test_check_env_passes(env):
    check_env(env)


def test_registered_env_defaults_to_builtin_mix_and_passes_check_env():
    env = gym.make("EnvACE-ToolCall-v0")
    check_env(env.unwrapped)
    assert env.unwrapped.suite.name == "builtin"
    assert set(env.unwrapped.pool.domains) == set(envace_gym.registration.BUILTIN_DOMAINS)


def test_one_domain_by_suite_kwarg():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")
    obs, info = env.reset(seed=3)
    assert info["domain"] == "bank" and info["task_id"].startswith("bank-test-")


def test_oracle_episode_messages_and_reward(env):
    obs, info = env.reset(options={"task_id": "kv-1"})
    assert obs == "Store 7 under a, then read it back."
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in info["tools"]} >= {"put", "get"}
    obs, reward, term, trunc, info = env.step(put("a", 7))
    assert json.loads(obs.split("\n")[1]) == {"stored": "a"} and reward == 0.0 and not term
    assert info["tool_results"][0]["ok"] and info["messages"][-2]["tool_calls"][0]["function"]["name"] == "put"
    assert (
        info["messages"][-1]["role"] == "tool"
        and info["messages"][-1]["tool_call_id"] == info["messages"][-2]["tool_calls"][0]["id"]
    )
    env.step(format_calls([ToolCall("get", {"key": "a"})]))
    obs, reward, term, trunc, info = env.step("The value of a is 7.")
    assert term and not trunc and reward == 1.0 and info["success"]
    assert info["reward_components"] == {"call_match": 1.0, "state_match": 1.0, "answer_match": 1.0}
    with pytest.raises(RuntimeError, match="reset"):
        env.step("again")


def test_multi_turn_and_parallel(env):
    obs, info = env.reset(options={"task_id": "kv-2"})
    env.step(put("a", 7) + "\n" + format_calls([ToolCall("get", {"key": "z"})]))  # two calls in one message
    assert env.unwrapped.backend.state()["data"] == {"z": 1, "a": 7}
    env.step(format_calls([ToolCall("get", {"key": "a"})]))
    obs, reward, term, trunc, info = env.step("a is 7")
    assert obs == "Also store 8 under b." and not term and info["user_turn"] == 1
    env.step(put("b", 8))
    obs, reward, term, trunc, info = env.step("Stored 8 under b.")
    assert term and info["reward_components"]["state_match"] == 1.0
    assert info["reward_components"]["call_match"] == 0.0  # the extra get(z) is not in the reference
    assert reward == 0.0


@pytest.mark.parametrize(
    "action, code",
    [
        ("<tool_call>{broken</tool_call>", "INVALID_TOOL_CALL_FORMAT"),
        (format_calls([ToolCall("rm_rf", {})]), "TOOL_NOT_AVAILABLE"),
        (format_calls([ToolCall("put", {"key": "a"})]), "INVALID_PARAMETERS"),
        ('<tool_call>{"name": "put", "arguments": "not json"}</tool_call>', "INVALID_TOOL_CALL_FORMAT"),
        ("", "INVALID_TOOL_CALL_FORMAT"),
        ("   \n", "INVALID_TOOL_CALL_FORMAT"),
        ("x" * 1_000_001, "INVALID_TOOL_CALL_FORMAT"),
        (format_calls([ToolCall("put_then_crash", {"key": "a"})]), "TOOL_EXECUTION_ERROR"),
        (format_calls([ToolCall("put_then_hang", {"key": "a", "seconds": 1.0})]), "TOOL_TIMEOUT"),
        (12345, "INVALID_TOOL_CALL_FORMAT"),
    ],
)
def test_bad_actions_become_error_observations_without_state_change(env, action, code):
    env.reset(options={"task_id": "kv-1"})
    before = env.unwrapped.backend.state_hash()
    obs, reward, term, trunc, info = env.step(action)
    assert not term and reward == 0.0
    assert [e["code"] for e in info["errors"]] == [code]
    assert code in obs and env.observation_space.contains(obs)
    assert env.unwrapped.backend.state_hash() == before
    # the episode goes on normally afterwards
    obs, *_ = env.step(put("q", 1))
    assert '"stored": "q"' in obs


def test_too_many_parallel_calls_are_bounded():
    env = ToolCallEnv(tasks=[kv_task()], split=None, max_calls_per_step=3)
    env.reset()
    obs, _, _, _, info = env.step("\n".join(put(f"k{i}", i) for i in range(10)))
    assert len(info["tool_results"]) == 3 and info["errors"][-1]["code"] == "INVALID_TOOL_CALL_FORMAT"
    assert env.observation_space.contains(obs)


def test_same_seed_same_task_and_transcript():
    def run(seed):
        env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")
        obs, info = env.reset(seed=seed)
        env.step(format_calls([ToolCall("get_balance", {"account_id": "A-0000"})]))
        env.step("done")
        return info["task_id"], env.unwrapped.transcript()

    assert run(11) == run(11)
    assert len({run(s)[0] for s in range(6)}) > 1


def test_truncation_at_max_turns():
    env = ToolCallEnv(tasks=[kv_task()], split=None, max_turns=3)
    env.reset()
    for i in range(3):
        obs, reward, term, trunc, info = env.step(put("a", i))
    assert trunc and not term and "reward_components" in info and reward == 0.0


def test_reset_options(env):
    _, info = env.reset(options={"task_id": "kv-2"})
    assert info["task_id"] == "kv-2"
    _, info = env.reset(seed=0, options={"suite": "builtin/bank", "split": "train"})
    assert info["task_id"].startswith("bank-train-")
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"tsk": 1})
    with pytest.raises(KeyError, match="no task"):
        env.reset(options={"task_id": "nope"})


def test_no_state_leaks_between_episodes(env):
    env.reset(options={"task_id": "kv-1"})
    env.step(put("leak", 1))
    env.reset(options={"task_id": "kv-1"})
    assert "leak" not in env.unwrapped.backend.state()["data"]


def test_render_transcript():
    env = ToolCallEnv(tasks=[kv_task()], split=None, render_mode="ansi")
    env.reset()
    env.step(put("a", 7))
    text = env.render()
    assert "[user] Store 7" in text and "[tool put]" in text and "[assistant] <tool_call>" in text


def test_render_without_a_render_mode_warns_and_returns_none_as_gymnasium_does(capsys):
    env = gym.make("EnvACE-ToolCall-v0", tasks=[kv_task()], split=None)
    env.reset()
    with pytest.warns(UserWarning, match=r'without specifying any render mode.*render_mode="ansi"'):
        assert env.render() is None
    assert "[user] Store 7" in env.unwrapped.transcript() and capsys.readouterr().out == ""
    human = ToolCallEnv(tasks=[kv_task()], split=None, render_mode="human")
    human.reset()
    assert human.render() is None and "[user] Store 7" in capsys.readouterr().out


def test_bad_constructor_arguments():
    with pytest.raises(KeyError, match="unknown suite 'nope'"):
        ToolCallEnv(suite="nope")
    with pytest.raises(ValueError, match="no tasks in split 'dev'"):
        ToolCallEnv(suite="builtin/bank", split="dev")
    with pytest.raises(ValueError, match="unknown backend"):
        ToolCallEnv(backend="imaginary")


def test_prose_that_looks_like_a_call_ends_the_episode_as_an_answer(env):
    # Issue 21: "Put(s) ... (...)" is read as a broken Python-syntax call only when it names a declared tool.
    env.reset(options={"task_id": "kv-1"})
    text = "Refund(s) processed for order W123 (total 10)"
    obs, reward, term, trunc, info = env.step(text)
    assert term and info["errors"] == [] and "INVALID_TOOL_CALL_FORMAT" not in obs
    assert env.unwrapped.record.turn_answers == [text]


def test_a_broken_python_call_of_a_declared_tool_is_a_format_error(env):
    env.reset(options={"task_id": "kv-1"})
    obs, reward, term, trunc, info = env.step('put(key="a", value=')
    assert not term and [e["code"] for e in info["errors"]] == ["INVALID_TOOL_CALL_FORMAT"] and "'put'" in obs


def test_unclosed_think_runs_the_call_after_it_or_says_why_nothing_was_read(env):
    env.reset(options={"task_id": "kv-1"})
    obs, reward, term, trunc, info = env.step("<think>store it first " + put("a", 7))
    assert info["tool_results"][0]["ok"] and env.unwrapped.backend.state()["data"]["a"] == 7
    obs, reward, term, trunc, info = env.step("<think>The value of a is 7.")
    assert not term and [e["code"] for e in info["errors"]] == ["INVALID_TOOL_CALL_FORMAT"]
    assert "never closes it" in obs
