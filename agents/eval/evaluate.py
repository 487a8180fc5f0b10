"""Episode evaluation: run a policy on envs over the seeded evaluation order of their tasks and summarise."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envace_gym.agents.provenance import run_environment
from envace_gym.agents.rollout.loop import EpisodeResult, Trajectory, collect

if TYPE_CHECKING:
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import LMPolicy
    from envace_gym.agents.lm.protocols import TextPolicy

__all__ = ["CALL_FIELDS", "EpisodeResult", "EvalReport", "evaluate"]


@dataclass
class EvalReport:
    """The episodes of an evaluation (``results``) and their trajectories (token-level for an LM policy)."""

    results: list[EpisodeResult]
    trajectories: list[Trajectory] = field(default_factory=list, repr=False)
    #: Where it ran (`envace_gym.agents.provenance.run_environment`: code, kernels, precision, threads,
    #: versions); `evaluate` fills it in, and `summary` reports it.
    environment: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory]) -> EvalReport:
        return cls([t.episode for t in trajectories], list(trajectories))

    def summary(self) -> dict[str, Any]:
        """``episodes``, ``success_rate``, ``mean_reward``, ``valid_call_rate``, ``mean_turns``, ``truncated`` and
        ``aborted`` (episodes that hit the turn limit / that the env ended early), the calls per episode by what
        answered them (`CALL_FIELDS`), and the same ``by_domain``; with
        rehearsal, ``rehearsal`` (its costs per episode); with ``VerifiedCalls``, ``verified_calls`` (calls predicted,
        revisions and their tokens per episode, the share of episodes where it fired and their success rate)."""
        by_domain: dict[str, list[EpisodeResult]] = defaultdict(list)
        for r in self.results:
            by_domain[r.domain].append(r)
        out = _stats(self.results)
        out["by_domain"] = {d: _stats(rs) for d, rs in sorted(by_domain.items())}
        if self.environment is not None:
            out["environment"] = self.environment
        rows = self.per_episode()
        if any(row["rehearsals"] for row in rows):
            n = len(rows)
            out["rehearsal"] = {
                "rehearsals_per_episode": sum(r["rehearsals"] for r in rows) / n,
                "rehearsal_tokens_per_episode": sum(r["rehearsal_tokens"] for r in rows) / n,
                "memory_tokens_per_episode": sum(r["memory_tokens"] for r in rows) / n,
                "rehearsal_seconds_per_episode": sum(r["rehearsal_seconds"] for r in rows) / n,
            }
        if any(n.get("use") == "verify" for t in self.trajectories for n in t.notes):
            n = len(rows)
            fired = [r for r in rows if r["verifier_fired"]]
            out["verified_calls"] = {
                "predicted_per_episode": sum(r["verifier_predicted"] for r in rows) / n,
                "fired_per_episode": sum(r["verifier_fired"] for r in rows) / n,
                "episodes_fired": len(fired) / n,
                "success_rate_fired": sum(r["success"] for r in fired) / len(fired) if fired else None,
                "verifier_tokens_per_episode": sum(r["verifier_tokens"] for r in rows) / n,
            }
        return out

    def per_episode(self) -> list[dict[str, Any]]:
        """One row per episode: ``task_id``, ``success``, its calls by what answered them (``live_calls``,
        ``logged_calls``, ``imagined_calls``, ``rejected_calls``, ``verifier_calls``: see `CALL_FIELDS`) and
        what rehearsing before it cost (``trajectory.notes``: rehearsals,
        tokens they generated, memory tokens, seconds; zeros without rehearsal), and what verifying its calls
        did (``VerifiedCalls``: calls the env role predicted, decisions where a predicted error made the policy
        revise, their tokens; zeros without it)."""
        notes = [t.notes for t in self.trajectories] if self.trajectories else [[] for _ in self.results]
        return [
            {
                "task_id": r.task_id,
                "success": r.success,
                **{name: count(r) for name, count in _CALL_COUNTS.items()},
                "rehearsals": sum(n.get("rehearsals", 0) for n in ns),
                "rehearsal_tokens": sum(n.get("rehearsal_tokens", 0) for n in ns),
                "memory_tokens": sum(n.get("memory_tokens", 0) for n in ns),
                "rehearsal_seconds": sum(n.get("seconds", 0.0) for n in ns),
                "verifier_predicted": sum(n.get("predicted", 0) for n in ns),
                "verifier_fired": sum(n.get("fired", 0) for n in ns),
                "verifier_tokens": sum(n.get("verifier_tokens", 0) for n in ns),
            }
            for r, ns in zip(self.results, notes, strict=True)
        ]

    def save(self, out_dir: str | Path) -> Path:
        """Write ``episodes.jsonl`` (one episode per line, with its messages) and ``summary.json``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with (out / "episodes.jsonl").open("w", encoding="utf-8") as fh:
            for r in self.results:
                fh.write(json.dumps(asdict(r), ensure_ascii=False) + "\n")
        (out / "summary.json").write_text(json.dumps(self.summary(), indent=2))
        return out


