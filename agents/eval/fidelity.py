"""Fidelity report: how close imagined tool results are to the real ones.

The oracle's episodes are played with each imagined backend answering its calls (``self``: the policy
itself, prompted; ``self-inline``: the policy writing the tool message in the actor's conversation;
``simulator``: a separate frozen model, prompted). Every imagined answer is compared with the real result
the reference trajectory recorded for that call:

* ``parse_valid_rate``: a usable answer (prompted: an ``<execution_result>`` block holding a non-empty JSON
  object or array; inline: that JSON alone);
* ``schema_valid_rate``: parse-valid and within the tool's ``returns`` schema;
* ``exact_match``: equal to the real result (canonical JSON);
* ``key_f1``: F1 over (path, value) leaves of the two JSON values;
* ``success_agreement``: how often the oracle's episode success under imagination equals its success
  under the real backend (always 1.0 there).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from envace_gym.agents.provenance import run_environment
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.backends.spec import BackendSpec
from envace_gym.calls import canonical_json
from envace_gym.compose import rehearse
from envace_gym.imagination import BatchImaginer, Imaginer, parse_execution_result, parse_inline_result
from envace_gym.imagination.fidelity import leaf_f1

__all__ = ["leaf_f1", "FidelityStats", "fidelity_report", "fidelity_table", "plot_fidelity", "save_report"]


@dataclass
class FidelityStats:
    calls: int = 0
    parse_valid: int = 0
    schema_valid: int = 0
    exact: int = 0
    f1_sum: float = 0.0
    episodes: int = 0
    success_agree: int = 0
    by_tool: dict[str, list[float]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        n = max(1, self.calls)
        return {
            "calls": self.calls,
            "episodes": self.episodes,
            "parse_valid_rate": self.parse_valid / n,
            "schema_valid_rate": self.schema_valid / n,
            "exact_match": self.exact / n,
            "key_f1": self.f1_sum / n,
            "success_agreement": self.success_agree / max(1, self.episodes),
        }


def fidelity_report(
    env_factory,
    imaginers: dict[str, Any],
    episodes: int,
    seed: int = 0,
    progress: bool = True,
    grounding: str = "reference",
    batch_size: int = 8,
) -> dict[str, Any]:
    """Compare each imaginer's results with the real ones on ``episodes`` oracle episodes with tool calls.

    ``imaginers`` maps a backend name to an imaginer (prompted mode) or to ``(imaginer, mode)``.
    ``grounding="none"`` withholds the reference examples from the simulator prompt (a harder test: with
    reference grounding the real result of a reference call is among the examples; inline mode never
    shows examples). An imaginer with ``imagine_batch`` (an ``LMPolicy``) answers ``batch_size`` episodes
    at a time, in batches."""
    pool = [t for t in env_factory().unwrapped.pool if t.reference_calls]
    random.Random(seed).shuffle(pool)
    tasks = pool[:episodes]
    report: dict[str, Any] = {"episodes": len(tasks), "grounding": grounding, "backends": {}}
    for name, entry in imaginers.items():
        imaginer, mode = entry if isinstance(entry, tuple) else (entry, "prompted")
        parse = parse_inline_result if mode == "inline" else parse_execution_result
        spec = BackendSpec.self_imagined_as(mode)  # an unknown mode is refused here

        def make_env(spec: BackendSpec = spec, imaginer: Imaginer = imaginer) -> Any:
            return rehearse(env_factory(), spec, imaginer, grounding=grounding, on_invalid="error_observation")

        stats = FidelityStats()
        with tqdm(total=len(tasks), desc=f"fidelity {name}", disable=not progress, unit="ep") as bar:
            played = _play_oracle(tasks, make_env, imaginer, batch_size, bar)
        for task, info, answers in played:
            specs = {s.name: s for s in task.tool_specs}
            for ref, (tool, text) in zip(task.reference_calls, answers, strict=False):
                value, reason = parse(text)
                stats.calls += 1
                ok = reason is None
                stats.parse_valid += ok
                stats.schema_valid += ok and not specs[tool].validate_result(value)
                stats.exact += ok and canonical_json(value) == canonical_json(ref.result)
                f1 = leaf_f1(value if ok else None, ref.result)
                stats.f1_sum += f1
                stats.by_tool.setdefault(tool, []).append(f1)
            stats.episodes += 1
            stats.success_agree += bool(info.get("success")) is True  # real-backend oracle success is always 1
        summary = stats.summary()
        summary["mode"] = mode
        summary["key_f1_by_tool"] = {t: sum(v) / len(v) for t, v in sorted(stats.by_tool.items())}
        summary["environment"] = run_environment(imaginer)
        report["backends"][name] = summary
    return report


def _play_oracle(
    tasks: list[Any], make_env: Callable[[], Any], imaginer: Imaginer, batch_size: int, bar: Any
) -> list[tuple[Any, dict[str, Any], list[tuple[str, str]]]]:
    """Play each task's oracle episode with ``imaginer`` answering; ``(task, last info, env-role answers)``
    in task order. Through the episode loop: an imaginer with ``imagine_batch`` (an ``LMPolicy``) answers
    ``batch_size`` episodes at a time, each round's requests in one call (the envs' half-steps)."""
    workers = min(batch_size, len(tasks)) if isinstance(imaginer, BatchImaginer) else 1
    envs = [make_env() for _ in range(workers)]
    oracles = [OraclePolicy(envs[0].unwrapped.suite) for _ in envs]
    played: dict[str, tuple[dict[str, Any], list[tuple[str, str]]]] = {}

    def record(traj: Any, info: dict[str, Any]) -> None:
        played[traj.task_id] = (info, [(s.tool, s.text) for s in traj.env_role_samples])
        bar.update(1)

    try:
        collect(envs, oracles, len(tasks), task_ids=[t.id for t in tasks], seed=None, progress=False, on_episode=record)
    finally:
        for env in envs:
            env.close()
    return [(task, *played[task.id]) for task in tasks]


def plot_fidelity(report: dict[str, Any], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["parse_valid_rate", "schema_valid_rate", "exact_match", "key_f1", "success_agreement"]
    names = list(report["backends"])
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        ax.bar(
            [m + i * width for m in range(len(metrics))],
            [report["backends"][name][k] for k in metrics],
            width=width,
            label=name,
        )
    ax.set_xticks([m + width * (len(names) - 1) / 2 for m in range(len(metrics))], metrics)
    ax.set_ylim(0, 1)
    ax.set_title(f"imagined vs real tool results ({report['episodes']} oracle episodes)")
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def fidelity_table(report: dict[str, Any]):
    from rich.table import Table

    table = Table(title=f"Fidelity of imagined tool results ({report['episodes']} oracle episodes)")
    cols = ["backend", "calls", "parse-valid", "schema-valid", "exact", "key F1", "success agreement"]
    for c in cols:
        table.add_column(c, justify="left" if c == "backend" else "right")
    for name, s in report["backends"].items():
        table.add_row(
            name,
            str(s["calls"]),
            *(f"{100 * s[k]:.0f}%" for k in ("parse_valid_rate", "schema_valid_rate", "exact_match")),
            f"{s['key_f1']:.2f}",
            f"{100 * s['success_agreement']:.0f}%",
        )
    return table


def save_report(report: dict[str, Any], out: Path) -> Path:
    """``fidelity.json`` and ``fidelity.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(json.dumps(report, indent=2))
    plot_fidelity(report, out / "fidelity.png")
    return out
