"""EnvACE-Tau2-v0: tau2-bench domains in our env, scored as tau2's evaluator scores them. Offline and fast:
mostly the small mock and telecom databases, a few retail and airline episodes."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest

from envace_gym import SelfRehearsalEnv, TaskSuite, ToolCall, format_calls
from envace_gym.agents.scripted import OraclePolicy, play_episode
from envace_gym.envs.tau2 import _runtime
from envace_gym.envs.tau2.env import Tau2Env
from envace_gym.envs.tau2.official import evaluate_with_tau2
from envace_gym.envs.tau2.perturb import PERTURBATIONS, perturbations
from envace_gym.envs.tau2.tasks import build_task, load_suite
from envace_gym.envs.tau2.users import STOP_TOKENS, ScriptedUser
from envace_gym.imagination import RealResultImaginer
from envace_gym.tasks import RefTurn

REPO = Path(__file__).resolve().parents[1]
SIZES = {"airline": 50, "retail": 114, "telecom": 114, "mock": 9}


def make(domain: str = "mock", **kwargs) -> Tau2Env:
    return gym.make("EnvACE-Tau2-v0", domain=domain, split=None, **kwargs).unwrapped


def oracle_info(env: Tau2Env, task_id: str) -> dict:
    return play_episode(env, OraclePolicy(env.suite), task_id)


def variant_suite(domain: str, task_id: str, kinds=PERTURBATIONS) -> tuple[TaskSuite, dict[str, str]]:
    tasks = list(_runtime.base_tasks(domain))
    task = next(t for t in tasks if t.id == task_id)
    plans = perturbations(domain, task, tasks)
    built = {"gold": build_task(domain, task, actions=None, id_suffix="~gold")}
    built.update({k: build_task(domain, task, actions=plans[k], id_suffix=f"~{k}") for k in kinds if k in plans})
    return TaskSuite(built.values(), "variants"), {k: t.id for k, t in built.items()}


# ---------------------------------------------------------------------------- loading
@pytest.mark.parametrize("domain", sorted(SIZES))
def test_domain_tasks_load(domain):
    suite = load_suite(domain)
    assert len(suite) == SIZES[domain]
    assert set(suite.splits) <= {"train", "test"} and "test" in suite.splits
    for task in suite[:3]:
        assert task.tools and all(t["type"] == "function" for t in task.tools)
        assert task.reward and all(b.startswith("tau2_") for b in task.reward)
        assert task.metadata["tau2"]["domain"] == domain
        assert "<policy>" in task.system
        assert len(task.reference) == len(task.user_turns)


def test_splits_follow_tau2_files():
    assert {s: len(load_suite("retail").filter(split=s)) for s in ("train", "test")} == {"train": 74, "test": 40}
    assert load_suite("mock").splits == ["test"]  # no train/test split file: everything is test


def test_unknown_domain_is_one_line_error():
    with pytest.raises(ValueError, match="unknown tau2 domain 'nope'; known domains: airline, retail, telecom, mock"):
        gym.make("EnvACE-Tau2-v0", domain="nope")


def test_reward_basis_comes_from_tau2():
    retail = load_suite("retail")[0]
    assert retail.reward == ("tau2_db", "tau2_communicate")
    assert load_suite("telecom")[0].reward == ("tau2_env_assertion",)


# ---------------------------------------------------------------------------- oracle
def test_oracle_passes_mock_except_the_impossible_gold():
    env = make("mock")
    results = {t.id: oracle_info(env, t.id)["success"] for t in env.suite}
    # Its gold action list is empty, yet its assertion wants task_2 completed: tau2's gold fails it too.
    assert [k for k, ok in results.items() if not ok] == ["mock-update_task_with_history_and_env_assertions"]


@pytest.mark.parametrize("domain,count", [("retail", 3), ("telecom", 4), ("airline", 1)])
def test_oracle_passes_db_and_assertion_tasks(domain, count):
    env = make(domain)
    for task in env.suite[:count]:
        info = oracle_info(env, task.id)
        assert info["success"], (task.id, info.get("reward_components"), info.get("tau2"))
        assert set(info["reward_components"]) == set(task.reward)
        assert info["tau2"]["termination"] == "user_stop"


def test_cli_eval_oracle_mock():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "envace_gym.cli",
            "eval",
            "--env",
            "EnvACE-Tau2-v0",
            "--domain",
            "mock",
            "--policy",
            "oracle",
            "--json",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 9 and summary["success_rate"] == pytest.approx(8 / 9)


# ---------------------------------------------------------------------------- perturbations
def test_each_perturbation_fails_retail():
    suite, ids = variant_suite("retail", "22")
    assert set(ids) == {"gold", *PERTURBATIONS}
    env = Tau2Env(domain="retail", split=None, tasks=suite)
    rewards = {k: oracle_info(env, tid)["success"] for k, tid in ids.items()}
    assert rewards == {"gold": True, **{k: False for k in PERTURBATIONS}}


def test_dropped_user_action_fails_telecom():
    suite, ids = variant_suite(
        "telecom", load_suite("telecom")[0].metadata["tau2"]["task_id"], kinds=("dropped_action",)
    )
    env = Tau2Env(domain="telecom", split=None, tasks=suite)
    assert oracle_info(env, ids["gold"])["success"]
    info = oracle_info(env, ids["dropped_action"])
    assert not info["success"] and info["reward_components"] == {"tau2_env_assertion": 0.0}


def test_our_reward_equals_tau2_evaluator():
    for domain, task_id in (
        ("mock", "update_task_1"),
        ("telecom", load_suite("telecom")[1].metadata["tau2"]["task_id"]),
    ):
        suite, ids = variant_suite(domain, task_id)
        env = Tau2Env(domain=domain, split=None, tasks=suite)
        for tid in ids.values():
            info = oracle_info(env, tid)
            official = evaluate_with_tau2(domain, env.task.metadata["tau2"]["task"], env.log)
            assert float(official.reward) == (1.0 if info["success"] else 0.0), (tid, info.get("tau2"))


# ---------------------------------------------------------------------------- episodes
def test_fresh_state_every_episode():
    suite, ids = variant_suite("mock", "update_task_1", kinds=("extra_write",))
    env = Tau2Env(domain="mock", split=None, tasks=suite)
    first = oracle_info(env, ids["gold"])
    first_state, first_env = env.backend.state_hash(), env.backend.env
    assert not oracle_info(env, ids["extra_write"])["success"]  # a different write in between...
    second = oracle_info(env, ids["gold"])  # ...does not leak into the next episode
    assert env.backend.env is not first_env
    assert (
        (first["success"], first["reward_components"])
        == (second["success"], second["reward_components"])
        == (True, {"tau2_db": 1.0, "tau2_communicate": 1.0})
    )
    assert env.backend.state_hash() == first_state


def test_invalid_calls_get_fixed_error_codes_and_never_reach_tau2():
    env = make("mock")
    env.reset(options={"task_id": "mock-create_task_1"})
    before = env.backend.state_hash()
    _, _, _, _, info = env.step(format_calls([ToolCall("delete_everything", {})]))
    assert [e["code"] for e in info["errors"]] == ["TOOL_NOT_AVAILABLE"]
    _, _, _, _, info = env.step(format_calls([ToolCall("create_task", {"user_id": 7})]))
    assert [e["code"] for e in info["errors"]] == ["INVALID_PARAMETERS"]
    assert env.backend.state_hash() == before
    assert env.log.calls() == []  # tau2's trajectory would not hold them
    _, _, _, _, info = env.step(
        format_calls([ToolCall("update_task_status", {"task_id": "task_404", "status": "completed"})])
    )
    assert [e["code"] for e in info["errors"]] == ["TOOL_EXECUTION_ERROR"]  # tau2 raised: it reached tau2
    assert [c.name for c in env.log.calls()] == ["update_task_status"] and env.log.calls()[0].error


def test_hostile_calculate_is_refused():
    env = make("retail")
    env.reset(options={"task_id": "retail-0"})
    _, _, _, _, info = env.step(format_calls([ToolCall("calculate", {"expression": "9**9**9**9"})]))
    assert [e["code"] for e in info["errors"]] == ["INVALID_PARAMETERS"]


def test_scripted_user_ends_the_conversation():
    env = make("mock")
    obs, _ = env.reset(options={"task_id": "mock-create_task_1"})
    assert "Important Meeting" in obs  # the scenario's known information
    obs, reward, terminated, truncated, info = env.step("Shall I create it?")
    assert obs == "Yes, please go ahead." and not terminated  # a question gets a confirmation...
    obs, reward, terminated, truncated, info = env.step("I could not do it.")
    assert terminated and not truncated and "###STOP###" in obs  # ...a statement ends the conversation
    assert reward == 0.0 and info["tau2"]["termination"] == "user_stop"


def test_scripted_user_patience_is_bounded():
    user = ScriptedUser(patience=1)
    env = make("mock", user=user)
    env.reset(options={"task_id": "mock-create_task_1"})
    assert env.step("Really?")[0] == "Yes, please go ahead."
    assert env.step("Really?")[2]  # patience spent: the user stops


def test_transfer_then_user_stop_scores_action_basis():
    env = make("mock")
    env.reset(options={"task_id": "mock-impossible_task_1"})
    env.step(format_calls([ToolCall("transfer_to_human_agents", {"summary": "cannot delete tasks"})]))
    obs, reward, terminated, _, info = env.step("I am transferring you to a human agent.")
    assert terminated and "###STOP###" in obs and info["tau2"]["termination"] == "user_stop"
    assert reward == 1.0 and info["reward_components"] == {"tau2_db": 1.0, "tau2_action": 1.0}


def test_agent_cannot_end_the_conversation():
    env = make("mock")
    env.reset(options={"task_id": "mock-create_task_1"})
    obs, _, terminated, _, _ = env.step("Can I help with anything else? ###STOP###")
    assert not terminated and obs == "Yes, please go ahead."  # as in tau2: the text just goes to the user


def test_too_many_errors_scores_zero():
    env = make("mock", max_errors=3)
    env.reset(options={"task_id": "mock-create_task_1_nl_eval"})  # gold: no actions, so doing nothing passes
    bad = format_calls([ToolCall("nope", {})])
    results = [env.step(bad) for _ in range(3)]
    _, reward, terminated, truncated, info = results[-1]
    assert truncated and not terminated and reward == 0.0 and info["tau2"]["termination"] == "too_many_errors"


def test_max_turns_scores_zero():
    env = make("mock", max_turns=1)
    env.reset(options={"task_id": "mock-create_task_1"})
    _, reward, _, truncated, info = env.step(
        format_calls([ToolCall("create_task", {"user_id": "user_1", "title": "Important Meeting"})])
    )
    assert truncated and reward == 0.0 and info["tau2"]["termination"] == "max_steps"


def test_telecom_user_acts_with_its_own_tools():
    env = make("telecom")
    task = env.suite[0]
    info = oracle_info(env, task.id)
    user_calls = [c for c in env.log.calls() if c.requestor == "user"]
    assert [c.name for c in user_calls] == [a["name"] for step in task.metadata["tau2"]["user_script"] for a in step]
    assert info["success"]
    assert all(
        m["role"] != "tool" or "toggle" not in m.get("name", "") for m in info["messages"]
    )  # the agent never sees them


class _ToolUsingUser:
    """Checks its device once, then stops."""

    def __init__(self):
        self.calls = 0

    def reply(self, messages, tools):
        self.calls += 1
        if self.calls == 2:
            return format_calls([ToolCall("check_status_bar", {})])
        return "My phone has no data." if self.calls == 1 else "Fine, bye. ###STOP###"


def test_custom_user_protocol_and_user_tool_calls():
    env = make("telecom", user=_ToolUsingUser())
    env.reset(options={"task_id": env.suite[0].id})
    _, _, terminated, _, info = env.step("Please check your status bar.")
    assert terminated and info["tau2"]["termination"] == "user_stop"
    assert [c.name for c in env.log.calls()] == ["check_status_bar"] and not env.log.calls()[0].error


class _StubLM:
    """An LMPolicy stand-in that records its prompts."""

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def act(self, messages, tools=()):
        self.prompts.append((messages, tools))
        return type("Gen", (), {"text": self.replies.pop(0)})()


@pytest.mark.parametrize("token", STOP_TOKENS)
def test_lm_user_follows_scenario_and_stop_tokens(token):
    lm = _StubLM(["Hi, I need a task created.", f"Thanks. {token}"])
    env = make("mock", user=lm)
    obs, _ = env.reset(options={"task_id": "mock-create_task_1"})
    assert obs == "Hi, I need a task created."
    system = lm.prompts[0][0][0]
    assert system["role"] == "system" and "<scenario>" in system["content"] and "Important Meeting" in system["content"]
    assert lm.prompts[0][0][1] == {"role": "user", "content": "Hi! How can I help you today?"}  # roles flipped
    _, _, terminated, _, info = env.step("Done.")
    assert terminated and info["tau2"]["termination"] == "user_stop"


def test_lm_user_tiny_model_runs():
    from envace_gym.agents import LMPolicy

    env = make("mock", user=LMPolicy.from_spec("tiny"), max_turns=2)
    env.reset(options={"task_id": "mock-create_task_1"})
    done, steps = False, 0
    while not done:
        _, reward, terminated, truncated, info = env.step("Could you tell me more?")
        done, steps = terminated or truncated, steps + 1
    assert steps <= 2 and info["tau2"]["termination"] in ("max_steps", "user_stop", "user_error")
    assert (reward == 0.0) or info["tau2"]["termination"] == "user_stop"


def test_checklist_judge_reads_yes_and_no():
    from envace_gym.envs.tau2.judge import ChecklistJudge, make_judge

    lm = _StubLM(["YES, it did.", "no"])
    judge = make_judge(lm)
    assert isinstance(judge, ChecklistJudge)
    assert judge(["greeted the user", "offered a refund"], "assistant: Hello") == [True, False]
    assert "offered a refund" in lm.prompts[1][0][-1]["content"]


def test_nl_judge_is_optional_and_reported():
    verdicts = []

    def judge(assertions, transcript):
        verdicts.append((list(assertions), transcript))
        return [True] * len(assertions)

    env = make("mock", judge=judge)
    info = oracle_info(env, "mock-create_task_1")
    assert verdicts and "Important Meeting" in verdicts[0][1]
    assert info["tau2"]["nl_assertions"] == [True] * len(verdicts[0][0])
    assert "tau2_nl_assertion" not in info["reward_components"]  # not in this task's reward basis
    assert "nl_assertions" not in oracle_info(make("mock"), "mock-create_task_1")["tau2"]  # off by default


# ---------------------------------------------------------------------------- rehearsal
def test_self_rehearsal_with_real_results_keeps_scores():
    suite, ids = variant_suite("mock", "update_task_1", kinds=("wrong_argument",))
    env = gym.make("EnvACE-Tau2-v0", domain="mock", split=None, tasks=suite)
    wrapped = SelfRehearsalEnv(env, RealResultImaginer(env))
    oracle = OraclePolicy(suite)
    assert play_episode(wrapped, oracle, ids["gold"])["success"]
    assert not play_episode(wrapped, oracle, ids["wrong_argument"])["success"]
    retail = gym.make("EnvACE-Tau2-v0", domain="retail", split=None)
    wrapped = SelfRehearsalEnv(retail, RealResultImaginer(retail))
    info = play_episode(wrapped, OraclePolicy(retail.unwrapped.suite), "retail-0")
    assert info["success"] and info["reward_components"]["tau2_db"] == 1.0


# ---------------------------------------------------------------------------- hygiene
def test_jsonl_round_trip(tmp_path):
    suite = load_suite("mock")
    path = suite.save_jsonl(tmp_path / "mock.jsonl")
    again = TaskSuite.load_jsonl(path)
    env = Tau2Env(domain="mock", split=None, tasks=again)
    assert oracle_info(env, "mock-update_task_1")["success"]


_OFFLINE = r"""
import builtins, io, os, socket, sys
repo = os.path.realpath(sys.argv[1])
def no_net(*a, **k):
    raise AssertionError("network access")
