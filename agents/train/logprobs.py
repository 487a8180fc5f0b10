"""Teacher-forced token logprobs: the one forward pass that SFT and the RL objective both train through."""

from __future__ import annotations

from typing import Any

import torch

from envace_gym.agents.lm.engine import cache_kwarg

__all__ = ["TokenLogprobs", "token_logprobs"]


def token_logprobs(model: Any, batch: dict[str, torch.Tensor], temperature: float = 1.0) -> torch.Tensor:
    """The logprob of every labelled token of ``batch``, flattened in row-major order.

    ``batch``: right-padded ``input_ids`` [B, W], ``attention_mask`` [B, W] and ``labels`` [B, W] (the token
    id where a position is scored, -100 elsewhere); optionally ``head_ids`` [1, H], a prefix shared by every
    row, encoded once **without gradient** (its keys and values are held fixed; the rows attend to them).
    ``temperature`` divides the logits, as sampling at that temperature did (the engine records logprobs of
    the tempered distribution).

    The LM head (576 x 49k for SmolLM2) runs only where there is a label: trained tokens are a small share
    of each sequence, so this skips most of the largest matmul and its softmax.

    ``model`` may also be a `TokenLogprobs` (or a DDP/FSDP wrapper around one, as
    ``accelerator.prepare`` returns it): the pass then goes through the wrapper's ``forward``.
    """
    if isinstance(model, TokenLogprobs) or isinstance(getattr(model, "module", None), TokenLogprobs):
        return model(batch, temperature)
    return _token_logprobs(model, batch, temperature)


class TokenLogprobs(torch.nn.Module):
    """``model`` as a module whose ``forward(batch, temperature)`` is `token_logprobs`.

    `token_logprobs` calls the decoder and the LM head apart (to skip the head where nothing is
    labelled), never ``model.forward``; DDP and FSDP only see a pass that enters through the ``forward`` of
    the module they wrap. So ``accelerator.prepare`` gets this module, and the pass goes through it.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        # accelerate's FSDP auto-wrap reads the layer classes to shard from the root module's attribute
        self._no_split_modules = getattr(model, "_no_split_modules", None)

    def forward(self, batch: dict[str, torch.Tensor], temperature: float = 1.0) -> torch.Tensor:
        return _token_logprobs(self.model, batch, temperature)


def _token_logprobs(model: Any, batch: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
    core = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = core.get_decoder()
    device = next(core.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    kwargs: dict[str, Any] = {"attention_mask": batch["attention_mask"]}
    if "head_ids" in batch:
        from transformers import DynamicCache

        rows, head = batch["input_ids"].shape[0], batch["head_ids"].shape[1]
        with torch.no_grad():
            cache = DynamicCache()
            decoder(input_ids=batch["head_ids"], use_cache=True, **{cache_kwarg(decoder): cache})
        layers = [
            (layer.keys.expand(rows, -1, -1, -1).contiguous(), layer.values.expand(rows, -1, -1, -1).contiguous())
            for layer in cache.layers
        ]
        width = batch["input_ids"].shape[1]
        kwargs = {
            "attention_mask": torch.cat(
                [torch.ones((rows, head), dtype=torch.long, device=device), batch["attention_mask"]], dim=1
            ),
            "position_ids": torch.arange(head, head + width, device=device).expand(rows, -1),
            "use_cache": True,
            cache_kwarg(decoder): DynamicCache(ddp_cache_data=layers),
        }
    hidden = decoder(input_ids=batch["input_ids"], **kwargs).last_hidden_state
    labels = batch["labels"][:, 1:]
    keep = labels != -100
    logits = core.get_output_embeddings()(hidden[:, :-1][keep]).float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(1, labels[keep][:, None]).squeeze(1)
