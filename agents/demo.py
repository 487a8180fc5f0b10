"""``envace demo`` (what ``make demo`` runs): the embedded model before and after a supervised warm start.

1. evaluate the model zero-shot on builtin test tasks with the real backends;
2. warm-start it for a few minutes on the train split's reference trajectories;
3. evaluate it again on the same tasks;
4. write ``runs/demo-<time>/``: trajectories (JSONL), metrics (JSON), a PNG plot, one transcript (Markdown)
   and the checkpoint, and print a before/after table.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rollout import Trajectory, save_trajectories
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft
from envace_gym.transcript import render_transcript

__all__ = ["DemoConfig", "run_demo"]


@dataclass
class DemoConfig:
    """Settings of ``envace demo``; each field is a flag (``--out`` is ``--out-root``)."""

    policy: str = field(
        default="default", metadata={"help": "the LM to demo: default | tiny | ckpt:DIR | hf:PATH | gguf:PATH"}
    )
    minutes: float = field(default=3.0, metadata={"help": "warm-start budget, in minutes"})
    episodes: int = field(
        default=32, metadata={"help": "test episodes per evaluation (the same tasks before and after)"}
    )
    batch_size: int = field(default=16, metadata={"help": "envs stepped in lockstep"})
    max_turns: int = field(default=4, metadata={"help": "assistant messages per episode before truncation"})
    max_new_tokens: int = field(default=112, metadata={"help": "tokens generated per LM turn at most"})
    sft_examples: int = field(default=800, metadata={"help": "train tasks whose reference trajectories are learned"})
    lr: float = field(default=1e-4, metadata={"help": "warm-start learning rate"})
    seed: int = field(default=0, metadata={"help": "seed of the task order, sampling and training"})
    out_root: str = field(
        default="runs", metadata={"help": "parent folder of the run folder (demo-<time>/)", "aliases": ["--out"]}
    )

    def __post_init__(self) -> None:
        checks = {
            "minutes": (self.minutes > 0, "> 0"),
            "episodes": (self.episodes >= 1, ">= 1"),
            "batch_size": (self.batch_size >= 1, ">= 1"),
            "max_turns": (self.max_turns >= 1, ">= 1"),
            "max_new_tokens": (self.max_new_tokens >= 1, ">= 1"),
            "sft_examples": (self.sft_examples >= 1, ">= 1"),
            "lr": (self.lr > 0, "> 0"),
        }
        for name, (ok, rule) in checks.items():
            if not ok:
                raise ValueError(
                    f"DemoConfig.{name} (--{name.replace('_', '-')}) must be {rule}, got {getattr(self, name)}"
                )
        if not self.policy:
            raise ValueError("DemoConfig.policy (--policy) must not be empty")


def _make_envs(cfg: DemoConfig, split: str, n: int) -> list[gym.Env]:
    return [gym.make("EnvACE-ToolCall-v0", split=split, max_turns=cfg.max_turns) for _ in range(n)]


def _evaluate(policy: LMPolicy, cfg: DemoConfig, desc: str) -> tuple[list[Trajectory], dict[str, Any]]:
    """The same ``cfg.episodes`` test tasks every time (the pool's seeded evaluation order)."""
    envs = _make_envs(cfg, "test", min(cfg.batch_size, cfg.episodes))
    report = evaluate(envs, policy, cfg.episodes, seed=cfg.seed, desc=desc)
    trajs = report.trajectories
    summary = report.summary()
    summary["calls_per_episode"] = sum(t.calls_ok + t.calls_failed for t in trajs) / max(1, len(trajs))
    return trajs, summary


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _table(before: dict[str, Any], after: dict[str, Any]):
    from rich.table import Table

    table = Table(title="Embedded model on builtin test tasks, real backends: zero-shot -> warm-started")
    for col in ("domain", "episodes", "success", "valid calls", "calls/episode", "mean reward"):
        table.add_column(col, justify="left" if col == "domain" else "right")
    rows = [(d, before["by_domain"][d], after["by_domain"].get(d, {})) for d in before["by_domain"]] + [
        ("all", before, after)
    ]
    for name, b, a in rows:
        table.add_row(
            name,
            str(b["episodes"]),
            f"{_pct(b['success_rate'])} -> {_pct(a.get('success_rate'))}",
            f"{_pct(b['valid_call_rate'] or 0.0)} -> {_pct(a.get('valid_call_rate') or 0.0)}",
            f"{b.get('calls_per_episode', 0):.1f} -> {a.get('calls_per_episode', 0):.1f}" if name == "all" else "",
            f"{b['mean_reward']:.2f} -> {a.get('mean_reward', 0.0):.2f}",
        )
    return table


def _plot(path: Path, before: dict[str, Any], after: dict[str, Any], sft_metrics: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = list(before["by_domain"]) + ["all"]

    def series(s: dict[str, Any], key: str) -> list[float]:
        return [((s["by_domain"].get(d, {}) if d != "all" else s).get(key) or 0.0) for d in domains]

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    x = range(len(domains))
    for ax, key, title in ((axes[0], "valid_call_rate", "valid-call rate"), (axes[1], "success_rate", "success rate")):
        ax.bar([i - 0.2 for i in x], series(before, key), width=0.4, label="zero-shot")
        ax.bar([i + 0.2 for i in x], series(after, key), width=0.4, label="warm-started")
        ax.set_xticks(list(x), domains)
        ax.set_ylim(0, 1)
        ax.set_title(title)
        ax.legend()
    steps, losses = [], []
    for line in sft_metrics.read_text().splitlines():
        rec = json.loads(line)
        steps.append(rec["step"])
        losses.append(rec["loss"])
    axes[2].plot(steps, losses)
    axes[2].set_title("warm-start loss (actor tokens)")
    axes[2].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _transcript(traj: Trajectory) -> str:
    header = (
        f"# Episode {traj.task_id} ({traj.domain})\n\n"
        f"reward {traj.reward:.2f}, components {traj.components}, turns {traj.turns}\n\n"
    )
    return header + render_transcript(traj.messages, markdown=True)


def run_demo(cfg: DemoConfig) -> Path:
    """Run the demo; returns the run folder."""
    from rich.console import Console

    console = Console()
    started = time.monotonic()
    run_dir = Path(cfg.out_root) / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    console.print(
        f"[bold]envace demo[/bold]: policy={cfg.policy}, {cfg.episodes} test episodes, "
        f"{cfg.minutes:g} min warm start -> {run_dir}"
    )
    policy = LMPolicy.from_spec(cfg.policy, sampling=sampling)

    before_trajs, before = _evaluate(policy, cfg, "zero-shot eval")
    save_trajectories(before_trajs, run_dir / "trajectories_before.jsonl")

    train_env = _make_envs(cfg, "train", 1)[0]
    examples = build_sft_examples(train_env, policy, cfg.sft_examples, seed=cfg.seed)
    sft_cfg = SFTConfig(minutes=cfg.minutes, lr=cfg.lr, seed=cfg.seed)
    sft_summary = train_sft(policy, examples, sft_cfg, run_dir / "checkpoint")

    after_trajs, after = _evaluate(policy, cfg, "warm-started eval")
    save_trajectories(after_trajs, run_dir / "trajectories_after.jsonl")

    metrics = {
        "config": asdict(cfg),
        "before": before,
        "after": after,
        "sft": sft_summary,
        "seconds": round(time.monotonic() - started, 1),
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    _plot(run_dir / "plot.png", before, after, run_dir / "checkpoint" / "metrics.jsonl")
    shown = max(after_trajs, key=lambda t: (t.reward, t.calls_ok, -t.turns))
    (run_dir / "transcript.md").write_text(_transcript(shown))

    console.print(_table(before, after))
    console.print(
        f"valid-call rate {_pct(before['valid_call_rate'] or 0.0)} -> {_pct(after['valid_call_rate'] or 0.0)}, "
        f"success {_pct(before['success_rate'])} -> {_pct(after['success_rate'])}; "
        f"{sft_summary['steps']} warm-start steps in {sft_summary['seconds']:.0f}s; total {metrics['seconds']:.0f}s"
    )
    console.print(f"run folder: {run_dir} (trajectories_*.jsonl, metrics.json, plot.png, transcript.md, checkpoint/)")
    return run_dir
