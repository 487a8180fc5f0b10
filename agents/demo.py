"""``envace demo`` (what ``make demo`` runs): training under imagination, on the embedded model, on a CPU.

The learning benchmark's imagination-only recipe (`envace_gym.agents.recipe`) in miniature, on
``builtin/bank`` tasks that need one or two calls (look an account up, then act on the id it returned):

1. warm start: the LoRA adapter shipped in the package merged at the recipe's scale (``make warm-adapter``
   reproduces the adapter), or, for another model or ``--warm sft``, ``--warm-steps`` supervised steps;
2. evaluate on held-out ``test-id`` tasks (the train split's phrasings, tasks never trained on) **with the
   real backends** (greedy), and measure the env role's fidelity;
3. EnvACE training **under imagination** (the recipe's `IMAGINATION` settings): every training tool result
   is written by the model itself, its env role shown no real result (the real results shown are counted,
   and printed: 0), each imagined episode scored by the checklist bound to what it showed, the task reward
   alone; **no live tool call** (``live_calls`` is counted, and
   printed); the sim-to-real diagnostic replays each imagined episode's actions on the real backend
   (counted apart); per step, how many groups had rewards that differ (the only ones GRPO learns from);
4. evaluate and measure fidelity again, on the same tasks: the paired per-task difference with its
   bootstrap 95% interval is the figure, and the demo says so when the interval includes 0;
5. write ``runs/demo-<time>/``: trajectories (JSONL), metrics (JSON), a before/after plot with the learning
   curve, a transcript of one imagined (training) and one real (evaluation) episode, the checkpoint, and
   print the before/after table.

Every budget is a count (steps, episodes), never minutes: a busy machine makes the demo slower, not smaller.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from envace_gym.agents import recipe
from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.eval.fidelity import fidelity_report
from envace_gym.agents.eval.stats import paired_bootstrap, wilson_interval
from envace_gym.agents.lm.device import resolve_device
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.provenance import describe_environment, run_environment
from envace_gym.agents.rollout import Trajectory, load_trajectories, save_trajectories
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft
from envace_gym.imagination.prompt import is_result_shaped
from envace_gym.transcript import render_transcript

__all__ = ["DemoConfig", "run_demo"]


@dataclass
class DemoConfig:
    """Settings of ``envace demo``; each field is a flag (``--out`` is ``--out-root``)."""

    policy: str = field(
        default="default", metadata={"help": "the LM to demo: default | tiny | ckpt:DIR | hf:PATH | gguf:PATH"}
    )
    warm: str = field(
        default="auto",
        metadata={
            "help": "warm start: adapter (the shipped LoRA adapter; the default model only), sft (--warm-steps "
            "of supervised training), none, or auto (adapter for the default model, else sft)"
        },
    )
    warm_steps: int = field(default=60, metadata={"help": "supervised warm-start steps (--warm sft)"})
    episodes: int = field(
        default=32, metadata={"help": "test-id episodes per evaluation (the same tasks before and after)"}
    )
    batch_size: int = field(default=16, metadata={"help": "envs stepped in lockstep"})
    max_turns: int = field(default=3, metadata={"help": "assistant messages per episode before truncation"})
    max_new_tokens: int = field(
        default=recipe.RL_SETTINGS["max_new_tokens"], metadata={"help": "tokens generated per LM turn at most"}
    )
    sft_examples: int = field(default=400, metadata={"help": "train tasks whose reference trajectories are learned"})
    lr: float = field(default=1e-4, metadata={"help": "warm-start learning rate"})
    # Fewer steps and tasks per step than the learning benchmark's recipe (12 x 4): on 2 CPU cores a step of
    # 4 tasks x 8 episodes takes about 6 minutes (rollout 3.5, update 2.5), so the demo stays within 15 minutes.
    rl_steps: int = field(default=3, metadata={"help": "EnvACE training steps under imagination"})
    rl_tasks: int = field(default=2, metadata={"help": "train tasks per step"})
    rl_group: int = field(
        default=recipe.RL_SETTINGS["group_size"], metadata={"help": "episodes per task (the GRPO group)"}
    )
    rl_lr: float = field(default=recipe.RL_SETTINGS["lr"], metadata={"help": "EnvACE learning rate (LoRA)"})
    rl_filter_groups: int = field(
        default=0,
        metadata={
            "help": "dynamic sampling: up to this many extra task draws per step while no group's rewards differ "
            "(all-equal groups teach nothing); 0: off"
        },
    )
    fidelity_episodes: int = field(default=4, metadata={"help": "oracle episodes of the env-role fidelity check"})
    seed: int = field(default=0, metadata={"help": "seed of the task order, sampling and training"})
    out_root: str = field(
        default="runs", metadata={"help": "parent folder of the run folder (demo-<time>/)", "aliases": ["--out"]}
    )
    device: str = field(
        default="auto",
        metadata={"help": "where the model runs: auto (CUDA when present, else the CPU), cpu, cuda or cuda:N"},
    )

    def __post_init__(self) -> None:
        checks = {
            "warm_steps": (self.warm_steps >= 1, ">= 1"),
            "episodes": (self.episodes >= 1, ">= 1"),
            "batch_size": (self.batch_size >= 1, ">= 1"),
            "max_turns": (self.max_turns >= 1, ">= 1"),
            "max_new_tokens": (self.max_new_tokens >= 1, ">= 1"),
            "sft_examples": (self.sft_examples >= 1, ">= 1"),
            "lr": (self.lr > 0, "> 0"),
            "rl_steps": (self.rl_steps >= 1, ">= 1"),
            "rl_tasks": (self.rl_tasks >= 1, ">= 1"),
            "rl_group": (self.rl_group >= 1, ">= 1"),
            "rl_lr": (self.rl_lr > 0, "> 0"),
            "rl_filter_groups": (self.rl_filter_groups >= 0, ">= 0"),
            "fidelity_episodes": (self.fidelity_episodes >= 1, ">= 1"),
        }
        for name, (ok, rule) in checks.items():
            if not ok:
                raise ValueError(
                    f"DemoConfig.{name} (--{name.replace('_', '-')}) must be {rule}, got {getattr(self, name)}"
                )
        if not self.policy:
            raise ValueError("DemoConfig.policy (--policy) must not be empty")
        resolve_device(self.device, "--device")
        if self.warm not in ("auto", "adapter", "sft", "none"):
            raise ValueError(f"DemoConfig.warm (--warm) must be auto, adapter, sft or none, got {self.warm!r}")
        if self.warm == "adapter" and self.policy != "default":
            raise ValueError("--warm adapter: the shipped adapter is for --policy default; use --warm sft")


def _make_envs(cfg: DemoConfig, split: str, n: int) -> list[gym.Env]:
    pool = recipe.task_pool()
    return [gym.make("EnvACE-ToolCall-v0", tasks=pool, split=split, max_turns=cfg.max_turns) for _ in range(n)]


#: Where the demo evaluates: held-out tasks in the train split's phrasings (what RL on train tasks can reach).
EVAL_SPLIT = "test-id"


def _evaluate(policy: LMPolicy, cfg: DemoConfig, desc: str) -> tuple[list[Trajectory], dict[str, Any]]:
    """The same ``cfg.episodes`` test-id tasks every time (the pool's seeded evaluation order), real backends."""
    envs = _make_envs(cfg, EVAL_SPLIT, min(cfg.batch_size, cfg.episodes))
    report = evaluate(envs, policy, cfg.episodes, seed=cfg.seed, desc=desc)
    trajs = report.trajectories
    summary = report.summary()
    turns = [m for t in trajs for m in t.messages if m.get("role") == "assistant"]
    summary["success_ci"] = wilson_interval(sum(t.success for t in trajs), len(trajs))
    summary["calls_per_episode"] = sum(t.calls_ok + t.calls_failed for t in trajs) / max(1, len(trajs))
    summary["result_shaped"] = sum(map(is_result_shaped, turns)) / len(turns) if turns else 0.0
    return trajs, summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _fidelity(policy: LMPolicy, cfg: DemoConfig) -> dict[str, Any]:
    """The env role's world model: its answers to the reference calls of oracle episodes of held-out tasks,
    shown no real result, scored against the real results (the share of their fields it writes exactly)."""
    factory = lambda: _make_envs(cfg, EVAL_SPLIT, 1)[0]  # noqa: E731
    report = fidelity_report(factory, {"self": policy}, cfg.fidelity_episodes, seed=cfg.seed, grounding="none")
    return {"none": report["backends"]["self"]}


def _paired(before: list[Trajectory], after: list[Trajectory]) -> dict[str, Any]:
    """After minus before on each task (the same tasks, greedy): mean and bootstrap 95% interval."""
    was = {t.episode.task_id: int(t.success) for t in before}
    return paired_bootstrap([int(t.success) - was[t.episode.task_id] for t in after if t.episode.task_id in was])


def _table(
    before: dict[str, Any],
    after: dict[str, Any],
    fid: tuple[dict, dict],
    calls: dict[str, int],
    paired: dict[str, Any],
):
    from rich.table import Table

    table = Table(title=f"{EVAL_SPLIT} tasks, real backends: warm start -> + EnvACE training under imagination")
    for col in ("", "warm start", "+ EnvACE (imagination only)"):
        table.add_column(col, justify="left" if not col else "right")

    def ci(s: dict[str, Any]) -> str:
        lo, hi = s["success_ci"]
        return f"{_pct(s['success_rate'])} ({100 * lo:.0f}-{100 * hi:.0f}%)"

    def fields(f: dict[str, Any]) -> str:
        return _pct(f["none"]["field_exact"])

    table.add_row("success (95% CI)", ci(before), ci(after))
    lo, hi = paired["ci95"]
    table.add_row(
        "paired difference, same tasks (95% CI; won/lost)",
        "",
        f"{100 * paired['mean']:+.1f} points ({100 * lo:+.1f} to {100 * hi:+.1f}; {paired['won']}/{paired['lost']})",
    )
    table.add_row("valid calls", _pct(before["valid_call_rate"] or 0.0), _pct(after["valid_call_rate"] or 0.0))
    table.add_row("calls per episode", f"{before['calls_per_episode']:.1f}", f"{after['calls_per_episode']:.1f}")
    table.add_row("actor turns holding a tool result", _pct(before["result_shaped"]), _pct(after["result_shaped"]))
    table.add_row("env role: real results' fields written exactly (shown none)", fields(fid[0]), fields(fid[1]))
    table.add_row("live tool calls during training", "", f"{calls['live_calls']:,}")
    table.add_row("real results shown to the env role (logged)", "", f"{calls['logged_calls_used']:,}")
    table.add_row("training rows with a learning signal", "", f"{calls['trained_rows']:,}")
    table.add_row("groups whose rewards differ", "", f"{calls['groups_with_spread']:,} of {calls['groups']:,}")
    return table


def _plot(path: Path, before: dict[str, Any], after: dict[str, Any], records: list[dict[str, Any]], group: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names, stats = ["warm start", "+ EnvACE\n(imagination only)"], [before, after]
    rates = [s["success_rate"] for s in stats]
    err = [[r - s["success_ci"][0] for r, s in zip(rates, stats, strict=True)]]
    err.append([s["success_ci"][1] - r for r, s in zip(rates, stats, strict=True)])
    ax1.bar(names, rates, yerr=err, capsize=6, color=["tab:gray", "tab:blue"])
    ax1.set_ylim(0, 1)
    ax1.set_title(f"{EVAL_SPLIT} success, real backends (95% Wilson)")
    steps = [r["step"] for r in records]
    ax2.plot(steps, [r["reward_actor"] for r in records], marker="o", label="training reward (imagined results)")
    if records and records[0].get("real_reward_imagined") is not None:
        ax2.plot(steps, [r["real_reward_imagined"] for r in records], marker="x", ls=":",
                 label="same actions replayed on the real backend")  # fmt: skip
    ax2.plot(steps, [r["groups_with_spread"] / max(1, r["n_actor"] // group) for r in records], marker=".",
             label="share of groups whose rewards differ")  # fmt: skip
    live = sum(r.get("live_calls") or 0 for r in records)
    ax2.set_title(f"EnvACE under imagination ({live} live tool calls)")
    ax2.set_xlabel("step")
    ax2.set_ylim(-0.05, 1.05)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _transcript(traj: Trajectory) -> str:
    header = (
        f"# Episode {traj.task_id} ({traj.domain})\n\n"
        f"reward {traj.reward:.2f}, components {traj.components}, turns {traj.turns}\n\n"
    )
    return header + render_transcript(traj.messages, markdown=True)


def _warm_start(policy: LMPolicy, cfg: DemoConfig, run_dir: Path) -> dict[str, Any]:
    """Load the shipped adapter, or train ``warm_steps`` supervised steps of both roles, or nothing."""
    mode = cfg.warm
    if mode == "auto":
        shipped = (recipe.WARM_ADAPTER / "adapter_model.safetensors").is_file()
        mode = "adapter" if cfg.policy == "default" and shipped else "sft"
    if mode == "none":
        return {"warm": "none", "steps": 0, "seconds": 0.0}
    if mode == "adapter":
        t0 = time.monotonic()
        recipe.load_warm_adapter(policy, scale=recipe.WARM_SCALE)
        info = json.loads((recipe.WARM_ADAPTER / "warm_start.json").read_text())
        seconds = round(time.monotonic() - t0, 1)
        return {"warm": "adapter", "scale": recipe.WARM_SCALE, "steps": info["summary"]["steps"], "seconds": seconds}
    train_env = _make_envs(cfg, "train", 1)[0]
    examples = build_sft_examples(train_env, policy, cfg.sft_examples, seed=cfg.seed, roles=("actor", "env_role"))
    sft_cfg = SFTConfig(steps=cfg.warm_steps, lr=cfg.lr, seed=cfg.seed)
    summary = train_sft(policy, examples, sft_cfg, run_dir / "warm-start")
    return {"warm": "sft", **summary}


def run_demo(cfg: DemoConfig) -> Path:
    """Run the demo; returns the run folder."""
    from rich.console import Console

    console = Console()
    started = time.monotonic()
    run_dir = Path(cfg.out_root) / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    rl_cfg = recipe.imagination_config(
        steps=cfg.rl_steps,
        tasks_per_step=cfg.rl_tasks,
        group_size=cfg.rl_group,
        lr=cfg.rl_lr,
        filter_groups=cfg.rl_filter_groups,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
        save_every=cfg.rl_steps,
        keep_last=1,
        log_trajectories_every=1,
        sim_to_real=True,  # a diagnostic, counted apart; never trained on
    )
    console.print(
        f"[bold]envace demo[/bold]: policy={cfg.policy}, warm start {cfg.warm}, then {rl_cfg.steps} EnvACE steps x "
        f"{rl_cfg.tasks_per_step} tasks x {rl_cfg.group_size} episodes under imagination (no live tool call), "
        f"{cfg.episodes} {EVAL_SPLIT} episodes on the real backends before and after -> {run_dir}"
    )
    policy = LMPolicy.from_spec(cfg.policy, sampling=sampling).to(cfg.device)
    # Greedy outcomes move with the float kernels, precision and versions: say where these figures come from.
    environment = run_environment(policy)
    console.print(f"environment: {describe_environment(environment)}")
    warm = _warm_start(policy, cfg, run_dir)

    before_trajs, before = _evaluate(policy, cfg, "warm start: eval")
    save_trajectories(before_trajs, run_dir / "trajectories_before.jsonl")
    fid_before = _fidelity(policy, cfg)

    rl_dir = run_dir / "envace"
    trainer = EnvACETrainer(policy, lambda: _make_envs(cfg, "train", 1)[0], rl_cfg, rl_dir)
    records = trainer.train()
    if rl_cfg.lora:  # evaluate the merged weights, as the checkpoint holds them
        policy.model = policy.engine.model = trainer.model.merge_and_unload().eval()
        policy.engine.clear()

    after_trajs, after = _evaluate(policy, cfg, "after EnvACE: eval")
    save_trajectories(after_trajs, run_dir / "trajectories_after.jsonl")
    fid_after = _fidelity(policy, cfg)

    keys = ("live_calls", "logged_calls_used", "diagnostic_calls", "trained_rows", "groups_with_spread")
    calls = {k: sum(r.get(k) or 0 for r in records) for k in keys}
    calls["groups"] = sum(r["n_actor"] for r in records) // rl_cfg.group_size
    paired = _paired(before_trajs, after_trajs)
    metrics = {
        "config": asdict(cfg),
        "warm_start": warm,
        "before": before,
        "after": after,
        "paired": paired,
        "outcomes": {
            "before": {t.episode.task_id: int(t.success) for t in before_trajs},
            "after": {t.episode.task_id: int(t.success) for t in after_trajs},
        },
        "fidelity_before": fid_before,
        "fidelity_after": fid_after,
        "calls": calls,
        "envace": records,
        "seconds": round(time.monotonic() - started, 1),
        "environment": environment,
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    _plot(run_dir / "plot.png", before, after, records, rl_cfg.group_size)
    imagined = [
        t
        for step in range(1, cfg.rl_steps + 1)
        for t in load_trajectories(rl_dir / "trajectories" / f"step-{step}.jsonl")
    ]
    shown_imagined = max(imagined, key=lambda t: (t.reward, t.calls_ok, -t.turns))
    shown_real = max(after_trajs, key=lambda t: (t.reward, t.calls_ok, -t.turns))
    (run_dir / "transcript.md").write_text(
        "# One imagined episode (EnvACE training: every tool result written by the model)\n\n"
        + _transcript(shown_imagined)
        + "\n\n# One real episode (evaluation: the real tools answer)\n\n"
        + _transcript(shown_real)
    )

    agree = [r["sim_real_agreement"] for r in records if r.get("sim_real_agreement") is not None]
    rewards = ", ".join(f"{r['reward_actor']:.2f}" for r in records)
    spread = ", ".join(f"{r['groups_with_spread']}" for r in records)
    console.print(_table(before, after, (fid_before, fid_after), calls, paired))
    lo, hi = paired["ci95"]
    if lo is not None and lo <= 0.0 <= hi:  # say it: a figure within noise is a finding, not a gain
        console.print(
            f"the paired interval includes 0 ({100 * lo:+.1f} to {100 * hi:+.1f} points): on these "
            f"{len(after_trajs)} tasks this run is not distinguishable from its warm start"
        )
    console.print(
        f"training: {len(records)} steps, imagined reward per step {rewards}, groups whose rewards differ per step "
        f"{spread} (of {rl_cfg.tasks_per_step}); the same actions on the real backend "
        f"agreed on success in {_pct(sum(agree) / len(agree) if agree else None)} of episodes "
        f"({calls['diagnostic_calls']} diagnostic calls, never trained on); "
        f"warm start: {warm['warm']}; total {metrics['seconds']:.0f} s"
    )
    console.print(f"environment: {describe_environment(environment)}")
    console.print(f"run folder: {run_dir} (metrics.json, plot.png, transcript.md, trajectories_*.jsonl, envace/)")
    return run_dir