#: An episode's calls by what answered them (the call ledger's kinds, `envace_gym.backends.ledger`, tallied per
#: episode by the env in ``info["call_counts"]``): ``live`` ran on a real backend; ``logged`` were taken from a
#: recorded log or replay cache (a replay hit; under prompted imagination, also the real reference results shown
#: to the env role as examples); ``imagined`` were answered by the env role; ``rejected`` did not parse or failed
#: the deterministic checks (reached no backend); ``verifier`` ran on a fresh backend only to compute the reward.
_CALL_COUNTS = {
    "live_calls": lambda r: r.calls_live,
    "logged_calls": lambda r: r.calls_logged,
    "imagined_calls": lambda r: r.calls_imagined,
    "rejected_calls": lambda r: r.calls_failed,
    "verifier_calls": lambda r: r.calls_verifier,
}
#: The summary's per-episode call counts: ``<kind>_calls_per_episode`` for each of `_CALL_COUNTS`.
CALL_FIELDS = tuple(f"{name}_per_episode" for name in _CALL_COUNTS)


def _stats(results: list[EpisodeResult]) -> dict[str, Any]:
    n = len(results)
    attempted = sum(r.calls_ok + r.calls_failed for r in results)
    calls = {f"{name}_per_episode": sum(map(count, results)) / n if n else 0.0 for name, count in _CALL_COUNTS.items()}
    return {
        "episodes": n,
        "success_rate": sum(r.success for r in results) / n if n else 0.0,
        "mean_reward": sum(r.reward for r in results) / n if n else 0.0,
        "valid_call_rate": sum(r.calls_ok for r in results) / attempted if attempted else None,
        "mean_turns": sum(r.turns for r in results) / n if n else 0.0,
        "truncated": sum(r.truncated for r in results),
        "aborted": sum(r.aborted is not None for r in results),
        **calls,
    }


def evaluate(
    env: gym.Env | Sequence[gym.Env] | gym.vector.VectorEnv,
    policy: LMPolicy | TextPolicy | Sequence[TextPolicy],
    episodes: int,
    seed: int = 0,
    progress: bool = True,
    desc: str = "eval",
    sampling: SamplingConfig | None = None,
) -> EvalReport:
    """Run ``episodes`` episodes of ``policy`` through `collect`.

    Tasks come from the env's pool in its seeded evaluation order (``env.evaluation_order(episodes, seed)``:
    domains interleaved, each task once before any repeats); episode ``i`` resets with ``seed + i``.
    ``env`` is one env or several stepped in lockstep (``policy`` as for ``collect``: an LM policy, or one
    text policy per env).
    """
    if isinstance(env, gym.vector.VectorEnv):
        task_ids = env.call("evaluation_order", episodes, seed)[0]  # answered in the worker if it has one
    else:
        env = [env] if isinstance(env, gym.Env) else list(env)
        task_ids = env[0].get_wrapper_attr("evaluation_order")(episodes, seed)
    trajectories = collect(
        env, policy, episodes, sampling=sampling, task_ids=task_ids, seed=seed, progress=progress, desc=desc
    )
    report = EvalReport.from_trajectories(trajectories)
    report.environment = run_environment(None if isinstance(policy, Sequence) else policy)
    return report
