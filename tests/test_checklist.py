"""The checklist reward: items from the reference, turns from the messages, a scripted judge's verdicts."""

from __future__ import annotations

import dataclasses
import json
import re

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.scripted import OraclePolicy, play_episode
from envace_gym.agents.train.checklist import ChecklistItem, ChecklistJudge, checklist_items, split_turns
from envace_gym.tasks import RefTurn


@pytest.fixture(scope="module")
def env():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    yield env
    env.close()


@pytest.fixture(scope="module")
def multi(env):
    """A multi-turn task with calls and required strings in every turn, and the oracle's messages."""
    task = next(
        t
        for t in env.unwrapped.pool
        if len(t.user_turns) > 1 and all(r.calls and r.answer_contains for r in t.reference)
    )
    info = play_episode(env, OraclePolicy(env.unwrapped.suite), task.id)
    assert info["success"]
    return task, info["messages"]


def scripted_judge(prompt: str) -> str:
    """Says yes when the item's tool was called / its string was answered in the turn's assistant lines."""
    transcript, _, requirement = prompt.rpartition("\n\nRequirement for the assistant: ")
    assistant = "\n".join(line for line in transcript.splitlines() if line.startswith("[assistant]"))
    call = re.match(r"calls (\S+) with", requirement)
    if call:
        return "yes" if f"calls {call.group(1)} with" in assistant else "no"
    wanted = re.match(r'the answer states "(.*)"', requirement).group(1)
    return "Yes." if wanted in assistant else "No."


