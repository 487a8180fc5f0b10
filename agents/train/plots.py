"""The learning curve of a training run, drawn from its ``metrics.jsonl``."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from envace_gym.jsonl import read_jsonl

__all__ = ["plot_learning_curve", "read_metrics"]

# (key, label) per panel; the env-role keys are absent or null on steps without env-role samples.
_REWARD_SERIES = (("reward_actor", "actor"), ("reward_env_role", "env role"))
_SUCCESS_SERIES = (("success_actor", "actor success"), ("valid_env_role", "env-role valid"))


def read_metrics(metrics_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The JSON objects of a ``metrics.jsonl``, one per non-blank line.

    Raises ``ValueError`` naming the file and line for a line that is not a JSON object (a torn last line,
    from a killed run, is skipped with a warning), and
    ``ValueError("<path>: no metrics")`` for a file without records.
    """
    path = Path(metrics_path)
    records = []
    for lineno, record in read_jsonl(path):  # a torn last line (a killed run) is skipped with a warning
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{lineno}: not a JSON object")
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no metrics")
    return records


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for i, record in enumerate(records):
        value = record.get(key)
        # bool is an int: success flags plot as 0/1; None, strings and NaN are skipped.
        if isinstance(value, int | float) and math.isfinite(value):
            step = record.get("step")
            xs.append(float(step) if isinstance(step, int | float) else float(i + 1))
            ys.append(float(value))
    return xs, ys


def _moving_average(ys: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


def _draw(ax: Any, records: list[dict[str, Any]], series: tuple[tuple[str, str], ...], colors: list[str]) -> None:
    for (key, label), color in zip(series, colors, strict=True):
        xs, ys = _series(records, key)
        if not xs:
            continue
        ax.plot(xs, ys, color=color, alpha=0.35, linewidth=1, marker="." if len(xs) < 50 else None)
        window = max(2, len(xs) // 10)
        if len(xs) >= 5:
            ax.plot(xs, _moving_average(ys, window), color=color, linewidth=2, label=f"{label} (avg {window})")
        else:
            ax.lines[-1].set_label(label)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    ax.grid(True, alpha=0.3)


def plot_learning_curve(
    metrics_path: str | os.PathLike[str], out_png: str | os.PathLike[str], title: str = "EnvACE training"
) -> Path:
    """Draw mean reward and success per step, by role, from ``metrics_path`` into ``out_png``; return its path.

    Top panel: ``reward_actor`` and ``reward_env_role``; bottom panel: ``success_actor`` and
    ``valid_env_role``, each with a moving average. Missing or null values are skipped.
    """
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI, safe in threads and tests.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = read_metrics(metrics_path)
    fig = Figure(figsize=(8, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    reward_ax, success_ax = fig.subplots(2, 1, sharex=True)
    _draw(reward_ax, records, _REWARD_SERIES, ["tab:blue", "tab:orange"])
    reward_ax.set_ylabel("mean reward")
    _draw(success_ax, records, _SUCCESS_SERIES, ["tab:green", "tab:red"])
    success_ax.set_ylabel("rate")
    success_ax.set_ylim(-0.05, 1.05)
    success_ax.set_xlabel("step")
    fig.suptitle(title)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100)
    return out
