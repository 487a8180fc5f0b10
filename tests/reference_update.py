"""The EnvACE update written out in plain torch, one process, no accelerate: the reference the trainer's
update (one process or several) must equal. Not a test module; imported by the tests that compare.

Only what those tests configure: RL rows (no grounding), role weights 1 (actor) and ``env_role_coef``, KL to
a frozen reference where ``kl_coef`` > 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.objective import Sample, collate, micro_batches, sample_loss


def plain_update(
    model: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    steps: Sequence[Sequence[Sample]],
    cfg: EnvACEConfig,
    pad_id: int,
) -> list[dict[str, float]]:
    """Train ``model`` in place on each step's samples (every rank's, for a multi-process run); return each
    step's ``loss`` and ``grad_norm`` as the trainer reports them."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))
    weight = {"actor": 1.0, "env_role": cfg.env_role_coef}
    kl_coef = {"actor": cfg.kl_coef, "env_role": cfg.env_role_kl_coef}
    out = []
    for samples in steps:
        assert all(s.role != "grounding" for s in samples), "the reference has no grounding loss"
        n = max(sum(s.tokens for s in samples), 1)  # token-mean over the whole step
        active = [s for s in samples if (s.advantage != 0.0 and weight[s.role] > 0) or kl_coef[s.role] > 0]
        model.train()
        total, norm = 0.0, 0.0
        for _ in range(cfg.ppo_epochs):
            optimizer.zero_grad(set_to_none=True)
            for rows in micro_batches(active, cfg.micro_batch_tokens, cfg.detach_prompt):
                role = rows[0].role
                parts = sample_loss(
                    model,
                    collate(rows, pad_id, cfg.detach_prompt),
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    dual_clip=cfg.dual_clip,
                    temperature=cfg.temperature,
                    ref_model=ref_model if kl_coef[role] > 0 else None,
                )
                loss = (weight[role] * parts.pg + kl_coef[role] * parts.kl) / n
                loss.backward()
                total += loss.item()
            norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
            optimizer.step()
        scheduler.step()
        model.eval()
        out.append({"loss": total / cfg.ppo_epochs, "grad_norm": norm})
    return out
