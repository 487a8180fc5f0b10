"""``PrivateRehearsal``: rehearse in imagination within a budget, then act once for real.

EnvACE's test-time claim: a policy whose weights also hold a world model can rehearse the task privately
(imagining the tool results itself) before it commits to real calls. :class:`PrivateRehearsal` wraps a
policy and is itself a policy: :func:`~envace_gym.agents.rollout.collect`, ``evaluate`` and ``envace eval``
use it like any other. Through ``collect``'s ``prepare_turns`` hook, before the committed episode's first
turn (and, with ``each_user_turn``, before every later user turn) it

1. forks each env at its current state into a :class:`~envace_gym.rehearsal.RehearsalFork` (the task made
   blind: no reference, no reward bases, no metadata but a schedule the env keeps, BFCL's ``holdout``; the
   real backend neither copied nor called; where the user is part of the world, tau2, ``user`` plays it
   from the conversation the agent saw) wrapped in ``SelfRehearsalEnv(..., grounding="none")``, so the env
   role sees nothing of the reference;
2. plays rehearsals there: ``parallel`` (independent, all of a batch's rehearsals in one ``collect`` call,
   so the rollout engine batches them) or ``sequential`` (rehearsal k sees the memory of 1..k-1);
   ``budget="adaptive"`` rehearses until two rehearsals agree on the plan (calls by name and arguments in
   order, and the final answer) or ``max_budget`` is spent;
3. condenses them (:mod:`.memory`; deterministic, or ``memory="summary"``: the policy summarises that) into
   a note bounded by ``memory_tokens``, which the committed episode's policy sees as a system message (a
   text policy: ``info["note"]``). The env never sees it.

Rehearsal statistics (rehearsals played, tokens generated, memory tokens, seconds, agreement) travel with
the note onto the trajectory (``trajectory.notes``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envace_gym.agents.lm.protocols import is_lm_policy
from envace_gym.agents.rollout.loop import PolicyNote, Trajectory, collect
from envace_gym.backends.spec import BackendSpec
from envace_gym.compose import rehearse
from envace_gym.rehearsal import Imaginer, RehearsalFork

from .memory import MEMORY_HEADER, RehearsalOutcome, condense, cut_to_tokens, render_memory

if TYPE_CHECKING:
    from envace_gym.agents.lm.protocols import LMPolicyLike
    from envace_gym.agents.scripted import TextPolicy

__all__ = ["PrivateRehearsal", "rehearsal_tokens", "REHEARSAL_MODES"]

#: How rehearsals are played (``PrivateRehearsal(mode=...)``); not the env role's imagination mode
#: (``env_role_mode``: ``prompted`` or ``inline``, see ``envace_gym.rehearsal.MODES``).
REHEARSAL_MODES = ("parallel", "sequential")
_SUMMARY_PROMPT = (
    "Below are notes from private rehearsals of the user's task (imagined, not real). Summarise in a few "
    "short lines what to do for real: which calls to make with which arguments, which calls were rejected, "
    "and the answer to give.\n\n{memory}"
)


def rehearsal_tokens(trajectory: Trajectory) -> int:
    """Tokens a rehearsal generated: the actor's and the env role's (an imagined user's are counted by its
    fork, ``RehearsalFork.user``, and added to the note's ``rehearsal_tokens``)."""
    return trajectory.actor_tokens + sum(len(s.completion_ids) for s in trajectory.env_role_samples)


class _Noted:
    """A policy that adds a fixed note per env (by identity) through ``collect``'s hook, once, where the env's
    episode starts: a sequential rehearsal sees the memory of the ones before it."""

    def __init__(self, policy: LMPolicyLike | TextPolicy, notes: dict[int, str | None]) -> None:
        self._policy, self._notes = policy, dict(notes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)

    def prepare_turns(self, envs: Sequence[gym.Env], infos: Sequence[dict[str, Any]]) -> list[PolicyNote | None]:
        return [PolicyNote(n) if (n := self._notes.pop(id(env), None)) else None for env in envs]

    # A text policy keeps per-episode state: these reach it through the explicit methods, not __getattr__.
    def reset(self) -> None:
        self._policy.reset()

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self._policy.act(obs, info)


class PrivateRehearsal:
    """A policy that rehearses each task privately in imagination before acting for real.

    Args:
        policy: the acting policy: an ``LMPolicy`` (it also imagines the tool results, in its env role, unless
            ``imaginer`` is given) or a text policy (``reset()``, ``act(obs, info)``; it reads the memory from
            ``info["note"]``; one ``PrivateRehearsal`` per env, as for any text policy).
        budget: rehearsals per committed episode (0: none, the policy as it is), or ``"adaptive"``.
        mode: ``"parallel"`` (independent rehearsals, batched) or ``"sequential"`` (each sees the memory of
            the ones before).
        max_budget: the most rehearsals ``budget="adaptive"`` plays.
        memory: ``"deterministic"`` (:func:`~.memory.render_memory`) or ``"summary"`` (an LM policy summarises
            the deterministic memory; the summary is bounded the same way).
        memory_tokens: the memory note's bound, counted with the policy's tokenizer (a text policy: about 4
            characters a token).
        imaginer: who imagines tool results in rehearsal (anything with ``imagine(request)``); default: the
            policy itself (world rehearsal). Required for a text policy.
        user: who plays the user in rehearsal where the user is part of the world (tau2, whose simulator
            reads the task's scenario): anything with ``act(messages, tools)``, shown only the conversation
            the agent saw (see :class:`~envace_gym.rehearsal.ImaginedUser`); default: the policy itself (an
            LM policy). Its tokens count in ``rehearsal_tokens`` (and ``user_tokens``). Envs with scripted
            user turns do not use it.
        env_role_mode: ``"prompted"`` (the paper's simulator prompt) or ``"inline"``.
        temperature: the actor's sampling temperature in rehearsal (rehearsals differ only if it is above 0);
            the env role answers with the policy's own sampling.
        each_user_turn: rehearse again before each later user turn of a multi-turn task.
        seed: base seed of the rehearsals' sampling.
    """

    def __init__(
        self,
        policy: LMPolicyLike | TextPolicy,
        budget: int | str = 2,
        mode: str = "parallel",
        max_budget: int = 4,
        memory: str = "deterministic",
        memory_tokens: int = 256,
        imaginer: Imaginer | None = None,
        user: Any = None,
        env_role_mode: str = "prompted",
        temperature: float = 0.7,
        each_user_turn: bool = False,
        seed: int = 0,
    ) -> None:
        if mode not in REHEARSAL_MODES:
            raise ValueError(f"mode must be one of {REHEARSAL_MODES}, got {mode!r}")
        if budget != "adaptive" and not (isinstance(budget, int) and budget >= 0):
            raise ValueError(f"budget must be a non-negative integer or 'adaptive', got {budget!r}")
        if budget == "adaptive" and max_budget < 2:
            raise ValueError(f"budget='adaptive' needs max_budget >= 2 (two rehearsals must agree), got {max_budget}")
        if memory not in ("deterministic", "summary"):
            raise ValueError(f"memory must be 'deterministic' or 'summary', got {memory!r}")
        if memory_tokens < 16:
            raise ValueError(f"memory_tokens must be at least 16, got {memory_tokens}")
        self._is_lm = is_lm_policy(policy)
        if imaginer is None and not self._is_lm:
            raise ValueError("a text policy cannot imagine tool results: pass imaginer=<env role>")
        if memory == "summary" and not self._is_lm:
            raise ValueError("memory='summary' needs a language-model policy to write the summary")
        self.policy, self.budget, self.mode, self.max_budget = policy, budget, mode, max_budget
        self.memory, self.memory_tokens, self.env_role_mode = memory, memory_tokens, env_role_mode
        self.imaginer = imaginer if imaginer is not None else policy
        self.user = user if user is not None else (policy if self._is_lm else None)
        self.temperature, self.each_user_turn, self.seed = temperature, each_user_turn, seed
        self._round = 0  # rehearsal rounds played so far: each gets its own sampling seed
        self.name = f"{getattr(policy, 'name', None) or type(policy).__name__}+rehearsal({mode},{budget})"

    # ------------------------------------------------------------------ a policy like the one it wraps
    def __getattr__(self, name: str) -> Any:
        if name == "policy":  # not set yet (during unpickling or a failed __init__)
            raise AttributeError(name)
        return getattr(self.policy, name)

    def reset(self) -> None:
        self.policy.reset()

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.policy.act(obs, info)

    # ------------------------------------------------------------------ collect()'s hook
    def prepare_turns(self, envs: Sequence[gym.Env], infos: Sequence[dict[str, Any]]) -> list[PolicyNote | None]:
        """Rehearse each env's task from where it stands; one note (memory and statistics) per env, or None
        where nothing is rehearsed (budget 0, or a later user turn without ``each_user_turn``)."""
        todo = [i for i, info in enumerate(infos) if info.get("user_turn", 0) == 0 or self.each_user_turn]
        notes: list[PolicyNote | None] = [None] * len(envs)
        if self.budget == 0 or not todo:
            return notes
        t0 = time.monotonic()
        forks = []
        for i in todo:
            if not hasattr(envs[i], "unwrapped"):
                raise TypeError(
                    "private rehearsal forks the env: it needs envs in this process (not an AsyncVectorEnv)"
                )
            messages = infos[i]["messages"]
            forks.append((RehearsalFork(envs[i], messages[-1]["content"], user=self.user), len(messages)))
        played: list[list[Trajectory]] = [[] for _ in todo]
        agreed = [False] * len(todo)
        adaptive = self.budget == "adaptive"
        limit = self.max_budget if adaptive else int(self.budget)
        if self.mode == "parallel" and not adaptive:
            trajs = self._play([f for f, _ in forks for _ in range(limit)], [None] * (len(forks) * limit))
            for k in range(len(forks)):
                played[k] = trajs[k * limit : (k + 1) * limit]
        else:
            for _ in range(limit):
                going = [k for k in range(len(forks)) if not agreed[k] and len(played[k]) < limit]
                if not going:
                    break
                memos = [self._memory_text(played[k], forks[k][1])[0] if self.mode == "sequential" else None
                         for k in going]  # fmt: skip
                for k, traj in zip(going, self._play([forks[k][0] for k in going], memos), strict=True):
                    played[k].append(traj)
                    agreed[k] = adaptive and _two_agree([_outcome(t, forks[k][1]) for t in played[k]])
        seconds = (time.monotonic() - t0) / len(todo)  # the batch's time, shared evenly
        for k, i in enumerate(todo):
            text, summary_tokens = self._memory_text(played[k], forks[k][1])
            imagined_user = forks[k][0].user
            user_tokens = imagined_user.tokens if imagined_user is not None else 0
            stats = {
                "rehearsals": len(played[k]),
                "rehearsal_tokens": sum(rehearsal_tokens(t) for t in played[k]) + summary_tokens + user_tokens,
                "memory_tokens": self._count(text),
                "agreed": agreed[k] if adaptive else None,
                "seconds": round(seconds, 3),
            }
            if user_tokens:
                stats["user_tokens"] = user_tokens  # the imagined user's share of rehearsal_tokens
            notes[i] = PolicyNote(text, stats)
        return notes

    # ------------------------------------------------------------------ internals
    def _play(self, forks: Sequence[RehearsalFork], memos: Sequence[str | None]) -> list[Trajectory]:
        """One rehearsal on each fork (all in one ``collect`` call); ``memos[j]``: the note fork j's actor sees."""
        backend = BackendSpec.self_imagined_as(self.env_role_mode)
        envs = [rehearse(fork.sibling(), backend, self.imaginer, grounding="none", on_invalid="end") for fork in forks]
        self._round += 1
        seed = self.seed + 1000 * self._round
        notes = {id(env): memo for env, memo in zip(envs, memos, strict=True)}
        if self._is_lm:
            sampling = replace(self.policy.sampling, temperature=self.temperature, seed=seed)
            actor: Any = _Noted(self.policy, notes)
            return collect(envs, actor, len(envs), sampling=sampling, seed=seed, progress=False, desc="rehearsal")
        actors = [_Noted(copy.deepcopy(self.policy), notes) for _ in envs]
        return collect(envs, actors, len(envs), seed=seed, progress=False, desc="rehearsal")

    def _count(self, text: str) -> int:
        tokenizer = getattr(self.policy, "tokenizer", None) if self._is_lm else None
        if tokenizer is None:
            return (len(text) + 3) // 4
        return len(tokenizer.encode(text, add_special_tokens=False))

    def _memory_text(self, trajectories: Sequence[Trajectory], start: int) -> tuple[str, int]:
        """The memory note of ``trajectories`` and the tokens spent writing it (a summary's)."""
        outcomes = [_outcome(t, start) for t in trajectories]
        if not outcomes:
            return "", 0
        text = render_memory(outcomes, self.memory_tokens, self._count)
        if self.memory != "summary":
            return text, 0
        sampling = replace(self.policy.sampling, temperature=0.0, max_new_tokens=self.memory_tokens)
        gen = self.policy.act([{"role": "user", "content": _SUMMARY_PROMPT.format(memory=text)}], (), sampling)
        summary = f"{MEMORY_HEADER}\n{gen.text.strip()}"
        return cut_to_tokens(summary, self.memory_tokens, self._count), len(gen.token_ids)


def _outcome(trajectory: Trajectory, start: int) -> RehearsalOutcome:
    return condense(trajectory.messages, start, truncated=trajectory.truncated)


def _two_agree(outcomes: Sequence[RehearsalOutcome]) -> bool:
    plans = [o.plan() for o in outcomes]
    return len(set(plans)) < len(plans)
