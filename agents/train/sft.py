"""Supervised warm start: fine-tune a policy on reference trajectories (loss on the actor's tokens only).

The embedded model cannot call tools zero-shot, so RL from it alone gets no signal. A few minutes of
SFT on the train split's reference trajectories (played through the real env, so tool results are real)
teach it the call format and the domains.

Training runs through ``accelerate.Accelerator`` (`distributed`). Under ``accelerate launch`` with
several processes (DDP; FSDP is not supported here yet) every process draws the same shuffled batches and
trains on its own share of them (``batch_size`` is per process), the gradients are averaged, and rank 0
writes the run's files.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from tqdm.auto import tqdm

from envace_gym.agents.lm.chat import GENERATED_ROLES, encode_conversation
from envace_gym.agents.lm.policy import LMPolicy, bf16_by_default
from envace_gym.agents.provenance import run_environment
from envace_gym.agents.quiet import library_bars_off, peft_notes_off
from envace_gym.agents.scripted import OraclePolicy, play_episode
from envace_gym.compose import make_env
from envace_gym.imagination import EnvRoleAnswer, ImagineRequest, RealResultImaginer

from .distributed import idle_loss, make_accelerator, place_model, uses_fsdp
from .logprobs import TokenLogprobs, token_logprobs

__all__ = ["SFTConfig", "SFTExample", "build_sft_examples", "train_sft"]


@dataclass
class SFTConfig:
    """Settings of ``envace sft`` (TRL-style: one flat, documented dataclass; each field is a flag)."""

    steps: int | None = field(default=None, metadata={"help": "optimizer steps; with --minutes, whichever ends first"})
    minutes: float | None = field(default=None, metadata={"help": "wall-clock budget for training, in minutes"})
    lr: float = field(default=5e-5, metadata={"help": "AdamW learning rate"})
    batch_size: int = field(default=4, metadata={"help": "examples per optimizer step"})
    max_tokens: int = field(
        default=1024, metadata={"help": "longer examples are cut (actor: the end goes; env role: the middle goes)"}
    )
    warmup_steps: int = field(default=5, metadata={"help": "linear learning-rate warm-up steps"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clipping"})
    lora: bool = field(default=False, metadata={"help": "train LoRA adapters (merged into the checkpoint)"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank (with --lora)"})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (with --lora)"})
    seed: int = field(default=0, metadata={"help": "seed of the example order and the initialisation"})
    max_examples: int | None = field(default=None, metadata={"help": "train tasks to use; default: all of the split"})
    bf16: bool | str = field(
        default="auto",
        metadata={
            "help": "bfloat16 autocast (float32 master weights): true, false or auto (a CUDA device with bf16; "
            "float32 on CPUs)"
        },
    )
    shared_head: bool = field(
        default=True, metadata={"help": "encode the system+tools prefix once per batch, without gradient"}
    )

    def __post_init__(self) -> None:
        if self.steps is None and self.minutes is None:
            raise ValueError("give steps or minutes (envace sft --steps N or --minutes M)")
        checks = {
            "steps": (self.steps is None or self.steps >= 1, ">= 1"),
            "minutes": (self.minutes is None or self.minutes > 0, "> 0"),
            "lr": (self.lr > 0, "> 0"),
            "batch_size": (self.batch_size >= 1, ">= 1"),
            "max_tokens": (self.max_tokens >= 1, ">= 1"),
            "warmup_steps": (self.warmup_steps >= 0, ">= 0"),
            "weight_decay": (self.weight_decay >= 0, ">= 0"),
            "grad_clip": (self.grad_clip > 0, "> 0"),
            "lora_rank": (self.lora_rank >= 1, ">= 1"),
            "lora_alpha": (self.lora_alpha >= 1, ">= 1"),
            "max_examples": (self.max_examples is None or self.max_examples >= 1, ">= 1"),
        }
        for name, (ok, rule) in checks.items():
            if not ok:
                raise ValueError(
                    f"SFTConfig.{name} (--{name.replace('_', '-')}) must be {rule}, got {getattr(self, name)}"
                )
        if self.bf16 not in (True, False, "auto"):
            raise ValueError(f"SFTConfig.bf16 (--bf16) must be true, false or auto, got {self.bf16!r}")


@dataclass
class SFTExample:
    task_id: str
    input_ids: list[int]
    loss_mask: list[int]  # 1 on actor tokens
    head: int = 0  # tokens of the shared system+tools prefix (no loss there)
    keep_end: bool = False  # when too long, cut the middle and keep the end (the env role's target is last)


class _Recorder(RealResultImaginer):
    """The perfect env role, keeping (env-role prompt, real answer) pairs as env-role targets."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.pairs: list[tuple[list[dict[str, Any]], str]] = []

    def imagine(self, request: ImagineRequest) -> EnvRoleAnswer:
        answer = super().imagine(request)
        self.pairs.append((request.messages, answer.text))
        return answer


def _env_role_example(policy: LMPolicy, task_id: str, prompt: list[dict[str, Any]], answer: str) -> SFTExample:
    head_ids, head = policy.encode_prompt(prompt)
    target = policy.chat.encode(answer + (policy.tokenizer.eos_token or ""))
    return SFTExample(task_id, head_ids + target, [0] * len(head_ids) + [1] * len(target), head, keep_end=True)


