"""The env role is batched across envs that step at the same time."""

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import gymnasium as gym
from forced import ForcedTokens

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import collect
from envace_gym.rehearsal import ImagineRequest
from envace_gym.rehearsal.batching import BatchingImaginer, step_concurrently


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


def test_batching_imaginer_answers_each_request_and_batches_concurrent_ones():
    policy = RecordingBatcher()
    n, calls_each = 6, 5
    batcher = BatchingImaginer(policy, n)
    rng = random.Random(0)
    plans = [[rng.random() * 0.01 for _ in range(rng.randint(0, calls_each))] for _ in range(n)]
    answers = [[] for _ in range(n)]

    def step(i):
        for j, pause in enumerate(plans[i]):
            time.sleep(pause)
            answers[i].append(batcher.imagine(ImagineRequest([], tool=f"t{i}-{j}")).text)
        return i

    with ThreadPoolExecutor(n) as pool:
        done = step_concurrently(pool, [(lambda i=i: step(i), batcher) for i in range(n)])
    assert done == list(range(n))
    for i in range(n):
        assert answers[i] == [
            f'<execution_result>\n{{"tool": "t{i}-{j}"}}\n</execution_result>' for j in range(len(plans[i]))
        ]
    assert sum(policy.batches) == sum(len(p) for p in plans) and max(policy.batches) > 1
    assert batcher.running == 0


def test_a_crash_in_a_batch_reaches_every_waiting_request():
    policy = RecordingBatcher(fail_on=1)
    batcher = BatchingImaginer(policy, 3)
    errors = []

    def step():
        try:
            batcher.imagine(ImagineRequest([], tool="x"))
        except RuntimeError as exc:
            errors.append(str(exc))

    with ThreadPoolExecutor(3) as pool:
        step_concurrently(pool, [(step, batcher) for _ in range(3)])
    assert errors == ["env role crashed"] * 3 and policy.batches == [3]


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
