"""``envace demo`` (what ``make demo`` runs): the EnvACE story on the embedded model, in minutes on a CPU.

1. warm-start the model for a few minutes on the train split's reference trajectories (both roles: the
   embedded model earns no reward and imagines nothing usable zero-shot);
2. evaluate it on builtin test tasks with the real backends, and measure its env role's fidelity;
3. train it by EnvACE under imagination (``backend="self"``: every tool result of training is imagined by
   the model itself, both roles trained by role-wise GRPO);
4. evaluate and measure fidelity again, on the same tasks;
5. write ``runs/demo-<time>/``: trajectories (JSONL), metrics (JSON), a before/after plot, the learning
   curve, a transcript of one imagined (training) and one real (evaluation) episode, the checkpoints, and
   print a before/after table by domain.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.eval.fidelity import fidelity_report
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rollout import Trajectory, load_trajectories, save_trajectories
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft
from envace_gym.jsonl import read_jsonl
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
        default=24, metadata={"help": "test episodes per evaluation (the same tasks before and after)"}
    )
    batch_size: int = field(default=12, metadata={"help": "envs stepped in lockstep"})
    max_turns: int = field(default=3, metadata={"help": "assistant messages per episode before truncation"})
    max_new_tokens: int = field(default=96, metadata={"help": "tokens generated per LM turn at most"})
    sft_examples: int = field(default=800, metadata={"help": "train tasks whose reference trajectories are learned"})
    lr: float = field(default=1e-4, metadata={"help": "warm-start learning rate"})
    rl_steps: int = field(default=3, metadata={"help": "EnvACE training steps under imagination"})
    rl_tasks: int = field(default=2, metadata={"help": "train tasks per EnvACE step"})
    rl_group: int = field(default=4, metadata={"help": "episodes per task (the GRPO group)"})
    rl_lr: float = field(default=2e-5, metadata={"help": "EnvACE learning rate"})
    fidelity_episodes: int = field(default=6, metadata={"help": "oracle episodes of the env-role fidelity check"})
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
            "rl_steps": (self.rl_steps >= 1, ">= 1"),
            "rl_tasks": (self.rl_tasks >= 1, ">= 1"),
            "rl_group": (self.rl_group >= 1, ">= 1"),
            "rl_lr": (self.rl_lr > 0, "> 0"),
            "fidelity_episodes": (self.fidelity_episodes >= 1, ">= 1"),
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

    table = Table(title="Embedded model on builtin test tasks, real backends: warm-started -> + EnvACE training")
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


def _plot(path: Path, before: dict[str, Any], after: dict[str, Any], rl_metrics: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = list(before["by_domain"]) + ["all"]

    def series(s: dict[str, Any], key: str) -> list[float]:
        return [((s["by_domain"].get(d, {}) if d != "all" else s).get(key) or 0.0) for d in domains]

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    x = range(len(domains))
    for ax, key, title in ((axes[0], "valid_call_rate", "valid-call rate"), (axes[1], "success_rate", "success rate")):
        ax.bar([i - 0.2 for i in x], series(before, key), width=0.4, label="warm-started")
        ax.bar([i + 0.2 for i in x], series(after, key), width=0.4, label="+ EnvACE")
        ax.set_xticks(list(x), domains)
        ax.set_ylim(0, 1)
        ax.set_title(title)
        ax.legend()
    records = [record for _, record in read_jsonl(rl_metrics)]
    steps = [r["step"] for r in records]
    axes[2].plot(steps, [r["reward_actor"] for r in records], marker="o", label="actor reward (imagined)")
    axes[2].plot(steps, [r["valid_env_role"] or 0.0 for r in records], marker="o", label="env role: valid answers")
    axes[2].set_title("EnvACE training under imagination")
    axes[2].set_xlabel("step")
    axes[2].set_ylim(-0.15, 1.05)
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _transcript(traj: Trajectory) -> str:
    header = (
        f"# Episode {traj.task_id} ({traj.domain})\n\n"
        f"reward {traj.reward:.2f}, components {traj.components}, turns {traj.turns}\n\n"
    )
    return header + render_transcript(traj.messages, markdown=True)


def _fidelity(policy: LMPolicy, cfg: DemoConfig) -> dict[str, Any]:
    """The env role's fidelity on oracle episodes, without the reference examples (``--grounding none``)."""
    factory = lambda: gym.make("EnvACE-ToolCall-v0", split="test", max_turns=8)  # noqa: E731
    report = fidelity_report(factory, {"self": policy}, cfg.fidelity_episodes, seed=cfg.seed, grounding="none")
    return report["backends"]["self"]


