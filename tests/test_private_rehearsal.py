"""Test-time private rehearsal: forks that touch nothing real and know nothing of the reference, the budget,
the memory and where it goes, adaptive stopping, and a rehearsal that turns a failure into a success."""

import dataclasses
import itertools
import json
import re

import gymnasium as gym
import pytest

import envace_gym
from envace_gym import ToolCall, format_calls
from envace_gym.agents.rehearsal import PrivateRehearsal, condense, render_memory
from envace_gym.agents.rollout import collect
from envace_gym.backends import make_backend
from envace_gym.imagination import SelfRehearsalEnv
from envace_gym.rehearsal import RehearsalFork
from envace_gym.tasks import RefCall, RefTurn

TASK = "bank-test-0008"  # "Could you check what account A-5247 currently holds?" (one get_balance call)
SUITE = envace_gym.load_suite("builtin/bank")
BALANCE = {"account_id": "A-5247", "balance": 2215.7, "currency": "EUR"}


# ------------------------------------------------------------------------------------------ test doubles
class CountingBackend:
    """The real backend, with every call counted in a list shared by all its copies."""

    def __init__(self, inner, counter):
        self.inner, self.counter = inner, counter

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def execute(self, call):
        self.counter.append(call.name)
        return self.inner.execute(call)

    def copy(self):
        return CountingBackend(self.inner.copy(), self.counter)


def counting_env(counter, tasks=None, **kwargs):
    def backend(task):
        return CountingBackend(make_backend(task.backend), counter)

    return gym.make("EnvACE-ToolCall-v0", tasks=tasks or list(SUITE), split=None, backend=backend, **kwargs)


class KnownWorld:
    """A scripted env role that answers get_balance with the real result; records every prompt it sees."""

    def __init__(self):
        self.prompts = []

    def imagine(self, request):
        self.prompts.append(json.dumps(request.messages, ensure_ascii=False))
        if request.tool == "get_balance" and request.arguments.get("account_id") == "A-5247":
            payload = BALANCE
        else:
            payload = {"error": "unknown account"}
        return f"<execution_result>\n{json.dumps(payload)}\n</execution_result>"


class Scripted:
    """A text policy: ``plan`` (the calls to make, one per turn; skipped when the note marks them REJECTED),
    then an answer quoting the last result's balance; it records the notes it was shown."""

    seen_notes: list = []  # class-level: rehearsals act through deep copies

    def __init__(self, plan=(("get_balance", {"account_id": "A-5247"}),), give_up_after_error=False):
        self.plan, self.give_up_after_error = list(plan), give_up_after_error

    def reset(self):
        self._todo = None

    def act(self, obs, info):
        note = info.get("note")
        if self._todo is None:
            Scripted.seen_notes.append(note)
            rejected = set(re.findall(r"(\w+)\(\{[^}]*\}\) -> REJECTED", note or ""))
            self._todo = [c for c in self.plan if c[0] not in rejected]
        if '"error"' in obs and self.give_up_after_error:
            return "Sorry, I could not do that."
        if self._todo:
            name, args = self._todo.pop(0)
            return format_calls([ToolCall(name, args)])
        try:
            balance = json.loads(obs.split("<tool_response>\n")[-1].split("\n</tool_response>")[0]).get("balance")
        except ValueError:  # a user message, not a tool result
            balance = None
        return f"Account A-5247 holds {balance:.2f} EUR." if balance is not None else "I do not know."


@pytest.fixture(autouse=True)
def _clear_notes():
    Scripted.seen_notes = []


def _reset(env):
    obs, info = env.reset(seed=0, options={"task_id": TASK})
    return obs, info


# ----------------------------------------------------------------------------------------------- the fork
def test_a_fork_with_a_backend_swapped_mid_episode_never_touches_the_original():
    counter = []
    env = counting_env(counter)
    _reset(env)
    env.step(format_calls([ToolCall("get_balance", {"account_id": "A-5247"})]))
    assert counter == ["get_balance"]
    fork = RehearsalFork(env, "obs")
    world = KnownWorld()
    rehearsal = SelfRehearsalEnv(fork, world, grounding="none", on_invalid="error_observation")
    obs, info = rehearsal.reset()
    assert obs == "obs" and len(info["messages"]) == len(env.unwrapped.messages)  # the live state, forked
    obs, reward, terminated, truncated, info = rehearsal.step(
        format_calls([ToolCall("get_balance", {"account_id": "A-5247"})])
    )
    assert "2215.7" in obs and counter == ["get_balance"]  # imagined: the real backend was not called again
    _, reward, terminated, _, info = rehearsal.step("It holds 2215.70 EUR.")
    assert terminated and reward == 0.0 and "success" not in info  # unscored: nothing of the reference is read
    assert fork.task.reference == () and fork.task.reward == () and fork.task.metadata == {}
    assert len(env.unwrapped.messages) == 4 and not env.unwrapped.done  # the live episode did not move
    with pytest.raises(ValueError, match="needs options\\['backend'\\]"):
        fork.reset()


