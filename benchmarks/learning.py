"""Learning benchmark: does training under imagination help, against the real backend, on held-out test tasks?

Every arm starts from the same warm-started checkpoint (``envace sft --roles actor,env_role``: the
embedded model earns no reward zero-shot) and gets the same budget of steps and episodes:

* ``untrained``: the warm start itself;
* ``envace-self``: EnvACE world rehearsal as the paper does it (the policy imagines every tool result, both
  roles trained by the task reward);
* ``envace-log``: the same, with the env role grounded on a **tool log** written from the train split's
  reference trajectories (a supervised target where the log has the call): no live tool call;
* ``envace-log-fidelity``: ``envace-log`` with the env role rewarded by its fidelity to the logged result;
* ``envace-log-rehearsal``: ``envace-log`` with half of each step's task groups played with a private-rehearsal
  memory in context (two imagined rehearsals per episode; rehearsal-aware training, docs/training.md); it is
  measured as every arm is, without rehearsal at test time;
* ``envace-frozen-env``: ``envace-self`` with the env role's samples masked out (the masked-role ablation);
* ``grpo-real``: plain GRPO on the real backends (the upper reference: every call is live);
* ``grpo-simulator``: GRPO with a frozen copy of the warm start answering the calls (the paper's baseline);
* ``grounded-0.25``: EnvACE with a shadow real backend that executes every call (live grounding) and a
  quarter of the env-role answers supervised toward the real result.

For each arm it reports success on test tasks played **on the real backend** (greedy) with a 95% Wilson
interval pooled over seeds; what training cost in **live tool calls** (and logged results used, and the
diagnostic and reward-check calls, counted apart); for imagined arms the sim-to-real diagnostic (each
imagined training episode's actions replayed on a fresh real backend: agreement of imagined and real
success, real reward); the env role's fidelity on held-out calls before and after training, with and
without reference examples; the share of actor turns that hold a tool result instead of a call or an
answer; tokens and time. It prints a table, writes ``results.json``, ``table.md`` and ``learning.png``
under ``--out``; each (arm, seed) run keeps its own ``result.json``, so ``--resume`` skips finished runs, and
an arm cut short goes on from its newest checkpoint (one every ``SAVE_EVERY`` = 5 steps).

    python benchmarks/learning.py                       # the default setting
    python benchmarks/learning.py --jobs 9 --device cuda  # the same setting, runs in parallel on one GPU
    python benchmarks/learning.py --arms untrained,grpo-real --steps 4 --seeds 0   # a subset

Nothing here is tuned on the test split: the domain, horizon and budget were chosen from the warm start's
success on *train* tasks, and the imagination-only candidate (``envace-log``) was named before any test
figure of it existed (see docs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents import recipe
from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.eval.fidelity import fidelity_report
from envace_gym.agents.eval.stats import mean_interval, wilson_interval
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.train.checkpoint import latest_checkpoint
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft
from envace_gym.jsonl import read_jsonl
from envace_gym.rehearsal.prompt import is_result_shaped

ARMS: dict[str, dict[str, Any] | None] = {
    "untrained": None,
    "envace-self": {"backend": "self"},
    "envace-log": {"backend": "self", "tool_log": "reference"},  # the recipe of agents/recipe.py
    "envace-log-fidelity": {"backend": "self", "tool_log": "reference", "env_role_reward": "fidelity"},
    "envace-log-rehearsal": {
        "backend": "self",
        "tool_log": "reference",
        "rehearsal_fraction": 0.5,
        "rehearsal_budget": 2,
    },
    "envace-frozen-env": {"backend": "self", "train_env_role": False},
    "grpo-real": {"backend": "real"},
    "grpo-simulator": {"backend": "simulator"},
    "grounded-0.25": {"backend": "self", "real_fraction": 0.25},
}
#: The arms whose env role's answers reach the actor: the sim-to-real diagnostic applies to them.
IMAGINED = {
    "envace-self",
    "envace-log",
    "envace-log-fidelity",
    "envace-log-rehearsal",
    "envace-frozen-env",
    "grpo-simulator",
    "grounded-0.25",
}

#: Steps between an arm's checkpoints: what a run cut short loses at most (``--resume`` goes on from there).
SAVE_EVERY = 5

DEFAULT = {
    "suite": "builtin/bank",
    "max_calls": 2,
    "max_turns": 3,
    "steps": 40,
    "tasks_per_step": 2,
    "group_size": 4,
    "lr": 2e-5,
    "temperature": 0.7,
    "max_new_tokens": 64,
    "eval_episodes": 64,
    "train_episodes": 96,
    "fidelity_episodes": 12,
    "warm_steps": 60,
    "seeds": "0,1,2",
    "arms": "untrained,envace-self,envace-log,grpo-real",
}
FULL = {  # one GPU: all four domains, a longer warm start, 200 steps of 16 groups, the whole test split
    **DEFAULT,
    "suite": "builtin",
    "max_calls": -1,
    "max_turns": 4,
    "steps": 200,
    "tasks_per_step": 16,
    "lr": 1e-5,
    "max_new_tokens": 128,
    "eval_episodes": 600,
    "fidelity_episodes": 60,
    "warm_steps": 600,
    "arms": ",".join(ARMS),
}


def task_pool(args) -> list:
    """The suite's one-turn tasks that need at most ``--max-calls`` reference calls (-1: every task).

    The default (at most two calls) was chosen on the *train* split: with one-call tasks only, the 60-step
    warm start already solves nine in ten, so most groups of four are all ones and teach nothing (as all-zero
    groups do); two-call tasks (look an account up, then act on the id it returned) leave room to learn and
    make the second call depend on the first call's result, which under imagination the env role writes.
    The run prints the start's success on train tasks (``start_train_success``) so the choice can be checked."""
    return recipe.task_pool(args.suite, args.max_calls)


