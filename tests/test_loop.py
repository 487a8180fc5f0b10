"""The one episode loop: scripted policies go through collect() as LM policies do, evaluate() and
play_episode() are thin calls of it, and Trajectory holds its EpisodeResult."""

import importlib
import json
import threading

import gymnasium as gym
import pytest

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents import scripted
from envace_gym.agents.eval.evaluate import EpisodeResult, EvalReport, evaluate
from envace_gym.agents.rollout import EnvRoleSample, Trajectory, collect, load_trajectories, loop, save_trajectories
from envace_gym.agents.scripted import NoopPolicy, OraclePolicy, RandomPolicy, play_episode

evaluate_module = importlib.import_module("envace_gym.agents.eval.evaluate")  # the package's `evaluate` is the function

_INVALID_CODES = {"INVALID_TOOL_CALL_FORMAT", "TOOL_NOT_AVAILABLE", "INVALID_PARAMETERS"}


def _old_count_calls(info):
    """The former evaluate.count_calls: (valid, invalid) call attempts of one step's info."""
    results = info["tool_results"]
    format_errors = len(info["errors"]) - sum(1 for r in results if not r["ok"])
    invalid = sum(1 for e in info["errors"] if e["code"] in _INVALID_CODES)
    return len(results) + format_errors - invalid, invalid


def _reference_evaluate(env, policy, episodes, seed):
    """The former evaluate's own loop (task order: the pool's seeded evaluation order)."""
    results = []
    for i, task in enumerate(env.unwrapped.pool.episode_order(episodes, seed)):
        policy.reset()
        obs, info = env.reset(seed=seed + i, options={"task_id": task.id})
        ok = failed = 0
        reward, terminated, truncated = 0.0, False, False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
            step_ok, step_bad = _old_count_calls(info)
            ok, failed = ok + step_ok, failed + step_bad
        results.append(
            EpisodeResult(
                task.id,
                task.domain,
                float(reward),
                bool(info.get("success", False)),
                info.get("reward_components", {}),
                info["turn"],
                bool(truncated),
                ok,
                failed,
                info["messages"],
                # by what answered them: the env's own tally of the ledger's bookings, as the driver reads it
                calls_live=info["call_counts"]["live"],
                calls_logged=info["call_counts"]["logged"],
                calls_imagined=info["call_counts"]["imagined"],
                calls_verifier=info["call_counts"]["verifier"],
                aborted=info.get("aborted"),
            )
        )
    return EvalReport(results)


def _env(**kwargs):
    return gym.make("EnvACE-ToolCall-v0", split="test", **kwargs)


@pytest.mark.parametrize("name", ["oracle", "random"])
def test_the_driver_gives_the_former_evaluate_summary(name):
    def make(env):
        return OraclePolicy(env.unwrapped.suite) if name == "oracle" else RandomPolicy(seed=3)

    env = _env()
    episodes = 60 if name == "oracle" else 120
    # a fresh env each: an env caches its tasks' reference state hashes, so a second run books fewer verifier calls
    expected = _reference_evaluate(_env(), make(env), episodes, seed=5)
    report = evaluate(env, make(env), episodes, seed=5, progress=False)
    summary = report.summary()
    assert summary.pop("environment")["cpu_capability"]  # evaluate() records where it ran; the former did not
    assert summary == expected.summary()
    assert [r.task_id for r in report.results] == [t.id for t in env.unwrapped.pool.episode_order(episodes, 5)]
    assert report.results == expected.results  # every field, the call counts (info["call_counts"]) included
    if name == "oracle":
        assert report.summary()["success_rate"] == 1.0 and report.summary()["valid_call_rate"] == 1.0
    else:
        assert report.summary()["success_rate"] < 0.3 and 0 < report.summary()["valid_call_rate"] < 1
    assert all(t.token_ids == t.roles == t.logprobs == [] for t in report.trajectories)  # scripted: no tokens


def test_text_policies_one_per_env_in_lockstep_equal_one_env():
    env = _env()
    suite = env.unwrapped.suite
    one = evaluate(env, OraclePolicy(suite), 9, seed=1, progress=False)
    three = evaluate([_env() for _ in range(3)], [OraclePolicy(suite) for _ in range(3)], 9, seed=1, progress=False)
    assert three.results == one.results
    assert all(t.policy == "OraclePolicy" for t in three.trajectories)
    with pytest.raises(ValueError, match="one per env"):
        collect([_env(), _env()], OraclePolicy(suite), 2, progress=False)
    with pytest.raises(TypeError, match="neither an LM policy nor a text policy"):
        collect([_env()], object(), 1, progress=False)


class Spy:
    """A text policy that records what it is shown, and acts as the oracle."""

    def __init__(self, suite):
        self.inner = OraclePolicy(suite)
        self.seen = []
        self.resets = 0

    def reset(self):
        self.resets += 1
        self.inner.reset()

    def act(self, obs, info):
        self.seen.append((obs, info["turn"], len(info["messages"])))
        return self.inner.act(obs, info)


