"""Test-time private rehearsal: success on held-out test tasks against the rehearsal budget.

For each policy (the warm-started embedded model, and each ``--policy NAME=SPEC``: e.g. a checkpoint of
``envace train --backend self``, whose env role was trained) and each configuration ``USE:BUDGET`` of
``--configs`` it plays the same held-out test episodes on the **real backend** (greedy actor; rehearsals
sample the actor at temperature 0.7 and imagine every tool result with the policy itself, without
reference grounding). A use is how the rehearsals serve the committed episode:

* ``memory-parallel`` / ``memory-sequential``: a memory of them enters the actor's context (independent
  rehearsals, or each seeing the ones before);
* ``select-agreement`` / ``select-judge``: before every actor turn the agent rehearses from the real state
  and commits the chosen rehearsal's first message (the most frequent one, a tie to the policy's verdict;
  or the policy's verdict), with no rehearsal text in its context;

and a budget is rehearsals per decision (``adaptive``: until two agree, at most 4). Budget 0 (no
rehearsal) is always played first. It reports success with a 95% Wilson interval, real calls, rehearsals,
rehearsal tokens (actor, env role and judge) and seconds per episode; prints a table and writes
``results.json`` (after every configuration: ``--resume`` skips the finished ones) and
``rehearsal_budget.png`` under ``--out``; ``--write-docs RESULTS.json`` rewrites the table of
``docs/rehearsal.md`` from a results file without running anything. The paper's finding to test:
rehearsal helps a model whose env role was trained, not one whose env role was not.

    python benchmarks/rehearsal_budget.py                                     # warm start only (trained here)
    python benchmarks/rehearsal_budget.py --warm runs/learning/warm \
        --policy envace-log=ckpt:runs/learning/envace-log-seed0 --configs select-agreement:2,memory-parallel:2

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
from envace_gym.agents.eval.stats import paired_bootstrap, wilson_interval
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rehearsal import PrivateRehearsal

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the learning benchmark's task pool and warm start: one of each)
from _docs import write_block  # noqa: E402

from envace_gym.agents.provenance import run_environment  # noqa: E402

#: ``--configs`` default: every use at budgets 1, 2, 4 and adaptive.
USES = ("memory-parallel", "memory-sequential", "select-agreement", "select-draft", "select-outcome", "select-judge")
DEFAULT_CONFIGS = ",".join(f"{use}:{budget}" for use in USES for budget in (1, 2, 4, "adaptive"))


def parse_configs(text: str) -> list[tuple[str, int | str]]:
    """``"select-agreement:2,memory-parallel:adaptive"`` -> ``[("select-agreement", 2), ...]``; budget 0 first."""
    configs: list[tuple[str, int | str]] = [("none", 0)]
    for item in filter(None, (part.strip() for part in text.split(","))):
        use, _, budget = item.partition(":")
        if use not in USES or not (budget == "adaptive" or budget.isdigit() and int(budget) > 0):
            uses = ", ".join(USES)
            raise SystemExit(f"--configs: {item!r} is not USE:BUDGET (USE one of {uses}; BUDGET >= 1 or adaptive)")
        configs.append((use, budget if budget == "adaptive" else int(budget)))
    return configs


def make_agent(policy: LMPolicy, use: str, budget: int | str, args) -> LMPolicy | PrivateRehearsal:
    if budget == 0:
        return policy
    kind, _, how = use.partition("-")
    options = {"mode": how} if kind == "memory" else {"use": "select", "choose": how}
    return PrivateRehearsal(
        policy, budget=budget, max_budget=4, memory_tokens=args.memory_tokens, seed=args.seed, **options
    )


def run_config(policy: LMPolicy, use: str, budget: int | str, args, rehearsal_seed: int = 0) -> dict[str, Any]:
    """One configuration on ``args.episodes`` episodes: the tasks and their order come from ``args.seed`` (the
    same for every configuration, so outcomes pair by task), the rehearsals' sampling from ``rehearsal_seed``."""
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, args.seed)
    policy.engine.clear()
    actor = make_agent(policy, use, budget, argparse.Namespace(**{**vars(args), "seed": rehearsal_seed}))
    envs = [learning.env_factory(args, args.split)() for _ in range(min(args.batch, args.episodes))]
    t0 = time.monotonic()
    report = evaluate(envs, actor, args.episodes, seed=args.seed, progress=False, desc=f"{use}-{budget}")
    seconds = time.monotonic() - t0
    if args.save_trajectories:  # to read what each configuration did (on the train split: to choose designs)
        from envace_gym.agents.rollout import save_trajectories

        tail = f"-r{rehearsal_seed}" if rehearsal_seed else ""
        path = Path(args.out) / "trajectories" / f"{args.current}-{use}-{budget}{tail}.jsonl"
        save_trajectories(report.trajectories, path)
    rows = report.per_episode()
    n = len(rows)
    wins = sum(r["success"] for r in rows)
    choices: dict[str, int] = {}
    for traj in report.trajectories:
        for note in traj.notes:
            if note.get("choice"):  # select mode's decision notes: agreement, judge, tie->judge, fallback, ...
                choices[note["choice"]] = choices.get(note["choice"], 0) + 1
    return {
        "use": use,
        "budget": budget,
        "success": wins / n,
        "success_ci": wilson_interval(wins, n),
        "episodes": n,
        # the committed episodes' calls on the real backend, rejected ones included (this file's own key)
        "real_calls": sum(r["live_calls"] + r["rejected_calls"] for r in rows) / n,
        "rehearsals": sum(r["rehearsals"] for r in rows) / n,
        "rehearsal_tokens": sum(r["rehearsal_tokens"] for r in rows) / n,
        "memory_tokens": sum(r["memory_tokens"] for r in rows) / n,
        "seconds_per_episode": seconds / n,
        "choices": choices,  # select mode: how each decision was made (agreement, judge, tie->judge, ...)
        "rehearsal_seed": rehearsal_seed if budget != 0 else None,
        "task_ids": [r["task_id"] for r in rows],  # with outcomes: the pairing with budget 0, task by task
        "outcomes": [int(r["success"]) for r in rows],
    }


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = max(6.0, 0.6 * max(map(len, results.values())))
    fig, axes = plt.subplots(1, len(results), figsize=(width * len(results), 4.5), squeeze=False)
    for ax, (name, rows) in zip(axes[0], results.items(), strict=True):
        labels = [label(r) for r in rows]
        ys = [r["success"] for r in rows]
        err = [[r["success"] - r["success_ci"][0] for r in rows], [r["success_ci"][1] - r["success"] for r in rows]]
        colors = ["tab:gray" if r["budget"] == 0 else "tab:blue" if r["use"].startswith("memory") else "tab:orange"
                  for r in rows]  # fmt: skip
        ax.bar(range(len(rows)), ys, yerr=err, capsize=3, color=colors)
        ax.axhline(rows[0]["success"], color="tab:gray", linestyle=":", linewidth=1)
        ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("test success (real backend)")
        ax.set_title(f"{name} (gray: no rehearsal; blue: memory; orange: select)", fontsize=9)
        ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def label(row: dict[str, Any]) -> str:
    return "none" if row["budget"] == 0 else f"{row['use']} {row['budget']}"


