"""The trainer runs through ``accelerate.Accelerator``; in one process its update is the plain-torch one: the
same samples, through the project's objective (``loss.backward``, ``clip_grad_norm_``, ``AdamW.step``), give
the same metrics and weights. (The 2-process run is checked against the same reference in
``test_envace_ddp.py``.)"""

from __future__ import annotations

import copy
import dataclasses

import gymnasium as gym
import pytest
import torch
from reference_update import plain_update

import envace_gym  # noqa: F401
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.rewards import register_reward_basis


def _odd_answer_length(ctx) -> float:
    answers = ctx.record.turn_answers
    return float(len((answers[0] if answers else None) or "") % 2)


register_reward_basis("acc_odd_answer_length", _odd_answer_length, overwrite=True)


def test_single_process_update_equals_the_plain_torch_update():
    bank = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    task = dataclasses.replace(bank.unwrapped.pool[0], reward=("acc_odd_answer_length",), max_turns=1)

    def make() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", tasks=[task], split=None)

    policy = tiny_policy(seed=0)
    reference = copy.deepcopy(policy.model)
    frozen = copy.deepcopy(policy.model).eval()
    # Several micro-batches per step, two PPO epochs, KL, warm-up, and a clip low enough to act.
    cfg = EnvACEConfig(
        backend="real",
        steps=3,
        tasks_per_step=2,
        group_size=4,
        lr=1e-3,
        max_new_tokens=24,
        bf16=False,
        save_every=100,
        ppo_epochs=2,
        kl_coef=0.05,
        micro_batch_tokens=64,
        grad_clip=0.1,
        warmup_steps=2,
        log_trajectories_every=0,
    )
    trainer = EnvACETrainer(policy, make, cfg, progress=False)
    assert (trainer.rank, trainer.world, trainer.is_main) == (0, 1, True)
    seen = []
    build = trainer.samples
    trainer.samples = lambda *a: seen.append(build(*a)) or seen[-1]
    records = trainer.train()

    expected = plain_update(reference, frozen, seen, cfg, policy.engine.pad_id)
    assert len(records) == len(expected) == 3
    assert all(r["trained_rows"] > 0 for r in records)  # there was a gradient every step
    assert any(e["grad_norm"] > cfg.grad_clip for e in expected)  # and the clip acted
    for got, want in zip(records, expected, strict=True):  # the record rounds to 6 decimals
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-6)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], abs=1e-6)
    start = tiny_policy(seed=0).model.state_dict()
    trained, ref = policy.model.state_dict(), reference.state_dict()
    assert any(not torch.equal(trained[k], start[k]) for k in start)  # the weights moved
    for k in ref:
        torch.testing.assert_close(trained[k], ref[k], rtol=1e-5, atol=1e-7)