# --------------------------------------------------------------------------------- no real interaction
def test_rehearsal_makes_no_real_call_and_honours_the_budget_exactly():
    counter = []
    env = counting_env(counter)
    world = KnownWorld()
    for mode in ("parallel", "sequential"):
        world.prompts.clear()
        agent = PrivateRehearsal(Scripted(), budget=3, mode=mode, imaginer=world)
        _, info = _reset(env)
        (note,) = agent.prepare_turns([env], [info])
        assert counter == [] and note.stats["rehearsals"] == 3
        assert len(world.prompts) == 3  # one get_balance per rehearsal: exactly the budget
        assert note.text.count("Rehearsal ") == 3
    (traj,) = collect([env], PrivateRehearsal(Scripted(), budget=2, imaginer=world), 1, task_ids=[TASK], progress=False)
    assert traj.success and counter == ["get_balance"]  # the committed episode's one call, and only it
    assert traj.notes[0]["rehearsals"] == 2 and traj.episode.calls_ok == 1


def test_budget_zero_is_the_policy_itself():
    env = counting_env([])
    world = KnownWorld()
    (traj,) = collect([env], PrivateRehearsal(Scripted(), budget=0, imaginer=world), 1, task_ids=[TASK], progress=False)
    assert traj.success and traj.notes == [] and world.prompts == []


# ------------------------------------------------------------------------------------------ the memory
def test_sequential_rehearsal_k_sees_the_memory_of_the_ones_before_and_parallel_sees_none():
    env = counting_env([])
    _, info = _reset(env)
    PrivateRehearsal(Scripted(), budget=3, mode="sequential", imaginer=KnownWorld()).prepare_turns([env], [info])
    first, second, third = Scripted.seen_notes
    assert first is None
    assert "Rehearsal 1:" in second and "Rehearsal 2:" not in second
    assert "Rehearsal 1:" in third and "Rehearsal 2:" in third and "Rehearsal 3:" not in third
    Scripted.seen_notes = []
    PrivateRehearsal(Scripted(), budget=3, mode="parallel", imaginer=KnownWorld()).prepare_turns([env], [info])
    assert Scripted.seen_notes == [None, None, None]


def test_the_memory_reaches_the_committed_prompt_within_its_token_bound():
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=8, seed=0))
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=2)
    agent = PrivateRehearsal(policy, budget=2, memory_tokens=40, imaginer=KnownWorld())
    (traj,) = collect([env], agent, 1, task_ids=[TASK], progress=False)
    (note,) = traj.notes
    assert note["rehearsals"] == 2 and note["rehearsal_tokens"] > 0
    assert 0 < note["memory_tokens"] <= 40
    assert len(policy.tokenizer.encode(note["text"], add_special_tokens=False)) <= 40
    prompt = policy.tokenizer.decode([t for t, r in zip(traj.token_ids, traj.roles, strict=True) if r == "prompt"])
    assert note["text"] in prompt  # the committed episode's prompt holds the memory
    assert note["text"] not in json.dumps(traj.messages)  # and the env never saw it
    assert not policy.engine._caches  # the nested rehearsal run and the committed one each dropped their own


