"""The training recipe, in one place: the learning benchmark runs it, the demo runs it small.

* **task pool**: one-turn tasks of a suite that need at most ``max_calls`` reference calls (the benchmark's
  default: ``builtin/bank``, two calls: look an account up, then act on the id it returned);
* **warm start**: supervised fine-tuning of both roles (actor turns and env-role answers) on the train
  split's reference trajectories: a LoRA adapter of a few MB shipped in the package (`WARM_ADAPTER`,
  written by `train_warm_adapter`, ``make warm-adapter``), merged at `WARM_SCALE` (chosen on
  ``val``: merged whole it leaves RL almost nothing to learn);
* **RL** (`RL_SETTINGS`, chosen on ``val``): LoRA updates, 4 tasks x group 8 per step, temperature
  1.0, 96 new tokens per turn; `imagination_config` is EnvACE under imagination (`IMAGINATION`, chosen on
  ``val``): the env role shown no real result, every imagined episode scored by the checklist bound to what
  it showed, the task reward alone (no penalty on unusable output): no live tool call, no real result.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.quiet import library_bars_off, peft_notes_off
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft

__all__ = [
    "RL_SETTINGS",
    "WARM_ADAPTER",
    "WARM_SCALE",
    "task_pool",
    "IMAGINATION",
    "imagination_config",
    "load_warm_adapter",
    "train_warm_adapter",
]

#: The demo's shipped warm start: a LoRA adapter over the embedded model (``adapter_model.safetensors``).
WARM_ADAPTER = Path(__file__).parent / "data" / "warm_start"

#: The scale the shipped adapter is merged at for RL (``load_warm_adapter(scale=...)``): chosen on ``val`` by
#: benchmarks/warm_start.py (docs/learning.md): 77% greedy ``val`` success, half the groups with a reward spread.
WARM_SCALE = 0.5

#: The RL settings chosen on ``val`` (docs/learning.md): what the learning benchmark's arms and the demo share.
RL_SETTINGS: dict[str, Any] = {
    "tasks_per_step": 4,
    "group_size": 8,
    "lr": 1e-4,
    "lora": True,
    "lora_rank": 16,
    "lora_alpha": 32,
    "temperature": 1.0,
    "max_new_tokens": 96,
}

#: What the shipped adapter was trained with (``train_warm_adapter`` defaults; ``make warm-adapter``).
ADAPTER_SETTINGS = {"suite": "builtin/bank", "max_calls": 2, "steps": 300, "lr": 1e-3, "rank": 16, "examples": 400}


def task_pool(suite: str = "builtin/bank", max_calls: int = 2) -> list:
    """The suite's one-turn tasks that need at most ``max_calls`` reference calls (-1: every task)."""
    from envace_gym.suites import load_suite

    tasks = load_suite(suite)
    if max_calls < 0:
        return list(tasks)
    return [t for t in tasks if len(t.user_turns) == 1 and len(t.reference_calls) <= max_calls]


#: The imagination-only recipe's settings (``envace-blind`` in the learning benchmark, chosen on ``val`` over
#: ``envace-log``, whose env role is shown real results of other train tasks): the policy imagines every tool
#: result (prompted) and is shown no real result at all; imagined episodes are scored by the bound checklist
#: (``imagined_reward="bound"``, the default); the task reward alone trains both roles (``invalid_penalty=0``).
IMAGINATION: dict[str, Any] = {
    "backend": "self",
    "grounding": "none",
    "imagined_reward": "bound",
    "invalid_penalty": 0.0,
}


def imagination_config(**overrides: Any) -> EnvACEConfig:
    """The imagination-only recipe: `RL_SETTINGS` with `IMAGINATION`; no live tool call."""
    return EnvACEConfig(**{**RL_SETTINGS, **IMAGINATION, **overrides})


def load_warm_adapter(policy: LMPolicy, path: str | Path = WARM_ADAPTER, scale: float = 1.0) -> LMPolicy:
    """Merge the LoRA warm-start adapter at ``path`` into ``policy``'s model (in place); returns the policy.

    ``scale`` multiplies the adapter's update before it is merged (peft's ``scale_layer``): 1.0 is the adapter
    as trained; below 1 a weaker warm start, between the base model (0) and the adapter."""
    if not 0.0 <= scale:
        raise ValueError(f"the adapter's merge scale must be >= 0; got {scale}")
    path = Path(path)
    if not (path / "adapter_model.safetensors").is_file():
        raise FileNotFoundError(f"{path}: no warm-start adapter (adapter_model.safetensors): make warm-adapter")
    try:
        from peft import PeftModel
    except ImportError:
        raise RuntimeError("the warm-start adapter needs the peft package: .venv/bin/pip install peft") from None
    from peft.tuners.lora import LoraLayer

    with peft_notes_off(), library_bars_off():
        model = PeftModel.from_pretrained(policy.model, str(path))
    for module in model.modules():
        if isinstance(module, LoraLayer):
            module.scale_layer(scale)
    policy.model = model.merge_and_unload().eval()
    for p in policy.model.parameters():  # peft froze the base weights; the merged model trains as a whole
        p.requires_grad_(True)
    policy.engine.model = policy.model
    policy.engine.clear()
    return policy


def train_warm_adapter(
    out: str | Path = WARM_ADAPTER,
    policy: str = "default",
    device: str = "auto",
    progress: bool = True,
    **settings: Any,
) -> dict[str, Any]:
    """Train the warm-start LoRA adapter on the train split (both roles) and keep only the adapter at ``out``
    (``adapter_model.safetensors``, ``adapter_config.json``, ``warm_start.json`` with the settings and
    summary). Settings default to `ADAPTER_SETTINGS`."""
    import gymnasium as gym

    s = {**ADAPTER_SETTINGS, **settings}
    lm = LMPolicy.from_spec(policy, progress=progress).to(device)
    pool = task_pool(s["suite"], s["max_calls"])
    env = gym.make("EnvACE-ToolCall-v0", tasks=pool, split="train")
    examples = build_sft_examples(env, lm, s["examples"], seed=0, progress=progress, roles=("actor", "env_role"))
    cfg = SFTConfig(steps=s["steps"], lr=s["lr"], seed=0, lora=True, lora_rank=s["rank"], lora_alpha=2 * s["rank"])
    t0 = time.monotonic()
    summary = train_sft(lm, examples, cfg, None, progress=progress, adapter_dir=out)
    info = {"settings": s, "policy": policy, "summary": summary, "seconds": round(time.monotonic() - t0, 1)}
    (Path(out) / "warm_start.json").write_text(json.dumps(info, indent=2))
    (Path(out) / "README.md").unlink(missing_ok=True)  # peft's model-card template: nothing of ours
    return info


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Train the demo's warm-start LoRA adapter (make warm-adapter).")
    parser.add_argument("--out", default=str(WARM_ADAPTER))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=ADAPTER_SETTINGS["steps"])
    args = parser.parse_args()
    print(json.dumps(train_warm_adapter(args.out, device=args.device, steps=args.steps), indent=2))
