"""The step as two halves (issue 20): ``begin_step`` returns the imagined calls as requests,
``continue_step`` takes their answers, ``env.step(pending)`` ends the step through every wrapper; and the
rollout loop answers all envs' requests, in this process or in worker processes, in one call per round."""

import json

import gymnasium as gym
import pytest
from gymnasium.wrappers import TransformReward

from envace_gym import SelfRehearsalEnv, ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import collect
from envace_gym.env import PendingStep
from envace_gym.rehearsal.halfstep import half_step_base

BANK = {"suite": "builtin/bank", "split": "test"}
TASK = "bank-test-0008"  # "Could you check what account A-5247 currently holds?"
TWO_CALLS = format_calls(
    [ToolCall("get_balance", {"account_id": "A-5247"}), ToolCall("get_balance", {"account_id": "A-1"})]
)


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
    base = half_step_base(env)
    answerer = Echo()
    pending = base.begin_step(TWO_CALLS)
    assert isinstance(pending, PendingStep) and [r.arguments for r in pending.requests] == [{"account_id": "A-5247"}]
    pending = base.continue_step([answerer.imagine(pending.requests[0])])
    # The second call is asked with the first one's result in view.
    assert [r.arguments for r in pending.requests] == [{"account_id": "A-1"}]
    pending = base.continue_step([answerer.imagine(pending.requests[0])])
    assert pending.requests == []
    half = env.step(pending)

    assert half_role.asked == []  # the env's own role was never called: the caller answered
    assert [r.messages for r in answerer.asked] == [r.messages for r in whole_role.asked]  # asked the same
    assert half[0] == whole[0] and half[1:4] == whole[1:4]
    assert half[4]["messages"] == whole[4]["messages"] and len(half[4]["rehearsal"]) == 2


def test_finishing_through_the_wrappers_applies_their_change_and_refuses_a_stale_pending():
    env = TransformReward(_env(Echo(), max_turns=1), lambda r: r + 10.0)
    base = half_step_base(env)
    pending = base.begin_step(format_calls([ToolCall("get_balance", {"account_id": "A-5247"})]))
    with pytest.raises(ValueError, match="continue_step"):
        env.step(pending)  # its request is not answered yet
    pending = base.continue_step(['<execution_result>\n{"balance": 1}\n</execution_result>'])
    _, reward, _, truncated, _ = env.step(pending)
    assert truncated and reward == 10.0  # the wrapper's change applies to the half-step's end
    with pytest.raises(RuntimeError):
        env.step(pending)  # already finished


def test_an_env_role_that_raises_is_that_calls_error():
    env = _env(Echo())
    base = half_step_base(env)
    assert base.begin_step(format_calls([ToolCall("get_balance", {"account_id": "A-5247"})])).requests
    _, reward, terminated, _, info = env.step(base.continue_step([RuntimeError("engine down")]))
    assert terminated and reward == 0.0 and "env role raised RuntimeError: engine down" in info["aborted"]


def test_a_wrapper_that_changes_actions_is_refused_for_half_steps():
    env = gym.wrappers.TransformAction(_env(Echo()), lambda a: a, gym.spaces.Text(10))
    with pytest.raises(TypeError, match="changes actions"):
        half_step_base(env)


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
