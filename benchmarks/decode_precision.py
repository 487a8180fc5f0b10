"""Decoding speed in float32 and under bfloat16 autocast on this machine: what ``bf16="auto"`` should pick.

The embedded model, 16 first-turn prompts of ``builtin/bank`` train tasks (about 260 tokens each), 64 new
tokens each, greedy, through the rollout engine (one ``generate`` call, shared heads encoded once, as
``collect()`` does), with the engine's caches cleared before each run. The two precisions alternate,
``--repeats`` times each, so a change of load touches both alike; it prints each run's tokens per second and
the median ratio bf16 / float32, and writes JSON (every run, and where it ran). ``--write-docs RESULTS.json``
renders the table of docs/benchmarks.md from a kept file.

    OMP_NUM_THREADS=1 python benchmarks/decode_precision.py --out runs/decode_precision.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _docs import write_block  # noqa: E402
from gpu_check import first_turn_prompts  # noqa: E402  (the same prompts as the GPU check: one definition)

from envace_gym.agents.lm.engine import SamplingConfig  # noqa: E402
from envace_gym.agents.lm.policy import LMPolicy  # noqa: E402
from envace_gym.agents.provenance import run_environment  # noqa: E402


def decode(policy: LMPolicy, prompts: list[list[int]], heads: list[int], bf16: bool, new_tokens: int) -> dict:
    """One greedy ``generate`` over every prompt in the given precision: its tokens and seconds."""
    policy.engine.bf16 = bf16
    policy.engine.clear()
    t0 = time.monotonic()
    out = policy.engine.generate(prompts, SamplingConfig(0.0, 1.0, new_tokens, 0), prefix_lens=heads)
    seconds = time.monotonic() - t0
    tokens = sum(len(g.token_ids) for g in out)
    return {"precision": "bf16" if bf16 else "float32", "tokens": tokens, "seconds": round(seconds, 2),
            "tok_s": round(tokens / seconds, 1)}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    env = result["environment"]
    med = result["median_tok_s"]
    return "\n".join(
        [
            "| CPU kernels | threads | float32, tok/s | bf16 autocast, tok/s | bf16 / float32 | runs each |",
            "|---|---|---|---|---|---|",
            f"| {env['cpu_capability']} (native bf16: {result['native_bf16']}) | {env['threads']} | "
            f"{med['float32']:.1f} | {med['bf16']:.1f} | {result['bf16_over_float32']:.2f} | {result['repeats']} |",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="runs/decode_precision.json")
    parser.add_argument("--write-docs", metavar="RESULTS.json", help="render docs/benchmarks.md's table; run nothing")
    args = parser.parse_args(argv)
    if args.write_docs:
        result = json.loads(Path(args.write_docs).read_text())
        write_block("benchmarks.md", "decode-precision", table(result))
        return result
    from envace_gym.agents.lm.policy import bf16_supported

    policy = LMPolicy.from_spec("default", progress=False)  # float32 on a CPU (bf16="auto")
    prompts, heads = first_turn_prompts(policy, args.prompts)
    decode(policy, prompts[:2], heads[:2], False, 8)  # warm-up: first-call costs out of the figures
    runs = []
    for _ in range(args.repeats):
        for bf16 in (False, True):
            runs.append(decode(policy, prompts, heads, bf16, args.new_tokens))
            print(json.dumps(runs[-1]), flush=True)
    med = {p: statistics.median(r["tok_s"] for r in runs if r["precision"] == p) for p in ("float32", "bf16")}
    policy.engine.bf16 = False
    result = {
        "prompts": args.prompts,
        "prompt_tokens": sum(map(len, prompts)) // len(prompts),
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "native_bf16": bf16_supported("cpu"),
        "runs": runs,
        "median_tok_s": med,
        "bf16_over_float32": round(med["bf16"] / med["float32"], 3),
        "environment": {**run_environment(policy), "precision": "both (alternated)"},
        "date": time.strftime("%Y-%m-%d"),
        "torch_threads": torch.get_num_threads(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(table(result))
    return result


if __name__ == "__main__":
    main()
