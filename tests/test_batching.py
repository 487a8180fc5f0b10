"""The env role is batched across envs that step at the same time."""

import json
import threading
from types import SimpleNamespace

import gymnasium as gym
from forced import ForcedTokens

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import collect


class RecordingBatcher:
    """An env role that can batch: answers every call with a fixed result and records batch sizes."""

    def __init__(self, fail_on=None):
        self.batches = []
        self.singles = 0
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def imagine_batch(self, requests):
        with self.lock:
            self.batches.append(len(requests))
        if self.fail_on is not None and len(self.batches) == self.fail_on:
            raise RuntimeError("env role crashed")
        return [
            SimpleNamespace(
                text=f'<execution_result>\n{{"tool": "{r.tool}"}}\n</execution_result>',
                token_ids=[1],
                logprobs=[-0.1],
                prompt_ids=[2],
            )
            for r in requests
        ]

    def imagine(self, request):
        self.singles += 1
        return self.imagine_batch([request])[0]


def test_collect_sends_the_env_role_of_all_envs_as_one_batch(monkeypatch):
    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=64, seed=0))
    action = format_calls([ToolCall("get_balance", {"account_id": "A-1"})])
    turns = 3
    forced = ForcedTokens(policy, [action] * 4 * turns)
    monkeypatch.setattr(engine_module, "_sample", forced.sample)
    role = RecordingBatcher()
    envs = [
        SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=turns), role)
        for _ in range(4)
    ]
    trajs = collect(envs, policy, 4, progress=False)
    assert role.batches == [4] * turns and role.singles == 0  # one batch per step, none one by one
    assert all(len(t.env_role_samples) == turns and t.truncated for t in trajs)
    assert all(env.imaginer is role for env in envs)  # the batcher was only borrowed
    tool_msgs = [m for m in trajs[0].messages if m["role"] == "tool"]
    assert json.loads(tool_msgs[0]["content"]) == {"tool": "get_balance"}


def test_fidelity_batched_equals_one_by_one_for_a_greedy_model():
    from envace_gym.agents.eval.fidelity import fidelity_report

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=12, seed=0))

    def factory():
        return gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")

    sizes = []
    original = policy.imagine_batch

    def recording(requests, sampling=None):
        sizes.append(len(requests))
        return original(requests, sampling)

    policy.imagine_batch = recording
    reports = []
    for batch_size in (1, 4):
        sizes.clear()
        reports.append(
            fidelity_report(
                factory,
                {"self": policy, "inline": (policy, "inline")},
                episodes=4,
                progress=False,
                batch_size=batch_size,
            )
        )
        assert max(sizes) == batch_size
    assert reports[0] == reports[1] and reports[0]["backends"]["self"]["calls"] >= 4
