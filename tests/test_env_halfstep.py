"""The step as two halves: ``begin_step`` (through the action wrappers) returns the imagined calls as
requests, ``continue_step`` takes their answers, ``env.step(action)`` with the same action ends the step
through every wrapper; and the rollout loop answers all envs' requests, in this process or in worker
processes, in one call per round."""

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TransformReward

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import collect
from envace_gym.env import PendingStep
from envace_gym.imagination.halfstep import begin_step, half_step_route
from envace_gym.vector import ToolCallVectorEnv
from envace_gym.wrappers import CandidateActions, FeatureObservation

BANK = {"suite": "builtin/bank", "split": "test"}
TASK = "bank-test-0008"  # "Could you check what account A-5247 currently holds?"
TWO_CALLS = format_calls(
    [ToolCall("get_balance", {"account_id": "A-5247"}), ToolCall("get_balance", {"account_id": "A-1"})]
)
ONE_CALL = format_calls([ToolCall("get_balance", {"account_id": "A-5247"})])


class Echo:
    """An env role that answers with the call's arguments and records what it was asked."""

    def __init__(self):
        self.asked = []

    def imagine(self, request):
        self.asked.append(request)
        return f"<execution_result>\n{json.dumps(request.arguments)}\n</execution_result>"


def _env(role, **kwargs):
    env = SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", **BANK, **kwargs), role)
    env.reset(seed=0, options={"task_id": TASK})
    return env


def test_a_half_step_asks_one_call_at_a_time_and_ends_as_step_does():
    whole_role, half_role = Echo(), Echo()
    whole = _env(whole_role).step(TWO_CALLS)

    env = _env(half_role)
    answerer = Echo()
    pending = begin_step(env, TWO_CALLS)
    assert isinstance(pending, PendingStep) and [r.arguments for r in pending.requests] == [{"account_id": "A-5247"}]
    pending = env.unwrapped.continue_step([answerer.imagine(pending.requests[0])])
    # The second call is asked with the first one's result in view.
    assert [r.arguments for r in pending.requests] == [{"account_id": "A-1"}]
    pending = env.unwrapped.continue_step([answerer.imagine(pending.requests[0])])
    assert pending.requests == []
    half = env.step(TWO_CALLS)

    assert half_role.asked == []  # the env's own role was never called: the caller answered
    assert [r.messages for r in answerer.asked] == [r.messages for r in whole_role.asked]  # asked the same
    assert half[0] == whole[0] and half[1:4] == whole[1:4]
    assert half[4]["messages"] == whole[4]["messages"] and len(half[4]["env_role_samples"]) == 2


def test_ending_through_the_wrappers_applies_their_change_and_refuses_a_wrong_end():
    env = TransformReward(_env(Echo(), max_turns=1), lambda r: r + 10.0)
    begin_step(env, ONE_CALL)
    with pytest.raises(ValueError, match="continue_step"):
        env.step(ONE_CALL)  # its request is not answered yet
    env.unwrapped.continue_step(['<execution_result>\n{"balance": 1}\n</execution_result>'])
    with pytest.raises(RuntimeError, match="in flight"):
        env.step("another action")  # a step ends with the action it began with
    with pytest.raises(TypeError, match="step\\(action\\)"):
        env.step(PendingStep(1, []))  # the old way to end a half-step is refused, not misread
    _, reward, _, truncated, _ = env.step(ONE_CALL)
    assert truncated and reward == 10.0  # the wrapper's change applies to the half-step's end


def test_an_env_role_that_raises_is_that_calls_error():
    env = _env(Echo())
    assert begin_step(env, ONE_CALL).requests
    env.unwrapped.continue_step([RuntimeError("engine down")])
    _, reward, terminated, _, info = env.step(ONE_CALL)
    assert terminated and reward == 0.0 and "env role raised RuntimeError: engine down" in info["aborted"]


