"""tau2 tasks as `envace_gym.Task` objects, built at run time from the installed ``tau2`` package.

Each task keeps tau2's own task (JSON, in ``metadata["tau2"]["task"]``) for scoring. Its ``reference`` is
the oracle's plan built from the gold actions: each agent-side action is one step (order preserved), and
the turns are cut where the user has to act (telecom): the oracle's answer asks the user to act, and the
scripted user runs those user-side gold actions (``metadata["tau2"]["user_script"]``). ``user_turns``
holds the scripted user's messages (the opening with the scenario's known information, then one per
script step); an LM user writes its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from envace_gym.env import DEFAULT_SYSTEM_PROMPT
from envace_gym.tasks import RefCall, RefTurn, Task, TaskSuite

from . import _runtime
from .domains import check_domain
from .scoring import BASES, register_bases

__all__ = [
    "AGENT_INSTRUCTIONS",
    "load_suite",
    "build_task",
    "GoldAction",
    "gold_actions",
    "agent_tools",
    "system_prompt",
]

AGENT_INSTRUCTIONS = (
    "You are a customer service agent. Help the user by following the policy below. In each message either "
    "call tools or write to the user, not both. Use only information from the user, the tools and the "
    "policy; never invent it."
)

GoldAction = tuple[str, str, dict[str, Any]]  # (requestor, tool name, arguments)


def system_prompt(domain: str) -> str:
    """The agent's system prompt: our instructions and call format, then tau2's policy for the domain."""
    return f"{AGENT_INSTRUCTIONS}\n\n{DEFAULT_SYSTEM_PROMPT}\n\n<policy>\n{_runtime.domain_policy(domain)}\n</policy>"


@cache
def agent_tools(domain: str) -> tuple[dict[str, Any], ...]:
    """OpenAI schemas of the domain's agent tools (tau2's ``Tool.openai_schema``)."""
    return tuple(t.openai_schema for t in _runtime.new_environment(domain).get_tools())


def gold_actions(task: Any) -> list[GoldAction]:
    """A tau2 task's gold actions as (requestor, name, arguments)."""
    criteria = task.evaluation_criteria
    return [(a.requestor, a.name, dict(a.arguments)) for a in (criteria.actions or [] if criteria else [])]


def _opening(task: Any) -> str:
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str):
        return instructions
    parts = [instructions.reason_for_call, instructions.known_info or ""]
    return "\n".join(p.strip() for p in parts if p and p.strip())


def _segments(actions: Sequence[GoldAction]) -> tuple[list[list[GoldAction]], list[list[GoldAction]]]:
    """Agent turns and the user-side steps between them; ``len(turns) == len(user_steps) + 1``."""
    turns: list[list[GoldAction]] = [[]]
    user_steps: list[list[GoldAction]] = []
    for action in actions:
        if action[0] == "user":
            if len(user_steps) < len(turns):  # the user's turn starts: the agent's turn ends
                user_steps.append([])
            user_steps[-1].append(action)
        else:
            if len(user_steps) == len(turns):  # back to the agent after the user acted
                turns.append([])
            turns[-1].append(action)
    if len(user_steps) == len(turns):
        turns.append([])
    return turns, user_steps


def _final_answer(task: Any) -> str:
    info = list(task.evaluation_criteria.communicate_info or []) if task.evaluation_criteria else []
    # No question mark: the scripted user ends the conversation after a statement.
    return ("Here is a summary: " + "; ".join(info) + ".") if info else "Your request has been handled."


def build_task(
    domain: str, task: Any, split: str = "test", actions: Iterable[GoldAction] | None = None, id_suffix: str = ""
) -> Task:
    """Our `Task` for one tau2 task. ``actions`` replaces the gold actions in the oracle's plan and
    the scripted user's script (perturbation checks); scoring always uses the task's own criteria."""
    register_bases()
    plan = list(actions) if actions is not None else gold_actions(task)
    turns, user_steps = _segments(plan)
    reference = []
    for i, steps in enumerate(turns):
        if i < len(user_steps):
            answer = "Please do this on your side: " + ", ".join(name for _, name, _ in user_steps[i]) + "."
        else:
            answer = _final_answer(task)
        calls = tuple((RefCall(name, args),) for _, name, args in steps)
        reference.append(RefTurn(steps=calls, answer=answer))
    criteria = task.evaluation_criteria
    basis = [b.value for b in criteria.reward_basis] if criteria is not None else []
    user_turns = [_opening(task)] + ["I did what you asked." for _ in user_steps]
    return Task(
        id=f"{domain}-{task.id}{id_suffix}",
        user_turns=tuple(user_turns),
        tools=agent_tools(domain),
        backend=f"tau2/{domain}",
        reference=tuple(reference),
        reward=tuple(BASES[b] for b in basis),
        domain=f"tau2/{domain}",
        split=split,
        system=system_prompt(domain),
        metadata={
            "tau2": {
                "domain": domain,
                "task_id": task.id,
                "task": task.model_dump(mode="json", exclude_none=True),
                "scenario": str(task.user_scenario),
                "user_script": [[{"name": n, "arguments": a} for _, n, a in step] for step in user_steps],
            }
        },
    )


@cache
def load_suite(domain: str) -> TaskSuite:
    """All tasks of tau2's ``base`` task set for ``domain``, split into train/test by tau2's split file
    (all ``test`` for mock, which has none)."""
    check_domain(domain)
    splits = _runtime.task_splits(domain)
    tasks = [build_task(domain, t, splits[t.id]) for t in _runtime.base_tasks(domain)]
    return TaskSuite(tasks, name=f"tau2/{domain}")
