"""Does EnvACE-Tau2-v0 score episodes the way tau2-bench's own evaluator does?

For every task of each domain it plays the oracle (gold actions, scripted user) and up to four perturbed
action lists (a dropped write action, a wrong argument, an extra write action borrowed from another task,
two write actions swapped), each kept only where it changes the end state (``envace_gym.envs.tau2.perturb``),
through ``EnvACE-Tau2-v0``; then it hands each episode, converted to tau2 messages, to
``tau2.evaluator.evaluate_simulation`` (``EvaluationType.ALL``) and compares the rewards. Where tau2's
evaluator raises (an assertion function on a missing entity), the episode counts as tau2 reward 0, as
tau2's runner scores a failed sample with ``--skip-failed-samples``.

    .venv/bin/python benchmarks/tau2_agreement.py [--domains retail,airline] [--split test|train|all]
                                                   [--limit N] [--replay] [--json]

The default is the test split of every domain (109 tasks, 387 episodes, about 5 minutes on 2 cores);
--split all runs all 287 tasks (1,057 episodes, about 16 minutes).

``--replay`` also scores every episode by replaying its calls on a fresh environment (the path imagined
backends take) and compares that too. Prints a table per domain and every disagreement.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from typing import Any

from envace_gym.agents.scripted import OraclePolicy, play_episode
from envace_gym.envs.tau2 import _runtime
from envace_gym.envs.tau2.domains import DOMAINS
from envace_gym.envs.tau2.env import Tau2Env
from envace_gym.envs.tau2.official import evaluate_with_tau2
from envace_gym.envs.tau2.perturb import PERTURBATIONS, perturbations
from envace_gym.envs.tau2.scoring import score_log
from envace_gym.envs.tau2.tasks import build_task
from envace_gym.tasks import TaskSuite

VARIANTS = ("gold",) + PERTURBATIONS


def run_domain(domain: str, split: str, limit: int | None, replay: bool) -> dict[str, Any]:
    start = time.perf_counter()
    splits = _runtime.task_splits(domain)
    all_tasks = list(_runtime.base_tasks(domain))
    chosen = [t for t in all_tasks if split == "all" or splits[t.id] == split][:limit]
    episodes = []
    for task in chosen:
        plans = {"gold": None, **perturbations(domain, task, all_tasks)}
        for variant, actions in plans.items():
            episodes.append(
                (task, variant, build_task(domain, task, splits[task.id], actions, id_suffix=f"~{variant}"))
            )
    env = Tau2Env(domain=domain, split=None, tasks=TaskSuite([e[2] for e in episodes], f"tau2/{domain}~agreement"))
    oracle = OraclePolicy(env.suite)
    rows = []
    for task, variant, ours in episodes:
        info = play_episode(env, oracle, ours.id)
        ours_reward = float(bool(info.get("success")))
        row = {
            "task": task.id,
            "variant": variant,
            "ours": ours_reward,
            "ours_components": info.get("reward_components", {}),
            "termination": env.log.termination,
        }
        try:
            reward_info = evaluate_with_tau2(domain, ours.metadata["tau2"]["task"], env.log)
        except Exception as exc:  # noqa: BLE001 - tau2's runner scores such a sample 0 (--skip-failed-samples)
            row.update(tau2=0.0, tau2_breakdown={}, tau2_error=f"{type(exc).__name__}: {exc}")
        else:
            breakdown = reward_info.reward_breakdown or {}
            row.update(
                tau2=float(reward_info.reward),
                tau2_breakdown={getattr(k, "value", str(k)): v for k, v in breakdown.items()},
            )
        if replay:
            row["ours_replay"] = score_log(domain, ours.metadata["tau2"]["task"], env.log).reward
        rows.append(row)
    env.close()
    return {"rows": rows, "seconds": time.perf_counter() - start, "tasks": len(chosen)}


def summarise(domain: str, result: dict[str, Any]) -> dict[str, Any]:
    rows = result["rows"]
    by_variant: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_variant[r["variant"]].append(r)
    agree = sum(r["ours"] == r["tau2"] for r in rows)
    out = {
        "domain": domain,
        "tasks": result["tasks"],
        "episodes": len(rows),
        "agree": agree,
        "agreement": agree / len(rows) if rows else None,
        "seconds": round(result["seconds"], 1),
        "variants": {
            v: {
                "episodes": len(by_variant[v]),
                "agree": sum(r["ours"] == r["tau2"] for r in by_variant[v]),
                "reward_1_ours": sum(r["ours"] == 1.0 for r in by_variant[v]),
                "reward_1_tau2": sum(r["tau2"] == 1.0 for r in by_variant[v]),
            }
            for v in VARIANTS
            if by_variant[v]
        },
        "disagreements": [r for r in rows if r["ours"] != r["tau2"]],
        "tau2_errors": [r for r in rows if "tau2_error" in r],
    }
    if any("ours_replay" in r for r in rows):
        out["replay_agree"] = sum(r["ours_replay"] == r["tau2"] for r in rows)
        out["disagreements"] += [
            dict(r, path="replay") for r in rows if r["ours_replay"] != r["tau2"] and r["ours"] == r["tau2"]
        ]
    return out


def print_table(summaries: list[dict[str, Any]], total_seconds: float) -> None:
    print(f"{'domain':<9}{'variant':<16}{'episodes':>9}{'agree':>7}{'rate':>9}{'ours=1':>8}{'tau2=1':>8}{'time':>9}")
    for s in summaries:
        for v, c in s["variants"].items():
            rate = 100 * c["agree"] / c["episodes"]
            print(
                f"{s['domain']:<9}{v:<16}{c['episodes']:>9}{c['agree']:>7}{rate:>8.1f}%{c['reward_1_ours']:>8}{c['reward_1_tau2']:>8}"
            )
        rate = f"{100 * s['agreement']:.1f}%" if s["agreement"] is not None else "-"
        ours1 = sum(c["reward_1_ours"] for c in s["variants"].values())
        tau1 = sum(c["reward_1_tau2"] for c in s["variants"].values())
        print(
            f"{s['domain']:<9}{'ALL (' + str(s['tasks']) + ' tasks)':<16}{s['episodes']:>9}{s['agree']:>7}"
            f"{rate:>9}{ours1:>8}{tau1:>8}{s['seconds']:>8.1f}s"
        )
        if "replay_agree" in s:
            print(
                f"{s['domain']:<9}{'replay path':<16}{s['episodes']:>9}{s['replay_agree']:>7}"
                f"{100 * s['replay_agree'] / s['episodes']:>8.1f}%"
            )
    n = sum(s["episodes"] for s in summaries)
    a = sum(s["agree"] for s in summaries)
    print(f"all domains: {a}/{n} episodes agree ({100 * a / n:.1f}%) in {total_seconds:.1f}s" if n else "no episodes")
    for s in summaries:
        for e in s["tau2_errors"]:
            print(
                f"TAU2 RAISED {s['domain']} task={e['task']} variant={e['variant']} ours={e['ours']} "
                f"({e['tau2_error']}); "
                "counted as tau2 reward 0, as its runner does with --skip-failed-samples"
            )
        for d in s["disagreements"]:
            print(
                f"DISAGREE {s['domain']} task={d['task']} variant={d['variant']} ours={d['ours']} tau2={d['tau2']} "
                f"ours={d['ours_components']} tau2={d['tau2_breakdown']} termination={d['termination']}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", default=",".join(DOMAINS), help=f"comma-separated, from {', '.join(DOMAINS)}")
    parser.add_argument(
        "--split", default="test", choices=("all", "train", "test"), help="tau2 task split (default: test)"
    )
    parser.add_argument("--limit", type=int, default=None, help="at most N tasks per domain")
    parser.add_argument("--replay", action="store_true", help="also score by replay on a fresh environment")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    for d in domains:
        if d not in DOMAINS:
            print(f"unknown tau2 domain {d!r}; known domains: {', '.join(DOMAINS)}", file=sys.stderr)
            return 2
    start = time.perf_counter()
    summaries = [summarise(d, run_domain(d, args.split, args.limit, args.replay)) for d in domains]
    total = time.perf_counter() - start
    if args.json:
        print(json.dumps({"split": args.split, "seconds": round(total, 1), "domains": summaries}))
    else:
        print_table(summaries, total)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
