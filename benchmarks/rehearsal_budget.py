"""Test-time private rehearsal: success on held-out test tasks against the rehearsal budget.

For each policy (the warm-started embedded model, and ``--policy``: a checkpoint from ``envace train``,
e.g. EnvACE with ``--backend self``, whose env role was trained), each mode (``parallel``, ``sequential``)
and each budget (0, 1, 2, 4 rehearsals, and ``adaptive``: until two rehearsals agree, at most 4), it plays
the same held-out test episodes on the **real backend** (greedy actor; rehearsals sample the actor at
temperature 0.7 and imagine every tool result with the policy itself, without reference grounding) and
reports success with a 95% Wilson interval, rehearsals, rehearsal tokens (generated, actor and env role)
and seconds per episode. It prints a table, writes ``results.json`` and ``rehearsal_budget.png`` under
``--out``. The paper's finding to test: rehearsal helps a model whose env role was trained, not one whose
env role was not.

    python benchmarks/rehearsal_budget.py                                   # warm start only (trained here)
    python benchmarks/rehearsal_budget.py --warm runs/ckpts/warm --policy ckpt:runs/ckpts/envace-self-seed0/final

The tasks and horizon are the learning benchmark's (``benchmarks/learning.py``: builtin/bank, one user turn,
at most two reference calls, 3 turns), chosen there on train tasks; nothing here is tuned on the test split.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.eval.stats import wilson_interval
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rehearsal import PrivateRehearsal

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the learning benchmark's task pool and warm start: one of each)

BUDGETS: tuple[int | str, ...] = (0, 1, 2, 4, "adaptive")
MODES = ("parallel", "sequential")


def run_config(policy: LMPolicy, budget: int | str, mode: str, args) -> dict[str, Any]:
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, args.seed)
    policy.engine.clear()
    actor = policy if budget == 0 else PrivateRehearsal(
        policy, budget=budget, mode=mode, max_budget=4, memory_tokens=args.memory_tokens, seed=args.seed
    )  # fmt: skip
    envs = [learning.env_factory(args, "test")() for _ in range(min(args.batch, args.episodes))]
    t0 = time.monotonic()
    report = evaluate(envs, actor, args.episodes, seed=args.seed, progress=False, desc=f"{mode}-{budget}")
    seconds = time.monotonic() - t0
    rows = report.per_episode()
    n = len(rows)
    wins = sum(r["success"] for r in rows)
    return {
        "budget": budget,
        "mode": mode,
        "success": wins / n,
        "success_ci": wilson_interval(wins, n),
        "episodes": n,
        "real_calls": sum(r["real_calls"] for r in rows) / n,
        "rehearsals": sum(r["rehearsals"] for r in rows) / n,
        "rehearsal_tokens": sum(r["rehearsal_tokens"] for r in rows) / n,
        "memory_tokens": sum(r["memory_tokens"] for r in rows) / n,
        "seconds_per_episode": seconds / n,
    }


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(b) for b in BUDGETS]
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], results.items(), strict=True):
        for offset, mode in ((-0.08, "parallel"), (0.08, "sequential")):
            pts = [r for r in rows if r["mode"] == mode or r["budget"] == 0]
            xs = [labels.index(str(r["budget"])) + offset for r in pts]
            ys = [r["success"] for r in pts]
            err = [[r["success"] - r["success_ci"][0] for r in pts], [r["success_ci"][1] - r["success"] for r in pts]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=mode)
        ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel("rehearsal budget (episodes)")
        ax.set_ylabel("test success (real backend)")
        ax.set_title(name)
        ax.set_ylim(0, 1)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    lines = [
        "| policy | mode | budget | success (95% CI) | rehearsals/ep | rehearsal tokens/ep | real calls/ep | s/ep |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        for r in rows:
            lo, hi = r["success_ci"]
            lines.append(
                f"| {name} | {r['mode'] if r['budget'] != 0 else '-'} | {r['budget']} | "
                f"{100 * r['success']:.1f}% ({100 * lo:.0f}-{100 * hi:.0f}) | {r['rehearsals']:.2f} | "
                f"{r['rehearsal_tokens']:.0f} | {r['real_calls']:.2f} | {r['seconds_per_episode']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", default=None, help="a warm-started checkpoint folder (default: train one)")
    parser.add_argument("--policy", default=None, help="a trained policy spec (e.g. ckpt:DIR from envace train)")
    parser.add_argument("--policy-name", default="envace-trained", help="its name in the table")
    parser.add_argument("--episodes", type=int, default=32, help="test episodes per configuration")
    parser.add_argument("--budgets", default=",".join(str(b) for b in BUDGETS), help="comma-separated budgets")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes")
    parser.add_argument("--memory-tokens", type=int, default=256, help="the rehearsal memory's bound")
    parser.add_argument("--batch", type=int, default=16, help="envs in lockstep")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/rehearsal_budget", help="output folder")
    for key, value in learning.DEFAULT.items():  # the learning benchmark's setting (tasks, horizon, warm start)
        if key in ("suite", "max_calls", "max_turns", "max_new_tokens", "warm_steps"):
            parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value, help=f"default {value}")
    args = parser.parse_args()
    budgets = [b if b == "adaptive" else int(b) for b in args.budgets.split(",") if b]
    modes = [m for m in args.modes.split(",") if m]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policies = {"warm start": learning.warm_start(args)}
    if args.policy:
        policies[args.policy_name] = args.policy
    results: dict[str, list[dict[str, Any]]] = {}
    t0 = time.monotonic()
    for name, spec in policies.items():
        policy = learning.load(spec, args, args.seed)
        rows = results.setdefault(name, [])
        for budget in budgets:
            for mode in modes if budget != 0 else modes[:1]:
                row = run_config(policy, budget, mode, args)
                rows.append(row)
                print(
                    f"{name} {mode} budget {budget}: success {row['success']:.3f} "
                    f"[{row['success_ci'][0]:.3f}, {row['success_ci'][1]:.3f}], {row['rehearsals']:.2f} rehearsals, "
                    f"{row['rehearsal_tokens']:.0f} tokens, {row['seconds_per_episode']:.1f} s per episode",
                    flush=True,
                )
                # Written after every configuration: a run cut short keeps what it finished.
                settings = {k: getattr(args, k) for k in ("episodes", "memory_tokens", "seed", "suite", "max_calls",
                                                          "max_turns", "max_new_tokens")}  # fmt: skip
                report = {"settings": settings, "policies": policies, "results": results,
                          "minutes": round((time.monotonic() - t0) / 60, 1)}  # fmt: skip
                (out / "results.json").write_text(json.dumps(report, indent=2))
    plot(results, out / "rehearsal_budget.png")
    print(table(results))
    print(f"wrote {out / 'results.json'} and {out / 'rehearsal_budget.png'} ({(time.monotonic() - t0) / 60:.1f} min)")


if __name__ == "__main__":
    main()
