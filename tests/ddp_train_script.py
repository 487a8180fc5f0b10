"""Launched by ``tests/test_envace_ddp.py`` under ``accelerate launch`` (2 processes): a tiny EnvACE run.

Not a test module (pytest collects ``test_*.py`` only). Usage: ``ddp_train_script.py OUT_DIR``. Each rank
writes ``OUT_DIR/rank{r}.json``: hashes of its weights before and after training, the summed absolute
weight change, the groups and rewards it played itself, and the metrics ``train()`` returned on that rank.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

import gymnasium as gym
import torch

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.rewards import register_reward_basis

TASKS_PER_STEP, GROUP_SIZE, STEPS = 2, 4, 2


def _odd_answer_length(ctx) -> float:
    """1.0 when the first turn's answer has an odd number of characters: random text gets varied rewards."""
    answers = ctx.record.turn_answers
    answer = answers[0] if answers else None
    return float(len(answer or "") % 2)


register_reward_basis("ddp_odd_answer_length", _odd_answer_length, overwrite=True)


def weights_hash(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def main(out: Path) -> None:
    bank = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    task = dataclasses.replace(bank.unwrapped.pool[0], reward=("ddp_odd_answer_length",), max_turns=1)
    bank.close()

    def env_factory() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", tasks=[task], split=None)

    policy = tiny_policy(seed=0)
    start = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    start_hash = weights_hash(policy.model)
    config = EnvACEConfig(
        backend="real",
        steps=STEPS,
        tasks_per_step=TASKS_PER_STEP,
        group_size=GROUP_SIZE,
        lr=1e-3,
        max_new_tokens=24,
        bf16=False,
        save_every=2,
        keep_last=1,
        log_trajectories_every=0,
    )
    trainer = EnvACETrainer(policy, env_factory, config, out_dir=out, progress=False)
    played: list[dict] = []  # this rank's own share of each step's rollouts
    rollout = trainer.rollout

    def recording_rollout(step: int):
        trajs, groups = rollout(step)
        played.append({"step": step, "groups": sorted(set(groups)), "rewards": [t.reward for t in trajs]})
        return trajs, groups

    trainer.rollout = recording_rollout
    records = trainer.train()
    change = sum(float((p.detach() - start[n]).abs().sum()) for n, p in policy.model.named_parameters())
    summary = {
        "rank": trainer.dist.rank,
        "world": trainer.dist.world,
        "env_rank": int(os.environ.get("RANK", "0")),
        "env_world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "n_local_envs": len(trainer.envs),
        "start_hash": start_hash,
        "final_hash": weights_hash(policy.model),
        "abs_change": change,
        "played": played,
        "metrics": records,
    }
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    (out / f"rank{rank}.json").write_text(json.dumps(summary, indent=1))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
