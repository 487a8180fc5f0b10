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
from doubles import alternating_rewards, free_port
from reference_update import plain_update

import envace_gym  # noqa: F401
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer


def _one_turn_task():
    bank = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    return dataclasses.replace(bank.unwrapped.pool[0], max_turns=1)


def test_single_process_update_equals_the_plain_torch_update():
    """Every step trains: the rewards are scripted (`alternating_rewards`: each group gets 1, 0, 1, 0), not
    sampled, so that the comparison is never of two updates with nothing to train."""
    task = _one_turn_task()

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
    trainer.score = alternating_rewards
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


@pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`", "ignore:When using ``NO_SHARD``")
def test_fsdp_branch_generates_and_saves_from_a_whole_copy_refreshed_after_each_update(monkeypatch, tmp_path):
    """The trainer's FSDP branch on CPU, one process. accelerate picks FSDP only on GPUs, so here its choice is
    patched and torch's own FSDP stands in for ``accelerator.prepare`` (world size 1: flattened, not sharded):
    generation runs on a whole copy, and after training that copy holds the trained weights (FSDP's full
    state dict), as does the checkpoint. Sharding itself, over several GPUs, has not run."""
    import functools

    import accelerate
    import torch.distributed as dist
    from safetensors.torch import load_file
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    from envace_gym.agents.train import distributed, envace

    def prepare(self, wrapper, optimizer, scheduler):
        layer = {type(wrapper.model.model.layers[0])}
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layer)
        sharded = FSDP(wrapper, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
        opt = torch.optim.AdamW(sharded.parameters(), lr=optimizer.param_groups[0]["lr"])
        return sharded, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    monkeypatch.setattr(distributed, "uses_fsdp", lambda accelerator: True)
    monkeypatch.setattr(envace, "uses_fsdp", lambda accelerator: True)
    monkeypatch.setattr(accelerate.Accelerator, "prepare", prepare)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        task = _one_turn_task()
        policy = tiny_policy(seed=0)
        start = {k: v.clone() for k, v in policy.model.state_dict().items()}
        cfg = EnvACEConfig(
            backend="real",
            steps=2,
            tasks_per_step=1,
            group_size=4,
            lr=1e-3,
            max_new_tokens=24,
            bf16=False,
            save_every=2,
            log_trajectories_every=0,
        )
        make = lambda: gym.make("EnvACE-ToolCall-v0", tasks=[task], split=None)  # noqa: E731
        trainer = EnvACETrainer(policy, make, cfg, out_dir=tmp_path, progress=False)
        trainer.score = alternating_rewards  # every step has rows to train, whatever was sampled
        assert policy.model is not trainer.model and policy.engine.model is policy.model
        records = trainer.train()
        full = {k.removeprefix("model."): v for k, v in distributed.full_state_dict(None, trainer.wrapped).items()}
    finally:
        dist.destroy_process_group()
    assert all(r["trained_rows"] > 0 for r in records)
    rollout = policy.model.state_dict()
    assert any(not torch.equal(rollout[k], start[k]) for k in start)
    assert all(torch.equal(rollout[k], full[k]) for k in full)
    saved = load_file(tmp_path / "ckpt-2" / "model.safetensors")
    assert all(torch.equal(saved[k], rollout[k]) for k in saved)