socket.socket.connect = no_net
socket.create_connection = no_net
real_open = builtins.open
def guarded_open(file, mode="r", *a, **k):
    if any(m in mode for m in "wax+") and os.path.realpath(str(file)).startswith(repo):
        raise AssertionError(f"write into the repo: {file}")
    return real_open(file, mode, *a, **k)
builtins.open = io.open = guarded_open
import gymnasium as gym, envace_gym
from envace_gym.agents.scripted import OraclePolicy, play_episode
env = gym.make("EnvACE-Tau2-v0", domain="mock", split=None)
info = play_episode(env, OraclePolicy(env.unwrapped.suite), "mock-update_task_1")
assert info["success"], info
print("ok")
"""


def test_offline_and_writes_nothing_into_the_repo():
    out = subprocess.run(
        [sys.executable, "-c", _OFFLINE, str(REPO)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**__import__("os").environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_importing_the_package_is_cheap():
    code = "import sys, envace_gym, envace_gym.envs.tau2; print('tau2' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]


def test_calculate_matches_tau2_without_eval():
    from envace_gym.envs.tau2._runtime import calculate, new_environment

    for expr in ("2 + 2", "(100 - 7.5) * 3 / 4", "-3 * (2 + 0.125)", "10 / 3"):
        assert calculate(expr) == str(
            round(float(eval(expr, {"__builtins__": None}, {})), 2)
        )  # the test's oracle, not library code
    for bad in ("__import__('os')", "2 ** 3", "1 / 0", "()"):
        with pytest.raises((ValueError, ZeroDivisionError, SyntaxError)):
            calculate(bad)
    env = new_environment("airline")
    assert env.tools.use_tool("calculate", expression="1.5 * 4") == "6.0"


class _ProseUser:
    """Replies with prose that looks like a Python call (issue 21), then stops."""

    def __init__(self):
        self.calls = 0

    def reply(self, messages, tools):
        self.calls += 1
        return "Hi, I need a task created." if self.calls == 1 else "Thanks(a lot) ###STOP### (bye)"


def test_prose_that_looks_like_a_call_reaches_the_other_side_as_text():
    env = make("mock", user=_ProseUser())
    env.reset(options={"task_id": "mock-create_task_1"})
    text = "Task(s) created for user_1 (total 1)"
    obs, _, terminated, _, info = env.step(text)
    # The agent's message went to the user as text (tau2's COMMUNICATE reads it), not a format error ...
    assert info["errors"] == [] and (env.log.messages[-2].role, env.log.messages[-2].text) == ("assistant", text)
    # ... and the user's reply reached the agent as text, not as a broken user tool call.
    assert terminated and obs == "Thanks(a lot) ###STOP### (bye)"
    assert info["tau2"]["termination"] == "user_stop"


# ---------------------------------------------------------------------------- private rehearsal
class RecordingWorld:
    """A scripted env role: answers every call with a plausible result; records every prompt it sees."""

    def __init__(self):
        self.prompts = []

    def imagine(self, request):
        self.prompts.append(json.dumps(request.messages, ensure_ascii=False))
        return '<execution_result>\n{"task_id": "task_1", "status": "completed"}\n</execution_result>'


class RecordingUser:
    """Plays the user in rehearsal (``act(messages, tools)``); records every prompt; each reply costs 3 tokens
    and ends the conversation."""

    def __init__(self):
        self.prompts = []

    def act(self, messages, tools):
        self.prompts.append(json.dumps([messages, tools], ensure_ascii=False))
        return SimpleNamespace(text="Thanks, that is all. ###STOP###", token_ids=[7, 8, 9])


class UpdatingAgent:
    """A text policy that marks task_1 completed, then reports it; records everything it is shown."""

    seen: list = []  # class-level: rehearsals act through deep copies

    def reset(self):
        self._called = False

    def act(self, obs, info):
        UpdatingAgent.seen.append(json.dumps([obs, info["messages"], info["tools"], info.get("note")]))
        if not self._called:
            self._called = True
            return format_calls([ToolCall("update_task_status", {"task_id": "task_1", "status": "completed"})])
        return "Task task_1 is now marked completed."


def _secret_tau2_task():
    """mock's update_task_1 with marker strings wherever the agent must not look: the user's scenario
    (persona, task instructions, unknown info), the ticket and notes, the evaluation criteria (and so the
    reference answer), the task's metadata and a later scripted user turn."""
    data = next(t for t in _runtime.base_tasks("mock") if t.id == "update_task_1").model_dump(
        mode="json", exclude_none=True
    )
    data["user_scenario"] = {
        "persona": "SECRET-PERSONA",
        "instructions": {
            "domain": "mock",
            "reason_for_call": "I need task_1 marked as completed.",
            "known_info": "My user id is user_1.",
            "unknown_info": "SECRET-UNKNOWN",
            "task_instructions": "SECRET-INSTRUCTIONS",
        },
    }
    data["ticket"], data["description"]["notes"] = "SECRET-TICKET", "SECRET-NOTES"
    data["evaluation_criteria"]["communicate_info"] = ["SECRET-COMMUNICATE"]
    task = build_task("mock", _runtime.parse_task(data))
    assert "SECRET-COMMUNICATE" in task.reference[-1].answer and "SECRET" not in task.user_turns[0]
    metadata = {**task.metadata, "note": "SECRET-META"}
    later = RefTurn(steps=(), answer="SECRET-REF-ANSWER")
    turns, reference = (task.user_turns[0], "SECRET-LATER-TURN"), (*task.reference, later)
    return dataclasses.replace(task, metadata=metadata, user_turns=turns, reference=reference)