def pooled(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of one policy with the same (use, budget) over rehearsal seeds, pooled: success over all their
    episodes, per-seed figures averaged, and ``delta``: the mean paired difference from budget 0 (the same
    tasks, budget 0 greedy and so seed-free) with a 95% bootstrap interval over tasks, where outcomes were kept."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["use"], r["budget"]), []).append(r)
    base = next((g[0] for key, g in groups.items() if key[1] == 0), None)
    out = []
    for (use, budget), group in groups.items():
        n = sum(r["episodes"] for r in group)
        wins = round(sum(r["success"] * r["episodes"] for r in group))
        row = {"use": use, "budget": budget, "episodes": n, "success": wins / n, "success_ci": wilson_interval(wins, n),
               "seeds": len(group), "per_seed": [r["success"] for r in group], "delta": None}  # fmt: skip
        for key in ("real_calls", "rehearsals", "rehearsal_tokens", "seconds_per_episode"):
            row[key] = sum(r[key] * r["episodes"] for r in group) / n
        if budget != 0 and base is not None and "outcomes" in base and all("outcomes" in r for r in group):
            row["delta"] = paired_delta(base, group)
        out.append(row)
    return out


def paired_delta(base: dict[str, Any], group: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of (configuration - budget 0) success over tasks, each task's difference averaged over the seeds
    that played it; 95% interval by bootstrap over tasks; tasks won and lost (summed over seeds)."""
    before = dict(zip(base["task_ids"], base["outcomes"], strict=True))
    per_task: dict[str, list[int]] = {}
    for r in group:
        for task, outcome in zip(r["task_ids"], r["outcomes"], strict=True):
            if task in before:
                per_task.setdefault(task, []).append(outcome - before[task])
    paired = paired_bootstrap([sum(d) / len(d) for d in per_task.values()], resamples=2000)
    flat = [d for ds in per_task.values() for d in ds]
    return {"mean": paired["mean"], "ci": paired["ci95"], "won": flat.count(1), "lost": flat.count(-1),
            "tasks": paired["tasks"]}  # fmt: skip


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    """The markdown table of ``results`` (policy -> rows). A configuration is paired with its policy's budget 0;
    a later policy's budget 0 with the first policy's (the same tasks: two models compared task by task)."""
    first = next(iter(results.values()), [])
    reference = next((r for r in first if r["budget"] == 0 and "outcomes" in r), None)
    lines = [
        "| policy | use | budget | seeds | episodes | success (95% CI) | vs budget 0, paired (95% CI; won/lost) "
        "| real calls/ep | rehearsals/ep | rehearsal tokens/ep | s/ep |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, (name, rows) in enumerate(results.items()):
        for r in pooled(rows):
            lo, hi = r["success_ci"]
            d, against = r["delta"], ""
            if k and r["budget"] == 0 and reference is not None:
                zero = next(x for x in rows if x["budget"] == 0)
                if "outcomes" in zero and set(zero["task_ids"]) == set(reference["task_ids"]):
                    d, against = paired_delta(reference, [zero]), f" vs {next(iter(results))}"
            vs = "-" if d is None else (
                f"{100 * d['mean']:+.1f} ({100 * d['ci'][0]:+.1f} to {100 * d['ci'][1]:+.1f}; "
                f"{d['won']}/{d['lost']}){against}"
            )  # fmt: skip
            lines.append(
                f"| {name} | {r['use'] if r['budget'] != 0 else '-'} | {r['budget']} | {r['seeds']} | "
                f"{r['episodes']} | "
                f"{100 * r['success']:.1f}% ({100 * lo:.0f}-{100 * hi:.0f}) | {vs} | {r['real_calls']:.2f} | "
                f"{r['rehearsals']:.2f} | {r['rehearsal_tokens']:.0f} | {r['seconds_per_episode']:.1f} |"
            )
    return "\n".join(lines)


def write_docs(path: str, block: str = "rehearsal-table") -> str:
    """Rewrite the generated table ``block`` of ``docs/rehearsal.md`` from a results file."""
    report = json.loads(Path(path).read_text())
    s = report["settings"]
    split = s.get("split", "test")
    episodes = "held-out test episodes" if split == "test" else f"{split}-split episodes"
    caption = (
        f"Raw results: `docs/results/{Path(path).name}` ({episodes} of {s['suite']}, tasks from seed "
        f"{s['seed']}, rehearsal seeds {s.get('rehearsal_seeds', s['seed'])}; "
        f"{report['minutes']} min on {report.get('machine', 'CPU')})."
    )
    text = f"{table(report['results'])}\n\n{caption}"
    changed = write_block("rehearsal.md", block, text)
    print(f"docs/rehearsal.md {'rewritten' if changed else 'unchanged'} from {path}")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", default=None, help="a warm-started checkpoint folder (default: train one)")
    parser.add_argument(
        "--policy", action="append", default=[], metavar="NAME=SPEC",
        help="a trained policy and its name in the table (repeatable), e.g. envace-log=ckpt:runs/x/envace-log-seed0",
    )  # fmt: skip
    parser.add_argument("--episodes", type=int, default=64, help="test episodes per configuration")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS, help="comma-separated USE:BUDGET (budget 0 always runs)")
    parser.add_argument("--memory-tokens", type=int, default=256, help="the rehearsal memory's bound")
    parser.add_argument("--batch", type=int, default=16, help="envs in lockstep")
    parser.add_argument("--seed", type=int, default=0, help="the tasks and their order (one for every configuration)")
    parser.add_argument(
        "--rehearsal-seeds", default="0", help="comma-separated: each rehearsal configuration runs once per seed"
    )
    parser.add_argument("--split", default="test", help="test (the figures) or train (to read episodes and choose)")
    parser.add_argument("--save-trajectories", action="store_true", help="OUT/trajectories/POLICY-USE-BUDGET.jsonl")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--out", default="runs/rehearsal_budget", help="output folder")
    parser.add_argument(
        "--skip-warm", action="store_true", help="play only the --policy models (the warm start runs elsewhere)"
    )
    parser.add_argument("--resume", action="store_true", help="keep the finished configurations of OUT/results.json")
    parser.add_argument(
        "--write-docs", metavar="RESULTS", help="rewrite docs/rehearsal.md's table from RESULTS; run nothing"
    )
    parser.add_argument("--block", default="rehearsal-table", help="(--write-docs) the table's block in the page")
    for key, value in learning.DEFAULT.items():  # the learning benchmark's setting (tasks, horizon, warm start)
        if key in ("suite", "max_calls", "max_turns", "max_new_tokens", "warm_steps"):
            parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value, help=f"default {value}")
    args = parser.parse_args()
    if args.write_docs:
        write_docs(args.write_docs, args.block)
        return
    configs = parse_configs(args.configs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # learning.warm_start reads --policy as the base model; here that is the embedded one.
    policies = {} if args.skip_warm else {
        "warm start": learning.warm_start(argparse.Namespace(**{**vars(args), "policy": "default"}))
    }  # fmt: skip
    for item in args.policy:
        name, sep, spec = item.partition("=")
        if not sep:
            raise SystemExit(f"--policy {item!r}: give NAME=SPEC")
        policies[name] = spec
    previous = json.loads((out / "results.json").read_text()) if args.resume and (out / "results.json").exists() else {}
    results: dict[str, list[dict[str, Any]]] = previous.get("results", {})
    t0 = time.monotonic() - 60 * previous.get("minutes", 0.0)
    for name, spec in policies.items():
        rows = results.setdefault(name, [])
        seeds = [int(x) for x in args.rehearsal_seeds.split(",")]
        runs = [(u, b, s) for u, b in configs for s in (seeds if b != 0 else [0])]
        todo = [(u, b, s) for u, b, s in runs if not any(
            r["use"] == u and r["budget"] == b and (b == 0 or r.get("rehearsal_seed", args.seed) == s) for r in rows
        )]  # fmt: skip
        if not todo:
            continue
        policy = learning.load(spec, args, args.seed)
        for use, budget, rehearsal_seed in todo:
            args.current = name.replace(" ", "-")
            row = run_config(policy, use, budget, args, rehearsal_seed)
            rows.append(row)
            print(
                f"{name} {label(row)} (rehearsal seed {rehearsal_seed}): success {row['success']:.3f} "
                f"[{row['success_ci'][0]:.3f}, "
                f"{row['success_ci'][1]:.3f}], {row['real_calls']:.2f} real calls, {row['rehearsals']:.2f} rehearsals, "
                f"{row['rehearsal_tokens']:.0f} tokens, {row['seconds_per_episode']:.1f} s per episode",
                flush=True,
            )
            # Written after every configuration: a run cut short keeps what it finished.
            keys = ("episodes", "memory_tokens", "seed", "rehearsal_seeds", "suite", "max_calls", "max_turns",
                    "max_new_tokens", "device", "split")  # fmt: skip
            settings = {k: getattr(args, k) for k in keys}
            report = {"settings": settings, "policies": policies, "results": results,
                      "minutes": round((time.monotonic() - t0) / 60, 1),
                      "environment": run_environment(policy)}  # fmt: skip
            (out / "results.json").write_text(json.dumps(report, indent=2))
    plot(results, out / "rehearsal_budget.png")
    print(table(results))
    print(f"wrote {out / 'results.json'} and {out / 'rehearsal_budget.png'} ({(time.monotonic() - t0) / 60:.1f} min)")


if __name__ == "__main__":
    main()
