"""``benchmarks/gpu_check.py``: without CUDA it says so in one line and exits 77; its CPU dry run
(``--device cpu --quick``) runs every code path but the GPU-only ones; its weight-sync check tells an engine
whose generation follows ``sync_weights`` from one whose does not (trl#5312's failure); the ``gpu`` tests are
skipped, with the reason "no CUDA device", where CUDA is not available. The tests marked ``gpu`` run the
check's training and rollout on CUDA, and ``VLLMEngine``'s weight sync where vllm is installed."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envace_gym.agents.lm.engine import HFEngine, SamplingConfig
from envace_gym.agents.lm.models import tiny_model
from envace_gym.agents.lm.policy import LMPolicy

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


gpu_check = _load_script()


def _env(**extra: str) -> dict[str, str]:
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so these run the no-CUDA paths on every machine.
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **extra}


def test_without_cuda_the_check_says_so_in_one_line_and_exits_77():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], env=_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == gpu_check.NO_CUDA_EXIT == 77
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [gpu_check.NO_CUDA_MESSAGE]
    assert "no CUDA device" in proc.stderr


def test_cpu_dry_run_trains_both_models_and_measures_the_rollout(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(tmp_path)],
        env=_env(CUDA_VISIBLE_DEVICES=""),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["ok"] and result["quick"]
    tiny, shaped = result["train"]
    assert tiny["model"] == "tiny" and shaped["model"].startswith("qwen3-0.6b shape")
    for run in (tiny, shaped):
        assert len(run["losses"]) == run["steps"] == 2
        assert run["loss_finite"] and run["weights_changed"] and run["abs_change"] > 0
        # every row of both steps: the check's scripted rewards (1, 0, 1, 0 in each group) always differ
        assert run["trained_rows"] >= run["steps"] * 2 * 4 and run["ok"]  # its 8 actor rows a step, at least
        assert run["peak_gib"] is None  # no GPU memory on the CPU
    (row,) = result["rollout"]
    assert row["envs"] == 2 and row["full_budget"]  # both decoded 2 rows x 4 tokens, no early stop
    assert row["ours"]["tokens"] == row["raw"]["tokens"] == 8
    assert row["ours_tok_s"] > 0 and row["raw_tok_s"] > 0 and row["ours_vs_raw"] > 0
    if importlib.util.find_spec("vllm") is None:
        assert result["vllm"] == {"skipped": "vllm is not importable here"}
    # The printed table is the docs' rendering of the JSON.
    assert gpu_check.docs_table(result) in proc.stdout


def test_write_docs_fills_the_gpu_page_block_from_a_result_file(tmp_path):
    result = {
        "machine": {"device": "NVIDIA X", "date": "2026-12-05", "torch": "2.x", "transformers": "5.x", "vllm": None},
        "quick": False,
        "train": [
            {
                "model": "tiny",
                "params": 3.2e6,
                "steps": 20,
                "loss_finite": True,
                "weights_changed": False,
                "s_per_step": 0.5,
                "rollout_tok_s": 900.0,
                "peak_gib": 0.31,
                "ok": False,
            }
        ],
        "rollout_model": "m",
        "rollout": [
            {
                "envs": 64,
                "new_tokens": 128,
                "ours": {"peak_gib": 2.0},
                "raw": {"error": "out of memory"},
                "ours_tok_s": 5000.0,
                "raw_tok_s": None,
                "ours_vs_raw": None,
            }
        ],
        "vllm": {"skipped": "vllm is not importable here"},
    }
    results = tmp_path / "r.json"
    results.write_text(json.dumps(result))
    page = tmp_path / "gpu.md"
    shutil.copy(ROOT / "docs" / "gpu.md", page)  # the real page holds the block's markers
    table = gpu_check.write_docs(results, page)
    block = re.search(r"<!-- gpu-check:begin -->\n(.*?)\n<!-- gpu-check:end -->", page.read_text(), re.DOTALL)
    assert block and block.group(1) == table
    assert "**NVIDIA X**, 2026-12-05" in table
    assert "| tiny | 3.2M | 20 | yes | **no** | 0.5 | 900.0 | 0.31 GiB |" in table  # a failed check stands out
    assert "| m | 64 | 128 | 5000.0 | out of memory | None | 2.00 GiB | n/a |" in table
    assert "vLLM: skipped (vllm is not importable here)." in table
    assert gpu_check.passed(result) is False


class _CopyEngine(HFEngine):
    """An engine with its own copy of the weights (as vLLM has): ``sync_weights`` loads the trained ones, or,
    ``stale``, does nothing (trl#5312: generation goes on with the old weights)."""

    def __init__(self, model, tokenizer, stale: bool = False):
        super().__init__(copy.deepcopy(model), tokenizer)
        self.stale = stale

    def sync_weights(self, model):
        if not self.stale:
            self.model.load_state_dict(model.state_dict())
        self.clear()


@pytest.mark.parametrize("stale", [False, True])
def test_the_sync_check_tells_an_engine_that_follows_the_new_weights_from_a_stale_one(stale):
    model, tok = tiny_model(seed=0)
    policy = LMPolicy(model, tok)
    prompt, _ = policy.encode_prompt([{"role": "user", "content": "What is my balance?"}])
    target = tok(" ok", add_special_tokens=False)["input_ids"][0]
    engine = _CopyEngine(model, tok, stale=stale)
    check = gpu_check.sync_check(engine, model, prompt, target)
    assert check["transformers_after"] == [target] * 8  # sharpen() makes greedy decoding pick the target
    assert check["reflects"] is (not stale)
    assert (check["after"] == check["before"]) is stale


def test_gpu_tests_are_skipped_without_cuda_and_say_why():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "gpu", str(Path(__file__))],
        cwd=ROOT,
        env=_env(CUDA_VISIBLE_DEVICES=""),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2 and all(line.endswith(": no CUDA device") for line in skipped), proc.stdout
    assert re.search(r"\b2 skipped\b", proc.stdout) and "passed" not in proc.stdout


# --------------------------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_gpu_check_trains_and_rolls_out_on_cuda():
    result = gpu_check.run(gpu_check.parse_args(["--steps", "3", "--envs", "8", "--new-tokens", "16", "--skip-vllm"]))
    assert result["ok"], gpu_check.docs_table(result)
    for run in result["train"]:
        assert run["loss_finite"] and run["weights_changed"] and run["peak_gib"] > 0
    (row,) = result["rollout"]
    assert row["full_budget"] and row["ours_tok_s"] > 0 and row["raw_tok_s"] > 0
    assert row["ours"]["peak_gib"] > 0 and row["raw"]["peak_gib"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_engine_generation_follows_synced_weights(tmp_path):
    from envace_gym.agents.lm.engine import VLLMEngine

    model, tok = tiny_model(seed=0, layers=2, hidden=256)  # head dim 64: one vLLM's attention kernels take
    model.save_pretrained(tmp_path, safe_serialization=True)
    tok.save_pretrained(tmp_path)
    engine = VLLMEngine(
        str(tmp_path), tok, gpu_memory_utilization=0.2, enforce_eager=True, dtype="bfloat16", max_model_len=2048
    )
    prompt, _ = LMPolicy(model, tok).encode_prompt([{"role": "user", "content": "What is my balance?"}])
    target = tok(" ok", add_special_tokens=False)["input_ids"][0]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8, seed=0)
    assert len(engine.generate([prompt], greedy)[0].token_ids) > 0
    check = gpu_check.sync_check(engine, model.to("cuda"), prompt, target)
    assert check["transformers_after"] == [target] * 8
    assert check["before"] != [target] * 8
    assert check["after"] == [target] * 8, check