def env_factory(args, split: str):
    tasks = task_pool(args)
    return lambda: gym.make("EnvACE-ToolCall-v0", tasks=tasks, split=split, max_turns=args.max_turns)


def load(spec: str, args, seed: int) -> LMPolicy:
    policy = LMPolicy.from_spec(spec, sampling=SamplingConfig(0.0, 1.0, args.max_new_tokens, seed), progress=False)
    return policy.to(args.device)


def warm_start(args) -> str:
    """The shared starting checkpoint: ``--warm DIR`` if given; ``--warm adapter``: the embedded model with the
    demo's shipped LoRA warm-start adapter merged in; else trained once (``--warm-steps`` of both roles). The
    last two are kept in ``OUT/warm``."""
    if args.warm and args.warm != "adapter":
        return f"ckpt:{args.warm}"
    out = Path(args.out) / "warm"
    if (out / "sft_summary.json").exists():
        return f"ckpt:{out}"
    policy = load(args.policy, args, 0)
    if args.warm == "adapter":
        recipe.load_warm_adapter(policy)
        policy.save(out)
        info = json.loads((recipe.WARM_ADAPTER / "warm_start.json").read_text())
        (out / "sft_summary.json").write_text(json.dumps({"adapter": str(recipe.WARM_ADAPTER), **info["summary"]}))
        return f"ckpt:{out}"
    env = env_factory(args, "train")()
    examples = build_sft_examples(env, policy, 400, seed=0, progress=False, roles=("actor", "env_role"))
    # A step count, not minutes: the starting point must not depend on how busy the machine is.
    cfg = SFTConfig(steps=args.warm_steps, lr=1e-4, seed=0)
    print(f"warm start: {len(examples)} examples, {args.warm_steps} steps", flush=True)
    train_sft(policy, examples, cfg, out, progress=False)
    return f"ckpt:{out}"


def by_kind(report: Any, args) -> dict[str, list[int]]:
    """``{task kind: [wins, episodes]}`` of an evaluation: which kinds of task fail (the bank's kinds: balance,
    both_balances, my_balance, ...)."""
    kind = {t.id: t.metadata.get("kind", t.domain) for t in task_pool(args)}
    tally: dict[str, list[int]] = {}
    for t in report.trajectories:
        counts = tally.setdefault(kind.get(t.episode.task_id, "?"), [0, 0])
        counts[0] += int(t.success)
        counts[1] += 1
    return dict(sorted(tally.items()))


