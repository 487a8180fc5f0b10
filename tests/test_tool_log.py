"""Grounding the env role on a recorded tool log (issue 19): targets and fidelity only where the log has the
call, the fidelity score itself, env_role_reward touching env-role rows only, and no log with a task outside
the train split."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.agents.train.objective import build_samples
from envace_gym.backends import ReplayBackend, ReplayFileError, ToolLog
from envace_gym.imagination import RealResultImaginer, SelfRehearsalEnv, format_execution_result
from envace_gym.imagination.fidelity import result_fidelity
from envace_gym.imagination.prompt import is_result_shaped


class _ZeroBalance(RealResultImaginer):
    """Well-formed answers that are wrong wherever a balance appears (it becomes 0)."""

    def imagine(self, request):
        real = json.loads(super().imagine(request).text.split("\n")[1])
        if isinstance(real, dict) and "balance" in real:
            real["balance"] = 0.0
        return SimpleNamespace(text=format_execution_result(real))


def _bank():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    pool = list(env.unwrapped.pool)
    one = next(t for t in pool if [c.name for c in t.reference_calls] == ["get_balance"])
    other = next(t for t in pool if t.id != one.id and [c.name for c in t.reference_calls] == ["get_balance"])
    return env, one, other


def _play(env, task, imaginer, log, targets=True):
    wrapped = SelfRehearsalEnv(env, imaginer, log=log, log_targets=targets)
    (traj,) = collect([wrapped], OraclePolicy(env.unwrapped.suite), 1, task_ids=[task.id], progress=False)
    return traj


def test_a_logged_call_gets_its_target_and_fidelity_and_a_call_outside_the_log_gets_neither(tmp_path):
    env, logged, unlogged = _bank()
    log = ToolLog.from_reference([logged], tmp_path / "log.jsonl")
    assert len(log) == 1 and ToolLog.load(tmp_path / "log.jsonl").entries == log.entries  # it round-trips
    traj = _play(env, logged, _ZeroBalance(env), log)
    (sample,) = traj.env_role_samples
    assert sample.target == format_execution_result(logged.reference_calls[0].result)
    assert sample.exact is False and 0.0 < sample.fidelity < 1.0  # right keys, one wrong value
    tool_message = next(m for m in traj.messages if m["role"] == "tool")
    assert json.loads(tool_message["content"])["balance"] == 0.0  # the actor still saw the imagined result
    (outside,) = _play(env, unlogged, _ZeroBalance(env), log).env_role_samples
    assert (outside.target, outside.exact, outside.fidelity) == (None, None, None)
    (no_target,) = _play(env, logged, _ZeroBalance(env), log, targets=False).env_role_samples
    assert no_target.target is None and no_target.fidelity == sample.fidelity
    (perfect,) = _play(env, logged, RealResultImaginer(env), log).env_role_samples
    assert perfect.exact is True and perfect.fidelity == 1.0


def test_result_fidelity_on_hand_made_pairs():
    real = {"account_id": "A-1", "balance": 10.0, "currency": "EUR"}
    assert result_fidelity(dict(reversed(list(real.items()))), real) == (True, 1.0)  # key order is not content
    exact, score = result_fidelity({"account_id": "A-1", "balance": 0.0, "currency": "EUR"}, real)
    assert not exact and score == pytest.approx(2 / 3)
    assert result_fidelity(None, real) == (False, 0.0)  # an unusable answer
    assert result_fidelity([{"a": 1}], [{"a": 1}, {"a": 2}])[1] == pytest.approx(2 / 3)
    assert result_fidelity({"x": 1}, real) == (False, 0.0)


def _traj(reward_env_rows):
    row = dict(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5], valid=True, tool="t", target=None)
    samples = [SimpleNamespace(**row, fidelity=f) for f in reward_env_rows]
    return SimpleNamespace(
        actor_mask=lambda: [0, 1, 1],
        token_ids=[5, 6, 7],
        logprobs=[0.0, -1.0, -1.0],
        calls_failed=0,
        task_id="t",
        success=True,
        env_role_samples=samples,
    )


def test_env_role_reward_fidelity_changes_only_env_role_rows():
    trajs, groups, rewards = [_traj([0.25, None])], ["g"], [1.0]
    task = build_samples(trajs, groups, rewards)
    fid = build_samples(trajs, groups, rewards, env_role_reward="fidelity")
    mix = build_samples(trajs, groups, rewards, env_role_reward="mix")
    by_role = lambda rows, role: [(r.group, r.reward) for r in rows if r.role == role]  # noqa: E731
    assert by_role(task, "actor") == by_role(fid, "actor") == by_role(mix, "actor") == [("g/actor", 1.0)]
    assert by_role(task, "env_role") == [("g/env_role", 1.0), ("g/env_role", 1.0)]
    # the scored row is rewarded by its fidelity in a group of its own; the unscored one keeps the task reward
    assert by_role(fid, "env_role") == [("g/env_role_fidelity", 0.25), ("g/env_role", 1.0)]
    assert by_role(mix, "env_role") == [("g/env_role", 0.625), ("g/env_role", 1.0)]
    with pytest.raises(ValueError, match="env_role_reward"):
        build_samples(trajs, groups, rewards, env_role_reward="judge")


@pytest.mark.parametrize("split", ["val", "test-id", "test"])
def test_a_log_with_a_task_of_another_split_than_train_is_refused(tmp_path, split):
    from envace_gym.agents.lm.policy import tiny_policy
    from envace_gym.agents.train.config import EnvACEConfig
    from envace_gym.agents.train.envace import EnvACETrainer

    suite = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank").unwrapped.suite
    held_out = next(t for t in suite if t.split == split and t.reference_calls)
    train_task = next(t for t in suite if t.split == "train" and t.reference_calls)
    path = tmp_path / "leak.jsonl"
    ToolLog.from_reference([train_task, held_out], path)
    make = lambda: gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")  # noqa: E731
    cfg = EnvACEConfig(backend="self", tool_log=str(path), steps=1, tasks_per_step=1, group_size=1)
    with pytest.raises(ValueError, match=re.escape(f"1 task(s) of the {split} split (e.g. '{held_out.id}')")):
        EnvACETrainer(tiny_policy(seed=0), make, cfg, progress=False)
    ToolLog.from_reference([train_task], path)  # a train-only log is taken
    assert EnvACETrainer(tiny_policy(seed=0), make, cfg, progress=False).tool_log.task_ids == {train_task.id}
    with pytest.raises(ValueError, match="--tool-log"):
        EnvACEConfig(backend="real", tool_log="reference")
    with pytest.raises(ValueError, match="--env-role-reward"):
        EnvACEConfig(backend="self", env_role_reward="fidelity")
    with pytest.raises(ReplayFileError, match="no such tool log"):
        ToolLog.load(tmp_path / "missing.jsonl")


def test_replay_backend_still_reads_the_log_format(tmp_path):
    env, task, _ = _bank()
    ToolLog.from_reference([task], tmp_path / "log.jsonl")
    replay = gym.make(
        "EnvACE-ToolCall-v0", suite="builtin/bank", split="train", backend=f"replay:{tmp_path / 'log.jsonl'}"
    )
    (traj,) = collect([replay], OraclePolicy(env.unwrapped.suite), 1, task_ids=[task.id], progress=False)
    assert traj.success
    assert isinstance(replay.unwrapped.backend, ReplayBackend) and replay.unwrapped.backend.hits == 1


def test_result_shaped_actor_messages():
    assert is_result_shaped({"role": "assistant", "content": '<success>{"order_id": "W1"}'})
    assert is_result_shaped({"role": "assistant", "content": "<execution_result>\n{}\n</execution_result>"})
    assert not is_result_shaped({"role": "assistant", "content": "Your balance is 10 EUR."})
    assert not is_result_shaped({"role": "assistant", "content": "{...}", "tool_calls": [{"id": "c"}]})
    assert not is_result_shaped({"role": "tool", "content": "{}"})
