"""``EnvACEConfig``: every setting of an EnvACE training run, one flat documented dataclass (TRL style).

Each field is a flag of ``envace train`` and a key of its ``config.toml``. The defaults are the reference
code's (Within-yao/EnvACE run script): group 4, mean-centred role-wise GRPO, clip 0.2 / dual-clip 3.0, one
PPO epoch, KL off, invalid-output penalty 0.1; except the learning rate, which by default is chosen by the
model's size (`default_lr`): the reference code's 1e-6 is for 7B models, and the embedded 135M model
needs a larger one.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envace_gym.backends.spec import SELF_KINDS
from envace_gym.env import IMAGINED_REWARDS
from envace_gym.imagination.prompt import GROUNDINGS

__all__ = [
    "BACKENDS",
    "ENV_ROLE_REWARDS",
    "REWARDS",
    "SCALE_REWARDS",
    "EnvACEConfig",
    "config_to_toml",
    "default_lr",
    "load_config",
    "read_config_values",
]

#: What ``--backend`` takes: the backend kinds (envace_gym.backends.spec) a trainer can compose with the
#: real env its ``env_factory`` returns.
BACKENDS = (*SELF_KINDS, "real", "simulator")
REWARDS = ("env", "checklist")
SCALE_REWARDS = ("none", "group")
ENV_ROLE_REWARDS = ("task", "fidelity", "mix")

#: `default_lr`'s thresholds: models of at most this many parameters get `SMALL_MODEL_LR`.
SMALL_MODEL_PARAMS = 1_000_000_000
#: The learning rate of the demo and of ``benchmarks/learning.py`` for the embedded 135M model (SmolLM2-135M).
SMALL_MODEL_LR = 2e-5
#: The reference code's learning rate (Within-yao/EnvACE run script), for its 7B models.
LARGE_MODEL_LR = 1e-6


def default_lr(num_parameters: int) -> float:
    """The learning rate ``EnvACEConfig(lr=None)`` resolves to for a model of ``num_parameters`` weights.

    * at most 1B parameters (`SMALL_MODEL_PARAMS`): 2e-5, the setting of the demo and of the learning
      benchmark (``benchmarks/learning.py``'s default, docs/learning.md) for the embedded 135M model. It was
      chosen a priori, not tuned (the one-GPU ``--full`` setting of that benchmark uses 1e-5);
    * above: 1e-6, the reference code's (Within-yao/EnvACE run script) for its 7B models.

    Nothing between 135M and 7B was measured: the 1B cut is where the two settings' regimes meet, not a
    finding; set ``lr`` (``--lr``) for a model in between or for LoRA adapters (which usually want a larger
    one: the warm-start recipe's LoRA SFT uses 1e-3).
    """
    if num_parameters <= 0:
        raise ValueError(f"num_parameters must be > 0, got {num_parameters}")
    return SMALL_MODEL_LR if num_parameters <= SMALL_MODEL_PARAMS else LARGE_MODEL_LR


@dataclass
class EnvACEConfig:
    """Settings of an EnvACE (role-wise GRPO) training run; each field is an ``envace train`` flag."""

    # ---- what is trained, against what
    backend: str = field(
        default="self",
        metadata={
            "help": "who answers tool calls during training: self (the policy imagines them from an env-role "
            "prompt: EnvACE), self-inline (it writes them in its own context), real (plain GRPO on the real "
            "backends) or simulator (a frozen external model, --simulator)"
        },
    )
    simulator: str | None = field(
        default=None,
        metadata={"help": "the frozen simulator's LM spec for --backend simulator; default: the starting policy"},
    )
    train_env_role: bool = field(
        default=True, metadata={"help": "train the env role's generations too (false: the masked-role ablation)"}
    )
    real_fraction: float = field(
        default=0.0,
        metadata={
            "help": "grounded imagination: this share of imagined calls also runs on the real backend and the env "
            "role gets a supervised loss toward the real result (the actor still sees the imagined one)"
        },
    )
    grounding_coef: float = field(default=1.0, metadata={"help": "weight of the grounding loss (--real-fraction)"})
    grounding: str = field(
        default="reference",
        metadata={
            "help": "few-shot real results in the env-role prompt: reference (the task's own reference results), "
            "log (other train tasks' results from --tool-log, never the task's own; the log then gives no target "
            "and no fidelity score) or none (no real result in the prompt); each result shown counts as logged"
        },
    )
    tool_log: str | None = field(
        default=None,
        metadata={
            "help": "ground the env role on a recorded tool log, with no live call: 'reference' (written from the "
            "train split's reference trajectories to OUT/tool_log.jsonl) or a replay-cache JSONL recorded on the "
            "train split (e.g. with --backend cache:PATH); an imagined call the log holds gets a fidelity score "
            "and, with --log-targets, a supervised target; a log holding a task of another split (val, test-id, "
            "test) is refused"
        },
    )
    log_targets: bool = field(
        default=True, metadata={"help": "with --tool-log: the logged result is a supervised env-role target"}
    )
    env_role_reward: str = field(
        default="task",
        metadata={
            "help": "reward of env-role rows: task (the trajectory's reward, the paper's), fidelity (1 for an "
            "exact match with the known real result, else key/value F1; rows with no known result keep the task "
            "reward in a group of their own) or mix (the mean of the two where the result is known)"
        },
    )
    env_role_coef: float = field(
        default=1.0, metadata={"help": "weight of the env-role rows' policy-gradient loss (the actor's is 1)"}
    )
    env_role_kl_coef: float = field(
        default=0.0,
        metadata={"help": "KL penalty to the starting policy on env-role rows only (low_var_kl; beside --kl-coef)"},
    )
    on_invalid: str = field(
        default="end",
        metadata={
            "help": "an unusable env-role answer: end (the episode ends with reward 0, the paper's rule) or "
            "error_observation (the actor sees a TOOL_EXECUTION_ERROR and goes on)"
        },
    )
    reward: str = field(
        default="env",
        metadata={"help": "env (the env's verifiable reward) or checklist (a judge grades each turn's items)"},
    )
    judge: str | None = field(default=None, metadata={"help": "the judge's LM spec for --reward checklist"})
    imagined_reward: str = field(
        default="bound",
        metadata={
            "help": "how an imagined episode is scored: bound (against its task's checklist bound to what the "
            "episode showed: an actor that uses what its env role imagined can score) or reference (against the "
            "real world's values, which the actor never saw)"
        },
    )
    # ---- the schedule
    steps: int = field(default=20, metadata={"help": "training steps (one rollout + one update each)"})
    tasks_per_step: int = field(default=4, metadata={"help": "train tasks drawn per step"})
    group_size: int = field(default=4, metadata={"help": "episodes per task (the GRPO group)"})
    filter_groups: int = field(
        default=0,
        metadata={
            "help": "dynamic sampling (DAPO; verl's algorithm.filter_groups): while fewer than --tasks-per-step "
            "groups have rewards that differ, play up to this many extra draws of tasks, and train on the groups "
            "that differ only (an all-equal group has no policy gradient); 0: off"
        },
    )
    # ---- rehearsal-aware training
    rehearsal_fraction: float = field(
        default=0.0,
        metadata={
            "help": "this share of each step's task groups (whole groups, chosen by the seed and step) plays with "
            "a private-rehearsal memory in context: before each such episode the policy rehearses the task "
            "--rehearsal-budget times on a fork with imagined results (PrivateRehearsal, parallel, no live call) "
            "and the condensed memory enters its prompt as a system note; the committed episode is trained as "
            "usual (the memory is context, never a trained token) and the rehearsals are not trained; 0: off"
        },
    )
    rehearsal_budget: int = field(
        default=2, metadata={"help": "rehearsals before each episode of a --rehearsal-fraction group"}
    )
    # ---- the objective
    lr: float | None = field(
        default=None,
        metadata={
            "help": "AdamW learning rate; default: by the model's size, 2e-5 up to 1B parameters (the embedded "
            "135M model's), 1e-6 above (the reference code's, for 7B); a resumed run keeps its own"
        },
    )
    warmup_steps: int = field(default=0, metadata={"help": "linear learning-rate warm-up steps"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clipping"})
    scale_rewards: str = field(
        default="none", metadata={"help": "none (advantage = reward - group mean) or group (also / group std)"}
    )
    clip_low: float = field(default=0.2, metadata={"help": "PPO ratio clip below 1"})
    clip_high: float = field(default=0.2, metadata={"help": "PPO ratio clip above 1"})
    dual_clip: float = field(default=3.0, metadata={"help": "dual-clip bound c for negative advantages (0: off)"})
    ppo_epochs: int = field(default=1, metadata={"help": "passes over each step's samples"})
    kl_coef: float = field(
        default=0.0, metadata={"help": "KL penalty to the frozen starting policy (low_var_kl; 1e-4 when on)"}
    )
    invalid_penalty: float = field(
        default=0.1, metadata={"help": "subtracted from the reward of a sample whose output was unusable"}
    )
    micro_batch_tokens: int = field(
        default=4096, metadata={"help": "tokens per forward/backward micro-batch (gradient accumulation)"}
    )
    detach_prompt: bool = field(
        default=True,
        metadata={
            "help": "encode each group's shared prompt once without gradient (much cheaper on CPU; the gradient "
            "through the prompt's own activations is dropped); false: the exact gradient"
        },
    )
    bf16: bool | str = field(
        default="auto",
        metadata={
            "help": "bfloat16 autocast in the update: true, false or auto (a CUDA device with bf16; float32 on CPUs)"
        },
    )
    lora: bool = field(default=False, metadata={"help": "train LoRA adapters (peft) instead of all weights"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank (with --lora)"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (with --lora)"})
    # ---- rollout sampling
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of both roles in rollouts"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass in rollouts"})
    max_new_tokens: int = field(default=96, metadata={"help": "tokens per generated turn at most"})
    # ---- the run
    seed: int = field(default=0, metadata={"help": "seed of task draws, sampling and the initialisation"})
    save_every: int = field(default=10, metadata={"help": "checkpoint every k steps (and after the last)"})
    keep_last: int = field(default=2, metadata={"help": "checkpoints kept (older ones are deleted)"})
    log_trajectories_every: int = field(
        default=5, metadata={"help": "write trajectories/step-N.jsonl every k steps (0: never)"}
    )
    # ---- diagnostics (never used by training)
    sim_to_real: bool = field(
        default=False,
        metadata={
            "help": "diagnostic: replay each imagined training episode's actions on a fresh real backend and "
            "report the reward they would have earned there; its calls are counted as diagnostic_calls and never "
            "used by training"
        },
    )

    def __post_init__(self) -> None:
        choices = {
            "backend": BACKENDS,
            "reward": REWARDS,
            "imagined_reward": IMAGINED_REWARDS,
            "scale_rewards": SCALE_REWARDS,
            "grounding": GROUNDINGS,
            "env_role_reward": ENV_ROLE_REWARDS,
            "on_invalid": ("end", "error_observation"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{_flag(name)} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        checks = {
            "steps": self.steps >= 1,
            "tasks_per_step": self.tasks_per_step >= 1,
            "group_size": self.group_size >= 1,
            "filter_groups": self.filter_groups >= 0,
            "lr": self.lr is None or self.lr > 0,
            "warmup_steps": self.warmup_steps >= 0,
            "weight_decay": self.weight_decay >= 0,
            "grad_clip": self.grad_clip > 0,
            "clip_low": 0 <= self.clip_low < 1,
            "clip_high": self.clip_high >= 0,
            "dual_clip": self.dual_clip == 0 or self.dual_clip > 1,
            "ppo_epochs": self.ppo_epochs >= 1,
            "kl_coef": self.kl_coef >= 0,
            "invalid_penalty": self.invalid_penalty >= 0,
            "micro_batch_tokens": self.micro_batch_tokens >= 16,
            "real_fraction": 0.0 <= self.real_fraction <= 1.0,
            "rehearsal_fraction": 0.0 <= self.rehearsal_fraction <= 1.0,
            "rehearsal_budget": self.rehearsal_budget >= 1,
            "grounding_coef": self.grounding_coef >= 0,
            "env_role_coef": self.env_role_coef >= 0,
            "env_role_kl_coef": self.env_role_kl_coef >= 0,
            "temperature": self.temperature > 0,
            "top_p": 0 < self.top_p <= 1,
            "max_new_tokens": self.max_new_tokens >= 1,
            "save_every": self.save_every >= 1,
            "keep_last": self.keep_last >= 1,
            "log_trajectories_every": self.log_trajectories_every >= 0,
            "lora_rank": self.lora_rank >= 1,
            "lora_alpha": self.lora_alpha >= 1,
        }
        rules = {
            "clip_low": "in [0, 1)",
            "dual_clip": "0 (off) or > 1",
            "real_fraction": "in [0, 1]",
            "rehearsal_fraction": "in [0, 1]",
            "rehearsal_budget": ">= 1",
            "top_p": "in (0, 1]",
            "temperature": "> 0 (RL needs sampled rollouts)",
            "micro_batch_tokens": ">= 16",
        }
        for name, ok in checks.items():
            if not ok or (isinstance(getattr(self, name), float) and not math.isfinite(getattr(self, name))):
                raise ValueError(f"{_flag(name)} must be {rules.get(name, 'positive')}; got {getattr(self, name)}")
        if self.bf16 not in (True, False, "auto"):
            raise ValueError(f"{_flag('bf16')} must be true, false or auto; got {self.bf16!r}")
        if self.real_fraction > 0 and not self.imagined:
            raise ValueError(
                "--real-fraction grounds the policy's own imagination: it needs --backend self|self-inline"
            )
        if self.grounding == "log" and not self.tool_log:
            raise ValueError("--grounding log draws the env role's examples from a tool log: it needs --tool-log")
        if self.tool_log and not self.imagined:
            raise ValueError("--tool-log grounds the policy's own imagination: it needs --backend self|self-inline")
        if self.env_role_reward != "task" and not (self.tool_log or self.real_fraction > 0):
            raise ValueError(
                f"--env-role-reward {self.env_role_reward} needs known real results: --tool-log or --real-fraction"
            )
        if self.sim_to_real and self.backend == "real":
            raise ValueError(
                "--sim-to-real compares imagined episodes with real ones: it needs --backend self, "
                "self-inline or simulator"
            )
        if self.simulator and self.backend != "simulator":
            raise ValueError("--simulator is only used with --backend simulator")
        if self.judge and self.reward != "checklist":
            raise ValueError("--judge is only used with --reward checklist")

    @property
    def imagined(self) -> bool:
        """The policy itself answers tool calls (EnvACE world rehearsal)."""
        return self.backend in SELF_KINDS

    @property
    def trains_env_role(self) -> bool:
        """Env-role samples enter the loss: the policy imagines and its env role is not frozen."""
        return self.imagined and self.train_env_role


def _flag(name: str) -> str:
    return f"EnvACEConfig.{name} (--{name.replace('_', '-')})"


# ------------------------------------------------------------------------------------------------ TOML
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def config_to_toml(cfg: Any, table: str | None = None) -> str:
    """A dataclass of scalars as TOML (``None`` fields are left out: absent means the default)."""
    lines = [f"[{table}]"] if table else []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if value is not None:
            lines.append(f"{f.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def load_config(path: str | Path, table: str | None = None, **overrides: Any) -> EnvACEConfig:
    """An `EnvACEConfig` from a TOML file (its top level, or ``[table]``), then ``overrides``.

    An unknown key is an error that names the file and the key.
    """
    return EnvACEConfig(**{**read_config_values(path, table), **overrides})


def read_config_values(path: str | Path, table: str | None = None) -> dict[str, Any]:
    """The `EnvACEConfig` keys a TOML file sets (its top level, or ``[table]``), not yet checked
    together: ``envace train --config`` lays command-line flags over them first. An unknown key is an error
    that names the file and the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not TOML: {exc}") from None
    if table:
        data = data.get(table, {})
    known = {f.name for f in dataclasses.fields(EnvACEConfig)}
    unknown = sorted(k for k in data if k not in known and not isinstance(data[k], dict))
    if unknown:
        raise ValueError(f"{path}: unknown EnvACEConfig key(s) {', '.join(unknown)}")
    return {k: v for k, v in data.items() if k in known}