def train_success(policy: LMPolicy, args) -> dict[str, Any]:
    """The start's greedy success on train tasks, overall and by task kind: what the setting is chosen on
    (never the test split)."""
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, 0)
    envs = [env_factory(args, "train")() for _ in range(16)]
    report = evaluate(envs[: args.train_episodes], policy, args.train_episodes, seed=0, progress=False, desc="train")
    return {
        "success": report.summary()["success_rate"],
        "episodes": args.train_episodes,
        "by_kind": by_kind(report, args),
    }


def measure(policy: LMPolicy, args, seed: int) -> dict[str, Any]:
    """Test success on the real backend (greedy), the share of result-shaped actor turns, and the env role's
    fidelity on held-out (test) calls with and without reference examples in its prompt. Measurement only:
    nothing here reaches training."""
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, seed)
    policy.engine.clear()
    envs = [env_factory(args, "test")() for _ in range(min(16, args.eval_episodes))]
    report = evaluate(envs, policy, args.eval_episodes, seed=seed, progress=False, desc="test")
    s = report.summary()
    wins = sum(t.success for t in report.trajectories)
    turns = [m for t in report.trajectories for m in t.messages if m.get("role") == "assistant"]
    fidelity = {}
    for grounding in ("reference", "none"):
        fid = fidelity_report(
            env_factory(args, "test"), {"self": policy}, args.fidelity_episodes, seed=seed, progress=False,
            grounding=grounding,
        )["backends"]["self"]  # fmt: skip
        fidelity[grounding] = {k: fid[k] for k in ("parse_valid_rate", "exact_match", "key_f1")}
    return {
        "success": s["success_rate"],
        "success_ci": wilson_interval(wins, len(report.trajectories)),
        "wins": wins,
        "mean_reward": s["mean_reward"],
        "valid_call_rate": s["valid_call_rate"],
        "result_shaped": sum(map(is_result_shaped, turns)) / len(turns) if turns else 0.0,
        "episodes": len(report.trajectories),
        "by_kind": by_kind(report, args),
        "fidelity": fidelity,
    }


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def run_arm(name: str, start: str, args, seed: int) -> dict[str, Any]:
    """Train one arm from the start (none for ``untrained``), then measure it; the result is what
    ``result.json`` of ``OUT/<arm>-seed<seed>`` holds."""
    overrides = ARMS[name]
    t0 = time.monotonic()
    policy = load(start, args, seed)
    if overrides is None:
        return {**measure(policy, args, seed), "train_s": 0.0, "tokens": 0, "curve": [], "calls": {}}
    cfg = EnvACEConfig(
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=seed,
        # A checkpoint every few steps (only the newest kept): an arm cut short goes on under --resume.
        save_every=min(SAVE_EVERY, args.steps),
        keep_last=1,
        log_trajectories_every=0,
        sim_to_real=name in IMAGINED,  # a diagnostic: its calls are counted apart and never trained on
        **overrides,
    )
    out = Path(args.out) / f"{name}-seed{seed}"
    resume = args.resume and latest_checkpoint(out) is not None  # an arm cut short: on from its checkpoint
    if resume:
        print(f"{name}-seed{seed}: resuming from {latest_checkpoint(out).name}", flush=True)
    trainer = EnvACETrainer(policy, env_factory(args, "train"), cfg, out, progress=False, resume=resume)
    trainer.train()
    # Every step's record, the ones of an earlier, interrupted process included (the trainer kept them).
    records = [r for _, r in read_jsonl(out / "metrics.jsonl") if isinstance(r, dict)]
    train_s = time.monotonic() - t0 if not resume else sum(r["rollout_s"] + r["update_s"] for r in records)
    result = measure(policy, args, seed)
    keys = ("live_calls", "logged_calls_used", "diagnostic_calls", "verifier_calls")
    result.update(
        train_s=round(train_s, 1),
        # rehearsal tokens (envace-log-rehearsal) are generated for training too: a cost like the others
        tokens=sum(r["actor_tokens"] + r["env_role_tokens"] + r.get("rehearsal_tokens", 0) for r in records),
        calls={k: sum(r.get(k) or 0 for r in records) for k in keys},
        sim_real_agreement=_mean([r.get("sim_real_agreement") for r in records]),
        real_reward_imagined=_mean([r.get("real_reward_imagined") for r in records]),
        curve=[
            {
                k: r.get(k)
                for k in (
                    "step",
                    "reward_actor",
                    "real_reward_imagined",
                    "sim_real_agreement",
                    "valid_env_role",
                    "exact_env_role",
                    "fidelity_env_role",
                    "live_calls",
                )
            }
            for r in records
        ],  # fmt: skip
    )
    return result


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm over its seeds: pooled Wilson interval of success, and the interval over seeds."""
    wins = sum(r["wins"] for r in runs)
    n = sum(r["episodes"] for r in runs)
    fid = {
        g: {k: _mean([r["fidelity"][g][k] for r in runs]) for k in runs[0]["fidelity"][g]} for g in runs[0]["fidelity"]
    }
    return {
        "success": wins / n,
        "success_ci": wilson_interval(wins, n),
        "success_ci_seeds": mean_interval([r["success"] for r in runs]),
        "per_seed": [r["success"] for r in runs],
        "mean_reward": _mean([r["mean_reward"] for r in runs]),
        "valid_call_rate": _mean([r["valid_call_rate"] or 0 for r in runs]),
        "result_shaped": _mean([r["result_shaped"] for r in runs]),
        "fidelity": fid,
        "by_kind": _sum_kinds([r["by_kind"] for r in runs if "by_kind" in r]),
        "by_kind_seeds": sum(1 for r in runs if "by_kind" in r),
        "calls": {k: sum(r["calls"].get(k, 0) for r in runs) // len(runs) for k in runs[0]["calls"]},
        "sim_real_agreement": _mean([r.get("sim_real_agreement") for r in runs]),
        "real_reward_imagined": _mean([r.get("real_reward_imagined") for r in runs]),
        "train_s": _mean([r.get("train_s", 0.0) for r in runs]),
        "tokens": sum(r.get("tokens", 0) for r in runs) // len(runs),
        "episodes": n,
        "seeds": len(runs),
        "curves": [r.get("curve", []) for r in runs],
    }


def _sum_kinds(tallies: list[dict[str, list[int]]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tally in tallies:
        for kind, (wins, n) in tally.items():
            counts = out.setdefault(kind, [0, 0])
            counts[0] += wins
            counts[1] += n
    return dict(sorted(out.items()))


def kind_table(results: dict[str, Any], start_train: dict[str, list[int]] | None) -> str:
    """Wins / episodes by task kind: the start on train tasks, then each arm on test tasks (the seeds that
    recorded kinds)."""
    columns = [("start, train tasks", start_train)] if start_train else []
    columns += [(f"{n}, test ({r['by_kind_seeds']} seeds)", r["by_kind"]) for n, r in results.items() if r["by_kind"]]
    if not columns:
        return ""
    kinds = sorted({k for _, tally in columns for k in tally})
    lines = ["| task kind | " + " | ".join(c for c, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for kind in kinds:
        cells = [f"{t[kind][0]}/{t[kind][1]}" if kind in t else "-" for _, t in columns]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def table(results: dict[str, Any]) -> str:
    before = results.get("untrained")
    lines = [
        "| arm | seeds | test success, real backend (95% CI) | live calls | logged results | diagnostic calls | "
        "imagined = real success | real reward of imagined episodes | env-role exact, ref. / none (before -> after) "
        "| result-shaped actor turns | tokens | train time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lo, hi = r["success_ci"]
        f = r["fidelity"]
        b = before["fidelity"] if before else None
        fid = f"{_pct(f['reference']['exact_match'])} / {_pct(f['none']['exact_match'])}"
        if b and name != "untrained":
            fid = f"{_pct(b['reference']['exact_match'])} / {_pct(b['none']['exact_match'])} -> {fid}"
        calls = r["calls"]
        lines.append(
            f"| {name} | {r['seeds']} | {100 * r['success']:.1f}% ({100 * lo:.0f}-{100 * hi:.0f}%) | "
            f"{calls.get('live_calls', 0):,} | {calls.get('logged_calls_used', 0):,} | "
            f"{calls.get('diagnostic_calls', 0):,} | {_pct(r['sim_real_agreement'])} | "
            f"{'-' if r['real_reward_imagined'] is None else format(r['real_reward_imagined'], '.2f')} | {fid} | "
            f"{_pct(r['result_shaped'])} | {r['tokens']:,} | {r['train_s'] / 60:.1f} min |"
        )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 4.5))
    names = list(results)
    succ = [results[n]["success"] for n in names]
    err = [
        [s - results[n]["success_ci"][0] for n, s in zip(names, succ, strict=True)],
        [results[n]["success_ci"][1] - s for n, s in zip(names, succ, strict=True)],
    ]
    ax1.bar(names, succ, yerr=err, capsize=4, color="tab:blue")
    for i, n in enumerate(names):
        ax1.annotate(f"{results[n]['calls'].get('live_calls', 0):,} live", (i, 0.02), ha="center", fontsize=7)
    ax1.set_ylabel("test success, real backend (95% Wilson, pooled seeds)")
    ax1.set_ylim(0, 1)
    ax1.tick_params(axis="x", rotation=25)
    for n in names:
        for seed, curve in enumerate(results[n]["curves"]):
            if curve:
                steps = [c["step"] for c in curve]
                ax2.plot(steps, [c["reward_actor"] for c in curve], label=f"{n} (training)" if not seed else None)
                if curve[0].get("real_reward_imagined") is not None:
                    ax2.plot(steps, [c["real_reward_imagined"] for c in curve], ls=":", alpha=0.7,
                             label=f"{n} (same actions, real)" if not seed else None)  # fmt: skip
                if curve[0].get("fidelity_env_role") is not None:
                    ax3.plot(steps, [c["fidelity_env_role"] for c in curve], label=n if not seed else None)
    ax2.set_xlabel("step")
    ax2.set_ylabel("training reward; dotted: its actions replayed for real")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    ax3.set_xlabel("step")
    ax3.set_ylabel("env-role fidelity to the logged/real result")
    ax3.set_ylim(0, 1)
    if ax3.get_legend_handles_labels()[0]:
        ax3.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_docs(paths: list[str], block: str = "learning-cpu") -> str:
    """Rewrite the ``block`` table of ``docs/learning.md`` from ``results.json`` files (the ones kept under
    ``docs/``); an arm in several files is taken from the last. Trains nothing; returns the table."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docs import write_block

    arms: dict[str, Any] = {}
    for path in paths:
        arms.update(json.loads(Path(path).read_text())["arms"])
    results = {name: arms[name] for name in [*ARMS, *sorted(set(arms) - set(ARMS))] if name in arms}
    text = table(results)
    changed = write_block("learning.md", block, text)
    print(f"docs/learning.md: {block} {'rewritten' if changed else 'unchanged'}")
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the GPU-sized setting")
    parser.add_argument(
        "--warm", default=None, help="a warm-started checkpoint folder, or 'adapter' (the demo's); default: train one"
    )
    parser.add_argument("--policy", default="default", help="the model the warm start starts from")
    parser.add_argument("--out", default="runs/learning", help="output folder")
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu or cuda")
    parser.add_argument("--jobs", type=int, default=1, help="(arm, seed) runs in parallel processes")
    parser.add_argument("--resume", action="store_true", help="keep finished (arm, seed) runs of --out")
    parser.add_argument("--report-only", action="store_true", help="train nothing: tabulate the finished runs of --out")
    parser.add_argument(
        "--write-docs",
        nargs="+",
        metavar="RESULTS.json",
        help="train nothing: rewrite docs/learning.md's CPU table from results files, an arm in several from the "
        "last (e.g. docs/learning_cpu_2026-12-04.json docs/learning_cpu_2026-12-05.json)",
    )
    for key, value in DEFAULT.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"default {value}")
    args = parser.parse_args(argv)
    base = FULL if args.full else DEFAULT
    for key, value in base.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    unknown = [a for a in args.arms.split(",") if a.strip() and a.strip() not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    return args


def _child_argv(args, name: str, seed: int, start: str) -> list[str]:
    argv = [sys.executable, __file__, "--arms", name, "--seeds", str(seed), "--resume", "--jobs", "1"]
    argv += ["--warm", start.removeprefix("ckpt:"), "--out", args.out, "--device", args.device]
    for key in DEFAULT:
        if key not in ("arms", "seeds"):
            argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return argv


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.write_docs:
        return {"table": write_docs(args.write_docs)}
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    seeds = [int(s) for s in str(args.seeds).split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if args.report_only:
        return report(args, arms, seeds, start=str(args.warm or out / "warm"), start_train=None, t0=t0)
    start = warm_start(args)
    print(f"start: {start}; {json.dumps({k: getattr(args, k) for k in DEFAULT})}", flush=True)
    summary_path = out / "start_train_success.json"
    if args.resume and summary_path.exists():
        start_train = json.loads(summary_path.read_text())
    else:
        start_train = train_success(load(start, args, 0), args)
        summary_path.write_text(json.dumps(start_train))
    print(f"start's greedy success on train tasks: {start_train}", flush=True)
    todo = [
        (n, s) for n in arms for s in seeds if not (args.resume and (out / f"{n}-seed{s}" / "result.json").exists())
    ]
    if args.jobs > 1 and len(todo) > 1:
        # One process per (arm, seed), at most --jobs at once; each writes its result.json.
        procs: list[subprocess.Popen] = []
        for name, seed in todo:
            while len([p for p in procs if p.poll() is None]) >= args.jobs:
                time.sleep(2)
            log = (out / f"{name}-seed{seed}.log").open("w")
            procs.append(subprocess.Popen(_child_argv(args, name, seed, start), stdout=log, stderr=subprocess.STDOUT))
        failed = [" ".join(p.args[3:7]) for p in procs if p.wait() != 0]
        if failed:
            print(f"runs that failed (see their .log under {out}): {failed}", flush=True)
    else:
        for name, seed in todo:
            r = run_arm(name, start, args, seed)
            path = out / f"{name}-seed{seed}"
            path.mkdir(parents=True, exist_ok=True)
            (path / "result.json").write_text(json.dumps(r, indent=1))
            print(
                f"{name} seed {seed}: success {r['success']:.3f}, calls {r['calls']}, {r['train_s']:.0f} s", flush=True
            )
    return report(args, arms, seeds, start, start_train, t0)


def report(
    args, arms: list[str], seeds: list[int], start: str, start_train: dict[str, Any] | None, t0: float
) -> dict[str, Any]:
    """Aggregate the finished (arm, seed) runs under ``--out``; write results.json, table.md, learning.png."""
    out = Path(args.out)
    if start_train is None and (out / "start_train_success.json").exists():
        start_train = json.loads((out / "start_train_success.json").read_text())
    start_train = start_train or {}
    runs: dict[str, list[dict[str, Any]]] = {}
    for name in arms:
        for seed in seeds:
            path = out / f"{name}-seed{seed}" / "result.json"
            if path.exists():
                runs.setdefault(name, []).append(json.loads(path.read_text()))
    results = {n: aggregate(rs) for n, rs in runs.items()}
    summary = {
        "settings": {k: getattr(args, k) for k in DEFAULT},
        "device": args.device,
        "start": start,
        "start_train_success": start_train.get("success"),
        "start_train_by_kind": start_train.get("by_kind"),
        "arms": results,
        "minutes": round((time.monotonic() - t0) / 60, 1),
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    text = table(results) + "\n\n" + kind_table(results, start_train.get("by_kind"))
    (out / "table.md").write_text(text + "\n")
    if results:
        plot(results, out / "learning.png")
    print(text)
    print(f"total {(time.monotonic() - t0) / 60:.1f} min")
    return summary


if __name__ == "__main__":
    main()
