"""Agreement of EnvACE's BFCL reward with BFCL's own checker, per category.

For every task (or the first ``--limit`` of each category), the ground-truth trajectory and its
perturbations (a dropped call, a wrong argument, an extra call, swapped order, a missing turn; see
``envace_gym.envs.bfcl.perturb``) are scored twice:

* ours: played through ``EnvACE-BFCL-v0`` (calls formatted, parsed, validated, executed, then scored);
* BFCL's: the same calls handed, as decoded model output, to bfcl_eval's own checker functions:
  ``ast_checker`` for AST categories, ``multi_turn_checker`` for multi-turn ones (BFCL's checker runs the
  calls with ``eval``: here it only ever sees ground-truth calls and our perturbations of them, never model
  output), and the relevance runner's rule (valid iff the decoded output has / has no call) for
  relevance and irrelevance, which have no checker function.

A check agrees when both say valid or both say invalid. Prints a table (``--json`` for JSON) and lists
every disagreement. Offline; the full run (about 20,000 checks) takes 45-70 s on 2 cores.

    python benchmarks/bfcl_agreement.py [--categories simple_python multi_turn_base] [--limit N] [--json]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import itertools
import json
import re
import sys
import time
from collections import Counter, defaultdict
from typing import Any

import gymnasium as gym

import envace_gym  # noqa: F401  (registers EnvACE-BFCL-v0)
from envace_gym.calls import ToolCall
from envace_gym.envs.bfcl import CATEGORIES, category_kind, load_suite, upstream
from envace_gym.envs.bfcl.perturb import PERTURBATIONS, perturb, play

_run_ids = itertools.count()


def render(call: ToolCall) -> str:
    """A call as the Python source BFCL's multi-turn checker executes (``repr`` of JSON values is a literal)."""
    return f"{call.name}(" + ", ".join(f"{k}={v!r}" for k, v in call.arguments.items()) + ")"


def official_verdict(task: Any, turns: list[list[ToolCall]], perturbation: str) -> dict[str, Any]:
    """BFCL's own verdict on ``turns`` as the decoded output of a model."""
    category, entry_id = task.metadata["bfcl_category"], task.metadata["bfcl_id"]
    kind = category_kind(category)
    calls = [c for turn in turns for c in turn]
    if kind in ("irrelevance", "relevance"):  # eval_runner._evaluate_single_relevance_entry
        has_call = bool(calls)
        return {"valid": not has_call if kind == "irrelevance" else has_call}
    if kind == "ast":  # eval_runner._evaluate_single_ast_entry: no call = nothing to decode
        if not calls:
            return {"valid": False, "error_type": "ast_decoder:decoder_failed"}
        entry = upstream.entry(category, entry_id)
        return upstream.ast_checker().ast_checker(
            copy.deepcopy(entry["function"]),
            [{c.name: copy.deepcopy(c.arguments)} for c in calls],
            copy.deepcopy(upstream.ground_truth(category, entry_id)),
            upstream.language(category),
            category,
            upstream.CHECKER_MODEL_NAME,
        )
    gt = upstream.ground_truth(category, entry_id)
    if perturbation == "ground_truth":  # BFCL's own strings, positional arguments and all
        decoded = [[list(turn)] if turn else [] for turn in gt]
    else:
        decoded = [[[render(c) for c in turn]] if turn else [] for turn in turns]
    model_name = f"envace_agreement_{next(_run_ids)}"
    try:
        return upstream.multi_turn_checker().multi_turn_checker(
            decoded, gt, copy.deepcopy(upstream.entry(category, entry_id)), category, model_name
        )
    except Exception as exc:  # noqa: BLE001 - reported as a disagreement, with the reason
        return {"valid": False, "error_type": f"checker raised {type(exc).__name__}", "error_message": str(exc)}
    finally:
        _forget_instances(model_name)


def _forget_instances(model_name: str) -> None:
    # BFCL's runner caches API instances in its module globals by model name and entry id; drop ours.
    utils = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    prefix = re.sub(r"[-./:]", "_", model_name)
    for key in [k for k in vars(utils) if k.startswith(prefix)]:
        del vars(utils)[key]


def run_category(category: str, limit: int | None) -> dict[str, Any]:
    env = gym.make("EnvACE-BFCL-v0", category=category)
    tasks = list(load_suite(category))[: limit or None]
    agree: Counter[str] = Counter()
    total: Counter[str] = Counter()
    valid: Counter[str] = Counter()  # BFCL says valid
    gt_pass = {"ours": 0, "bfcl": 0}
    disagreements = []
    start = time.perf_counter()
    for task in tasks:
        for name in PERTURBATIONS:
            turns = perturb(task, name)
            if turns is None:
                continue
            ours_reward, info = play(env, task.id, turns)
            ours = ours_reward >= 1.0
            theirs = official_verdict(task, turns, name)
            bfcl = bool(theirs.get("valid"))
            total[name] += 1
            agree[name] += ours == bfcl
            valid[name] += bfcl
            if name == "ground_truth":
                gt_pass["ours"] += ours
                gt_pass["bfcl"] += bfcl
            if ours != bfcl:
                disagreements.append(
                    {
                        "task": task.id,
                        "perturbation": name,
                        "ours": ours,
                        "bfcl": bfcl,
                        "ours_error": (info.get("bfcl") or {}).get("error_type"),
                        "bfcl_error": theirs.get("error_type"),
                    }
                )
    env.close()
    checks = sum(total.values())
    return {
        "category": category,
        "tasks": len(tasks),
        "checks": checks,
        "agreement": sum(agree.values()) / checks if checks else None,
        "by_perturbation": {k: {"checks": total[k], "agree": agree[k], "bfcl_valid": valid[k]} for k in total},
        "ground_truth_pass": gt_pass,
        "disagreements": disagreements,
        "seconds": round(time.perf_counter() - start, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--categories", nargs="*", default=list(CATEGORIES), help="BFCL categories (default: all supported)"
    )
    parser.add_argument("--limit", type=int, default=0, help="tasks per category (default 0: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [run_category(c, args.limit) for c in args.categories]
    elapsed = time.perf_counter() - start
    if args.json:
        print(json.dumps({"categories": rows, "seconds": round(elapsed, 1)}, indent=1))
        return 0
    head = (
        f"{'category':26} {'tasks':>5} {'checks':>6} {'agree':>8} {'GT pass ours/BFCL':>18} "
        f"{'perturbed: BFCL-valid':>22} {'time':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        rate = f"{100 * r['agreement']:.2f}%" if r["agreement"] is not None else "n/a"
        gt = f"{r['ground_truth_pass']['ours']}/{r['ground_truth_pass']['bfcl']}"
        perturbed = [v for k, v in r["by_perturbation"].items() if k != "ground_truth"]
        still = f"{sum(v['bfcl_valid'] for v in perturbed)}/{sum(v['checks'] for v in perturbed)}"
        print(
            f"{r['category']:26} {r['tasks']:5d} {r['checks']:6d} {rate:>8} {gt:>18} {still:>22} {r['seconds']:6.1f}s"
        )
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        for d in r["disagreements"]:
            by_kind[r["category"]].append(d)
    if by_kind:
        print("\nDisagreements:")
        for category, items in by_kind.items():
            for d in items:
                print(
                    f"  {category}: {d['task']} {d['perturbation']}: ours={d['ours']} ({d['ours_error']}) "
                    f"BFCL={d['bfcl']} ({d['bfcl_error']})"
                )
    print(f"\n{sum(r['checks'] for r in rows)} checks in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
