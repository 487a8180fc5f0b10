"""Role-wise GRPO: training samples from trajectories, advantages by (task, role), the PPO-clip objective.

As the EnvACE reference does it (verl ``compute_advantage`` with group key ``f"{uid}_{agent_id}"``):

* every trajectory is one **actor** sample (loss on its ``actor`` tokens; env-role, tool, user and prompt
  tokens are masked); every env-role generation in ``Trajectory.env_role_samples`` is one **env-role**
  sample (its env-role prompt as prompt, its completion trained). All carry the trajectory's reward;
* advantages are grouped by (task group, role): each row against the mean of its group, every row pooled
  (a trajectory with five env-role calls adds five rows to its env-role group); a group of one gets 0;
* the loss is PPO-clip with dual clip on the logprobs recorded at generation, token-mean over all trained
  tokens of the step.

Grounded imagination adds **grounding** samples: the env-role prompt with the real result as a supervised
target (cross-entropy, weight ``grounding_coef``), where the real backend answered the same call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .config import ENV_ROLE_REWARDS
from .logprobs import token_logprobs

__all__ = [
    "Sample",
    "build_samples",
    "env_role_row_reward",
    "compute_advantages",
    "micro_batches",
    "collate",
    "sample_loss",
    "low_var_kl",
]


@dataclass
class Sample:
    """One training row: ``input_ids`` with a loss mask, the logprobs that generated them, its reward."""

    group: str  # the GRPO group: f"{task group}/{role}"
    role: str  # one of GENERATED_ROLES (agents/lm/chat.py), or grounding: an env-role row with a supervised target
    input_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]  # aligned with input_ids; 0.0 where not trained
    reward: float
    valid: bool = True  # False: the output was unusable (penalised)
    advantage: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return sum(self.loss_mask)


def build_samples(
    trajectories: Sequence[Any],
    groups: Sequence[str],
    rewards: Sequence[float],
    *,
    train_env_role: bool = True,
    invalid_penalty: float = 0.1,
    encode_target: Callable[[str], list[int]] | None = None,
    env_role_reward: str = "task",
) -> list[Sample]:
    """The training rows of a step's trajectories.

    Args:
        trajectories: `Trajectory` records.
        groups: the GRPO group of each trajectory (its task draw: the same task drawn twice is two groups).
        rewards: each trajectory's reward (the env's, or a checklist judge's).
        train_env_role: add env-role rows (False: the env role is frozen or is another model).
        invalid_penalty: subtracted from the reward of a row whose output was unusable: an actor whose calls
            the env rejected (malformed, unknown tool, bad arguments), an env-role answer that did not parse.
        encode_target: text -> token ids of a grounding target (with ``train_env_role``: a grounding row for
            every env-role sample that carries ``target``).
        env_role_reward: what an env-role row is rewarded with: ``"task"`` (the trajectory's reward),
            ``"fidelity"`` (``sample.fidelity`` where the real result is known, in a GRPO group of its own;
            rows with no known result keep the task reward) or ``"mix"`` (the mean of the two where known).
    """
    out: list[Sample] = []
    for traj, group, reward in zip(trajectories, groups, rewards, strict=True):
        mask = traj.actor_mask()
        if any(mask):
            valid = traj.calls_failed == 0
            out.append(
                Sample(
                    f"{group}/actor",
                    "actor",
                    list(traj.token_ids),
                    mask,
                    list(traj.logprobs),
                    reward - (0.0 if valid else invalid_penalty),
                    valid,
                    meta={"task_id": traj.task_id, "reward": reward, "success": traj.success},
                )
            )
        if not train_env_role:
            continue
        for s in traj.env_role_samples:
            if s.completion_ids and s.prompt_ids:
                n = len(s.prompt_ids)
                row_group, row_reward = env_role_row_reward(s, group, reward, env_role_reward)
                out.append(
                    Sample(
                        row_group,
                        "env_role",
                        list(s.prompt_ids) + list(s.completion_ids),
                        [0] * n + [1] * len(s.completion_ids),
                        [0.0] * n + list(s.logprobs),
                        row_reward - (0.0 if s.valid else invalid_penalty),
                        s.valid,
                        meta={"task_id": traj.task_id, "tool": s.tool},
                    )
                )
            if s.target is not None and encode_target is not None and s.prompt_ids:
                target = encode_target(s.target)
                n = len(s.prompt_ids)
                out.append(
                    Sample(
                        f"{group}/grounding",
                        "grounding",
                        list(s.prompt_ids) + target,
                        [0] * n + [1] * len(target),
                        [0.0] * (n + len(target)),
                        reward,
                        meta={"task_id": traj.task_id, "tool": s.tool},
                    )
                )
    return out


def env_role_row_reward(sample: Any, group: str, task_reward: float, mode: str) -> tuple[str, float]:
    """The GRPO group and reward of one env-role row under ``mode`` (see `build_samples`)."""
    if mode not in ENV_ROLE_REWARDS:
        raise ValueError(f"env_role_reward must be one of {ENV_ROLE_REWARDS}, got {mode!r}")
    fidelity = getattr(sample, "fidelity", None)
    if mode == "task" or fidelity is None:
        return f"{group}/env_role", task_reward
    if mode == "fidelity":
        # Its own group: a fidelity score and a task reward are not on one scale to centre together.
        return f"{group}/env_role_fidelity", float(fidelity)
    return f"{group}/env_role", 0.5 * (task_reward + float(fidelity))


def compute_advantages(samples: Sequence[Sample], scale_rewards: str = "none") -> None:
    """Set ``advantage`` on every actor and env-role row: reward minus its group's mean (and divided by the
    group's std with ``scale_rewards="group"``); rows pooled per group; a group of one gets 0."""
    if scale_rewards not in ("none", "group"):
        raise ValueError(f"scale_rewards must be 'none' or 'group', got {scale_rewards!r}")
    by_group: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        if s.role != "grounding":
            by_group[s.group].append(s)
    for rows in by_group.values():
        if len(rows) == 1:
            rows[0].advantage = 0.0
            continue
        rewards = torch.tensor([r.reward for r in rows], dtype=torch.float64)
        centred = rewards - rewards.mean()
        if scale_rewards == "group":
            centred = centred / (rewards.std() + 1e-6)  # unbiased std, as verl
        for row, adv in zip(rows, centred.tolist(), strict=True):
            row.advantage = adv


def _shared_prefix(rows: Sequence[Sample]) -> int:
    """Tokens every row starts with, ending at least one token before the first trained token of any row
    (so every trained token is predicted from inside the rows' own forward pass)."""
    first = min(s.loss_mask.index(1) for s in rows)
    limit = min(first - 1, *(len(s.input_ids) for s in rows))
    head = 0
    ref = rows[0].input_ids
    while head < limit and all(s.input_ids[head] == ref[head] for s in rows):
        head += 1
    return max(head, 0)


def micro_batches(samples: Sequence[Sample], max_tokens: int, shared_prefix: bool = True) -> Iterator[list[Sample]]:
    """Rows packed into micro-batches of at most ``max_tokens`` padded tokens (a row longer than that goes
    alone). Rows of the same group go together, so with ``shared_prefix`` their common prompt is encoded
    once."""
    order = sorted(range(len(samples)), key=lambda i: (samples[i].group, len(samples[i].input_ids)))
    batch: list[Sample] = []
    for i in order:
        s = samples[i]
        trial = [*batch, s]
        head = _shared_prefix(trial) if shared_prefix and all(b.group == s.group for b in batch) else 0
        width = max(len(b.input_ids) for b in trial) - head
        if batch and (width * len(trial) > max_tokens or any(b.group != s.group for b in batch)):
            yield batch
            batch = [s]
        else:
            batch = trial
    if batch:
        yield batch


def collate(rows: Sequence[Sample], pad_id: int, shared_prefix: bool = True) -> dict[str, torch.Tensor]:
    """Right-padded tensors for `token_logprobs`, plus the trained positions' old logprobs and
    advantages (``old_logprobs``, ``advantages``, flattened in the same row-major order)."""
    head = _shared_prefix(rows) if shared_prefix else 0
    width = max(len(s.input_ids) for s in rows) - head
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    old, adv = [], []
    for i, s in enumerate(rows):
        body = s.input_ids[head:]
        n = len(body)
        ids[i, :n] = torch.tensor(body)
        attn[i, :n] = 1
        for j, (m, lp) in enumerate(zip(s.loss_mask[head:], s.old_logprobs[head:], strict=True)):
            if m and j > 0:  # position 0 of the body has no prediction inside the body (ruled out by _shared_prefix)
                labels[i, j] = body[j]
                old.append(lp)
                adv.append(s.advantage)
    out = {
        "input_ids": ids,
        "attention_mask": attn,
        "labels": labels,
        "old_logprobs": torch.tensor(old, dtype=torch.float32),
        "advantages": torch.tensor(adv, dtype=torch.float32),
    }
    if head:
        out["head_ids"] = torch.tensor([rows[0].input_ids[:head]])
    return out


def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """The k3 estimator of KL(pi || ref) per token (verl ``low_var_kl``), clamped to [-10, 10]."""
    log_ratio = ref_logprobs - logprobs
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10.0, max=10.0)