def build_sft_examples(
    env: gym.Env,
    policy: LMPolicy,
    max_examples: int | None = None,
    seed: int = 0,
    progress: bool = True,
    roles: Sequence[str] = ("actor",),
) -> list[SFTExample]:
    """Play the oracle through ``env`` (real results) on its task pool and encode what each role learns.

    ``actor``: each whole episode, loss on the assistant's tokens. ``env_role``: for every call, the
    prompted-mode env-role prompt at that point of the episode, with the real result (in
    ``<execution_result>`` form) as the target; and the inline form: in the episode's conversation, the
    tool messages' contents are targets too.
    """
    unknown = set(roles) - set(GENERATED_ROLES)
    if unknown or not roles:
        raise ValueError(f"roles must be among {GENERATED_ROLES}, got {list(roles)}")
    pool = list(env.unwrapped.pool)
    random.Random(seed).shuffle(pool)
    pool = pool[:max_examples] if max_examples else pool
    oracle = OraclePolicy(env.unwrapped.suite)
    recorder = _Recorder(env)
    play_env = make_env(env, backend="self", imaginer=recorder) if "env_role" in roles else env
    examples = []
    for task in tqdm(pool, desc="sft data", disable=not progress, unit="task"):
        recorder.pairs = []
        info = play_episode(play_env, oracle, task.id)
        # One conversation example carries the actor's targets and, for the env role, the tool results in
        # inline form (the tool message inside the actor's context).
        inline = "env_role" in roles
        stream = encode_conversation(policy.chat, info["messages"], info["tools"], "env_role" if inline else "external")
        labelled = set(roles)
        if any(r in labelled for r in stream.roles):
            examples.append(
                SFTExample(task.id, stream.ids, [1 if r in labelled else 0 for r in stream.roles], stream.head)
            )
        examples.extend(_env_role_example(policy, task.id, prompt, answer) for prompt, answer in recorder.pairs)
    return examples


def _batches(examples: Sequence[SFTExample], cfg: SFTConfig, rng: random.Random):
    """Endless shuffled batches of examples that share their head (so it is encoded once per batch);
    within windows of 8 batches, examples of similar length go together (less padding)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, e in enumerate(examples):
        groups.setdefault(tuple(e.input_ids[: e.head]), []).append(i)
    while True:
        batches = []
        for members in groups.values():
            order = list(members)
            rng.shuffle(order)
            window = cfg.batch_size * 8
            for w in range(0, len(order), window):
                chunk = sorted(order[w : w + window], key=lambda i: len(examples[i].input_ids))
                batches.extend(chunk[b : b + cfg.batch_size] for b in range(0, len(chunk), cfg.batch_size))
        rng.shuffle(batches)
        for batch in batches:
            yield [examples[i] for i in batch]


def _fit(e: SFTExample, head: int, max_tokens: int) -> tuple[list[int], list[int]]:
    """The tokens after ``head`` and their loss mask, cut so that head + body fit in ``max_tokens``."""
    room = max_tokens - head
    body, mask = e.input_ids[head:], e.loss_mask[head:]
    if len(body) <= room:
        return body, mask
    if e.keep_end:
        keep = e.head - head  # the example's own head (when not shared) stays, then the end
        return body[:keep] + body[-(room - keep) :], mask[:keep] + mask[-(room - keep) :]
    return body[:room], mask[:room]


def _collate(
    batch: Sequence[SFTExample], pad_id: int, max_tokens: int, shared_head: bool = False
) -> dict[str, torch.Tensor]:
    """Right-padded tensors; with ``shared_head`` the common head goes apart as ``head_ids`` [1, H]."""
    head = (
        batch[0].head
        if shared_head and all(e.input_ids[: e.head] == batch[0].input_ids[: batch[0].head] for e in batch)
        else 0
    )
    width = min(max(len(e.input_ids) for e in batch), max_tokens) - head  # _fit keeps head + body <= max_tokens
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, e in enumerate(batch):
        body, mask = _fit(e, head, max_tokens)
        n = len(body)
        ids[i, :n] = torch.tensor(body)
        attn[i, :n] = 1
        keep = torch.tensor(mask, dtype=torch.bool)
        labels[i, :n] = torch.where(keep, ids[i, :n], torch.full_like(ids[i, :n], -100))
    out = {"input_ids": ids, "attention_mask": attn, "labels": labels}
    if head:
        out["head_ids"] = torch.tensor([batch[0].input_ids[:head]])
    return out


def actor_token_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Token-mean cross-entropy on labelled positions only (see `logprobs.token_logprobs`).

    With ``head_ids`` in the batch (the system+tools prefix shared by every row), the head is encoded once
    without gradient and the rows attend to its keys and values: about half of each example's tokens skip
    the backward pass. The weights still learn from every actor token; only the head's own activations are
    held fixed.
    """
    return -token_logprobs(model, batch).mean()


