"""Pickle-free, atomic training checkpoints: weights, optimizer, scheduler, RNG and trainer state.

A checkpoint is a folder ``out_dir/ckpt-N/`` that is also a plain Hugging Face checkpoint (``config.json``,
``model.safetensors``, tokenizer files), so ``LMPolicy.from_spec("ckpt:DIR")`` evaluates it directly. Next to
the weights it holds everything a trainer needs to resume bit for bit on CPU:

- ``optimizer.safetensors`` + ``optimizer.json``: the optimizer ``state_dict``, tensors in safetensors and the
  rest (param groups, scalar state) in JSON;
- ``scheduler.json``: the LR scheduler ``state_dict`` minus what JSON cannot hold (LambdaLR's functions);
- ``rng.safetensors`` + ``rng.json``: the torch CPU (and CUDA) generator states, numpy's and python's;
- ``trainer_state.json``: ``{"step": N, **state}``; ``config.toml``: the run's configuration text.

Nothing is pickled, so loading a checkpoint never executes code from it. Every folder is written under a
temporary sibling name and renamed into place only when complete, so a crash mid-save never leaves a
``ckpt-N`` that looks loadable.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from envace_gym.agents.quiet import library_bars_off

__all__ = ["CKPT_PREFIX", "latest_checkpoint", "list_checkpoints", "load_checkpoint", "save_checkpoint"]

CKPT_PREFIX = "ckpt-"

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
TRAINER_STATE = "trainer_state.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"
SCHEDULER_JSON = "scheduler.json"
RNG_TENSORS = "rng.safetensors"
RNG_JSON = "rng.json"
CONFIG_TOML = "config.toml"
#: A LoRA run's adapter weights (peft's state dict), beside the merged model: what its resume loads.
ADAPTER_TENSORS = "adapter.safetensors"

_CKPT_RE = re.compile(rf"^{re.escape(CKPT_PREFIX)}(\d+)$")
# Temporary folders: ``.ckpt-N.tmp-PID`` while saving, ``.ckpt-N.old-PID`` while deleting.
_TEMP_RE = re.compile(rf"^\.{re.escape(CKPT_PREFIX)}\d+\.(?:tmp|old)-(\d+)$")

# JSON tags for what plain JSON cannot express; a dict key that starts with "__" marks an encoded value.
_TENSOR = "__tensor__"
_TUPLE = "__tuple__"
_ITEMS = "__items__"


# ---------------------------------------------------------------------------------------------- listing
def _step_of(path: Path) -> int | None:
    match = _CKPT_RE.match(path.name)
    return int(match.group(1)) if match else None


def _is_complete(path: Path) -> bool:
    has_weights = (path / WEIGHTS_FILE).is_file() or (path / WEIGHTS_INDEX).is_file()
    return path.is_dir() and has_weights and (path / TRAINER_STATE).is_file()


def list_checkpoints(out_dir: str | os.PathLike[str]) -> list[Path]:
    """The complete ``ckpt-N`` folders in ``out_dir``, ascending by step (``ckpt-10`` after ``ckpt-9``).

    Temporary folders and ``ckpt-N`` folders without ``trainer_state.json`` or the weights are skipped.
    """
    root = Path(out_dir)
    if not root.is_dir():
        return []
    found = [(step, p) for p in root.iterdir() if (step := _step_of(p)) is not None and _is_complete(p)]
    return [p for _, p in sorted(found)]


def latest_checkpoint(out_dir: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint in ``out_dir``, or ``None`` when there is none."""
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


# ---------------------------------------------------------------------------------------------- encoding
def _join(key: str, part: Any) -> str:
    return f"{key}.{part}" if key else str(part)


