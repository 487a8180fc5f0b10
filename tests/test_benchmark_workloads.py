"""The throughput benchmarks' workloads at their smallest size (issue 20, item 5): the fixed workload is what
it says (every turn a call of set length, every call answered), whatever the model. No timing assertions."""

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # rehearsal_throughput imports rollout_throughput by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rollout():
    return _load("rollout_throughput")


def test_the_rollout_workload_decodes_set_lengths_and_makes_real_calls_on_a_random_model(rollout):
    workload = rollout.Workload(turns=2)
    policy = rollout.scripted_policy("tiny", workload)  # random weights: unforced, it would babble
    result = rollout.measure(policy, workload, envs=[2], naive_episodes=1)
    assert result["fixed_workload_check"] == {"naive": True, "ours@2": True}
    (row,) = result["rows"]
    assert row["ours_tokens"] == row["raw_tokens"] == 2 * 2 * workload.actor_tokens
    assert row["calls_answered"] == 4 and result["naive"]["tokens"] == 2 * workload.actor_tokens
    assert row["engine_calls"] == 2  # one batched engine call per turn for both envs
    assert policy.engine.rows == {"actor": 4}


def test_a_forced_turn_is_the_scripted_call_and_a_short_budget_is_refused(rollout):
    workload = rollout.Workload(turns=1)
    policy = rollout.scripted_policy("tiny", workload)
    env = rollout.make_envs(1, workload)[0]
    _, info = env.reset(options={"task_id": rollout.task_ids(workload, 1)[0]})
    gen = policy.act(info["messages"], info["tools"])
    assert len(gen.token_ids) == workload.actor_tokens and gen.finish_reason == "stop"
    _, _, _, _, info = env.step(gen.text)
    assert [r["name"] for r in info["tool_results"]] == [rollout.ACTOR_CALL.name] and info["tool_results"][0]["ok"]
    with pytest.raises(ValueError, match="the workload allows 8"):
        rollout.Scripts(policy.tokenizer, policy.engine.stop_id, rollout.Workload(actor_tokens=8))


def test_the_rehearsal_workload_imagines_every_result_in_both_modes(rollout):
    rehearsal = _load("rehearsal_throughput")
    workload = rollout.Workload(turns=1)
    policy = rollout.scripted_policy("tiny", workload)
    result = rehearsal.measure(policy, workload, envs=[1], naive_episodes=1)
    assert all(result["fixed_workload_check"].values()), result["fixed_workload_check"]
    per_episode = workload.actor_tokens + workload.result_tokens
    for mode in rehearsal.MODES:
        (row,) = result["modes"][mode]["rows"]
        assert row["ours_tokens"] == per_episode and result["modes"][mode]["naive"]["tokens"] == per_episode
        assert row["rows_by_role"] == {"actor": 1, f"env_role_{mode}": 1}


def test_the_env_step_benchmark_times_cartpole_between_its_own_steps():
    """The per-CartPole ratio comes from CartPole slices interleaved with the env's steps, each timed apart:
    the env's CPU time excludes the slices, and the ratio is the two rates of the same run."""
    bench = _load("env_step")
    args = argparse.Namespace(wrapped=False, prewarm=False, seed=0, warmup=5, steps=2 * bench.SLICE_STEPS, seconds=60.0)
    row = bench.run("new", "random", args)
    assert row["steps"] == 2 * bench.SLICE_STEPS
    assert row["cartpole_steps_per_cpu_s"] > row["steps_per_cpu_s"] > 0  # CartPole is the cheaper env
    assert row["per_cartpole"] == row["steps_per_cpu_s"] / row["cartpole_steps_per_cpu_s"]


def test_the_env_step_benchmark_runs_the_user_toolkit_in_a_worker_under_the_defaults():
    bench = _load("env_step")
    from envace_gym.backends.isolated import ProcessBackend
    from envace_gym.backends.python import PythonBackend

    env = bench.make_env(False, "user-default")
    env.reset(seed=0)
    assert isinstance(env.backend, ProcessBackend) and env.backend.name.startswith("user/builtin/")
    env.close()
    threaded = bench.make_env(False, "user-thread")
    threaded.reset(seed=0)
    assert isinstance(threaded.backend, PythonBackend) and not threaded.backend.runs_inline
    args = argparse.Namespace(wrapped=False, prewarm=False, seed=0, warmup=5, steps=40, seconds=5.0)
    row = bench.run("user-default", "oracle", args)
    assert row["steps"] == 40 and row["calls"] > 0
