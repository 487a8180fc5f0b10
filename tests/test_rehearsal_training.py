"""Rehearsal-aware training (``EnvACEConfig.rehearsal_fraction``): a seeded share of whole task groups plays
with a private-rehearsal memory in context; the memory is in the trained actor rows' prompt and never in
their completion, the rehearsals themselves are not trained and make no live call, and with the option off
nothing changes."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import gymnasium as gym
import pytest
from forced import ForcedTokens

import envace_gym  # noqa: F401
from envace_gym import ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rehearsal import PrivateRehearsal, rehearsal_tokens
from envace_gym.agents.rehearsal.memory import MEMORY_HEADER
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.backends import LEDGER

_BASE = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train").unwrapped
_TASK = next(t for t in _BASE.pool if t.reference_calls and t.reference_calls[0].name == "get_balance")
TASK = dataclasses.replace(_TASK, max_turns=1)  # one message, then the episode is scored
ACTION = format_calls([ToolCall("get_balance", _TASK.reference_calls[0].arguments)])


def make_env() -> gym.Env:
    return gym.make("EnvACE-ToolCall-v0", tasks=[TASK], split=None)


def _config(**kw) -> EnvACEConfig:
    base = dict(steps=1, tasks_per_step=1, group_size=2, max_new_tokens=48, bf16=False, save_every=100, lr=1e-3)
    return EnvACEConfig(**{**base, **kw})


@pytest.fixture
def forced(monkeypatch):
    """A tiny model whose every generation (actor and env role, committed episodes and rehearsals) is
    ACTION: a well-formed get_balance call (as an env-role answer it is unusable, so imagined episodes end)."""
    policy = tiny_policy(seed=0, sampling=SamplingConfig(1.0, 1.0, 48, 0))
    monkeypatch.setattr(engine_module, "_sample", ForcedTokens(policy, [ACTION] * 400).sample)
    return policy


@pytest.fixture
def rehearsals(monkeypatch):
    """Every rehearsal trajectory PrivateRehearsal plays (they never leave its hook otherwise)."""
    played = []
    play = PrivateRehearsal._play

    def spy(self, forks, memos):
        out = play(self, forks, memos)
        played.extend(out)
        return out

    monkeypatch.setattr(PrivateRehearsal, "_play", spy)
    return played


def _spy_samples(trainer):
    seen = {}
    build = trainer.samples

    def spy(trajs, groups, rewards):
        seen.update(trajs=list(trajs), groups=list(groups), samples=build(trajs, groups, rewards))
        return seen["samples"]

    trainer.samples = spy
    return seen


def _decoded(tokenizer, ids, mask, keep):
    return tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == keep])


def test_the_memory_is_prompt_of_the_trained_actor_rows_and_the_rehearsals_are_never_trained(
    forced, rehearsals, tmp_path
):
    cfg = _config(backend="self", rehearsal_fraction=1.0, rehearsal_budget=2)
    trainer = EnvACETrainer(forced, make_env, cfg, tmp_path / "run", progress=False)
    seen = _spy_samples(trainer)
    (record,) = trainer.train()
    trajs, samples, tok = seen["trajs"], seen["samples"], forced.tokenizer
    assert len(trajs) == 2 and all(len(t.notes) == 1 and t.notes[0]["rehearsals"] == 2 for t in trajs)
    actor_rows = [s for s in samples if s.role == "actor"]
    assert len(actor_rows) == 2
    for row, traj in zip(actor_rows, trajs, strict=True):
        first = row.loss_mask.index(1)
        assert MEMORY_HEADER in tok.decode(row.input_ids[:first])  # the prompt: context
        assert "Private rehearsal" not in _decoded(tok, row.input_ids, row.loss_mask, 1)  # never a trained token
        assert ACTION.strip() in _decoded(tok, row.input_ids, row.loss_mask, 1)  # what the actor did is
        # the note's tokens are the stream's prompt, logprob 0 (nobody sampled them)
        note_end = first - 1
        assert set(traj.roles[:note_end]) == {"prompt"} and not any(row.old_logprobs[:first])
    # The rehearsals played (2 per episode), each imagined its call through the env role ...
    assert len(rehearsals) == 4 and all(t.calls_ok == 1 and t.env_role_samples for t in rehearsals)
    assert all("get_balance(" in t.notes[0]["text"] for t in trajs)
    # ... and none of it is a row: env-role rows are the committed episodes' own imagined calls only.
    env_rows = [s for s in samples if s.role == "env_role"]
    committed = [s for t in trajs for s in t.env_role_samples]
    assert len(env_rows) == len(committed) == 2
    assert [r.input_ids for r in env_rows] == [list(s.prompt_ids) + list(s.completion_ids) for s in committed]
    assert all(MEMORY_HEADER not in tok.decode(r.input_ids) for r in env_rows)  # the env never sees it
    assert len(samples) == 4
    # The costs are in the step's record, and no call was live.
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lines == [record]
    assert record["rehearsed_episodes"] == 2 and record["rehearsals"] == 4
    assert record["rehearsal_tokens"] == sum(rehearsal_tokens(t) for t in rehearsals) > 0
    assert record["live_calls"] == record["live_calls_total"] == 0
    saved = (tmp_path / "run" / "config.toml").read_text()
    assert "rehearsal_fraction = 1.0" in saved and "rehearsal_budget = 2" in saved


def test_on_real_tools_only_the_committed_calls_are_live(forced, rehearsals):
    cfg = _config(backend="real", rehearsal_fraction=1.0, rehearsal_budget=2)
    before = LEDGER.snapshot()
    (record,) = EnvACETrainer(forced, make_env, cfg, progress=False).train()
    live = LEDGER.snapshot()["live"] - before["live"]
    assert len(rehearsals) == 4 and all(t.calls_ok == 1 for t in rehearsals)  # each rehearsal made its call
    assert record["live_calls"] == live == 2  # only the two committed episodes' calls reached the tools
    assert record["rehearsals"] == 4 and record["rehearsed_episodes"] == 2


def test_half_of_the_groups_rehearse_whole_by_a_seeded_rule(forced):
    cfg = _config(backend="self", tasks_per_step=4, group_size=2, rehearsal_fraction=0.5, rehearsal_budget=1)
    trainer = EnvACETrainer(forced, make_env, cfg, progress=False)
    picked = trainer.rehearsal_groups(1)
    assert len(picked) == 2
    trajs, groups = trainer.rollout(1)
    with_memory = {g for t, g in zip(trajs, groups, strict=True) if t.notes}
    without = {g for t, g in zip(trajs, groups, strict=True) if not t.notes}
    assert with_memory == {f"s1g{g}" for g in picked} and not with_memory & without  # whole groups
    assert all(MEMORY_HEADER in t.notes[0]["text"] for t in trajs if t.notes)
    # The rule: the run's seed, the step (and filter_groups' extra draw); the same on every run.
    draws = [tuple(trainer.rehearsal_groups(s, b)) for s in range(1, 30) for b in (0, 1)]
    assert all(len(d) == 2 for d in draws) and len(set(draws)) > 1
    for seed, same in ((0, True), (1, False)):
        host = SimpleNamespace(cfg=dataclasses.replace(cfg, seed=seed))
        again = [tuple(EnvACETrainer.rehearsal_groups(host, s, b)) for s in range(1, 30) for b in (0, 1)]
        assert (again == draws) is same


@pytest.mark.parametrize(("fraction", "n", "sizes"), [(0.5, 3, {1, 2}), (1.0, 3, {3}), (0.25, 8, {2}), (0.0, 4, {0})])
def test_the_share_of_groups_is_exact_in_expectation(fraction, n, sizes):
    host = SimpleNamespace(cfg=SimpleNamespace(tasks_per_step=n, rehearsal_fraction=fraction, seed=0))
    counts = [len(EnvACETrainer.rehearsal_groups(host, step)) for step in range(400)]
    assert set(counts) == sizes
    assert abs(sum(counts) / len(counts) - fraction * n) < 0.1


def test_fraction_zero_changes_nothing():
    """Off (the default, or 0.0 with any budget), the step plays the bare policy: the same rows, no note."""
    out = []
    for extra in ({}, {"rehearsal_fraction": 0.0, "rehearsal_budget": 3}):
        policy = tiny_policy(seed=0, sampling=SamplingConfig(1.0, 1.0, 16, 0))
        cfg = _config(backend="self", tasks_per_step=2, max_new_tokens=16, **extra)
        trainer = EnvACETrainer(policy, make_env, cfg, progress=False)
        assert trainer.rehearsal_groups(1) == [] and trainer._actor(1, 0, policy.sampling, 0) is policy
        trajs, groups = trainer.rollout(1)
        assert not any(t.notes for t in trajs)
        rows = trainer.samples(trajs, groups, [t.reward for t in trajs])
        out.append([(s.group, s.role, s.input_ids, s.loss_mask, s.old_logprobs, s.reward) for s in rows])
    assert out[0] == out[1] and out[0]


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"rehearsal_fraction": 1.5}, r"--rehearsal-fraction\) must be in \[0, 1\]"),
        ({"rehearsal_fraction": -0.1}, r"--rehearsal-fraction\) must be in \[0, 1\]"),
        ({"rehearsal_budget": 0}, r"--rehearsal-budget\) must be >= 1"),
    ],
)
def test_bad_rehearsal_settings_are_one_line_errors(kw, says):
    with pytest.raises(ValueError, match=says) as err:
        EnvACEConfig(**kw)
    assert "\n" not in str(err.value)
