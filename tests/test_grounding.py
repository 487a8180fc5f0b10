"""What real results the env role is shown (its few-shot grounding), and that each one shown is counted: the
task's own reference results (``reference``), other tasks' logged results (``log``), or none (``blind``)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.backends import ToolLog
from envace_gym.backends.ledger import LEDGER
from envace_gym.imagination import RealResultImaginer, SelfRehearsalEnv


class _Recording(RealResultImaginer):
    """A perfect env role that keeps every prompt it was sent."""

    def __init__(self, env):
        super().__init__(env)
        self.prompts: list[str] = []

    def imagine(self, request):
        self.prompts.append(json.dumps(request.messages))
        return super().imagine(request)


def _balance_tasks():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    pool = [t for t in env.unwrapped.pool if [c.name for c in t.reference_calls] == ["get_balance"]]
    return env, pool[0], pool[1:6]


def _marker(task) -> str:
    """The task's real balance as the env role would see it in an example: a value no other task shares here."""
    return json.dumps(task.reference_calls[0].result["balance"])


def _play(env, task, grounding, log=None):
    imaginer = _Recording(env)
    wrapped = SelfRehearsalEnv(env, imaginer, grounding=grounding, log=log, log_targets=False)
    before = LEDGER.snapshot()["logged"]
    collect([wrapped], OraclePolicy(env.unwrapped.suite), 1, task_ids=[task.id], progress=False)
    return imaginer.prompts, LEDGER.snapshot()["logged"] - before


def test_reference_grounding_shows_the_tasks_own_result_and_counts_it_as_logged():
    env, task, _ = _balance_tasks()
    prompts, logged = _play(env, task, "reference")
    assert len(prompts) == 1 and _marker(task) in prompts[0]
    assert logged == 1  # one reference call shown, one real result counted


def test_blind_grounding_shows_no_real_result_and_counts_none():
    env, task, others = _balance_tasks()
    prompts, logged = _play(env, task, "none")
    assert len(prompts) == 1 and logged == 0
    for t in [task, *others]:  # no real balance of any task reaches the prompt
        assert _marker(t) not in prompts[0]


def test_log_grounding_shows_other_tasks_results_never_the_tasks_own():
    env, task, others = _balance_tasks()
    assert len({_marker(t) for t in [task, *others]}) == 1 + len(others)  # the markers tell the tasks apart
    log = ToolLog.from_reference([task, *others])
    prompts, logged = _play(env, task, "log", log)
    assert len(prompts) == 1 and _marker(task) not in prompts[0]
    shown = [t for t in others if _marker(t) in prompts[0]]
    assert len(shown) == logged == 3  # MAX_EXAMPLES results of other tasks, each counted
    again, _ = _play(env, task, "log", log)
    assert again == prompts  # the examples are drawn reproducibly


def test_log_grounding_needs_a_log():
    with pytest.raises(ValueError, match="tool log"):
        EnvACEConfig(grounding="log")
    env, task, _ = _balance_tasks()
    with pytest.raises(ValueError, match="log"):
        _play(env, task, "log", None)


def test_the_trainers_reference_log_holds_train_tasks_only(tmp_path):
    """``--tool-log reference`` under an env that draws from every split: the log (what ``log`` grounding
    shows the env role) holds the train split's results only, never a val, test-id or test task's."""
    from envace_gym.agents.lm.policy import tiny_policy
    from envace_gym.agents.train.envace import EnvACETrainer

    def make():
        return gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split=None)

    cfg = EnvACEConfig(backend="self", grounding="log", tool_log="reference", steps=1, tasks_per_step=1, group_size=1)
    trainer = EnvACETrainer(tiny_policy(), make, cfg, tmp_path, progress=False)
    splits = {t.id: t.split for t in make().unwrapped.pool}
    assert {splits[i] for i in trainer.tool_log.task_ids} == {"train"}
    logged = {json.loads(line)["task_id"] for line in (tmp_path / "tool_log.jsonl").read_text().splitlines()}
    assert logged == trainer.tool_log.task_ids