def test_tau2_rehearsal_imagines_the_user_from_the_visible_conversation_only():
    from envace_gym.agents.rehearsal import PrivateRehearsal

    task = _secret_tau2_task()
    env = Tau2Env(domain="mock", split=None, tasks=TaskSuite([task], "secret"))
    obs, info = env.reset(options={"task_id": task.id})
    live_user, live_messages = env.user, list(env.messages)
    world, user = RecordingWorld(), RecordingUser()
    UpdatingAgent.seen = []
    agent = PrivateRehearsal(UpdatingAgent(), budget=2, mode="sequential", imaginer=world, user=user)
    (note,) = agent.prepare_turns([env], [info])
    assert note.stats["rehearsals"] == 2 and len(world.prompts) == 2
    assert len(user.prompts) == 2  # one user turn per rehearsal: its ###STOP### ended each
    seen = "\n".join(world.prompts + user.prompts + UpdatingAgent.seen) + note.text
    assert "SECRET" not in seen
    first = json.loads(user.prompts[0])[0]
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user"]  # greeting, opening, answer
    assert "I need task_1 marked as completed." in first[2]["content"]  # the opening the agent saw
    assert first[3]["content"] == "Task task_1 is now marked completed." and json.loads(user.prompts[0])[1] == []
    assert note.stats["user_tokens"] == 6 == note.stats["rehearsal_tokens"]  # a text actor and env role: 0
    assert env.user is live_user and env.messages == live_messages and not env.done  # the live episode: as it was