def _encode(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A JSON-able copy of ``value``; tensors go into ``tensors`` under their dotted path ``key``.

    The optimizer's ``exp_avg`` of parameter 3 is stored as ``state.3.exp_avg``.
    """
    if isinstance(value, torch.Tensor):
        # A copy on CPU: safetensors refuses views and tensors that share storage.
        tensors[key] = value.detach().to("cpu", copy=True).contiguous()
        return {_TENSOR: key}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(v, _join(key, i), tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, _join(key, i), tensors) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: _encode(v, _join(key, k), tensors) for k, v in value.items()}
        # Non-string keys (the optimizer state is keyed by parameter index) keep their type as pairs.
        return {_ITEMS: [[_encode(k, key, {}), _encode(v, _join(key, k), tensors)] for k, v in value.items()]}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"{key or 'root'}: cannot store a {type(value).__name__} without pickle")


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            return tensors[value[_TENSOR]]
        if set(value) == {_TUPLE}:
            return tuple(_decode(v, tensors) for v in value[_TUPLE])
        if set(value) == {_ITEMS}:
            return {_decode(k, tensors): _decode(v, tensors) for k, v in value[_ITEMS]}
        return {k: _decode(v, tensors) for k, v in value.items()}
    return value


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _save_tree(obj: Any, json_path: Path, tensor_path: Path) -> None:
    tensors: dict[str, torch.Tensor] = {}
    encoded = _encode(obj, "", tensors)
    save_file(tensors, str(tensor_path))
    _write_json(json_path, encoded)


def _load_tree(json_path: Path, tensor_path: Path) -> Any:
    return _decode(_read_json(json_path), load_file(str(tensor_path)))


def _scheduler_state(scheduler: Any) -> dict[str, Any]:
    """``scheduler.state_dict()`` without the entries JSON cannot hold.

    LambdaLR stores ``lr_lambdas`` as ``None`` for plain functions (and the ``__dict__`` of callable objects);
    an entry that is not JSON becomes ``None``, which ``load_state_dict`` skips, so the list keeps its length
    (LambdaLR's loader requires the key).
    """
    out: dict[str, Any] = {}
    for key, value in scheduler.state_dict().items():
        if _json_ok(value):
            out[key] = value
        elif isinstance(value, list | tuple):
            out[key] = [v if _json_ok(v) else None for v in value]
        # anything else is a function or object: the freshly built scheduler already has it
    return out


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------------------------------------- RNG
def _save_rng(folder: Path, cpu: torch.Tensor, cuda: list[torch.Tensor], np_state: Any, py_state: Any) -> None:
    tensors = {"torch": cpu, **{f"cuda.{i}": s for i, s in enumerate(cuda)}}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / RNG_TENSORS))
    name, keys, pos, has_gauss, cached = np_state
    version, internal, gauss_next = py_state
    _write_json(
        folder / RNG_JSON,
        {
            "cuda_devices": len(cuda),
            "numpy": {"name": name, "keys": keys.tolist(), "pos": pos, "has_gauss": has_gauss, "cached": cached},
            "python": {"version": version, "state": list(internal), "gauss_next": gauss_next},
        },
    )


def _restore_rng(folder: Path) -> None:
    tensors = load_file(str(folder / RNG_TENSORS))
    meta = _read_json(folder / RNG_JSON)
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[f"cuda.{i}"] for i in range(meta.get("cuda_devices", 0))]
    if cuda and torch.cuda.is_available():
        # A resume on fewer devices restores those it has; more devices than saved keep their states.
        for i, state in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state, i)
    n = meta["numpy"]
    np.random.set_state((n["name"], np.asarray(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    p = meta["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss_next"]))


# ---------------------------------------------------------------------------------------------- save
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # exists but not ours, or not a pid at all: leave it alone
    return True


def _remove(path: Path) -> None:
    """Delete a checkpoint folder; renamed aside first so a half-deleted one never looks complete."""
    step = _step_of(path)
    trash = path.with_name(f".{CKPT_PREFIX}{step}.old-{os.getpid()}") if step is not None else path
    if trash != path:
        if trash.exists():
            shutil.rmtree(trash)
        os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def _clean_stale(root: Path) -> None:
    for p in root.iterdir():
        match = _TEMP_RE.match(p.name)
        if match and p.is_dir() and (int(match.group(1)) == os.getpid() or not _pid_alive(int(match.group(1)))):
            shutil.rmtree(p, ignore_errors=True)


def save_checkpoint(
    out_dir: str | os.PathLike[str],
    step: int,
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer | None,
    scheduler: Any,
    config_toml: str,
    state: dict[str, Any] | None = None,
    keep_last: int | None = 3,
    adapter: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write ``out_dir/ckpt-{step}/`` atomically and return its path.

    ``state`` (JSON-able) is stored with ``step`` in ``trainer_state.json``; the ``step`` argument wins over a
    ``"step"`` key in it. ``tokenizer``, ``optimizer`` and ``scheduler`` may be ``None`` (their files are then
    absent). An existing ``ckpt-{step}`` is replaced. After the save, only the newest ``keep_last`` complete
    checkpoints are kept (``None``: all; the one just written is always kept) and temporary folders left by
    crashed saves are removed. ``adapter``: a LoRA run's adapter weights, kept as `ADAPTER_TENSORS`
    (``model`` is then the merged model, which loads without peft).
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
    step = int(step)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    # RNG first: nothing the save does may shift what the resumed run draws.
    rng = (
        torch.get_rng_state(),
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        np.random.get_state(),
        random.getstate(),
    )
    trainer_state = {"step": step, **{k: v for k, v in (state or {}).items() if k != "step"}}
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{CKPT_PREFIX}{step}"
    tmp = root / f".{CKPT_PREFIX}{step}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with library_bars_off():  # "Writing model shards": the trainer shows its own progress
            model.save_pretrained(tmp, safe_serialization=True)
        if adapter is not None:
            save_file({k: v.detach().contiguous().cpu() for k, v in adapter.items()}, str(tmp / ADAPTER_TENSORS))
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        if optimizer is not None:
            _save_tree(optimizer.state_dict(), tmp / OPTIMIZER_JSON, tmp / OPTIMIZER_TENSORS)
        if scheduler is not None:
            _write_json(tmp / SCHEDULER_JSON, _scheduler_state(scheduler))
        _save_rng(tmp, *rng)
        (tmp / CONFIG_TOML).write_text(config_toml, encoding="utf-8")
        _write_json(tmp / TRAINER_STATE, trainer_state)  # last: its presence marks a complete folder
        if final.exists():
            _remove(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep_last is not None:
        complete = list_checkpoints(root)
        keep = set(complete[-keep_last:]) | {final}
        for old in complete:
            if old not in keep:
                _remove(old)
    _clean_stale(root)
    return final


# ---------------------------------------------------------------------------------------------- load
def _load_weights(path: Path) -> dict[str, torch.Tensor]:
    index = path / WEIGHTS_INDEX
    if (path / WEIGHTS_FILE).is_file():
        return load_file(str(path / WEIGHTS_FILE))
    shards = sorted(set(_read_json(index)["weight_map"].values()))
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        weights.update(load_file(str(path / shard)))
    return weights


def _tied_to_loaded(model: Any, missing: list[str], loaded: set[str]) -> list[str]:
    """The missing keys that are not tied to (do not share storage with) a loaded parameter."""
    params = model.state_dict(keep_vars=True)
    ptrs = {params[k].data_ptr() for k in loaded if k in params}
    return [k for k in missing if params[k].data_ptr() not in ptrs]


def load_checkpoint(
    path: str | os.PathLike[str],
    model: Any,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    restore_rng: bool = True,
    load_weights: bool = True,
) -> dict[str, Any]:
    """Restore weights in place (and optimizer, scheduler, RNG states); return the trainer state dict.
    ``load_weights=False``: everything but the weights (a LoRA run loads its adapter instead).

    The returned dict is the ``state`` given at save time plus ``"step"``. Raises `FileNotFoundError`
    for a missing folder and `ValueError` for an incomplete one or weights that do not fit ``model``
    (keys missing, other than weights tied to a loaded one such as ``lm_head.weight``, or unexpected).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint folder")
    if not _is_complete(path):
        raise ValueError(f"{path}: not a complete checkpoint (needs {TRAINER_STATE} and {WEIGHTS_FILE})")
    for needed, name in ((optimizer, OPTIMIZER_JSON), (scheduler, SCHEDULER_JSON), (restore_rng, RNG_JSON)):
        if needed and not (path / name).is_file():
            raise ValueError(f"{path}: the checkpoint has no {name}")
    trainer_state = _read_json(path / TRAINER_STATE)

    if load_weights:
        weights = _load_weights(path)
        try:
            result = model.load_state_dict(weights, strict=False)
        except RuntimeError as exc:  # shape mismatches: the checkpoint is for another architecture
            raise ValueError(f"{path}: weights do not fit the model: {str(exc).splitlines()[0]}") from None
        missing = _tied_to_loaded(model, list(result.missing_keys), set(weights))
        if missing or result.unexpected_keys:
            raise ValueError(
                f"{path}: weights do not fit the model (missing {missing[:5]}, unexpected {result.unexpected_keys[:5]})"
            )

    if optimizer is not None:
        optimizer.load_state_dict(_load_tree(path / OPTIMIZER_JSON, path / OPTIMIZER_TENSORS))
    if scheduler is not None:
        scheduler.load_state_dict(_read_json(path / SCHEDULER_JSON))
    if restore_rng:
        _restore_rng(path)
    return trainer_state
