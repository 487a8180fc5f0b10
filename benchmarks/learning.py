"""Learning benchmark: does EnvACE training help, against the real backend, on held-out test tasks?

Every arm starts from the same warm-started checkpoint (``envace sft --roles actor,env_role``: the
embedded model earns no reward zero-shot) and gets the same budget of steps and episodes:

* ``untrained``: the warm start itself;
* ``envace-self``: EnvACE world rehearsal (the policy imagines every tool result; both roles trained);
* ``envace-frozen-env``: the same, with the env role's samples masked out (the masked-role ablation);
* ``grpo-real``: plain GRPO on the real backends (the upper reference);
* ``grpo-simulator``: GRPO with a frozen copy of the warm start answering the calls (the paper's baseline);
* ``grounded-0.25``: EnvACE with a quarter of the calls also run for real, the env role supervised there.

For each arm it reports success and mean reward on test tasks played **on the real backend** (greedy), with
a 95% Wilson interval (and over seeds, with ``--seeds``), the env role's fidelity before and after
(``--grounding none``: parse-valid, exact match, key F1), generated tokens and wall time; it prints a
table, writes ``results.json`` and ``learning.png`` under ``--out``.

    python benchmarks/learning.py                       # the default setting (2 CPU cores, < 90 min)
    python benchmarks/learning.py --full                # sized for one GPU
    python benchmarks/learning.py --arms untrained,grpo-real --steps 4   # a subset

Nothing here is tuned on the test split: the domain, horizon and budget were chosen from the warm start's
success on *train* tasks (see the README).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.eval.fidelity import fidelity_report
from envace_gym.agents.eval.stats import mean_interval, wilson_interval
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft

ARMS: dict[str, dict[str, Any] | None] = {
    "untrained": None,
    "envace-self": {"backend": "self"},
    "envace-frozen-env": {"backend": "self", "train_env_role": False},
    "grpo-real": {"backend": "real"},
    "grpo-simulator": {"backend": "simulator"},
    "grounded-0.25": {"backend": "self", "real_fraction": 0.25},
}

DEFAULT = {
    "suite": "builtin/bank",
    "max_calls": 2,
    "max_turns": 3,
    "steps": 12,
    "tasks_per_step": 2,
    "group_size": 4,
    "lr": 2e-5,
    "temperature": 0.7,
    "max_new_tokens": 64,
    "eval_episodes": 64,
    "fidelity_episodes": 6,
    "warm_steps": 60,
    "seeds": "0",
}
FULL = {  # one GPU: all four domains, a longer warm start, 200 steps of 16 groups, the whole test split, 3 seeds
    "suite": "builtin",
    "max_calls": -1,
    "max_turns": 4,
    "steps": 200,
    "tasks_per_step": 16,
    "group_size": 4,
    "lr": 1e-5,
    "temperature": 0.7,
    "max_new_tokens": 128,
    "eval_episodes": 600,
    "fidelity_episodes": 60,
    "warm_steps": 600,
    "seeds": "0,1,2",
}


def task_pool(args) -> list:
    """The suite's one-turn tasks that need at most ``--max-calls`` reference calls (-1: every task).

    The default (at most two calls) was chosen on the *train* split: with one-call tasks only, the 60-step
    warm start already solves nine in ten, so most groups of four are all ones and teach nothing (as all-zero
    groups do); two-call tasks (look an account up, then act on the id it returned) leave room to learn and
    make the second call depend on the first call's result, which under imagination the env role writes.
    The run prints the start's success on train tasks (``start_train_success``) so the choice can be checked."""
    from envace_gym.suites import load_suite

    suite = load_suite(args.suite)
    if args.max_calls < 0:
        return list(suite)
    return [t for t in suite if len(t.user_turns) == 1 and len(t.reference_calls) <= args.max_calls]


def env_factory(args, split: str):
    tasks = task_pool(args)
    return lambda: gym.make("EnvACE-ToolCall-v0", tasks=tasks, split=split, max_turns=args.max_turns)


