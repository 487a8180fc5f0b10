"""Which torch device a model runs on: ``auto`` (CUDA when present, else the CPU), ``cpu``, ``cuda`` or
``cuda:N``; asking for a GPU that is not there is a one-line ``ValueError``, not a traceback later on."""

from __future__ import annotations

import torch

__all__ = ["DEVICE_CHOICES", "resolve_device"]

#: What a device setting may say (for help texts and errors).
DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"


def resolve_device(device: str | torch.device = "auto", what: str = "device") -> torch.device:
    """The torch device that ``device`` names; ``what`` names the setting in the error (``--device``).

    Raises ``ValueError`` (one line) for a name outside `DEVICE_CHOICES` and for ``cuda`` where
    ``torch.cuda.is_available()`` is false or the index is past the last GPU."""
    if isinstance(device, torch.device):
        if device.type == "cpu":  # accelerate's device on the CPU is cpu:0 (index 0), which names no setting
            return device
        name = str(device)
    else:
        name = device.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = name.partition(":")
    if kind not in ("cpu", "cuda") or (index and not (kind == "cuda" and index.isdigit())):
        raise ValueError(f"{what} must be {DEVICE_CHOICES}, got {device!r}")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{what} {name}: no CUDA device is available here (torch.cuda.is_available() is false); use cpu or auto"
            )
        if index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"{what} {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device(name)
