"""Quiet means quiet: a ``progress=False`` run of the Python API prints nothing, and the model libraries'
own bars ("Loading weights", "Writing model shards") and notes (peft's deprecation warning) never reach
the user; the CLI's ``--quiet`` is tested with the CLI (tests/test_cli.py)."""

from __future__ import annotations

import warnings

import gymnasium as gym

from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy, tiny_policy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer


def test_a_progress_false_lora_run_with_checkpoints_prints_nothing_and_warns_nothing(capfd, tmp_path):
    policy = tiny_policy(seed=0, sampling=SamplingConfig(1.0, 1.0, 4, 0))
    cfg = EnvACEConfig(
        steps=1, tasks_per_step=1, group_size=2, lr=1e-3, max_new_tokens=4, bf16=False, lora=True, save_every=1
    )
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = EnvACETrainer(policy, lambda: gym.make("EnvACE-ToolCall-v0", split="train"), cfg, tmp_path,
                                progress=False)  # fmt: skip
        trainer.train()
        LMPolicy.from_spec(f"ckpt:{tmp_path / 'ckpt-1'}")  # a load, as the next run would do
    out, err = capfd.readouterr()
    assert (tmp_path / "ckpt-1" / "model.safetensors").exists()  # a checkpoint was written...
    assert out == "" and err == ""  # ...and loaded, with no bar and no line
    # ResourceWarnings are the garbage of earlier tests (an event loop collected here), not this run's output.
    assert [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)] == []
