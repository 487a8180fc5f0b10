"""Imagined-results throughput on a fixed workload: actor and env role in one rollout, ours vs naive vs raw.

The workload of ``benchmarks/rollout_throughput.py`` (every episode ``--turns`` actor turns of
``--actor-tokens`` tokens, each turn one tool call; the forward passes are real, a forward hook sets which
token wins), but the envs are ``SelfRehearsalEnv``: every call is answered by the same policy in its env
role, an imagined result of ``--result-tokens`` tokens, in the ``prompted`` mode (a fresh env-role prompt
per call) and the ``inline`` mode (the result written inside the actor's own context). So every run
decodes the same tokens for both roles, on any checkpoint, before and after a change of the rollout code.

Per mode and number of envs the script prints generated tokens per second (actor and env role together),
ours / naive, ours / raw, and how the engine was asked: engine calls, and how many of them decoded actor
and env-role requests together (shared):

* ours: ``collect()`` over N ``SelfRehearsalEnv`` envs;
* naive: one env at a time, every request (actor turn or env-role answer) decoded alone by
  ``model.generate`` from its whole re-rendered prompt; measured once per mode on ``--naive-episodes``
  (its rate does not depend on N);
* raw: batched ``model.generate`` of the same number of new tokens per row from the first-turn prompts
  (measured once per N: the same for both modes).

    python benchmarks/rehearsal_throughput.py [--policy default|ckpt:DIR] [--envs 1 4 16] [--out DIR] [--quick]

Public API only (``collect``, ``LMPolicy``, ``SelfRehearsalEnv``, ``gym.make``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared workload lives beside this script

from rollout_throughput import (  # noqa: E402
    ScriptedEngine,
    Workload,
    answered,
    fixed,
    machine,
    make_envs,
    naive_turn,
    ours,
    rate,
    raw,
    scripted_policy,
    task_ids,
    write_json,
)

import envace_gym  # noqa: E402
from envace_gym.agents.lm.engine import Generation  # noqa: E402
from envace_gym.agents.lm.policy import LMPolicy  # noqa: E402
from envace_gym.agents.provenance import run_environment  # noqa: E402

MODES = ("prompted", "inline")


def rehearsal_envs(n: int, workload: Workload, policy: LMPolicy, mode: str) -> list[gym.Env]:
    return [envace_gym.SelfRehearsalEnv(env, policy, mode=mode) for env in make_envs(n, workload)]


class NaiveEngine(ScriptedEngine):
    """Each request decoded alone by ``model.generate`` from its whole prompt (no batching, no KV reuse),
    forced to the same script as :class:`ScriptedEngine`: the env role of the naive loop."""

    def generate(self, prompts, sampling, keys=None, generator=None, prefix_lens=None):  # noqa: D102
        gens = []
        for prompt in prompts:
            role, script = self.scripts.for_prompt(prompt)
            new = naive_turn(self, list(prompt), script, sampling.max_new_tokens)
            stopped = bool(new) and new[-1] in self.stop_token_ids
            self.rows[role] += 1
            self.tokens[role] += len(new)
            gens.append(
                Generation(
                    text=self.tokenizer.decode(new[:-1] if stopped else new),
                    token_ids=new,
                    logprobs=[0.0] * len(new),
                    finish_reason="stop" if stopped else "length",
                    prompt_tokens=len(prompt),
                    prompt_ids=list(prompt),
                    stop_text=self.tokenizer.decode(new[-1:]) if stopped else "",
                )
            )
        self.engine_calls += len(prompts)
        return gens


def naive_policy(policy: LMPolicy, workload: Workload) -> LMPolicy:
    """The same model and scripts, each request decoded alone (:class:`NaiveEngine`)."""
    engine = NaiveEngine(policy.model, policy.tokenizer, workload, bf16=policy.engine.bf16)
    return LMPolicy(policy.model, policy.tokenizer, policy.sampling, name=f"{policy.name}-naive", engine=engine)


def naive(policy: LMPolicy, workload: Workload, mode: str, ids: list[str]) -> dict[str, Any]:
    """One ``SelfRehearsalEnv`` at a time: the actor's turn, then (inside ``step``) the env role's answer,
    each decoded alone from its whole prompt."""
    engine: NaiveEngine = policy.engine
    engine.reset_counts()
    env = rehearsal_envs(1, workload, policy, mode)[0]
    calls = 0
    start = time.perf_counter()
    for task_id in ids:
        _, info = env.reset(options={"task_id": task_id})
        done = False
        while not done:
            gen = policy.act(info["messages"], info["tools"])
            _, _, terminated, truncated, info = env.step(gen.text)
            done = terminated or truncated
        calls += answered(info["messages"])
    seconds = time.perf_counter() - start
    return {"tokens": sum(engine.tokens.values()), "seconds": seconds, "answered": calls}


def measure(policy: LMPolicy, workload: Workload, envs: list[int], naive_episodes: int) -> dict[str, Any]:
    per_episode = workload.turns * (workload.actor_tokens + workload.result_tokens)
    ids = task_ids(workload, max(max(envs), naive_episodes))
    slow_policy = naive_policy(policy, workload)
    ours(policy, rehearsal_envs(1, workload, policy, "prompted"), ids[:1])  # warm-up, not reported
    out: dict[str, Any] = {"workload": asdict(workload), "modes": {}}
    check = {}
    limits = {n: raw(policy, workload, ids[:n], per_episode) for n in envs}  # the same for both modes
    for mode in MODES:
        slow = naive(slow_policy, workload, mode, ids[:naive_episodes])
        check[f"{mode}/naive"] = (
            slow["tokens"] == naive_episodes * per_episode and slow["answered"] == naive_episodes * workload.turns
        )
        rows = []
        for n in envs:
            fast = ours(policy, rehearsal_envs(n, workload, policy, mode), ids[:n])
            limit = limits[n]
            check[f"{mode}/ours@{n}"] = fixed(fast, n, workload, per_episode)
            rows.append(
                {
                    "envs": n,
                    "ours_tokens": fast["tokens"],
                    "ours_s": round(fast["seconds"], 2),
                    "ours_tok_s": round(rate(fast), 1),
                    "naive_tok_s": round(rate(slow), 1),
                    "raw_tok_s": round(rate(limit), 1),
                    "ours_vs_naive": round(rate(fast) / rate(slow), 2),
                    "ours_vs_raw": round(rate(fast) / rate(limit), 2),
                    "engine_calls": fast["engine_calls"],
                    "shared_engine_calls": fast["shared_calls"],
                    "rows_by_role": fast["rows"],
                }
            )
        out["modes"][mode] = {
            "naive": {"episodes": naive_episodes, "tokens": slow["tokens"], "s": round(slow["seconds"], 2)},
            "rows": rows,
        }
    out["fixed_workload_check"] = check
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="default", help="default | tiny | ckpt:DIR | hf:PATH")
    parser.add_argument("--envs", type=int, nargs="+", default=None, help="default 1 4 16 (--quick: 1 4)")
    parser.add_argument("--turns", type=int, default=None, help="actor turns per episode (default 2, --quick 1)")
    parser.add_argument("--actor-tokens", type=int, default=48)
    parser.add_argument("--result-tokens", type=int, default=40)
    parser.add_argument("--naive-episodes", type=int, default=None, help="default 2 (--quick: 1)")
    parser.add_argument("--quick", action="store_true", help="1 and 4 envs, 1 turn, 1 naive episode")
    parser.add_argument("--out", default=None, help="write rehearsal_throughput.json into this directory")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = Workload(
        turns=args.turns or (1 if args.quick else 2),
        actor_tokens=args.actor_tokens,
        result_tokens=args.result_tokens,
    )
    envs = args.envs or ([1, 4] if args.quick else [1, 4, 16])
    naive_episodes = args.naive_episodes or (1 if args.quick else 2)

    policy = scripted_policy(args.policy, workload)
    print(
        f"model={args.policy} bf16={policy.engine.bf16} threads={torch.get_num_threads()} workload: "
        f"{workload.suite}, {workload.turns} turns per episode, each {workload.actor_tokens} actor tokens (a call) "
        f"+ {workload.result_tokens} env-role tokens (its imagined result)",
        flush=True,
    )
    result = {"benchmark": "rehearsal_throughput", "policy": args.policy, "bf16": policy.engine.bf16, **machine()}
    result["environment"] = run_environment(policy)
    result.update(measure(policy, workload, envs, naive_episodes))
    print(
        f"{'mode':>8} {'envs':>4} | {'ours tok/s':>10} | {'naive':>6} | {'raw':>6} | {'ours/naive':>10} "
        f"| {'ours/raw':>8} | engine calls (shared by actor and env role)"
    )
    for mode, entry in result["modes"].items():
        for row in entry["rows"]:
            print(
                f"{mode:>8} {row['envs']:>4} | {row['ours_tok_s']:>10} | {row['naive_tok_s']:>6} | "
                f"{row['raw_tok_s']:>6} | {row['ours_vs_naive']:>9}x | {row['ours_vs_raw']:>8} | "
                f"{row['engine_calls']} ({row['shared_engine_calls']})"
            )
    if not all(result["fixed_workload_check"].values()):
        print(f"WARNING: the workload was not the fixed one: {result['fixed_workload_check']}")
    write_json(args.out, "rehearsal_throughput.json", result)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