def test_an_action_wrapper_maps_on_the_way_in_and_a_hidden_mapping_is_refused():
    role = Echo()
    env = gym.wrappers.TransformAction(_env(role), lambda a: ONE_CALL if a == "balance" else a, gym.spaces.Text(10))
    pending = begin_step(env, "balance")
    assert [r.arguments for r in pending.requests] == [{"account_id": "A-5247"}]  # began with the mapped text
    env.unwrapped.continue_step([Echo().imagine(pending.requests[0])])
    _, _, _, _, info = env.step("balance")  # the wrapper maps it again: the text the step began with
    assert info["messages"][-2]["content"] == ONE_CALL and role.asked == []

    class Hidden(gym.Wrapper):  # maps inside step(): a half-step could not see it
        def __init__(self, env):
            super().__init__(env)
            self.action_space = gym.spaces.Discrete(2)

    with pytest.raises(TypeError, match="gym.ActionWrapper"):
        half_step_route(Hidden(_env(Echo())))


class _Picks:
    """A text policy that picks candidate slots in a fixed order (the SB3 example's action space)."""

    def __init__(self, picks):
        self.picks, self.i = picks, 0

    def reset(self):
        self.i = 0

    def act(self, observation, info):
        self.i += 1
        return self.picks[self.i - 1]


def _sb3_stack(role):
    """The SB3 example's stack: ToolCallEnv -> SelfRehearsalEnv -> CandidateActions -> FeatureObservation."""
    inner = SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", **BANK, max_turns=3), role)
    return FeatureObservation(CandidateActions(inner, k=16), dim=32)


PICKS = [8, 10, 0]  # get_balance, then a slot that is a call in the first state, then an answer


def _plain_steps(env):
    obs, _ = env.reset(seed=0, options={"task_id": TASK})
    seen = [obs]
    for pick in PICKS:
        obs, reward, terminated, truncated, info = env.step(pick)
        seen.append(obs)
        if terminated or truncated:
            break
    return seen, reward, info["messages"]


def test_the_sb3_stack_steps_the_same_under_collect_the_vector_env_and_a_plain_step():
    plain_role = Echo()
    seen, reward, messages = _plain_steps(_sb3_stack(plain_role))
    assert plain_role.asked  # the picks make imagined calls: the half-step path is exercised below

    ends = []
    role = Echo()
    trajs = collect(
        [_sb3_stack(role)],
        _Picks(PICKS),
        1,
        task_ids=[TASK],
        progress=False,
        on_episode=lambda t, info: ends.append(info),
    )
    assert role.asked and [r.messages for r in role.asked] == [r.messages for r in plain_role.asked]
    assert trajs[0].episode.reward == reward and ends[0]["messages"] == messages

    vec_role = Echo()
    vec = ToolCallVectorEnv([lambda: _sb3_stack(vec_role)] * 2)
    obs, _ = vec.reset(seed=[0, 0], options={"task_id": [TASK, TASK]})
    vec_seen = [obs]
    for pick in PICKS[: len(seen) - 1]:
        obs, rewards, _, _, infos = vec.step(np.array([pick, pick]))
        vec_seen.append(obs)
    assert all(np.array_equal(v[0], s) and np.array_equal(v[1], s) for v, s in zip(vec_seen, seen, strict=True))
    assert rewards.tolist() == [reward, reward] and len(vec_role.asked) == 2 * len(plain_role.asked)


def _one_call_then_answer(policy, stop):
    """The actor calls get_balance once per turn; the env role answers a balance (both scripted)."""
    call = policy.chat.encode(format_calls([ToolCall("get_balance", {"account_id": "A-5247"})]))
    result = policy.chat.encode('<execution_result>\n{"balance": 1.0}\n</execution_result>')

    def rows(prompts):
        texts = [policy.tokenizer.decode(list(p)) for p in prompts]
        return [(result if "<execution_result>" in t else call) + [stop] for t in texts]

    return rows


