"""A simulated user played by a model is a typed request the rollout loop answers: no model is called inside
``env.step``, and the user turns of N envs (episodes, and private rehearsals) take one engine call per round."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import pytest

from envace_gym import ToolCall, format_calls
from envace_gym.agents.rollout import collect
from envace_gym.env import ToolCallEnv
from envace_gym.envs.tau2.env import Tau2Env
from envace_gym.envs.tau2.users import LMUser
from envace_gym.imagination import ImaginedUser, UserRequest, user_of
from envace_gym.imagination.halfstep import begin_step

TASK = "mock-update_task_1"


class _Stepping:
    """Marks when an env's step (whole or a half) is running, so a model can refuse to be called then."""

    depth = 0

    @classmethod
    def guard(cls, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("step", "begin_step", "continue_step"):
            original = getattr(ToolCallEnv, name)

            def guarded(self, *args, _original=original, **kwargs):
                cls.depth += 1
                try:
                    return _original(self, *args, **kwargs)
                finally:
                    cls.depth -= 1

            monkeypatch.setattr(ToolCallEnv, name, guarded)


class UserModel:
    """A model that plays the user: ``act_batch`` counted, each batch's size kept. It asks ``patience``
    times whether it may go on, then stops. It raises if called while an env is stepping."""

    def __init__(self, patience: int = 1) -> None:
        self.patience, self.batches, self.single = patience, [], 0

    def _reply(self, messages) -> SimpleNamespace:
        asked = sum(1 for m in messages if m["role"] == "assistant" and "Shall I" in m["content"])
        if not any(m["role"] == "assistant" for m in messages):
            text = "Please mark task_1 completed."  # the opening
        elif asked < self.patience:
            text = "Shall I tell you more?"
        else:
            text = "Thanks, that is all. ###STOP###"
        return SimpleNamespace(text=text, token_ids=[1, 2])

    def act(self, messages, tools=()):
        self.single += 1
        return self._reply(messages)

    def act_batch(self, conversations, sampling=None):
        if _Stepping.depth:
            raise AssertionError("the user model was called inside env.step")
        self.batches.append(len(conversations))
        return [self._reply(messages) for messages, _ in conversations]


class Asking:
    """A text policy that always answers in words (each answer goes to the user)."""

    def reset(self) -> None:
        pass

    def act(self, obs, info) -> str:
        return "Could you tell me more?"


def test_tau2_user_turns_of_n_envs_take_one_engine_call_per_round(monkeypatch):
    _Stepping.guard(monkeypatch)
    model = UserModel(patience=1)
    envs = [gym.make("EnvACE-Tau2-v0", domain="mock", split=None, user=model) for _ in range(3)]
    assert all(isinstance(user_of(env), LMUser) for env in envs)
    trajs = collect(envs, [Asking() for _ in envs], 3, task_ids=[TASK] * 3, progress=False)
    assert model.single == 3  # the openings, one per reset (outside any step)
    assert model.batches == [3, 3]  # round 1: "Shall I...", round 2: stop; every env in one call each
    assert [env.unwrapped.log.termination for env in envs] == ["user_stop"] * 3
    assert [t.turns for t in trajs] == [2, 2, 2] and not any(t.truncated for t in trajs)
    assert all("###STOP###" in t.messages[-1]["content"] for t in trajs)


def test_a_whole_step_asks_the_envs_own_user_with_the_same_outcome():
    model = UserModel(patience=1)
    env = Tau2Env(domain="mock", split=None, user=model)
    env.reset(options={"task_id": TASK})
    obs, _, terminated, _, _ = env.step("Could you tell me more?")
    assert obs == "Shall I tell you more?" and not terminated and model.batches == []
    _, _, terminated, _, info = env.step("Could you tell me more?")
    assert terminated and info["tau2"]["termination"] == "user_stop" and model.single == 3


def test_a_half_step_yields_the_user_turn_as_a_request_and_none_lets_the_env_answer():
    model = UserModel(patience=1)
    env = Tau2Env(domain="mock", split=None, user=model)
    env.reset(options={"task_id": TASK})
    pending = begin_step(env, "Could you tell me more?")
    (request,) = pending.requests
    assert isinstance(request, UserRequest) and request.messages[-1] == {
        "role": "user",
        "content": "Could you tell me more?",
    }  # the user's side: the agent's words come in as "user"
    with pytest.raises(ValueError, match="wait for answers"):
        env.step("Could you tell me more?")
    assert env.continue_step([None]).requests == []  # None: the env's own user answered
    obs, _, terminated, _, _ = env.step("Could you tell me more?")
    assert obs == "Shall I tell you more?" and not terminated


def test_a_user_that_raises_in_the_loop_ends_the_episode_as_a_user_error():
    class Broken(UserModel):
        def act_batch(self, conversations, sampling=None):
            raise RuntimeError("the user model broke")

    env = gym.make("EnvACE-Tau2-v0", domain="mock", split=None, user=Broken())
    (traj,) = collect([env], Asking(), 1, task_ids=[TASK], progress=False)
    assert env.unwrapped.log.termination == "user_error" and traj.reward == 0.0
    assert "the user model broke" in env.unwrapped._result_info["user_error"]


class _Updating:
    """Marks task_1 completed, then says so (each rehearsal acts through a fresh copy)."""

    def reset(self) -> None:
        self.called = False

    def act(self, obs, info) -> str:
        if not self.called:
            self.called = True
            return format_calls([ToolCall("update_task_status", {"task_id": "task_1", "status": "completed"})])
        return "Task task_1 is now marked completed."


class _World:
    def imagine(self, request):
        return '<execution_result>\n{"task_id": "task_1", "status": "completed"}\n</execution_result>'


def test_parallel_rehearsals_batch_their_imagined_users(monkeypatch):
    from envace_gym.agents.rehearsal import PrivateRehearsal

    _Stepping.guard(monkeypatch)
    model = UserModel(patience=0)
    env = Tau2Env(domain="mock", split=None)
    _, info = env.reset(options={"task_id": TASK})
    agent = PrivateRehearsal(_Updating(), budget=3, mode="parallel", imaginer=_World(), user=model)
    (note,) = agent.prepare_turns([env], [info])
    assert note.stats["rehearsals"] == 3
    assert model.batches == [3] and model.single == 0  # the three rehearsals' user turns: one engine call
    assert note.stats["user_tokens"] == 6  # 2 tokens per imagined user turn, counted through the batch


def test_model_users_read_their_generation():
    imagined = ImaginedUser(UserModel())
    gen = SimpleNamespace(text='Fine. <tool_call>{"name": "x", "arguments": {}}</tool_call>', token_ids=[1, 2, 3])
    assert imagined.read(gen) == "Fine." and imagined.tokens == 3  # words only: its calls are dropped
    assert imagined.conversation(UserRequest([{"role": "user", "content": "hi"}], [{"name": "t"}]))[1] == []
    assert LMUser(UserModel()).conversation(UserRequest([], [{"name": "t"}]))[1] == [{"name": "t"}]
