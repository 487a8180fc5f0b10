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
* ``field_exact``: the share of the real result's (path, value) leaves the answer holds exactly (0 for an
  unusable answer): how many of its fields the env role got right;
* ``success_agreement``: how often the oracle's episode success under imagination equals its success
  under the real backend (always 1.0 there).

Each backend also keeps one record per call (``calls_detail``: task id, index of the reference call within
the task, tool, and `score_answer`'s scores), so two models' answers to the same calls can be compared call
by call (`paired_calls`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from envace_gym.agents.eval.stats import paired_bootstrap
from envace_gym.agents.provenance import run_environment
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.backends.spec import BackendSpec
from envace_gym.calls import canonical_json
from envace_gym.compose import make_env
from envace_gym.imagination import BatchImaginer, Imaginer, parse_execution_result, parse_inline_result
from envace_gym.imagination.fidelity import leaf_f1, leaf_recall
from envace_gym.tools import ToolSpec

__all__ = [
    "leaf_f1",
    "score_answer",
    "call_summary",
    "call_differences",
    "bootstrap_calls",
    "paired_calls",
    "fidelity_report",
    "fidelity_table",
    "plot_fidelity",
    "save_report",
]


def score_answer(text: str, real: Any, spec: ToolSpec, mode: str = "prompted") -> dict[str, Any]:
    """One env-role answer (its raw text) against the real result of the call: ``parses`` (a usable answer in
    ``mode``'s format), ``schema`` (usable and within the tool's ``returns`` schema), ``fields`` (the share of
    the real result's leaf fields it holds exactly, `leaf_recall`), ``f1`` (`leaf_f1`), ``exact`` (canonical
    JSON equal). An unusable answer scores 0 everywhere."""
    value, reason = (parse_inline_result if mode == "inline" else parse_execution_result)(text)
    if reason is not None:
        return {"parses": False, "schema": False, "fields": 0.0, "f1": 0.0, "exact": False}
    return {
        "parses": True,
        "schema": not spec.validate_result(value),
        "fields": leaf_recall(value, real),
        "f1": leaf_f1(value, real),
        "exact": canonical_json(value) == canonical_json(real),
    }


def call_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The rates over per-call records (`score_answer`'s scores): the report's summary of a backend, and the
    pooled one of several runs (their records put together)."""
    n = max(1, len(calls))
    return {
        "calls": len(calls),
        "parse_valid_rate": sum(c["parses"] for c in calls) / n,
        "schema_valid_rate": sum(c["schema"] for c in calls) / n,
        "exact_match": sum(c["exact"] for c in calls) / n,
        "key_f1": sum(c["f1"] for c in calls) / n,
        "field_exact": sum(c["fields"] for c in calls) / n,
    }


def call_differences(
    start: list[dict[str, Any]], arm: list[dict[str, Any]], score: str = "fields"
) -> dict[tuple[str, int], float]:
    """``arm - start`` of a per-call ``score`` for each call both answered, keyed by ``(task_id, call)``: the same
    reference call, so the difference is the model's and not the call's. Calls only one of them answered (an
    episode ended early) are left out."""
    before = {(c["task_id"], c["call"]): float(c[score]) for c in start}
    return {key: float(c[score]) - before[key] for c in arm if (key := (c["task_id"], c["call"])) in before}


def bootstrap_calls(diffs: dict[tuple[str, int], float], seed: int = 0) -> dict[str, Any]:
    """`paired_bootstrap` over paired calls: the mean difference with its 95% interval (resampling calls), the
    calls won and lost, and how many calls and tasks were paired."""
    out = paired_bootstrap(list(diffs.values()), seed=seed)
    out["calls"] = len(diffs)
    out["tasks"] = len({task for task, _ in diffs})
    return out


def paired_calls(
    start: list[dict[str, Any]], arm: list[dict[str, Any]], score: str = "fields", seed: int = 0
) -> dict[str, Any]:
    """The arm's per-call difference from the start (two ``calls_detail`` lists of the same tasks), paired by
    ``(task_id, call)``: ``{"mean", "ci95": [lo, hi], "won", "lost", "calls", "tasks"}``; ``mean`` None when no
    call pairs."""
    return bootstrap_calls(call_differences(start, arm, score), seed=seed)


def fidelity_report(
    env_factory,
    imaginers: dict[str, Any],
    episodes: int,
    seed: int = 0,
    progress: bool = True,
    grounding: str = "reference",
    batch_size: int = 8,
    task_ids: list[str] | None = None,
) -> dict[str, Any]:
    """Compare each imaginer's results with the real ones on ``episodes`` oracle episodes with tool calls.

    ``imaginers`` maps a backend name to an imaginer (prompted mode) or to ``(imaginer, mode)``.
    ``grounding="none"`` withholds the reference examples from the env-role prompt (a harder test: with
    reference grounding the real result of a reference call is among the examples; inline mode never
    shows examples). An imaginer with ``imagine_batch`` (an ``LMPolicy``) answers ``batch_size`` episodes
    at a time, in batches. The tasks are a ``seed``-shuffle of the env's pool (its split), or ``task_ids``
    in that order (tasks of the env's pool with reference calls; at most ``episodes`` of them)."""
    tasks = _choose_tasks(env_factory().unwrapped.pool, episodes, seed, task_ids)
    report: dict[str, Any] = {"episodes": len(tasks), "grounding": grounding, "backends": {}}
    for name, entry in imaginers.items():
        imaginer, mode = entry if isinstance(entry, tuple) else (entry, "prompted")
        spec = BackendSpec.self_imagined_as(mode)  # an unknown mode is refused here

        def build(spec: BackendSpec = spec, imaginer: Imaginer = imaginer) -> Any:
            settings = {"grounding": grounding, "on_invalid": "error_observation"}
            return make_env(env_factory(), backend=spec, imaginer=imaginer, imagination=settings)

        with tqdm(total=len(tasks), desc=f"fidelity {name}", disable=not progress, unit="ep") as bar:
            played = _play_oracle(tasks, build, imaginer, batch_size, bar)
        calls: list[dict[str, Any]] = []
        for task, _, answers in played:
            specs = {s.name: s for s in task.tool_specs}
            # the oracle makes the reference calls in order: answer i is to reference call i
            for i, (ref, (tool, text)) in enumerate(zip(task.reference_calls, answers, strict=False)):
                calls.append(
                    {"task_id": task.id, "call": i, "tool": tool, **score_answer(text, ref.result, specs[tool], mode)}
                )
        summary = call_summary(calls)
        summary["episodes"] = len(played)
        # real-backend oracle success is always 1: agreement is the share of imagined episodes that succeed
        summary["success_agreement"] = sum(bool(info.get("success")) for _, info, _ in played) / max(1, len(played))
        summary["mode"] = mode
        summary["key_f1_by_tool"] = _by_tool(calls)
        summary["environment"] = run_environment(imaginer)
        summary["calls_detail"] = calls
        report["backends"][name] = summary
    return report


def _choose_tasks(pool: Any, episodes: int, seed: int, task_ids: list[str] | None) -> list[Any]:
    """The report's tasks: ``task_ids`` (each in the pool, with reference calls) or a ``seed``-shuffle of the
    pool's tasks with reference calls; the first ``episodes``."""
    if task_ids is None:
        tasks = [t for t in pool if t.reference_calls]
        random.Random(seed).shuffle(tasks)
        return tasks[:episodes]
    by_id = {t.id: t for t in pool}
    unusable = [i for i in task_ids if i not in by_id or not by_id[i].reference_calls]
    if unusable:
        raise ValueError(f"tasks not in the env's pool or without reference calls: {unusable[:5]}")
    return [by_id[i] for i in task_ids[:episodes]]


def _by_tool(calls: list[dict[str, Any]]) -> dict[str, float]:
    """Mean key F1 per tool."""
    f1s: dict[str, list[float]] = {}
    for c in calls:
        f1s.setdefault(c["tool"], []).append(c["f1"])
    return {t: sum(v) / len(v) for t, v in sorted(f1s.items())}


def _play_oracle(
    tasks: list[Any], build: Callable[[], Any], imaginer: Imaginer, batch_size: int, bar: Any
) -> list[tuple[Any, dict[str, Any], list[tuple[str, str]]]]:
    """Play each task's oracle episode with ``imaginer`` answering; ``(task, last info, env-role answers)``
    in task order. Through the episode loop: an imaginer with ``imagine_batch`` (an ``LMPolicy``) answers
    ``batch_size`` episodes at a time, each round's requests in one call (the envs' half-steps)."""
    workers = min(batch_size, len(tasks)) if isinstance(imaginer, BatchImaginer) else 1
    envs = [build() for _ in range(workers)]
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

    metrics = ["parse_valid_rate", "schema_valid_rate", "exact_match", "key_f1", "field_exact", "success_agreement"]
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
    cols = ["backend", "calls", "parse-valid", "schema-valid", "exact", "key F1", "fields right", "success agreement"]
    for c in cols:
        table.add_column(c, justify="left" if c == "backend" else "right")
    for name, s in report["backends"].items():
        table.add_row(
            name,
            str(s["calls"]),
            *(f"{100 * s[k]:.0f}%" for k in ("parse_valid_rate", "schema_valid_rate", "exact_match")),
            f"{s['key_f1']:.2f}",
            f"{100 * s['field_exact']:.0f}%",
            f"{100 * s['success_agreement']:.0f}%",
        )
    return table


def save_report(report: dict[str, Any], out: Path) -> Path:
    """``fidelity.json`` and ``fidelity.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "fidelity.json").write_text(json.dumps(report, indent=2))
    plot_fidelity(report, out / "fidelity.png")
    return out
