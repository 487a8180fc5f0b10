"""Launched by ``tests/test_envace_ddp.py`` under ``accelerate launch`` (2 processes): a tiny EnvACE run.

Not a test module (pytest collects ``test_*.py`` only). Usage: ``ddp_train_script.py OUT_DIR``. Each rank
writes ``OUT_DIR/rank{r}.json``: hashes of its weights before and after training, the summed absolute
weight change, the groups and rewards it played itself, the samples it trained on, the passes it made with
nothing to train (``idle_passes``, per step) and the metrics ``train()`` returned on that rank.

The rewards are scripted (:data:`SCORES`), not read from what the random model sampled, so that the run is the
same kind of run on any CPU: every group has rewards that differ, except rank 1's at step 2, which are all 0:
that group has no gradient, so rank 1 has no micro-batch to train while rank 0 has several
(``micro_batch_tokens`` is small); it must still meet rank 0's gradient reduction. At step 1 the ranks' patterns
differ, so their advantages, and so their local gradients, differ whatever they sampled.
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
import envace_gym.agents.train.envace as trainer_module
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer

TASKS_PER_STEP, GROUP_SIZE, STEPS = 2, 4, 2


#: (rank, step) -> the scores of that rank's ``GROUP_SIZE`` episodes of the step (one group each).
SCORES = {
    (0, 1): [1.0, 0.0, 1.0, 0.0],
    (1, 1): [1.0, 1.0, 0.0, 0.0],
    (0, 2): [0.0, 1.0, 0.0, 1.0],
    (1, 2): [0.0, 0.0, 0.0, 0.0],
}


def weights_hash(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(name.encode())
        digest.update(p.detach().to(torch.float32).contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()


def config() -> EnvACEConfig:
    return EnvACEConfig(
        backend="real",
        steps=STEPS,
        tasks_per_step=TASKS_PER_STEP,
        group_size=GROUP_SIZE,
        lr=1e-3,
        max_new_tokens=24,
        bf16=False,
        micro_batch_tokens=64,
        save_every=2,
        keep_last=1,
        log_trajectories_every=0,
    )


SAMPLE_FIELDS = ("group", "role", "input_ids", "loss_mask", "old_logprobs", "reward", "valid", "advantage")


def main(out: Path) -> None:
    bank = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    task = dataclasses.replace(bank.unwrapped.pool[0], max_turns=1)
    bank.close()

    def env_factory() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", tasks=[task], split=None)

    policy = tiny_policy(seed=0)
    start = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    start_hash = weights_hash(policy.model)
    trainer = EnvACETrainer(policy, env_factory, config(), out_dir=out, progress=False)
    played: list[dict] = []  # this rank's own share of each step's rollouts
    samples: list[list[dict]] = []
    idle = [0] * STEPS
    rollout, build = trainer.rollout, trainer.samples
    idle_loss = trainer_module.idle_loss

    def recording_rollout(step: int):
        trajs, groups = rollout(step)
        played.append({"step": step, "groups": sorted(set(groups)), "rewards": [t.reward for t in trajs]})
        return trajs, groups

    def scoring(trajs):
        rewards = SCORES[trainer.rank, played[-1]["step"]]
        played[-1]["scored"] = rewards
        return rewards

    def recording_samples(*args):
        made = build(*args)
        samples.append([{k: getattr(s, k) for k in SAMPLE_FIELDS} for s in made])
        return made

    def counting_idle_loss(*args):
        idle[len(played) - 1] += 1
        return idle_loss(*args)

    trainer.rollout, trainer.score, trainer.samples = recording_rollout, scoring, recording_samples
    trainer_module.idle_loss = counting_idle_loss  # the trainer's pass for a rank with nothing left to train
    records = trainer.train()
    change = sum(float((p.detach() - start[n]).abs().sum()) for n, p in policy.model.named_parameters())
    summary = {
        "rank": trainer.rank,
        "world": trainer.world,
        "env_rank": int(os.environ.get("RANK", "0")),
        "env_world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "n_local_envs": len(trainer.envs),
        "start_hash": start_hash,
        "final_hash": weights_hash(policy.model),
        "abs_change": change,
        "played": played,
        "samples": samples,
        "idle_passes": idle,
        "metrics": records,
    }
    out.mkdir(parents=True, exist_ok=True)
    rank = int(os.environ.get("RANK", "0"))
    (out / f"rank{rank}.json").write_text(json.dumps(summary, indent=1))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