@dataclass
class LossParts:
    """Sums over one micro-batch's trained tokens (the caller divides by the step's token counts)."""

    pg: torch.Tensor
    kl: torch.Tensor
    clipped: float
    tokens: int


def sample_loss(
    model: Any,
    batch: dict[str, torch.Tensor],
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 3.0,
    temperature: float = 1.0,
    ref_model: Any = None,
) -> LossParts:
    """PPO-clip (with dual clip) summed over the batch's trained tokens; low-variance KL to ``ref_model``."""
    logprobs = token_logprobs(model, batch, temperature)
    adv = batch["advantages"].to(logprobs.device)
    ratio = torch.exp(logprobs - batch["old_logprobs"].to(logprobs.device))
    loss1 = -adv * ratio
    loss2 = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = torch.maximum(loss1, loss2)
    clipped = (loss2 > loss1).float().sum().item()
    if dual_clip > 0:
        pg = torch.where(adv < 0, torch.minimum(pg, -adv * dual_clip), pg)
    kl = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    if ref_model is not None:
        with torch.no_grad():
            ref = token_logprobs(ref_model, batch, temperature)
        kl = low_var_kl(logprobs, ref).sum()
    return LossParts(pg.sum(), kl, clipped, int(logprobs.numel()))


def grounding_loss(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Cross-entropy summed over the grounding targets' tokens, and their count."""
    logprobs = token_logprobs(model, batch)
    return -logprobs.sum(), int(logprobs.numel())