def test_render_memory_drops_the_oldest_rehearsals_first_then_cuts():
    messages = [{"role": "user", "content": "q"}]
    outcome = condense(
        messages
        + [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_balance", "arguments": '{"account_id": "X"}'},
                    }
                ],
            },  # fmt: skip
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "get_balance",
                "content": '{"error": {"code": "INVALID_PARAMETERS", "message": "bad id"}}',
            },  # fmt: skip
            {"role": "assistant", "content": "Done."},
        ],
        1,
    )
    assert outcome.calls[0].rejected and outcome.answer == "Done." and outcome.ended == "answer"
    full = render_memory([outcome] * 3, 10_000)
    assert full.count("REJECTED INVALID_PARAMETERS") == 3
    fewer = render_memory([outcome] * 3, len(full) // 4 - 20)
    assert "Rehearsal 3:" in fewer and "Rehearsal 1:" not in fewer
    tiny = render_memory([outcome], 20)
    assert tiny.endswith("...[memory cut]") and (len(tiny) + 3) // 4 <= 20


# ------------------------------------------------------------------------------- test time: no answers
def _secret_task():
    task = SUITE.get(TASK)
    secret = RefTurn(
        steps=((RefCall("get_balance", {"account_id": "A-5247"}, {"balance": "SECRET-RESULT-91"}),),),
        answer="SECRET-ANSWER-77",
        answer_contains=("SECRET-ANSWER-77",),
    )
    return dataclasses.replace(task, reference=(secret,), metadata={"note": "SECRET-META-55"})


def test_nothing_of_the_reference_reaches_the_env_role_or_the_memory_and_removing_it_changes_nothing():
    runs = []
    for task in (_secret_task(), dataclasses.replace(_secret_task(), reference=(), metadata={})):
        world = KnownWorld()
        env = counting_env([], tasks=[task])
        _, info = _reset(env)
        agent = PrivateRehearsal(Scripted(), budget=2, mode="sequential", imaginer=world)
        (note,) = agent.prepare_turns([env], [info])
        seen = "\n".join(world.prompts) + note.text
        assert "SECRET" not in seen
        runs.append((world.prompts, note.text, note.stats["rehearsals"]))
    assert runs[0] == runs[1]  # the same rehearsal with or without the reference


# ----------------------------------------------------------------------- rehearsal that changes the outcome
def test_rehearsal_turns_a_failing_first_attempt_into_a_success():
    """The policy first tries a misspelt tool and gives up on the error; rehearsal shows the call REJECTED,
    so the real attempt skips it and succeeds. Without rehearsal it fails."""
    plan = (("get_balanse", {"account_id": "A-5247"}), ("get_balance", {"account_id": "A-5247"}))
    counter = []
    env = counting_env(counter)
    (alone,) = collect([env], Scripted(plan, give_up_after_error=True), 1, task_ids=[TASK], progress=False)
    assert not alone.success
    for mode in ("parallel", "sequential"):
        counter.clear()
        agent = PrivateRehearsal(Scripted(plan, give_up_after_error=True), budget=1, mode=mode, imaginer=KnownWorld())
        (traj,) = collect([env], agent, 1, task_ids=[TASK], progress=False)
        assert "REJECTED" in traj.notes[0]["text"] and traj.success, mode
        assert counter == ["get_balance"]  # one real call: the right one


# ------------------------------------------------------------------------------------------- adaptive
_variety = itertools.count()


class Wavering(Scripted):
    """Answers differently every episode: rehearsals never agree."""

    def act(self, obs, info):
        action = super().act(obs, info)
        return action if "<tool_call>" in action else f"Answer number {next(_variety)}."


def test_adaptive_stops_when_two_rehearsals_agree_and_spends_the_budget_when_none_do():
    env = counting_env([])
    _, info = _reset(env)
    (note,) = PrivateRehearsal(Scripted(), budget="adaptive", max_budget=4, imaginer=KnownWorld()).prepare_turns(
        [env], [info]
    )
    assert note.stats["rehearsals"] == 2 and note.stats["agreed"] is True
    (note,) = PrivateRehearsal(Wavering(), budget="adaptive", max_budget=4, imaginer=KnownWorld()).prepare_turns(
        [env], [info]
    )
    assert note.stats["rehearsals"] == 4 and note.stats["agreed"] is False


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="budget"):
        PrivateRehearsal(Scripted(), budget=-1, imaginer=KnownWorld())
    with pytest.raises(ValueError, match="imaginer"):
        PrivateRehearsal(Scripted(), budget=1)
    with pytest.raises(ValueError, match="mode"):
        PrivateRehearsal(Scripted(), mode="both", imaginer=KnownWorld())


# ------------------------------------------------------------------------------------------------ CLI
def test_eval_cli_reports_rehearsal_costs_per_episode(capsys):
    from envace_gym.cli import main

    code = main(["eval", "--policy", "tiny", "--suite", "builtin/bank", "--rehearsal-budget", "1", "--episodes", "2",
                 "--max-turns", "2", "--max-new-tokens", "8", "--json", "--no-progress"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["rehearsal"]["budget"] == 1 and summary["rehearsal"]["mode"] == "parallel"
    assert [row["rehearsals"] for row in summary["per_episode"]] == [1, 1]
    rows = summary["per_episode"]
    assert all(row["rehearsal_tokens"] > 0 and row["live_calls"] + row["rejected_calls"] > 0 for row in rows)
    assert summary["wall_s"] > 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--policy", "tiny", "--rehearsal-budget", "many"], "--rehearsal-budget must be"),
        (["--policy", "oracle", "--rehearsal-budget", "2"], "needs a language-model"),
        (["--policy", "tiny", "--rehearsal-budget", "2", "--rehearsal-mode", "both"], "--rehearsal-mode"),
    ],
)
def test_eval_cli_refuses_bad_rehearsal_flags_in_one_line(capsys, argv, says):
    from envace_gym.cli import main

    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