def load(spec: str, args, seed: int) -> LMPolicy:
    return LMPolicy.from_spec(spec, sampling=SamplingConfig(0.0, 1.0, args.max_new_tokens, seed), progress=False)


def warm_start(args) -> str:
    """The shared starting checkpoint: ``--warm DIR`` if given, else trained once and kept in ``OUT/warm``."""
    if args.warm:
        return f"ckpt:{args.warm}"
    out = Path(args.out) / "warm"
    if (out / "sft_summary.json").exists():
        return f"ckpt:{out}"
    policy = load("default", args, 0)
    env = env_factory(args, "train")()
    examples = build_sft_examples(env, policy, 400, seed=0, progress=False, roles=("actor", "env_role"))
    # A step count, not minutes: the starting point must not depend on how busy the machine is.
    cfg = SFTConfig(steps=args.warm_steps, lr=1e-4, seed=0)
    print(f"warm start: {len(examples)} examples, {args.warm_steps} steps", flush=True)
    train_sft(policy, examples, cfg, out, progress=False)
    return f"ckpt:{out}"


def train_success(policy: LMPolicy, args, episodes: int = 32) -> float:
    """The start's greedy success on train tasks: what the setting is chosen on (never the test split)."""
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, 0)
    envs = [env_factory(args, "train")() for _ in range(16)]
    return evaluate(envs, policy, episodes, seed=0, progress=False, desc="train").summary()["success_rate"]


def measure(policy: LMPolicy, args, seed: int) -> dict[str, Any]:
    """Test success on the real backend (greedy) and the env role's fidelity without grounding examples."""
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, seed)
    policy.engine.clear()
    envs = [env_factory(args, "test")() for _ in range(min(16, args.eval_episodes))]
    report = evaluate(envs, policy, args.eval_episodes, seed=seed, progress=False, desc="test")
    s = report.summary()
    wins = sum(t.success for t in report.trajectories)
    fid = fidelity_report(
        env_factory(args, "test"), {"self": policy}, args.fidelity_episodes, seed=seed, progress=False, grounding="none"
    )["backends"]["self"]
    return {
        "success": s["success_rate"],
        "success_ci": wilson_interval(wins, len(report.trajectories)),
        "mean_reward": s["mean_reward"],
        "valid_call_rate": s["valid_call_rate"],
        "episodes": len(report.trajectories),
        "fidelity": {k: fid[k] for k in ("parse_valid_rate", "exact_match", "key_f1")},
    }


