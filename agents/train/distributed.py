"""Training's one door to accelerate: the `Accelerator` a trainer runs through.

One process or many (``accelerate launch``, or any torchrun-style launcher that sets ``WORLD_SIZE``), DDP or
FSDP (chosen by the accelerate config file), on CPU (gloo) or CUDA (NCCL): the trainers hand their model,
optimizer and scheduler to ``accelerator.prepare`` and do every collective through accelerate.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["full_state_dict", "idle_loss", "make_accelerator", "place_model", "uses_fsdp"]


def make_accelerator(model: torch.nn.Module) -> Any:
    """An ``Accelerator`` for ``model`` where it already is (CPU or CUDA), joining the launcher's processes.

    The trainers accumulate over micro-batches and step their scheduler themselves, so accelerate's
    ``gradient_accumulation_steps`` must be 1 and its scheduler steps once per call (not once per process).
    """
    from accelerate import Accelerator, DistributedType
    from accelerate.state import AcceleratorState

    on_cpu = next(model.parameters()).device.type == "cpu"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    shared = AcceleratorState._shared_state  # read, not AcceleratorState(): that would set one up
    earlier = shared.get("device")
    if world == 1 and earlier is not None and (earlier.type == "cpu") != on_cpu:
        # One process, an earlier trainer's model was on the other device: its state would move this model
        # there (or refuse cpu=True). Nothing is shared between processes, so it can be set up afresh.
        AcceleratorState._reset_state(reset_partial_state=True)
    accelerator = Accelerator(
        # cpu=True for a model on the CPU: its collectives are on CPU tensors (gloo); without it, on a machine
        # with no GPU, PartialState ignores WORLD_SIZE and every process would train alone as rank 0 of 1,
        # all writing the same files. On CUDA: NCCL, one device per process.
        cpu=on_cpu,
        # The trainers move the model themselves (see place_model) and keep it where generation expects it.
        device_placement=False,
        # One scheduler step per optimizer step; accelerate's default steps it once per process.
        step_scheduler_with_optimizer=False,
    )
    if accelerator.num_processes != world:
        raise RuntimeError(
            f"WORLD_SIZE is {world} but accelerate set up {accelerator.num_processes} process(es) "
            f"({accelerator.distributed_type})"
        )
    if accelerator.gradient_accumulation_steps != 1:
        raise ValueError(
            "the trainer accumulates over micro-batches itself (--micro-batch-tokens); set accelerate's "
            f"gradient_accumulation_steps to 1, not {accelerator.gradient_accumulation_steps}"
        )
    if accelerator.distributed_type not in (
        DistributedType.NO,
        DistributedType.MULTI_CPU,
        DistributedType.MULTI_GPU,
        DistributedType.FSDP,
    ):
        raise ValueError(f"accelerate's {accelerator.distributed_type} is not supported: use DDP or FSDP")
    return accelerator


def place_model(policy: Any, accelerator: Any) -> None:
    """Move ``policy`` (model and engine) to this process's device when several processes share a machine's
    GPUs (each loaded its model on the default one)."""
    device = next(policy.model.parameters()).device
    if accelerator.num_processes > 1 and device != accelerator.device:
        policy.to(accelerator.device)


def uses_fsdp(accelerator: Any) -> bool:
    """Whether the accelerate config chose FSDP (parameters sharded: only the prepared module has them whole)."""
    from accelerate import DistributedType

    return accelerator.distributed_type == DistributedType.FSDP


def full_state_dict(accelerator: Any, prepared: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter of ``prepared`` in full, on every rank (under FSDP a collective: all ranks call it),
    keyed as in the unwrapped module."""
    if not uses_fsdp(accelerator):
        return accelerator.unwrap_model(prepared).state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(prepared, options=StateDictOptions(full_state_dict=True))


def idle_loss(wrapped: torch.nn.Module, pad_id: int, device: torch.device) -> torch.Tensor:
    """A loss of 0 through every trained weight (one pad token predicting another): the pass a rank with
    nothing to learn makes so that the ranks' gradient reduction meets (DDP reduces in every rank's backward)."""
    from .logprobs import token_logprobs

    batch = {
        "input_ids": torch.tensor([[pad_id, pad_id]], device=device),
        "attention_mask": torch.ones((1, 2), dtype=torch.long, device=device),
        "labels": torch.tensor([[-100, pad_id]], device=device),
    }
    return token_logprobs(wrapped, batch).sum() * 0.0