# ----------------------------------------------------------------------------------- each user turn
MULTI = "bank-test-0009"  # two user turns: a savings balance, then a transfer


def test_each_user_turn_rehearses_again_from_the_live_mid_episode_state():
    world = KnownWorld()
    env = counting_env([])
    once = PrivateRehearsal(Scripted(), budget=1, imaginer=world)
    (traj,) = collect([env], once, 1, task_ids=[MULTI], progress=False)
    assert len(traj.notes) == 1
    world.prompts.clear()
    every = PrivateRehearsal(Scripted(), budget=1, imaginer=world, each_user_turn=True)
    (traj,) = collect([env], every, 1, task_ids=[MULTI], progress=False)
    first, second = traj.notes
    assert first["at"] == 2 and second["at"] > first["at"]
    assert traj.messages[second["at"] - 1]["role"] == "user"  # given right after the second user message
    assert "top it up" in world.prompts[-1] and "savings" in world.prompts[-1]  # the fork kept turn one


def _plain_text_policy(monkeypatch, max_new_tokens: int):
    """The tiny model, its every generation forced to the same plain sentence (no call: an answer), so what
    the tests below see does not depend on what a random model samples under this CPU's float kernels."""
    from forced import force_text

    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy

    policy = tiny_policy(sampling=SamplingConfig(temperature=1.0, max_new_tokens=max_new_tokens, seed=0))
    force_text(policy, monkeypatch, "Done, thanks.")
    return policy


def test_an_lm_policy_sees_every_note_where_it_was_given(monkeypatch):
    # The model answers in plain text every time, so the second user turn comes.
    policy = _plain_text_policy(monkeypatch, max_new_tokens=8)
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=3)
    agent = PrivateRehearsal(policy, budget=1, memory_tokens=32, imaginer=KnownWorld(), each_user_turn=True)
    (traj,) = collect([env], agent, 1, task_ids=[MULTI], progress=False)
    assert [m["role"] for m in traj.messages].count("user") == 2 and len(traj.notes) == 2
    text = policy.tokenizer.decode(traj.token_ids)
    assert text.index(traj.notes[0]["text"]) < text.index("top it up") < text.rindex(traj.notes[1]["text"])


def test_sequential_rehearsal_from_a_later_user_turn_still_passes_the_memory_on():
    env = counting_env([])
    every = PrivateRehearsal(Scripted(), budget=2, mode="sequential", imaginer=KnownWorld(), each_user_turn=True)
    (traj,) = collect([env], every, 1, task_ids=[MULTI], progress=False)
    assert len(traj.notes) == 2
    # turn one: rehearsal 1, rehearsal 2, the committed episode; turn two: rehearsal 1, rehearsal 2
    r1, r2, committed, later1, later2 = Scripted.seen_notes
    assert r1 is None and "Rehearsal 1:" in r2 and committed == traj.notes[0]["text"]
    assert later1 is None and "Rehearsal 1:" in later2


def test_a_summarised_memory_is_the_policys_own_words_within_the_bound(monkeypatch):
    from envace_gym.agents.rehearsal.memory import MEMORY_HEADER

    policy = _plain_text_policy(monkeypatch, max_new_tokens=8)
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=2)
    _, info = env.reset(seed=0, options={"task_id": TASK})
    plain = PrivateRehearsal(policy, budget=1, memory_tokens=48, imaginer=KnownWorld())
    summary = PrivateRehearsal(policy, budget=1, memory_tokens=48, imaginer=KnownWorld(), memory="summary")
    (deterministic,) = plain.prepare_turns([env], [info])
    (summarised,) = summary.prepare_turns([env], [info])
    assert summarised.text.startswith(MEMORY_HEADER) and "Rehearsal 1:" not in summarised.text
    assert "Done, thanks." in summarised.text  # the policy's own (forced) words
    assert summarised.text != deterministic.text and summarised.stats["memory_tokens"] <= 48
    assert summarised.stats["rehearsal_tokens"] > deterministic.stats["rehearsal_tokens"]  # the summary's tokens count
    with pytest.raises(ValueError, match="summary"):
        PrivateRehearsal(Scripted(), imaginer=KnownWorld(), memory="summary")