def test_tau2_committed_episode_after_rehearsal_is_scored_by_tau2():
    from envace_gym.agents.rehearsal import PrivateRehearsal
    from envace_gym.agents.rollout import collect

    suite, ids = variant_suite("mock", "update_task_1", kinds=("wrong_argument",))
    env = Tau2Env(domain="mock", split=None, tasks=suite)
    outcomes = {}
    for kind, tid in ids.items():
        user = RecordingUser()
        agent = PrivateRehearsal(OraclePolicy(suite), budget=1, imaginer=RecordingWorld(), user=user)
        (traj,) = collect([env], agent, 1, task_ids=[tid], progress=False)
        official = evaluate_with_tau2("mock", env.task.metadata["tau2"]["task"], env.log)
        assert traj.notes[0]["rehearsals"] == 1 and user.prompts  # rehearsed, with an imagined user...
        assert isinstance(env.user, ScriptedUser) and env.log.termination == "user_stop"  # ...then tau2's
        assert traj.reward == float(official.reward), (kind, env.log.termination)
        outcomes[kind] = traj.success
    assert outcomes == {"gold": True, "wrong_argument": False}


def test_tau2_rehearsal_counts_the_policys_user_tokens(monkeypatch):
    from forced import force_text

    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy
    from envace_gym.agents.rehearsal import PrivateRehearsal

    policy = tiny_policy(sampling=SamplingConfig(temperature=1.0, max_new_tokens=8, seed=0))
    force_text(policy, monkeypatch, "Fine, thanks.")  # every turn, the actor's and the user's: plain words
    generated = []

    class Counting:  # the policy playing the user, its generations counted here too
        def act(self, messages, tools):
            gen = policy.act(messages, tools)
            generated.append(len(gen.token_ids))
            return gen

    env = Tau2Env(domain="mock", split=None, max_turns=3)
    _, info = env.reset(options={"task_id": "mock-update_task_1"})
    (note,) = PrivateRehearsal(policy, budget=1, user=Counting()).prepare_turns([env], [info])
    assert generated and note.stats["user_tokens"] == sum(generated) > 0
    assert note.stats["rehearsal_tokens"] > note.stats["user_tokens"]  # the actor's tokens come on top
    (note,) = PrivateRehearsal(policy, budget=1).prepare_turns([env], [info])  # the policy itself plays the user
    assert note.stats.get("user_tokens", 0) > 0


def test_tau2_rehearsal_without_a_user_model_is_a_one_line_error():
    from envace_gym.agents.rehearsal import PrivateRehearsal

    env = make("mock")
    _, info = env.reset(options={"task_id": "mock-update_task_1"})
    with pytest.raises(ValueError, match="imagines the user's turns too"):
        PrivateRehearsal(UpdatingAgent(), budget=1, imaginer=RecordingWorld()).prepare_turns([env], [info])