def test_items_follow_the_reference(multi):
    task, _ = multi
    items = checklist_items(task)
    n_calls = sum(len(r.calls) for r in task.reference)
    n_strings = sum(len(r.answer_contains) for r in task.reference)
    assert len(items) == n_calls + n_strings
    expected = [
        (turn, "call", f"calls {c.name} with {json.dumps(c.arguments)}")
        for turn, r in enumerate(task.reference)
        for c in r.calls
    ] + [
        (turn, "answer", f'the answer states "{s}"') for turn, r in enumerate(task.reference) for s in r.answer_contains
    ]
    assert sorted((i.turn, i.kind, i.text) for i in items) == sorted(expected)
    assert {i.turn for i in items} == set(range(len(task.user_turns)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        items[0].turn = 5


def test_split_turns(multi):
    task, messages = multi
    chunks = split_turns(messages)
    assert len(chunks) == len(task.user_turns)
    assert [c[0]["content"] for c in chunks] == list(task.user_turns)
    assert all(m["role"] != "user" for c in chunks for m in c[1:])
    assert [m for c in chunks for m in c] == messages[1:]  # everything but the system message
    assert split_turns(messages[:1]) == []


def test_scripted_judge_rewards_the_oracle_and_not_a_truncated_episode(multi):
    task, messages = multi
    judge = ChecklistJudge(scripted_judge)
    score, verdicts = judge.grade(task, messages)
    assert score == 1.0 and all(met for _, met in verdicts)
    assert judge(task, messages) == 1.0
    truncated = judge(task, messages[:2])  # system + first user message
    assert truncated < score
    assert truncated == 0.0


def test_later_turn_unreached_is_not_met_without_asking(multi):
    task, messages = multi
    asked: list[str] = []

    def judge(prompt: str) -> str:
        asked.append(prompt)
        return scripted_judge(prompt)

    second_user = next(i for i, m in enumerate(messages) if m["role"] == "user" and i > 1)
    score, verdicts = ChecklistJudge(judge).grade(task, messages[:second_user])
    first = [met for item, met in verdicts if item.turn == 0]
    later = [met for item, met in verdicts if item.turn > 0]
    assert all(first) and not any(later)
    assert score == pytest.approx(len(first) / len(verdicts))
    assert len(asked) == len(first)


def test_a_raising_judge_costs_that_item_only(multi):
    task, messages = multi
    first_call = checklist_items(task)[0]
    assert first_call.kind == "call"

    def flaky(prompt: str) -> str:
        if prompt.endswith(first_call.text + "\n\nIs the requirement met? Answer yes or no."):
            raise RuntimeError("judge down")
        return scripted_judge(prompt)

    score, verdicts = ChecklistJudge(flaky).grade(task, messages)
    n = len(verdicts)
    assert score == pytest.approx((n - 1) / n)
    assert dict(verdicts)[first_call] is False
    assert ChecklistJudge(lambda _: 1 / 0)(task, messages) == 0.0


@pytest.mark.parametrize(
    ("reply", "met"),
    [("Yes.", True), ("no", False), ("", False), ("  **YES** it is", True), ("Met", True), ("1", True),
     ("true!", True), ("Not met", False), ("maybe yes", False)],
)  # fmt: skip
def test_reply_parsing(multi, reply, met):
    task, messages = multi
    assert ChecklistJudge(lambda _: reply)(task, messages) == (1.0 if met else 0.0)


def test_a_task_without_items_scores_whether_it_ended_with_an_answer(multi):
    task, messages = multi
    bare = dataclasses.replace(task, reference=tuple(RefTurn(answer="ok") for _ in task.user_turns))
    assert checklist_items(bare) == []
    judge = ChecklistJudge(lambda _: pytest.fail("no item, no question"))
    assert judge.grade(bare, messages) == (1.0, [])
    assert judge(bare, messages[:-1]) == 0.0  # ends with a tool result
    assert judge(bare, messages[:2]) == 0.0  # ends with the user's question
    assert judge(bare, []) == 0.0


def test_the_prompt_shows_the_turn_with_calls_and_results(multi):
    task, messages = multi
    prompts: list[str] = []
    ChecklistJudge(lambda p: prompts.append(p) or "yes").grade(task, messages)
    first_turn = split_turns(messages)[0]
    tool_result = next(m["content"] for m in first_turn if m["role"] == "tool")
    prompt = prompts[0]
    assert "strict grader" in prompt and "yes or no" in prompt
    assert task.user_turns[0] in prompt and task.user_turns[1] not in prompt
    assert tool_result in prompt
    assert checklist_items(task)[0].text in prompt.split("Requirement")[0]  # the executed call, in item wording
    assert "banking assistant" not in prompt  # the agent's system prompt is not shown


class _FakePolicy:
    def __init__(self) -> None:
        self.samplings: list = []

    def act(self, messages, tools=(), sampling=None):
        self.samplings.append(sampling)
        assert [m["role"] for m in messages] == ["system", "user"]
        return type("Gen", (), {"text": "yes"})()


def test_a_string_spec_is_loaded_lazily_once_and_decodes_greedily(multi, monkeypatch):
    from envace_gym.agents.lm.policy import LMPolicy

    task, messages = multi
    loaded: list[str] = []
    fake = _FakePolicy()

    def from_spec(cls, spec, *args, **kwargs):
        loaded.append(spec)
        return fake

    monkeypatch.setattr(LMPolicy, "from_spec", classmethod(from_spec))
    judge = ChecklistJudge("ckpt:/nowhere", max_new_tokens=3)
    assert loaded == []
    assert judge(task, messages) == 1.0
    assert judge(task, messages) == 1.0
    assert loaded == ["ckpt:/nowhere"]
    assert len(fake.samplings) == 2 * len(checklist_items(task))
    assert all(s.temperature == 0 and s.max_new_tokens == 3 for s in fake.samplings)


def test_an_act_without_sampling_is_called_plainly(multi):
    task, messages = multi

    class Plain:
        def act(self, messages):
            return type("Gen", (), {"text": "no"})()

    assert ChecklistJudge(Plain())(task, messages) == 0.0


def test_the_tiny_policy_end_to_end(multi):
    task, messages = multi
    score, verdicts = ChecklistJudge("tiny", max_new_tokens=2).grade(task, messages)
    assert 0.0 <= score <= 1.0
    assert len(verdicts) == len(checklist_items(task))
    assert all(isinstance(item, ChecklistItem) and isinstance(met, bool) for item, met in verdicts)
