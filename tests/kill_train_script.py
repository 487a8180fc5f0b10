"""Run by ``tests/test_reliability.py``: a tiny EnvACE run that can be SIGKILLed in the middle of a
checkpoint write, then resumed.

Not a test module. Usage: ``kill_train_script.py MODE OUT_DIR`` with MODE ``run`` (train 3 steps),
``stall`` (train, but stall inside the write of checkpoint 2, after the weights and optimizer files are on
disk, printing ``stalled`` so that the parent can kill it there) or ``resume`` (resume and finish). Each
run that finishes writes ``OUT_DIR/final.json`` (its weights hash and steps done) and
``OUT_DIR/final.safetensors`` (its weights).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path

import gymnasium as gym
from safetensors.torch import save_file

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train import checkpoint
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.rewards import register_reward_basis


def _odd_answer_length(ctx) -> float:
    answers = ctx.record.turn_answers
    return float(len((answers[0] if answers else None) or "") % 2)


register_reward_basis("kill_odd_answer_length", _odd_answer_length, overwrite=True)


def main(mode: str, out: Path) -> None:
    bank = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    task = dataclasses.replace(bank.unwrapped.pool[0], reward=("kill_odd_answer_length",), max_turns=1)
    bank.close()

    def env_factory() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", tasks=[task], split=None)

    if mode == "stall":
        save_rng = checkpoint._save_rng

        def stalling(path, *rng):
            if ".ckpt-2.tmp" in str(path):
                print("stalled", flush=True)
                time.sleep(600)
            return save_rng(path, *rng)

        checkpoint._save_rng = stalling
    config = EnvACEConfig(
        backend="real", steps=3, tasks_per_step=2, group_size=4, lr=1e-3, max_new_tokens=16, bf16=False,
        save_every=1, keep_last=5, log_trajectories_every=0, seed=0,
    )  # fmt: skip
    trainer = EnvACETrainer(tiny_policy(seed=0), env_factory, config, out_dir=out, resume=mode == "resume",
                            progress=False)  # fmt: skip
    trainer.train()
    digest = hashlib.sha256()
    weights = {name: p.detach().float().cpu().contiguous() for name, p in trainer.model.named_parameters()}
    for name, tensor in weights.items():
        digest.update(name.encode() + tensor.numpy().tobytes())
    save_file(weights, str(out / "final.safetensors"))  # for a comparison within float tolerance
    (out / "final.json").write_text(json.dumps({"weights": digest.hexdigest(), "step_done": trainer.step_done}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