def run_arm(name: str, start: str, args, seed: int, before: dict[str, Any]) -> dict[str, Any]:
    overrides = ARMS[name]
    t0 = time.monotonic()
    policy = load(start, args, seed)
    if overrides is None:
        result = dict(before)
        result.update(train_s=0.0, tokens=0, curve=[])
        return result
    cfg = EnvACEConfig(
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=seed,
        save_every=args.steps,
        keep_last=1,
        log_trajectories_every=0,
        **overrides,
    )
    out = Path(args.out) / f"{name}-seed{seed}"
    trainer = EnvACETrainer(policy, env_factory(args, "train"), cfg, out, progress=False)
    records = trainer.train()
    train_s = time.monotonic() - t0
    result = measure(policy, args, seed)
    result.update(
        train_s=round(train_s, 1),
        tokens=sum(r["actor_tokens"] + r["env_role_tokens"] for r in records),
        curve=[(r["step"], r["reward_actor"]) for r in records],
    )
    return result


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm over its seeds: pooled Wilson interval of success, and the interval over seeds."""
    wins = sum(round(r["success"] * r["episodes"]) for r in runs)
    n = sum(r["episodes"] for r in runs)
    return {
        "success": wins / n,
        "success_ci": wilson_interval(wins, n),
        "success_ci_seeds": mean_interval([r["success"] for r in runs]),
        "mean_reward": sum(r["mean_reward"] for r in runs) / len(runs),
        "valid_call_rate": sum(r["valid_call_rate"] or 0 for r in runs) / len(runs),
        "fidelity": {k: sum(r["fidelity"][k] for r in runs) / len(runs) for k in runs[0]["fidelity"]},
        "train_s": sum(r.get("train_s", 0.0) for r in runs) / len(runs),
        "tokens": sum(r.get("tokens", 0) for r in runs) // len(runs),
        "episodes": n,
        "seeds": len(runs),
        "curves": [r.get("curve", []) for r in runs],
    }


def table(results: dict[str, Any], before: dict[str, Any]) -> str:
    fb = before["fidelity"]
    lines = [
        "| arm | test success (95% CI) | mean reward | valid calls | env-role parse-valid / exact / key F1 "
        "(before -> after) | tokens | train time |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lo, hi = r["success_ci"]
        f = r["fidelity"]
        lines.append(
            f"| {name} | {100 * r['success']:.1f}% ({100 * lo:.0f}-{100 * hi:.0f}%) | {r['mean_reward']:.3f} | "
            f"{100 * r['valid_call_rate']:.0f}% | {100 * fb['parse_valid_rate']:.0f}/{100 * fb['exact_match']:.0f}/"
            f"{fb['key_f1']:.2f} -> {100 * f['parse_valid_rate']:.0f}/{100 * f['exact_match']:.0f}/{f['key_f1']:.2f} | "
            f"{r['tokens']:,} | {r['train_s'] / 60:.1f} min |"
        )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    names = list(results)
    succ = [results[n]["success"] for n in names]
    err = [
        [s - results[n]["success_ci"][0] for n, s in zip(names, succ, strict=True)],
        [results[n]["success_ci"][1] - s for n, s in zip(names, succ, strict=True)],
    ]
    ax1.bar(names, succ, yerr=err, capsize=4, color="tab:blue")
    ax1.set_ylabel("test success, real backend (95% Wilson)")
    ax1.set_ylim(0, 1)
    ax1.tick_params(axis="x", rotation=25)
    for n in names:
        for curve in results[n]["curves"]:
            if curve:
                ax2.plot([c[0] for c in curve], [c[1] for c in curve], label=n, alpha=0.8)
    ax2.set_xlabel("step")
    ax2.set_ylabel("training reward (imagined backends: under imagination)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the GPU-sized setting")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms to run")
    parser.add_argument("--warm", default=None, help="a warm-started checkpoint folder (default: train one)")
    parser.add_argument("--out", default="runs/learning", help="output folder")
    for key, value in DEFAULT.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"default {value}")
    args = parser.parse_args()
    base = FULL if args.full else DEFAULT
    for key, value in base.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    seeds = [int(s) for s in str(args.seeds).split(",")]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    start = warm_start(args)
    print(f"start: {start}; {json.dumps({k: getattr(args, k) for k in DEFAULT})}", flush=True)
    start_train = train_success(load(start, args, 0), args)
    print(f"start's success on 32 train tasks (greedy): {start_train:.3f}", flush=True)
    befores = {seed: measure(load(start, args, seed), args, seed) for seed in seeds}
    before = aggregate(list(befores.values()))
    print(f"before: {json.dumps(before)}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    out = Path(args.out)
    for name in arms:
        for seed in seeds:
            r = run_arm(name, start, args, seed, befores[seed])
            runs.setdefault(name, []).append(r)
            print(
                f"{name} seed {seed}: success {r['success']:.3f}, reward {r['mean_reward']:.3f}, "
                f"fidelity {r['fidelity']}, {r['train_s']:.0f} s",
                flush=True,
            )
        # Written after every arm: a run cut short still leaves its finished arms.
        results = {n: aggregate(rs) for n, rs in runs.items()}
        settings = {k: getattr(args, k) for k in DEFAULT}
        minutes = round((time.monotonic() - t0) / 60, 1)
        report = {
            "settings": settings,
            "start": start,
            "start_train_success": start_train,
            "before": before,
            "arms": results,
            "minutes": minutes,
        }
        (out / "results.json").write_text(json.dumps(report, indent=2))
        (out / "table.md").write_text(table(results, before) + "\n")
        plot(results, out / "learning.png")
    print(table(results, before))
    print(f"total {(time.monotonic() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