def test_play_episode_and_evaluate_go_through_the_driver(monkeypatch):
    calls = []

    def spying_collect(*args, **kwargs):
        calls.append(kwargs)
        return loop.collect(*args, **kwargs)

    monkeypatch.setattr(scripted, "collect", spying_collect)
    monkeypatch.setattr(evaluate_module, "collect", spying_collect)
    env = _env()
    suite = env.unwrapped.suite
    task = env.unwrapped.pool.episode_order(1, 0)[0]

    by_hand = Spy(suite)
    by_hand.reset()
    obs, info = env.reset(options={"task_id": task.id})
    done = False
    while not done:
        obs, _, terminated, truncated, last = env.step(by_hand.act(obs, info))
        info, done = last, terminated or truncated

    played, evaluated = Spy(suite), Spy(suite)
    info = play_episode(env, played, task.id)
    report = evaluate(env, evaluated, 1, seed=0, progress=False)
    assert len(calls) == 2 and calls[0]["seed"] is None  # play_episode does not reseed the env
    assert played.seen == evaluated.seen == by_hand.seen and played.resets == evaluated.resets == 1
    assert info["messages"] == last["messages"] == report.results[0].messages and info["success"] is True
    assert info["tools"] == last["tools"]
    # the reference state hash is computed once per task (verifier calls), by the first episode of it
    assert info["call_counts"] == {**last["call_counts"], "verifier": info["call_counts"]["verifier"]}


class BatchOnly:
    """An env role that can batch; records batch sizes."""

    def __init__(self):
        self.batches = []
        self.lock = threading.Lock()

    def imagine_batch(self, requests):
        with self.lock:
            self.batches.append(len(requests))
        return ['<execution_result>\n{"balance": 1}\n</execution_result>' for _ in requests]

    def imagine(self, request):
        return self.imagine_batch([request])[0]


def test_scripted_actors_share_a_batched_env_role_through_outer_wrappers():
    role = BatchOnly()
    action = format_calls([ToolCall("get_balance", {"account_id": "A-1"})])

    class Caller(NoopPolicy):
        def act(self, obs, info):
            return action

    inner = [SelfRehearsalEnv(_env(suite="builtin/bank", max_turns=3), role) for _ in range(3)]
    envs = [gym.wrappers.RecordEpisodeStatistics(e) for e in inner]
    trajs = collect(envs, [Caller() for _ in envs], 3, progress=False)
    assert role.batches == [3, 3, 3]  # one batch per step across the three envs
    assert all(t.truncated and len(t.env_role_samples) == 3 and t.calls_ok == 3 for t in trajs)
    assert all(isinstance(s, EnvRoleSample) for t in trajs for s in t.env_role_samples)
    # The batcher was set on the wrapper that has an imaginer, and given back; nothing was added on top.
    assert all(e.imaginer is role for e in inner) and not any("imaginer" in vars(e) for e in envs)


def test_trajectory_holds_its_episode_and_round_trips(tmp_path):
    env = _env()
    (traj,) = collect([env], OraclePolicy(env.unwrapped.suite), 1, progress=False)
    assert isinstance(traj.episode, EpisodeResult)
    assert (traj.task_id, traj.reward, traj.success, traj.calls_ok) == (
        traj.episode.task_id,
        traj.episode.reward,
        traj.episode.success,
        traj.episode.calls_ok,
    )
    sample = EnvRoleSample([1, 2], [3], [-0.5], mode="inline", tool="t", prompt_text="ab", completion_text="c")
    rich = Trajectory(traj.episode, [1, 2, 3], ["prompt", "external", "env_role"], [0.0, 0.0, -0.5], [sample], "x")
    path = save_trajectories([traj, rich], tmp_path / "t.jsonl")
    line = json.loads(path.read_text().splitlines()[1])
    assert set(line) == {"episode", "policy", "token_ids", "roles", "logprobs", "env_role_samples"}
    assert load_trajectories(path) == [traj, rich]

    # A record without its episode is refused with the format it should have.
    flat = {**line.pop("episode"), **line}
    (tmp_path / "flat.jsonl").write_text(json.dumps(flat) + "\n")
    with pytest.raises(ValueError, match="'episode'"):
        load_trajectories(tmp_path / "flat.jsonl")

    bad = dict(json.loads(path.read_text().splitlines()[1]), roles=["prompt", "actor", "nobody"])
    (tmp_path / "bad.jsonl").write_text("\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*unknown roles \['nobody'\]"):
        load_trajectories(tmp_path / "bad.jsonl")
    (tmp_path / "short.jsonl").write_text(json.dumps({**bad, "roles": ["prompt"]}) + "\n")
    with pytest.raises(ValueError, match="short.jsonl:1: .*differ in length"):
        load_trajectories(tmp_path / "short.jsonl")


def test_the_env_roles_sampling_stream_belongs_to_the_rollout():
    """Two collect() calls with the same seeds draw the same env-role answers, whatever drew from the
    policy's own stream between them: the rollout seeds its env role's stream itself."""
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy
    from envace_gym.imagination import ImagineRequest

    policy = tiny_policy(seed=0, sampling=SamplingConfig(1.0, 1.0, 12, 0))
    sampling = SamplingConfig(1.0, 1.0, 12, seed=7)
    call = format_calls([ToolCall("get_balance", {"account_id": "A-1"})])

    class Calling:  # a text actor that always calls, so every step asks the env role (the tiny LM)
        def reset(self):
            pass

        def act(self, obs, info):
            return call

    def env_role_texts():
        envs = [SelfRehearsalEnv(_env(suite="builtin/bank", max_turns=2), policy) for _ in range(2)]
        actors = [Calling(), Calling()]
        trajs = collect(envs, actors, 2, env_role_sampling=sampling, task_ids=["bank-train-0001"], progress=False)
        return [s.completion_ids for t in trajs for s in t.env_role_samples]

    first = env_role_texts()
    policy.imagine_batch([ImagineRequest([{"role": "user", "content": "x"}])] * 3)  # the policy's own stream moves
    assert first and env_role_texts() == first
