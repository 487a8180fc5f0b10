"""Rollout throughput: our batched rollout engine vs a naive loop and vs raw batched ``model.generate``.

All three run in one process on the same model, tasks and token budget (greedy decoding), under the
same autocast setting, and the script prints generated tokens per second and the two ratios:

* ours / naive: the naive loop runs one env at a time and passes the whole re-rendered conversation to
  ``model.generate`` every turn (target: >= 4x at 16 envs);
* ours / raw: raw batched ``model.generate`` of the same number of new tokens per row from the first-turn
  prompts, with no env in the loop: the limit of this machine (target: >= 0.7).

    python benchmarks/rollout_throughput.py [--policy default|ckpt:DIR] [--envs 8 16] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import gymnasium as gym
import torch

import envace_gym  # noqa: F401  (registers the env)
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rollout import collect


def make_envs(n: int, suite: str, max_turns: int) -> list[gym.Env]:
    return [gym.make("EnvACE-ToolCall-v0", suite=suite, split="test", max_turns=max_turns) for _ in range(n)]


def autocast(policy: LMPolicy):
    return torch.autocast("cpu", dtype=torch.bfloat16) if policy.engine.bf16 else contextlib.nullcontext()


def ours(policy: LMPolicy, task_ids: list[str], args) -> tuple[int, float]:
    envs = make_envs(len(task_ids), args.suite, args.max_turns)
    policy.engine.clear()
    start = time.perf_counter()
    trajs = collect(envs, policy, len(task_ids), task_ids=task_ids, progress=False)
    elapsed = time.perf_counter() - start
    return sum(t.actor_tokens for t in trajs), elapsed


def naive(policy: LMPolicy, task_ids: list[str], args) -> tuple[int, float]:
    env = make_envs(1, args.suite, args.max_turns)[0]
    tok, model = policy.tokenizer, policy.model
    stop = policy.engine.stop_token_ids
    tokens = 0
    start = time.perf_counter()
    for task_id in task_ids:
        _, info = env.reset(options={"task_id": task_id})
        done = False
        while not done:
            ids = torch.tensor([policy.chat.encode(policy.prompt_text(info["messages"], info["tools"]))])
            with torch.inference_mode(), autocast(policy):
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=args.max_new_tokens,
                    do_sample=False,
                    eos_token_id=stop,
                    pad_token_id=policy.engine.pad_id,
                )
            new = out[0, ids.shape[1] :].tolist()
            tokens += len(new)
            text = tok.decode(new[:-1] if new and new[-1] in stop else new)
            _, _, term, trunc, info = env.step(text)
            done = term or trunc
    return tokens, time.perf_counter() - start


def raw(policy: LMPolicy, task_ids: list[str], new_per_row: int, args) -> tuple[int, float]:
    env = make_envs(1, args.suite, args.max_turns)[0]
    prompts = []
    for task_id in task_ids:
        _, info = env.reset(options={"task_id": task_id})
        prompts.append(policy.prompt_text(info["messages"], info["tools"]))
    tok = policy.tokenizer
    tok.padding_side = "left"
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    start = time.perf_counter()
    with torch.inference_mode(), autocast(policy):
        out = policy.model.generate(
            **batch,
            max_new_tokens=new_per_row,
            min_new_tokens=new_per_row,
            do_sample=False,
            pad_token_id=policy.engine.pad_id,
        )
    elapsed = time.perf_counter() - start
    return (out.shape[1] - batch["input_ids"].shape[1]) * len(prompts), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="default")
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    sampling = SamplingConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)
    policy = LMPolicy.from_spec(args.policy, sampling=sampling)
    pool = make_envs(1, args.suite, args.max_turns)[0].unwrapped.pool
    rows = []
    print(
        f"model={args.policy} bf16={policy.engine.bf16} max_new_tokens={args.max_new_tokens} "
        f"max_turns={args.max_turns} threads={torch.get_num_threads()}"
    )
    for n in args.envs:
        task_ids = [t.id for t in pool[:n]]
        ours(policy, task_ids[:2], args)  # warm-up (allocator, kernels)
        o_tok, o_s = ours(policy, task_ids, args)
        n_tok, n_s = naive(policy, task_ids, args)
        r_tok, r_s = raw(policy, task_ids, max(1, round(o_tok / n)), args)
        row = {
            "envs": n,
            "ours_tokens": o_tok,
            "ours_s": round(o_s, 1),
            "ours_tok_s": round(o_tok / o_s, 1),
            "naive_tokens": n_tok,
            "naive_s": round(n_s, 1),
            "naive_tok_s": round(n_tok / n_s, 1),
            "raw_tokens": r_tok,
            "raw_s": round(r_s, 1),
            "raw_tok_s": round(r_tok / r_s, 1),
        }
        row["ours_vs_naive"] = round(row["ours_tok_s"] / row["naive_tok_s"], 2)
        row["ours_vs_raw"] = round(row["ours_tok_s"] / row["raw_tok_s"], 2)
        rows.append(row)
        print(
            f"{n:>3} envs | ours {row['ours_tok_s']:>6} tok/s ({o_tok} tok, {row['ours_s']}s) "
            f"| naive {row['naive_tok_s']:>6} tok/s ({n_tok} tok, {row['naive_s']}s) "
            f"| raw generate {row['raw_tok_s']:>6} tok/s | ours/naive {row['ours_vs_naive']}x "
            f"(target >= 4 at 16) | ours/raw {row['ours_vs_raw']} (target >= 0.7)",
            flush=True,
        )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
