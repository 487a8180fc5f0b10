"""tau2's reward, computed by our own code over an `EpisodeLog` (checked against ``tau2.evaluator``
by ``benchmarks/tau2_agreement.py``).

Semantics, as in tau2-bench's evaluators:

* the episode scores 0 unless it ended with a stop (``user_stop`` or ``agent_stop``); a task without
  evaluation criteria scores 1;
* ``DB``: the executed calls (agent and user, including the task's initial history) are replayed on a fresh
  environment and the gold actions on another; the agent-side and user-side database hashes must both match;
* ``ENV_ASSERTION``: the task's assertion functions, run on the replayed environment, all hold;
* ``ACTION``: every gold action matches some executed call (tau2's ``compare_with_tool_call``);
* ``COMMUNICATE``: every ``communicate_info`` string occurs, case-insensitively, in some assistant text
  with commas removed;
* ``NL_ASSERTION``: only with a judge (see `judge`); tau2 refuses tasks graded on it otherwise.

The reward is the product of the task's ``reward_basis`` components.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from envace_gym.backends import LEDGER
from envace_gym.calls import canonical_json

from . import _runtime
from .trajectory import STOP_REASONS, EpisodeLog, LoggedCall

__all__ = [
    "BASES",
    "register_bases",
    "Tau2Score",
    "score_log",
    "gold_hashes",
    "replay_environment",
    "action_matches",
    "transcript",
]

#: tau2 reward type -> our reward-basis name (registered with ``envace_gym.rewards.register_reward_basis``).
BASES = {
    "DB": "tau2_db",
    "ENV_ASSERTION": "tau2_env_assertion",
    "ACTION": "tau2_action",
    "COMMUNICATE": "tau2_communicate",
    "NL_ASSERTION": "tau2_nl_assertion",
}

Judge = Callable[[Sequence[str], str], Sequence[bool]]


@dataclass
class Tau2Score:
    """The reward, its per-basis components, and what each check found (for ``info["tau2"]``)."""

    reward: float
    components: dict[str, float]
    checks: dict[str, Any] = field(default_factory=dict)


def _basis(name: str):
    def score(ctx: Any) -> float:
        # tau2 scores an episode as a whole (termination, then each check): the env computes it once.
        tau2_score = getattr(ctx.env, "tau2_score", None)
        if tau2_score is None:
            raise ValueError(f"task {ctx.task.id!r} is graded on {name!r}: play it in EnvACE-Tau2-v0")
        return tau2_score().components.get(name, 0.0)

    return score


def register_bases() -> None:
    """Register tau2's reward bases (each reads the episode's `Tau2Score` from ``Tau2Env``)."""
    from envace_gym.rewards import register_reward_basis, reward_bases

    for name in BASES.values():
        if name not in reward_bases():
            register_reward_basis(name, _basis(name))


def replay_environment(domain: str, task: Any, calls: Sequence[LoggedCall]) -> Any:
    """A fresh environment at the task's initial state with ``calls`` replayed in order (tau2's
    ``set_state`` on the full trajectory: each call through ``get_response``, then ``sync_tools``)."""
    env = _runtime.fresh_environment(domain, task, history=False)  # the history's calls are in ``calls``
    for c in calls:
        env.get_response(_runtime.tau2_call(c.id, c.name, copy.deepcopy(c.arguments), c.requestor))
        LEDGER.record("verifier")  # replayed only to score the episode
    env.sync_tools()
    return env


def gold_hashes(domain: str, task_data: dict[str, Any]) -> tuple[str | None, str | None]:
    """(agent DB hash, user DB hash) after the gold actions, cached per task."""
    return _gold_hashes(domain, canonical_json(task_data))


@lru_cache(maxsize=1024)
def _gold_hashes(domain: str, task_json: str) -> tuple[str | None, str | None]:
    task = _runtime._parse_task(task_json)
    env = _runtime.fresh_environment(domain, task, history=True)
    for action in task.evaluation_criteria.actions or []:
        LEDGER.record("verifier")  # the reference state, computed once per task (cached)
        try:  # tau2 makes the gold calls without sync_tools and ignores their errors
            env.make_tool_call(action.name, requestor=action.requestor, **copy.deepcopy(action.arguments))
        except Exception:  # noqa: BLE001 - a failing gold action is tau2's data, not our error
            pass
    return env.get_db_hash(), env.get_user_db_hash()


def action_matches(action: Any, call: LoggedCall) -> bool:
    """tau2's ``Action.compare_with_tool_call``. Without ``compare_args`` the *call's* argument names are
    compared, so a call that omits an argument the gold action has can still match (tau2's behaviour)."""
    if action.name != call.name:
        return False
    keys = list(call.arguments) if action.compare_args is None else action.compare_args
    if not keys:
        return True
    return {k: v for k, v in call.arguments.items() if k in keys} == {
        k: v for k, v in action.arguments.items() if k in keys
    }


def communicated(info: str, texts: Sequence[str]) -> bool:
    return any(info.lower() in text.lower().replace(",", "") for text in texts)


def transcript(log: EpisodeLog) -> str:
    """``role: text`` lines of the participants' messages (what an NL-assertion judge reads)."""
    return "\n".join(f"{m.role}: {m.text}" for m in log.messages if m.text)


def assertions_to_judge(task_data: dict[str, Any], log: EpisodeLog) -> list[str]:
    """The natural-language assertions a judge must rule on to score this episode (none where it did not end
    as tau2 scores, or its task lists none)."""
    if (log.termination or "max_steps") not in STOP_REASONS:
        return []
    criteria = _runtime.parse_task(task_data).evaluation_criteria
    return list(criteria.nl_assertions or []) if criteria is not None else []


def score_log(
    domain: str,
    task_data: dict[str, Any],
    log: EpisodeLog,
    judge: Judge | None = None,
    final_env: Any = None,
    verdicts: Sequence[bool] | None = None,
) -> Tau2Score:
    """Score one episode of the tau2 task ``task_data`` (its JSON dict) the way tau2's evaluator does.

    ``verdicts``: the judge's rulings on `assertions_to_judge`, where they were asked already (a rollout
    loop answered them as `JudgeRequest`s); else ``judge`` is asked here.

    ``final_env``: the episode's own real environment, when every logged call ran on it in order; it then
    stands in for the replay (same calls, same order, so the same state; ``benchmarks/tau2_agreement.py``
    checks this against tau2's replay). Without it the calls are replayed on a fresh environment.
    """
    task = _runtime.parse_task(task_data)
    criteria = task.evaluation_criteria
    basis = [b.value for b in criteria.reward_basis] if criteria is not None else []
    if log.termination not in STOP_REASONS:
        return Tau2Score(0.0, {BASES[b]: 0.0 for b in basis}, {"termination": log.termination})
    if criteria is None:
        return Tau2Score(1.0, {}, {"termination": log.termination, "note": "no evaluation criteria"})

    components: dict[str, float] = {}
    checks: dict[str, Any] = {"termination": log.termination}
    if {"DB", "ENV_ASSERTION"} & set(basis):
        db, assertions = _env_checks(domain, task_data, task, log, final_env)
        checks["db_match"] = db
        checks["env_assertions"] = assertions
        if "DB" in basis:
            components[BASES["DB"]] = 1.0 if db else 0.0
        if "ENV_ASSERTION" in basis:
            components[BASES["ENV_ASSERTION"]] = 1.0 if all(assertions) else 0.0
    if "ACTION" in basis:
        calls = log.calls()
        matched = [any(action_matches(a, c) for c in calls) for a in criteria.actions or []]
        checks["actions"] = matched
        components[BASES["ACTION"]] = 1.0 if all(matched) else 0.0
    if "COMMUNICATE" in basis:
        texts = log.assistant_texts()
        found = [communicated(info, texts) for info in criteria.communicate_info or []]
        checks["communicate"] = found
        components[BASES["COMMUNICATE"]] = 1.0 if all(found) else 0.0
    if criteria.nl_assertions and (judge is not None or verdicts is not None):
        if verdicts is None:
            verdicts = judge(list(criteria.nl_assertions), transcript(log))  # type: ignore[misc]
        verdicts = [bool(v) for v in verdicts]
        checks["nl_assertions"] = verdicts
        if "NL_ASSERTION" in basis:
            components[BASES["NL_ASSERTION"]] = 1.0 if all(verdicts) else 0.0
    elif "NL_ASSERTION" in basis:
        if judge is None and verdicts is None:
            raise ValueError(f"tau2 task {task.id!r} is graded on NL_ASSERTION; pass judge=... to the env")
        components[BASES["NL_ASSERTION"]] = 1.0  # no assertions listed: tau2 scores 1

    reward = 1.0
    for value in components.values():
        reward *= value
    return Tau2Score(reward, components, checks)


def _env_checks(
    domain: str, task_data: dict[str, Any], task: Any, log: EpisodeLog, final_env: Any
) -> tuple[bool, list[bool]]:
    criteria = task.evaluation_criteria
    if criteria.actions is None and criteria.env_assertions is None:
        return True, []  # tau2: nothing to compare
    predicted = final_env if final_env is not None else replay_environment(domain, task, log.calls())
    # Hashes before the assertions: running an assertion function syncs the environment's tools.
    db = (predicted.get_db_hash(), predicted.get_user_db_hash()) == gold_hashes(domain, task_data)
    assertions = []
    for assertion in criteria.env_assertions or []:
        try:
            assertions.append(bool(predicted.run_env_assertion(assertion, raise_assertion_error=False)))
        except Exception:  # noqa: BLE001 - an assertion that cannot run (e.g. missing entity) is not met
            assertions.append(False)
    return db, assertions
