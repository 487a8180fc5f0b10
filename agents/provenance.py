"""Where a result was produced: the code, torch's CPU kernels, the precision, the threads, the device and the
versions of the stack, recorded in every results file the benchmarks and ``envace`` write.

Greedy decoding of a small model flips on the last bits of a float: the same command gives other outcomes
under other CPU kernels (torch picks AVX-512, AVX2 or scalar kernels by CPU; ``ATEN_CPU_CAPABILITY`` forces
one), another precision or another release of torch or transformers (measured: 7 of 96 greedy outcomes of the
learning benchmark's start differed between an AVX-512 CPU's own kernels under bf16 and its AVX2 kernels in
float32; at one precision, AVX2 and scalar kernels gave the same tokens). Two results are comparable
only where their `run_environment` records agree on `PAIRING_KEYS` (`pairing_mismatch` says where not).
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "run_environment",
    "describe_environment",
    "code_version",
    "precision_of",
    "pairing_mismatch",
    "PAIRING_KEYS",
    "STACK",
]

#: The packages whose versions a result records (those whose releases change what a model computes or how
#: an env behaves).
STACK = ("torch", "transformers", "peft", "trl", "accelerate", "gymnasium", "numpy", "envace-gym")

#: What must agree for two evaluations to be paired task by task: the code, the kernels, the precision, the
#: device and the stack's versions. Threads are recorded but not compared (the thread count changed no greedy
#: outcome of the learning benchmark's start, 1 or 2 threads).
PAIRING_KEYS = ("code", "cpu_capability", "precision", "device", "versions")


@functools.cache
def code_version() -> str | None:
    """``git describe --always --dirty`` of the checkout this package runs from; None when it is not a git
    checkout (an installed wheel: `run_environment`'s ``versions["envace-gym"]`` then names the code)."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _lm_policy(policy: Any) -> Any:
    """``policy`` itself, or the LM policy inside an agent that wraps one (``PrivateRehearsal``,
    ``VerifiedCalls``: found through ``.policy``)."""
    while getattr(policy, "engine", None) is None and getattr(policy, "policy", None) is not None:
        policy = policy.policy
    return policy


def precision_of(policy: Any) -> str:
    """``"bf16"`` where ``policy`` (an ``LMPolicy``, or an agent around one) decodes under bfloat16 autocast,
    else ``"float32"``; ``"none"`` for a policy with no model (scripted)."""
    engine = getattr(_lm_policy(policy), "engine", None)
    if engine is None:
        return "none"
    return "bf16" if getattr(engine, "bf16", False) else "float32"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_environment(
    policy: Any = None, *, precision: str | None = None, device: str | torch.device | None = None
) -> dict[str, Any]:
    """What a results file records of where it was produced.

    Args:
        policy: the policy evaluated or trained (its precision and device are read from it).
        precision: say it outright (``"float32"``, ``"bf16"``) where no policy tells, e.g. a training update.
        device: likewise; default the policy's model's device, else ``"cpu"``.

    Returns a JSON-ready dict: ``code`` (git describe), ``cpu_capability`` (the kernels torch runs,
    ``torch.backends.cpu.get_cpu_capability()``, after ``ATEN_CPU_CAPABILITY``), ``precision``, ``threads``
    (torch's intra-op threads), ``device``, ``versions`` of `STACK`, ``python`` and ``machine``.
    """
    if precision is None:
        precision = precision_of(policy) if policy is not None else "none"
    if device is None:
        model = getattr(_lm_policy(policy), "model", None)
        try:
            device = next(model.parameters()).device if model is not None else "cpu"
        except (AttributeError, StopIteration, TypeError):
            device = "cpu"
    return {
        "code": code_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "precision": precision,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "versions": {name: _version(name) for name in STACK},
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def pairing_mismatch(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """The `PAIRING_KEYS` on which two `run_environment` records differ (a version by package name, e.g.
    ``versions.torch``); a missing record (a result kept from before they were written) is ``["environment"]``:
    nothing says the two ran alike. An empty list: the two may be paired."""
    if not a or not b:
        return ["environment"]
    differ = []
    for key in PAIRING_KEYS:
        if key == "versions":
            va, vb = a.get(key) or {}, b.get(key) or {}
            differ += [f"versions.{name}" for name in sorted(set(va) | set(vb)) if va.get(name) != vb.get(name)]
        elif a.get(key) != b.get(key):
            differ.append(key)
    return differ


def describe_environment(environment: dict[str, Any]) -> str:
    """One line for a console: ``code f70b6ec, AVX2 kernels, float32, 2 threads on cpu; torch 2.13.0+cpu, ...``."""
    threads = environment.get("threads")
    versions = ", ".join(
        f"{name} {v}" for name, v in environment.get("versions", {}).items() if v and name != "envace-gym"
    )
    return (
        f"code {environment.get('code') or 'not a git checkout'}, {environment.get('cpu_capability')} kernels, "
        f"{environment.get('precision')}, {threads} torch thread{'s' * (threads != 1)} on "
        f"{environment.get('device')}; "
        f"{versions}"
    )
