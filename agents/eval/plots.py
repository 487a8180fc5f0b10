"""``envace eval --plot``: success rate per domain, with the overall rate, as a bar chart."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .stats import wilson_interval

__all__ = ["plot_by_domain"]


def plot_by_domain(summary: dict[str, Any], out_png: str | os.PathLike[str]) -> Any:
    """Draw ``summary``'s success rate of each domain (``by_domain``) and overall (``all``) as bars with
    their 95% Wilson intervals into ``out_png``; return the matplotlib ``Figure`` (its first
    ``len(by_domain) + 1`` patches are the bars, in that order).

    ``summary`` is ``envace eval``'s summary (`summary` plus ``policy``,
    ``suite``, ``split`` and ``backend``, which the title names; a missing one is left out).
    """
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI (as the learning curve).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = [*summary["by_domain"].items(), ("all", summary)]
    names = [name for name, _ in groups]
    rates = [s["success_rate"] for _, s in groups]
    counts = [s["episodes"] for _, s in groups]
    intervals = [wilson_interval(round(r * n), n) for r, n in zip(rates, counts, strict=True)]
    errors = [[max(0.0, r - lo) for r, (lo, _) in zip(rates, intervals, strict=True)]]
    errors.append([max(0.0, hi - r) for r, (_, hi) in zip(rates, intervals, strict=True)])

    fig = Figure(figsize=(max(5.0, 1.0 + 0.9 * len(groups)), 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colors = ["tab:blue"] * (len(groups) - 1) + ["tab:gray"]
    ax.bar(range(len(groups)), rates, yerr=errors, capsize=4, color=colors, error_kw={"elinewidth": 1})
    for i, (rate, n, (_, hi)) in enumerate(zip(rates, counts, intervals, strict=True)):
        ax.annotate(
            f"{100 * rate:.0f}%\nn={n}",
            (i, hi),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(
        range(len(groups)), names, rotation=30 if len(groups) > 6 else 0, ha="right" if len(groups) > 6 else "center"
    )
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("success rate (95% Wilson interval)")
    what = summary.get("policy", "policy")
    where = ", ".join(f"{k}={summary[k]}" for k in ("split", "backend") if summary.get(k))
    ax.set_title(f"{what} on {summary.get('suite', 'its suite')}" + (f" ({where})" if where else ""))
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100)
    return fig
