"""A simulated user or a judge played by a model is a typed request the rollout loop answers: no model is called
inside ``env.step``, and the user turns of N envs (episodes, and private rehearsals) and their judges' verdicts
take one engine call per round."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import pytest

from envace_gym import ToolCall, format_calls
from envace_gym.agents.rollout import collect
from envace_gym.env import ToolCallEnv
from envace_gym.envs.tau2.env import Tau2Env
from envace_gym.envs.tau2.users import LMUser
from envace_gym.imagination import JudgeRequest, UserRequest, roles_of, user_of
from envace_gym.imagination.halfstep import begin_step
from envace_gym.rehearsal import ImaginedUser

TASK = "mock-update_task_1"


class _Stepping:
    """Marks when an env's step (whole or a half) is running, so a model can refuse to be called then."""

    depth = 0

    @classmethod
    def guard(cls, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("reset", "begin_reset", "step", "begin_step", "continue_step"):
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

    def act_batch(self, conversations, sampling=None, generator=None):
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
    # the openings: a request of each env's reset, answered by the loop (never inside reset); then round 1,
    # "Shall I...", and round 2, stop: every env in one call each
    assert model.single == 0 and model.batches == [1, 1, 1, 3, 3]
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
        def act_batch(self, conversations, sampling=None, generator=None):
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


class JudgeModel:
    """A model that judges: YES to every statement. Counts its batches and raises if called inside a step."""

    def __init__(self) -> None:
        self.batches, self.single = [], 0

    def act(self, messages, tools=()):
        self.single += 1
        return SimpleNamespace(text="YES")

    def act_batch(self, conversations, sampling=None, generator=None):
        if _Stepping.depth:
            raise AssertionError("the judge model was called inside env.step")
        self.batches.append(len(conversations))
        return [SimpleNamespace(text="YES") for _ in conversations]


JUDGED = "mock-create_task_1"  # a task with natural-language assertions (reported, not in its reward basis)


def test_judge_verdicts_of_n_envs_are_requests_answered_in_one_engine_call_per_round(monkeypatch):
    from envace_gym.agents.scripted import OraclePolicy

    _Stepping.guard(monkeypatch)
    judge = JudgeModel()
    envs = [gym.make("EnvACE-Tau2-v0", domain="mock", split=None, judge=judge) for _ in range(3)]
    assert all(set(roles_of(env)) == {"judge"} for env in envs)  # the scripted user is no model role
    oracles = [OraclePolicy(env.unwrapped.suite) for env in envs]
    trajs = collect(envs, oracles, 3, task_ids=[JUDGED] * 3, progress=False)
    n = len(envs[0].unwrapped._verdicts)
    assert n >= 1 and judge.single == 0
    assert judge.batches == [3] * n  # one round per assertion, every env's verdict in one call
    assert all(env.unwrapped.tau2_score().checks["nl_assertions"] == [True] * n for env in envs)
    assert all(t.reward == 1.0 for t in trajs)


def _oracle_episode(env: Tau2Env, answer=None) -> tuple[dict, list]:
    """The oracle's episode of `JUDGED` by plain steps; with ``answer``, in halves, each request answered by
    ``answer(request)``. Returns the last info and the requests asked."""
    from envace_gym.agents.scripted import OraclePolicy

    policy, asked = OraclePolicy(env.suite), []
    obs, info = env.reset(options={"task_id": JUDGED})
    policy.reset()
    while True:
        action = policy.act(obs, info)
        if answer is not None:
            pending = begin_step(env, action)
            while pending.requests:
                asked.extend(pending.requests)
                pending = env.continue_step([answer(pending.requests[0])])
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info, asked


def test_a_whole_step_asks_the_envs_own_judge_and_a_half_step_yields_its_requests():
    whole = JudgeModel()
    info, _ = _oracle_episode(Tau2Env(domain="mock", split=None, judge=whole))
    n = len(info["tau2"]["nl_assertions"])
    assert n >= 1 and whole.single == n and info["tau2"]["nl_assertions"] == [True] * n

    halves = JudgeModel()
    env = Tau2Env(domain="mock", split=None, judge=halves)
    info, asked = _oracle_episode(env, lambda request: "NO" if isinstance(request, JudgeRequest) else None)
    judged = [r for r in asked if isinstance(r, JudgeRequest)]
    assert len(judged) == n and "Statement:" in judged[0].messages[-1]["content"] and halves.single == 0
    assert info["tau2"]["nl_assertions"] == [False] * n  # the answers handed over, not the env's own judge
    info, _ = _oracle_episode(env, lambda request: None)  # None: the env's own judge answers
    assert info["tau2"]["nl_assertions"] == [True] * n and halves.single == n


def test_a_judge_that_raises_in_the_loop_rules_no_and_says_why():
    from envace_gym.agents.scripted import OraclePolicy

    class Broken(JudgeModel):
        def act_batch(self, conversations, sampling=None, generator=None):
            raise RuntimeError("the judge broke")

    env = gym.make("EnvACE-Tau2-v0", domain="mock", split=None, judge=Broken())
    collect([env], OraclePolicy(env.unwrapped.suite), 1, task_ids=[JUDGED], progress=False)
    assert not any(env.unwrapped.tau2_score().checks["nl_assertions"])
    assert "the judge broke" in env.unwrapped._result_info["judge_error"]


class Failing:
    """A text policy whose every message is a call to a tool that does not exist (each one a failed call)."""

    def reset(self) -> None:
        pass

    def act(self, obs, info) -> str:
        return format_calls([ToolCall("nope", {})])


def test_an_episode_cut_by_max_errors_ends_through_the_steps_play(monkeypatch):
    """tau2's max_errors ends the episode inside the step's play (`limit_reached`), through `end_turn` like
    any other end, so a judge it needed would be a request; tau2 scores the cut episode 0 without one."""
    _Stepping.guard(monkeypatch)
    ends = []
    original = Tau2Env.end_turn

    def end_turn(self):
        ends.append(self.log.termination)
        return (yield from original(self))

    monkeypatch.setattr(Tau2Env, "end_turn", end_turn)
    judge = JudgeModel()
    env = gym.make("EnvACE-Tau2-v0", domain="mock", split=None, judge=judge, max_errors=2)
    trajs = collect([env], Failing(), 1, task_ids=[JUDGED], progress=False)
    assert ends == ["too_many_errors"] and env.unwrapped.steps == 2 and trajs[0].reward == 0.0
    assert judge.batches == [] and judge.single == 0  # nothing to judge on a cut episode


class DrawingUser(UserModel):
    """A user model that samples: it asks a number of its questions drawn from the generator it is given, and
    keeps the sampling it was given."""

    def __init__(self) -> None:
        super().__init__(patience=1)
        self.given = []

    def act_batch(self, conversations, sampling=None, generator=None):
        import torch

        self.given.append((sampling, generator))
        if generator is None:
            raise AssertionError("the user model was given no random stream")
        draws = torch.randint(0, 10_000, (len(conversations),), generator=generator).tolist()
        return [SimpleNamespace(text=f"Shall I say {d}? ###STOP###", token_ids=[1]) for d in draws]


def test_a_model_user_samples_with_the_rollouts_sampling_and_stream():
    """The loop gives a model user the rollout's world sampling and random stream, as it gives the env role:
    the same seeds draw the same user turns whatever ran before, another seed draws others."""
    from envace_gym.agents.lm.engine import SamplingConfig

    def user_turns(seed: int) -> tuple[list[str], DrawingUser]:
        model = DrawingUser()
        env = gym.make("EnvACE-Tau2-v0", domain="mock", split=None, user=model)
        sampling = SamplingConfig(1.0, 1.0, 12, seed=seed)
        (traj,) = collect([env], Asking(), 1, task_ids=[TASK], progress=False, env_role_sampling=sampling)
        assert all(given[0] is sampling for given in model.given)
        return [m["content"] for m in traj.messages if m["role"] == "user"][1:], model

    first, _ = user_turns(3)
    again, _ = user_turns(3)
    other, _ = user_turns(4)
    assert first and first == again and first != other


def test_the_native_vector_env_batches_openings_and_calls_no_model_inside_reset_or_step(monkeypatch):
    """``ToolCallVectorEnv`` over tau2 envs whose user a model plays: the envs that start together get their
    opening turns in one call (at ``reset`` and at autoreset), and no model is called inside an env's
    ``reset`` or ``step``."""
    from envace_gym.vector import ToolCallVectorEnv

    _Stepping.guard(monkeypatch)
    model = UserModel(patience=0)
    vec = ToolCallVectorEnv([lambda: gym.make("EnvACE-Tau2-v0", domain="mock", split=None, user=model)] * 3)
    obs, _ = vec.reset(seed=0, options={"task_id": [TASK] * 3})
    assert model.batches == [3] and model.single == 0  # the three openings, one call
    assert all("task_1" in o for o in obs)
    _, _, terminated, _, _ = vec.step(["Could you tell me more?"] * 3)  # the user stops: one call
    assert terminated.all() and model.batches == [3, 3]
    vec.step(["ignored"] * 3)  # NEXT_STEP autoreset: the three new openings, one call
    assert model.batches == [3, 3, 3] and model.single == 0


class GuardedEnvRole:
    """An env role that answers every call with an empty object, counts its batches, and raises if it is
    called inside an env's reset or step (or one by one: the loop must batch it)."""

    def __init__(self) -> None:
        self.batches = []

    def imagine(self, request):
        raise AssertionError("the env role was asked one call at a time, inside the env")

    def imagine_batch(self, requests, sampling=None, generator=None):
        if _Stepping.depth:
            raise AssertionError("the env role was called inside env.step or env.reset")
        self.batches.append(len(requests))
        return ["{}" if r.mode == "inline" else "<execution_result>\n{}\n</execution_result>" for r in requests]


@pytest.mark.parametrize(
    "make",
    [
        lambda: gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test"),
        lambda: gym.make("EnvACE-BFCL-v0", category="multi_turn_base"),
        # a model user and a model judge too, and a turn limit that ends every episode through end_turn
        lambda: gym.make(
            "EnvACE-Tau2-v0", domain="mock", split=None, user=UserModel(9), judge=JudgeModel(), max_turns=2
        ),
    ],
    ids=["toolcall", "bfcl", "tau2"],
)
def test_no_model_is_called_inside_reset_or_step_under_the_loop(make, monkeypatch):
    """Every model of the world (the env role; tau2's user and judge) is asked by the loop, batched across envs,
    never from inside an env's ``reset``/``step``/half-steps: on the builtin env, BFCL and tau2."""
    from envace_gym import SelfRehearsalEnv
    from envace_gym.agents.scripted import OraclePolicy

    _Stepping.guard(monkeypatch)
    role = GuardedEnvRole()
    envs = [SelfRehearsalEnv(make(), role) for _ in range(2)]
    suite = envs[0].unwrapped.suite
    ids = [t.id for t in envs[0].unwrapped.pool if t.reference_calls][:2]
    trajs = collect(envs, [OraclePolicy(suite) for _ in envs], 2, task_ids=ids, progress=False)
    assert role.batches and max(role.batches) == 2  # the two envs' calls answered together
    assert len(trajs) == 2 and all(t.env_role_samples for t in trajs)
