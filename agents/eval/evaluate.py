"""Episode evaluation: run a text policy on an env over a fixed, seeded set of tasks and summarise."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from envace_gym.agents.scripted import TextPolicy

__all__ = ["EpisodeResult", "EvalReport", "evaluate", "count_calls"]

_INVALID_CODES = {"INVALID_TOOL_CALL_FORMAT", "TOOL_NOT_AVAILABLE", "INVALID_PARAMETERS"}


@dataclass
class EpisodeResult:
    """One finished episode."""

    task_id: str
    domain: str
    reward: float
    success: bool
    components: dict[str, float]
    turns: int
    truncated: bool
    calls_ok: int  # well-formed calls to declared tools with schema-valid arguments
    calls_failed: int  # malformed calls, unknown tools, schema violations
    messages: list[dict[str, Any]] = field(repr=False, default_factory=list)


@dataclass
class EvalReport:
    results: list[EpisodeResult]

    def summary(self) -> dict[str, Any]:
        """``success_rate``, ``mean_reward``, ``valid_call_rate``, ``episodes`` and the same ``by_domain``."""
        by_domain: dict[str, list[EpisodeResult]] = defaultdict(list)
        for r in self.results:
            by_domain[r.domain].append(r)
        out = _stats(self.results)
        out["by_domain"] = {d: _stats(rs) for d, rs in sorted(by_domain.items())}
        return out

    def save(self, out_dir: str | Path) -> Path:
        """Write ``episodes.jsonl`` (one episode per line, with its messages) and ``summary.json``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "episodes.jsonl").open("w", encoding="utf-8") as fh:
            for r in self.results:
                fh.write(json.dumps(asdict(r), ensure_ascii=False) + "\n")
        (out / "summary.json").write_text(json.dumps(self.summary(), indent=2))
        return out


def count_calls(info: dict[str, Any]) -> tuple[int, int]:
    """(valid, invalid) call attempts in one step's ``info``.

    A call is valid when it parses, names a declared tool and fits its schema; execution errors such as
    "no such order" are the world's answer, not an invalid call.
    """
    results = info["tool_results"]
    format_errors = len(info["errors"]) - sum(1 for r in results if not r["ok"])
    invalid = sum(1 for e in info["errors"] if e["code"] in _INVALID_CODES)
    return len(results) + format_errors - invalid, invalid


def _stats(results: list[EpisodeResult]) -> dict[str, Any]:
    n = len(results)
    attempted = sum(r.calls_ok + r.calls_failed for r in results)
    return {
        "episodes": n,
        "success_rate": sum(r.success for r in results) / n if n else 0.0,
        "mean_reward": sum(r.reward for r in results) / n if n else 0.0,
        "valid_call_rate": sum(r.calls_ok for r in results) / attempted if attempted else None,
        "mean_turns": sum(r.turns for r in results) / n if n else 0.0,
    }


def evaluate(
    env: gym.Env,
    policy: TextPolicy,
    episodes: int,
    seed: int = 0,
    progress: bool = True,
    desc: str = "eval",
) -> EvalReport:
    """Run ``episodes`` episodes; tasks are the env's pool in a seed-shuffled order, without repeats
    until every task has been used once."""
    pool = env.unwrapped.pool
    order = list(range(len(pool)))
    random.Random(seed).shuffle(order)
    results = []
    for i in tqdm(range(episodes), desc=desc, disable=not progress, unit="ep"):
        task = pool[order[i % len(order)]]
        policy.reset()
        obs, info = env.reset(seed=seed + i, options={"task_id": task.id})
        ok = failed = 0
        reward, terminated, truncated = 0.0, False, False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
            step_ok, step_bad = count_calls(info)
            ok += step_ok
            failed += step_bad
        results.append(
            EpisodeResult(
                task_id=task.id,
                domain=task.domain,
                reward=float(reward),
                success=bool(info.get("success", False)),
                components=info.get("reward_components", {}),
                turns=info["turn"],
                truncated=bool(truncated),
                calls_ok=ok,
                calls_failed=failed,
                messages=info["messages"],
            )
        )
    return EvalReport(results)
