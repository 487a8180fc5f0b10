"""Launched by ``tests/test_envace_ddp.py`` under ``accelerate launch`` (2 processes): a tiny SFT warm start.

Not a test module. Usage: ``ddp_sft_script.py OUT_DIR``. Each rank writes ``OUT_DIR/sft-rank{r}.json``: hashes
of its weights before and after training and the summary ``train_sft`` returned; the run itself goes to
``OUT_DIR/sft``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import gymnasium as gym
import torch
from ddp_train_script import weights_hash

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft

STEPS = 3


def main(out: Path) -> None:
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    policy = tiny_policy(seed=0)
    examples = build_sft_examples(env, policy, max_examples=4, progress=False)
    start = weights_hash(policy.model)
    cfg = SFTConfig(steps=STEPS, lr=1e-3, batch_size=1, warmup_steps=0, bf16=False, max_tokens=256)
    summary = train_sft(policy, examples, cfg, out_dir=out / "sft", progress=False)
    rank = int(os.environ.get("RANK", "0"))
    record = {"start_hash": start, "final_hash": weights_hash(policy.model), "summary": summary}
    (out / f"sft-rank{rank}.json").write_text(json.dumps(record))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