def _apply_lora(policy: LMPolicy, cfg: SFTConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise RuntimeError("--lora needs the peft package: .venv/bin/pip install peft") from None
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        lora_dropout=0.0,
    )
    with peft_notes_off():
        return get_peft_model(policy.model, lora)


def train_sft(
    policy: LMPolicy,
    examples: Sequence[SFTExample],
    cfg: SFTConfig,
    out_dir: str | Path | None = None,
    progress: bool = True,
    adapter_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Train in place; write ``metrics.jsonl``, ``sft_config.json`` and a safetensors checkpoint to ``out_dir``.
    With ``cfg.lora``, ``adapter_dir`` also gets the LoRA adapter alone (a few MB of safetensors, loadable with
    peft's ``PeftModel.from_pretrained``) before it is merged into the model.

    Loss: token-mean cross-entropy over actor tokens. Returns a summary (steps, tokens, time, final loss).
    """
    if not examples:
        raise ValueError("no SFT examples")
    if cfg.steps is None and cfg.minutes is None:
        raise ValueError("give steps or minutes")
    accelerator = make_accelerator(policy.model)
    if uses_fsdp(accelerator):
        raise ValueError("envace sft does not support FSDP yet: use DDP (an accelerate config without fsdp_config)")
    place_model(policy, accelerator)
    rank, world, main = accelerator.process_index, accelerator.num_processes, accelerator.is_main_process
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    model = _apply_lora(policy, cfg) if cfg.lora else policy.model
    model.train()
    use_bf16 = bf16_by_default(next(model.parameters()).device) if cfg.bf16 == "auto" else bool(cfg.bf16)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
    )
    total = cfg.steps or 10**9
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))
    # The forward pass goes through `wrapped` (DDP around the model when several processes; else the model).
    wrapped, opt, sched = accelerator.prepare(TokenLogprobs(model), opt, sched)
    device = next(model.parameters()).device
    out = Path(out_dir) if out_dir else None
    if out and main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "sft_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    metrics_fh = (out / "metrics.jsonl").open("w") if out and main else None
    pad_id = policy.engine.pad_id
    deadline = time.monotonic() + cfg.minutes * 60 if cfg.minutes else math.inf
    start = time.monotonic()
    tokens = 0
    step = 0
    skipped = 0
    loss_value = float("nan")
    bar = tqdm(total=cfg.steps, desc="sft", disable=not (progress and main), unit="step")
    batches = _batches(examples, cfg, rng)
    try:
        while True:
            # Every process draws the same batches; each trains on its own one of every `world` in a row.
            batch = _collate([next(batches) for _ in range(world)][rank], pad_id, cfg.max_tokens, cfg.shared_head)
            labelled = bool((batch["labels"] != -100).any())
            # Whether to go on, and whether any process has something to learn: decided together (the
            # processes' clocks and batches differ, and each step's gradient reduction needs them all).
            go_on = step < total and time.monotonic() < deadline
            flags = torch.tensor([float(labelled), float(not go_on)], device=device)
            flags = accelerator.reduce(flags, "sum") if world > 1 else flags
            if flags[1] > 0:
                break
            if flags[0] == 0:
                skipped += 1  # nothing to learn in this batch (every target was cut)
                continue
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
                if labelled:
                    loss = actor_token_loss(wrapped, batch)
                else:  # another process has targets: take part in the step with a loss of 0
                    loss = idle_loss(wrapped, pad_id, device)
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"SFT loss became {loss.item()} at step {step + 1}; lower --lr or check the data"
                )
            opt.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(wrapped.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            step += 1
            step_tokens = batch["attention_mask"].sum()
            loss_value = loss.item()
            if world > 1:  # the record: every process's tokens, the mean of their losses
                step_tokens = accelerator.reduce(step_tokens.to(device), "sum")
                loss_value = float(accelerator.reduce(loss.detach().float(), "mean"))
            tokens += int(step_tokens)
            elapsed = time.monotonic() - start
            record = {
                "step": step,
                "loss": loss_value,
                "lr": sched.get_last_lr()[0],
                "tokens": tokens,
                "seconds": round(elapsed, 2),
                "tokens_per_s": round(tokens / elapsed, 1),
            }
            if metrics_fh:
                metrics_fh.write(json.dumps(record) + "\n")
                metrics_fh.flush()
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=record["tokens_per_s"])
    finally:
        bar.close()
        if metrics_fh:
            metrics_fh.close()
    if cfg.lora:
        if adapter_dir is not None and main:
            with library_bars_off():
                model.save_pretrained(str(adapter_dir), safe_serialization=True)
        policy.model = model.merge_and_unload()  # a plain model again: the checkpoint loads without peft
    policy.model.eval()
    policy.engine.model = policy.model
    policy.engine.clear()  # caches were computed with the old weights
    summary = {
        "bf16": use_bf16,
        "skipped_batches": skipped,
        "steps": step,
        "tokens": tokens,
        "seconds": round(time.monotonic() - start, 1),
        "final_loss": loss_value,
        "examples": len(examples),
        "environment": run_environment(policy, precision="bf16" if use_bf16 else "float32"),
    }
    if out and main:
        policy.save(out)
        (out / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    accelerator.wait_for_everyone()
    return summary