def test_collect_over_a_process_vector_env_answers_all_workers_env_role_in_one_engine_call(monkeypatch):
    import torch

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=40, seed=0))
    stop = policy.engine.stop_token_ids[0]
    script = _one_call_then_answer(policy, stop)
    calls = []  # per engine call: (batch size, env role?)
    state = {"rows": []}
    original = policy.engine._generate

    def generate(prompts, sampling, keys, generator, prefix_lens):
        state["rows"] = script(prompts)
        calls.append((len(prompts), "<execution_result>" in policy.tokenizer.decode(list(prompts[0]))))
        return original(prompts, sampling, keys, generator, prefix_lens)

    def sample(logits, cfg, generator):
        logp = torch.log_softmax(logits.float(), dim=-1)
        tokens = torch.tensor([row.pop(0) if row else stop for row in state["rows"]])
        return tokens, logp.gather(1, tokens[:, None]).squeeze(1)

    policy.engine._generate = generate
    monkeypatch.setattr(engine_module, "_sample", sample)
    vec = gym.make_vec(
        "EnvACE-ToolCall-v0", num_envs=3, asynchronous=True, backend="self", imaginer=policy, max_turns=2, **BANK
    )
    try:
        trajs = collect(vec, policy, 3, task_ids=[TASK], progress=False)
    finally:
        vec.close()
    # Two steps, each: one actor call and one env-role call for all three workers (not one per worker).
    assert calls == [(3, False), (3, True), (3, False), (3, True)]
    assert all(len(t.env_role_samples) == 2 and all(s.valid for s in t.env_role_samples) for t in trajs)
    assert all(t.truncated for t in trajs)


class _SlowHalfStep(gym.Env):
    """An env whose half-step never returns in time when told to (a tool stuck in native code, say)."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def begin_step(self, action):
        if action == "hang":
            import time

            time.sleep(600)
        return PendingStep(1, [])


def test_a_worker_stuck_in_its_half_step_is_terminated_by_the_worker_timeout():
    from envace_gym.agents.rollout.remote import RemoteEnvs
    from envace_gym.vector import ToolCallAsyncVectorEnv, WorkerTimeoutError

    vec = ToolCallAsyncVectorEnv([_SlowHalfStep, _SlowHalfStep], worker_timeout=3)
    remote = RemoteEnvs(vec)
    assert remote.begin_steps([0, 1], ["ok", "ok"]) == [PendingStep(1, []), PendingStep(1, [])]
    processes = list(vec.processes)
    with pytest.raises(WorkerTimeoutError, match="worker 1 did not answer begin_step"):
        remote.begin_steps([0, 1], ["ok", "hang"])
    assert vec.closed
    for process in processes:
        process.join(10)
        assert not process.is_alive()


class _CountedHalfStep(_SlowHalfStep):
    """Counts its half-steps; ``"fail"`` raises inside the worker."""

    begun = 0

    def begin_step(self, action):
        if action == "fail":
            raise ValueError("no such step")
        self.begun += 1
        return super().begin_step(action)


@pytest.mark.timeout(120)
def test_each_workers_half_step_gets_its_own_action_and_failures_and_deaths_reach_the_parent():
    import os
    import signal

    from envace_gym.agents.rollout.remote import RemoteEnvs
    from envace_gym.vector import ToolCallAsyncVectorEnv, WorkerDiedError

    vec = ToolCallAsyncVectorEnv([_CountedHalfStep] * 3)
    remote = RemoteEnvs(vec)
    assert remote.begin_steps([2, 0], ["ok", "ok"]) == [PendingStep(1, []), PendingStep(1, [])]
    assert vec.get_attr("begun") == (1, 0, 1)  # worker 1 took no part
    with pytest.raises(ValueError, match="no such step"):  # a worker's exception, raised here as Gymnasium does
        remote.begin_steps([1], ["fail"])
    vec.close(terminate=True)

    vec = ToolCallAsyncVectorEnv([_CountedHalfStep] * 2)
    remote = RemoteEnvs(vec)
    pid = vec.processes[0].pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerDiedError, match=rf"worker 0 \(pid {pid}\) died"):
        remote.begin_steps([1], ["ok"])
    assert vec.closed