def _fid_text(f: dict[str, Any]) -> str:
    return f"parse-valid {_pct(f['parse_valid_rate'])}, exact {_pct(f['exact_match'])}, key F1 {f['key_f1']:.2f}"


def run_demo(cfg: DemoConfig) -> Path:
    """Run the demo; returns the run folder."""
    from rich.console import Console

    console = Console()
    started = time.monotonic()
    run_dir = Path(cfg.out_root) / f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    console.print(
        f"[bold]envace demo[/bold]: policy={cfg.policy}, {cfg.minutes:g} min warm start, {cfg.rl_steps} EnvACE "
        f"steps under imagination, {cfg.episodes} test episodes before and after -> {run_dir}"
    )
    policy = LMPolicy.from_spec(cfg.policy, sampling=sampling)

    train_env = _make_envs(cfg, "train", 1)[0]
    examples = build_sft_examples(train_env, policy, cfg.sft_examples, seed=cfg.seed, roles=("actor", "env_role"))
    sft_cfg = SFTConfig(minutes=cfg.minutes, lr=cfg.lr, seed=cfg.seed)
    sft_summary = train_sft(policy, examples, sft_cfg, run_dir / "warm-start")

    before_trajs, before = _evaluate(policy, cfg, "warm-started eval")
    save_trajectories(before_trajs, run_dir / "trajectories_before.jsonl")
    fid_before = _fidelity(policy, cfg)

    rl_cfg = EnvACEConfig(
        backend="self",
        steps=cfg.rl_steps,
        tasks_per_step=cfg.rl_tasks,
        group_size=cfg.rl_group,
        lr=cfg.rl_lr,
        temperature=0.7,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.seed,
        save_every=cfg.rl_steps,
        keep_last=1,
        log_trajectories_every=1,
    )
    rl_dir = run_dir / "envace"
    console.print(
        f"EnvACE training: {rl_cfg.steps} steps x {rl_cfg.tasks_per_step} tasks x {rl_cfg.group_size} episodes"
    )
    records = EnvACETrainer(policy, lambda: _make_envs(cfg, "train", 1)[0], rl_cfg, rl_dir).train()
    policy.sampling = sampling

    after_trajs, after = _evaluate(policy, cfg, "EnvACE-trained eval")
    save_trajectories(after_trajs, run_dir / "trajectories_after.jsonl")
    fid_after = _fidelity(policy, cfg)

    metrics = {
        "config": asdict(cfg),
        "before": before,
        "after": after,
        "fidelity_before": fid_before,
        "fidelity_after": fid_after,
        "sft": sft_summary,
        "envace": records,
        "seconds": round(time.monotonic() - started, 1),
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    _plot(run_dir / "plot.png", before, after, rl_dir / "metrics.jsonl")
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

    rewards = ", ".join(f"{r['reward_actor']:.2f}" for r in records)
    console.print(_table(before, after))
    console.print(f"env role fidelity (no reference examples): {_fid_text(fid_before)} -> {_fid_text(fid_after)}")
    console.print(
        f"success {_pct(before['success_rate'])} -> {_pct(after['success_rate'])} on {cfg.episodes} test episodes; "
        f"{sft_summary['steps']} warm-start steps in {sft_summary['seconds']:.0f}s, {len(records)} EnvACE steps "
        f"(imagined reward per step: {rewards}); "
        f"total {metrics['seconds']:.0f}s"
    )
    console.print(
        f"run folder: {run_dir} (trajectories_*.jsonl, metrics.json, plot.png, transcript.md, warm-start/, "
        f"envace/ with learning_curve.png and ckpt-{cfg.rl_steps}/)"
    )
    return run_dir
