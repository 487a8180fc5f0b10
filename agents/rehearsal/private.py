"""``PrivateRehearsal``: rehearse in imagination within a budget, then act for real.

EnvACE's test-time claim: a policy whose weights also hold a world model can rehearse the task privately (imagining
the tool results itself) before it commits to real calls. `PrivateRehearsal` holds a policy and adds hooks to
it (a `PolicyHooks`): `collect`, ``evaluate`` and
``envace eval`` take it where they take a policy. Through ``collect``'s ``prepare_turns`` hook, before the committed
episode's first turn (and, with ``each_user_turn``, before every later user turn) it

1. forks each env at its current state into a `RehearsalFork` (the task made
   blind: no reference, no reward bases, no metadata but a schedule the env keeps, BFCL's ``holdout``; the
   real backend neither copied nor called; where the user is part of the world, tau2, ``user`` plays it
   from the conversation the agent saw) wrapped in ``SelfRehearsalEnv(..., grounding="none")``, so the env
   role sees nothing of the reference;
2. plays rehearsals there: ``parallel`` (independent, all of a batch's rehearsals in one ``collect`` call,
   so the rollout engine batches them) or ``sequential`` (rehearsal k sees the memory of 1..k-1);
   ``budget="adaptive"`` rehearses until two rehearsals agree on the plan (calls by name and arguments in
   order, and the final answer) or ``max_budget`` is spent;
3. condenses them (`memory`; deterministic, or ``memory="summary"``: the policy summarises that) into
   a note bounded by ``memory_tokens``, which the committed episode's policy sees as a system message (a
   text policy: ``info["note"]``). The env never sees it.

Rehearsal statistics (rehearsals played, tokens generated, memory tokens, seconds, agreement) travel with
the note onto the trajectory (``trajectory.notes``).

**Select mode** (``use="select"``): rehearsals propose, the agent picks, and nothing of them enters the
actor's context. Through ``collect``'s ``choose_actions`` hook, before EVERY actor turn of the committed
episode (receding-horizon control: each decision starts from the real state, real results so far included)
it forks each env as it stands, plays ``budget`` rehearsals (``"adaptive"``: until two agree on the first
message, at most ``max_budget``), and commits one rehearsal's first assistant message as the actor's message,
its text as generated; the env runs it for real. Which one (``choose``):

* ``"agreement"``: the most frequent first message (its calls by name and canonical arguments, or its
  answer, whitespace-normalised, when it makes no call); a first message the deterministic checks REJECTED
  (format, unknown tool, schema) is no candidate, since it fails for real too. A tie in the top count goes
  to the judge (the LM policy, or ``judge=``), else to the earliest rehearsal;
* ``"draft"``: agreement in which the policy's own next message counts: before rehearsing, the policy drafts
  it as it would act (its own sampling, greedy in ``envace eval``); the draft is one vote among the
  rehearsals' first messages and wins ties, so a rehearsed plan replaces it only when more rehearsals agree on
  that plan than on the draft (budget 2: both rehearsals, against the draft). A draft that does not parse or
  names an undeclared tool is no candidate (its schema is not checked before the real call). Where the
  draft's plan stands, the policy then acts as it would (its generation in the rollout's own batch, exactly
  budget 0's move; a draft drafted in a batch of its own can differ from it in a near-tie of a small model's
  logits). The draft's tokens are counted apart (``draft_tokens``);
* ``"outcome"``: the world model decides, with no verdict asked: each rehearsal scores 1 where it ended in a
  final answer with no call refused or answered by an error (its imagined results taken at their word), and
  a first message scores what its rehearsals scored; the draft (drafted as in ``"draft"``) adds half a point
  to its plan, so it stands on a tie and where no rehearsal reached an answer. Among rehearsed plans that
  score alike, the one more rehearsals began with, then the earliest;
* ``"judge"``: the policy's own verdict, asked greedily in one user message (the user's request, the
  candidate rehearsals numbered, each with its calls, imagined results (clipped) and final answer, then
  "Which rehearsal reaches the user's goal? Answer with its number."); the first integer in range picks; an
  unusable verdict falls back to agreement. Asked only when candidates differ.

Where no rehearsal gives a candidate, the policy acts as it would (its own generation). Each decision's
statistics (rehearsals, tokens of the actor, the env role and the judge, how it chose, seconds) go onto the
trajectory as a note without text, which nobody is shown.
"""

from __future__ import annotations

import copy
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envace_gym.agents.lm.protocols import is_lm_policy
from envace_gym.agents.rollout.hooks import PolicyChoice, PolicyHooks, PolicyNote, TurnContext
from envace_gym.agents.rollout.loop import Trajectory, collect
from envace_gym.backends.spec import BackendSpec
from envace_gym.calls import parse_calls, tool_calls_to_openai, tool_names_of
from envace_gym.compose import make_env
from envace_gym.imagination import Imaginer
from envace_gym.rehearsal import RehearsalFork

from .memory import (
    MEMORY_HEADER,
    RehearsalOutcome,
    condense,
    cut_to_tokens,
    first_step,
    outcome_line,
    render_memory,
)

if TYPE_CHECKING:
    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.protocols import LMPolicyLike, TextPolicy

__all__ = ["PrivateRehearsal", "rehearsal_tokens", "REHEARSAL_MODES", "REHEARSAL_USES", "REHEARSAL_CHOICES"]

#: How rehearsals are played (``PrivateRehearsal(mode=...)``); not the env role's imagination mode
#: (``env_role_mode``: ``prompted`` or ``inline``, see ``envace_gym.imagination.MODES``).
REHEARSAL_MODES = ("parallel", "sequential")
#: What rehearsals are for (``PrivateRehearsal(use=...)``): a memory the actor reads, or plans it selects from.
REHEARSAL_USES = ("memory", "select")
#: How select mode picks a rehearsal (``PrivateRehearsal(choose=...)``).
REHEARSAL_CHOICES = ("agreement", "draft", "judge", "outcome")
_SUMMARY_PROMPT = (
    "Below are notes from private rehearsals of the user's task (imagined, not real). Summarise in a few "
    "short lines what to do for real: which calls to make with which arguments, which calls were rejected, "
    "and the answer to give.\n\n{memory}"
)
_JUDGE_PROMPT = (
    "The user's request:\n{request}\n\nPrivate rehearsals of what to do next (tool results imagined, not "
    "real):\n{rehearsals}\n\nWhich rehearsal reaches the user's goal? Answer with its number."
)


def rehearsal_tokens(trajectory: Trajectory) -> int:
    """Tokens a rehearsal generated: the actor's and the env role's (an imagined user's are counted by its
    fork, ``RehearsalFork.user``, and added to the note's ``rehearsal_tokens``)."""
    return trajectory.actor_tokens + sum(len(s.completion_ids) for s in trajectory.env_role_samples)


class _Noted(PolicyHooks):
    """``policy`` with a fixed note per env (by identity), added through ``collect``'s hook once, where the
    env's episode starts: a sequential rehearsal sees the memory of the ones before it."""

    def __init__(self, policy: LMPolicyLike | TextPolicy, notes: dict[int, str | None]) -> None:
        self.policy, self._notes = policy, dict(notes)

    def prepare_turns(
        self, envs: Sequence[gym.Env], infos: Sequence[dict[str, Any]], ctx: TurnContext | None = None
    ) -> list[PolicyNote | None]:
        return [PolicyNote(n) if (n := self._notes.pop(id(env), None)) else None for env in envs]


class PrivateRehearsal(PolicyHooks):
    """A policy that rehearses each task privately in imagination before acting for real.

    Args:
        policy: the acting policy: an ``LMPolicy`` (it also imagines the tool results, in its env role, unless
            ``imaginer`` is given) or a text policy (``reset()``, ``act(obs, info)``; it reads the memory from
            ``info["note"]``; one ``PrivateRehearsal`` per env, as for any text policy).
        budget: rehearsals per committed episode (0: none, the policy as it is), or ``"adaptive"``.
        mode: ``"parallel"`` (independent rehearsals, batched) or ``"sequential"`` (each sees the memory of
            the ones before).
        max_budget: the most rehearsals ``budget="adaptive"`` plays.
        memory: ``"deterministic"`` (`render_memory`) or ``"summary"`` (an LM policy summarises
            the deterministic memory; the summary is bounded the same way).
        memory_tokens: the memory note's bound, counted with the policy's tokenizer (a text policy: about 4
            characters a token).
        imaginer: who imagines tool results in rehearsal (anything with ``imagine(request)``); default: the
            policy itself (world rehearsal). Required for a text policy.
        user: who plays the user in rehearsal where the user is part of the world (tau2, whose user model
            reads the task's scenario): anything with ``act(messages, tools)``, shown only the conversation
            the agent saw (see `ImaginedUser`); default: the policy itself (an
            LM policy). Its tokens count in ``rehearsal_tokens`` (and ``user_tokens``). Envs with scripted
            user turns do not use it.
        env_role_mode: ``"prompted"`` (the paper's env-role prompt) or ``"inline"``.
        temperature: the actor's sampling temperature in rehearsal (rehearsals differ only if it is above 0);
            the env role answers with the policy's own sampling.
        each_user_turn: rehearse again before each later user turn of a multi-turn task (memory mode; select
            mode rehearses before every turn anyway).
        seed: base seed of the rehearsals' sampling.
        use: ``"memory"`` (rehearse before the task, the actor reads a memory of it) or ``"select"`` (rehearse
            before every turn and commit the chosen rehearsal's first message; see the module docstring).
        choose: (select) ``"agreement"``, ``"draft"`` (the policy's own next message is a vote and wins ties),
            ``"outcome"`` (the first message whose rehearsals reached an answer without an error result; the
            draft wins ties) or ``"judge"``.
        judge: (select) who gives the verdict (anything with ``act(messages, tools, sampling)`` returning a
            generation with ``text`` and ``token_ids``); default: the policy itself when it is an LM policy.
        judge_tokens: (select) the verdict's ``max_new_tokens``.
        sampling: (LM policy) the rehearsals' sampling, with ``temperature`` and each round's seed laid over
            it for the actor; the env role answers with it as given (a trainer passes its rollout sampling).
            Default: the policy's own.
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
        use: str = "memory",
        choose: str = "agreement",
        judge: Any = None,
        judge_tokens: int = 8,
        sampling: SamplingConfig | None = None,
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
        if use not in REHEARSAL_USES:
            raise ValueError(f"use must be one of {REHEARSAL_USES}, got {use!r}")
        if choose not in REHEARSAL_CHOICES:
            raise ValueError(f"choose must be one of {REHEARSAL_CHOICES}, got {choose!r}")
        if judge_tokens < 1:
            raise ValueError(f"judge_tokens must be at least 1, got {judge_tokens}")
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
        self.use, self.choose, self.judge_tokens = use, choose, judge_tokens
        self.judge = judge if judge is not None else (policy if self._is_lm else None)
        if use == "select" and choose == "judge" and self.judge is None:
            raise ValueError("choose='judge' needs a language-model policy or judge=<policy> to give the verdict")
        self.rehearsal_sampling = sampling
        self._round = 0  # rehearsal rounds played so far: each gets its own sampling seed
        how = f"{mode},{budget}" if use == "memory" else f"select-{choose},{mode},{budget}"
        self.name = f"{getattr(policy, 'name', None) or type(policy).__name__}+rehearsal({how})"

    # ------------------------------------------------------------------ collect()'s hooks
    def prepare_turns(
        self, envs: Sequence[gym.Env], infos: Sequence[dict[str, Any]], ctx: TurnContext | None = None
    ) -> list[PolicyNote | None]:
        """(memory) Rehearse each env's task from where it stands; one note (memory and statistics) per env, or
        None where nothing is rehearsed (select mode, budget 0, or a later user turn without ``each_user_turn``)."""
        todo = [i for i, info in enumerate(infos) if info.get("user_turn", 0) == 0 or self.each_user_turn]
        notes: list[PolicyNote | None] = [None] * len(envs)
        if self.use != "memory" or self.budget == 0 or not todo:
            return notes
        t0 = time.monotonic()
        starts = [len(infos[i]["messages"]) for i in todo]
        obs = [infos[i]["messages"][-1]["content"] for i in todo]
        played, agreed, user_tokens = self._rehearse([envs[i] for i in todo], obs, starts, _plans_agree)
        seconds = (time.monotonic() - t0) / len(todo)  # the batch's time, shared evenly
        for k, i in enumerate(todo):
            text, summary_tokens = self._memory_text(played[k], starts[k])
            stats = {
                "rehearsals": len(played[k]),
                "rehearsal_tokens": sum(rehearsal_tokens(t) for t in played[k]) + summary_tokens + user_tokens[k],
                "memory_tokens": self._count(text),
                "agreed": agreed[k] if self.budget == "adaptive" else None,
                "seconds": round(seconds, 3),
            }
            if user_tokens[k]:
                stats["user_tokens"] = user_tokens[k]  # the imagined user's share of rehearsal_tokens
            notes[i] = PolicyNote(text, stats)
        return notes

    def choose_actions(
        self,
        envs: Sequence[gym.Env],
        observations: Sequence[Any],
        infos: Sequence[dict[str, Any]],
        ctx: TurnContext | None = None,
    ) -> list[PolicyChoice | None]:
        """(select) Before an actor turn: rehearse each env from where it stands and choose the first message to
        commit; None for every env in memory mode or with budget 0 (the policy acts as it would). A draft is
        sampled as the rollout samples (``ctx.sampling``; without a context, the policy's own)."""
        if self.use != "select" or self.budget == 0:
            return [None] * len(envs)
        t0 = time.monotonic()
        starts = [len(info["messages"]) for info in infos]
        drafted = self.choose in ("draft", "outcome")
        sampling = ctx.sampling if ctx is not None else None
        drafts = self._drafts(observations, infos, sampling) if drafted else [None] * len(envs)
        played, agreed, user_tokens = self._rehearse(envs, observations, starts, _first_messages_agree)
        choices = [
            self._select(p, n, info["messages"], draft)
            for p, n, info, draft in zip(played, starts, infos, drafts, strict=True)
        ]
        seconds = (time.monotonic() - t0) / len(envs)  # the batch's time, shared evenly
        for choice, ok, user in zip(choices, agreed, user_tokens, strict=True):
            choice.stats.update(agreed=ok if self.budget == "adaptive" else None, seconds=round(seconds, 3))
            if user:  # tau2: the imagined user's tokens are rehearsal tokens too
                choice.stats.update(user_tokens=user, rehearsal_tokens=choice.stats["rehearsal_tokens"] + user)
        return list(choices)

    # ------------------------------------------------------------------ internals
    def _rehearse(
        self,
        envs: Sequence[gym.Env],
        observations: Sequence[Any],
        starts: Sequence[int],
        agree: Callable[[Sequence[Trajectory], int], bool],
    ) -> tuple[list[list[Trajectory]], list[bool], list[int]]:
        """The rehearsals of each env from its current state (``observations[k]``: what its last reset or step
        returned; ``starts[k]``: its messages so far), whether an adaptive budget stopped on ``agree``, and the
        tokens an imagined user generated in each env's rehearsals (tau2; 0 elsewhere)."""
        forks = []
        for env, obs in zip(envs, observations, strict=True):
            if not hasattr(env, "unwrapped"):
                raise TypeError(
                    "private rehearsal forks the env: it needs envs in this process (not an AsyncVectorEnv)"
                )
            forks.append(RehearsalFork(env, obs, user=self.user))
        played: list[list[Trajectory]] = [[] for _ in forks]
        agreed = [False] * len(forks)
        adaptive = self.budget == "adaptive"
        limit = self.max_budget if adaptive else int(self.budget)
        if self.mode == "parallel" and not adaptive:
            trajs = self._play([f for f in forks for _ in range(limit)], [None] * (len(forks) * limit))
            played = [trajs[k * limit : (k + 1) * limit] for k in range(len(forks))]
            return played, agreed, [_user_tokens(f) for f in forks]
        for _ in range(limit):
            going = [k for k in range(len(forks)) if not agreed[k]]
            if not going:
                break
            memos = [self._memory_text(played[k], starts[k])[0] if self.mode == "sequential" else None
                     for k in going]  # fmt: skip
            for k, traj in zip(going, self._play([forks[k] for k in going], memos), strict=True):
                played[k].append(traj)
                agreed[k] = adaptive and agree(played[k], starts[k])
        return played, agreed, [_user_tokens(f) for f in forks]

    def _select(
        self,
        played: Sequence[Trajectory],
        start: int,
        messages: Sequence[dict[str, Any]],
        draft: tuple[str, tuple | None, int] | None = None,
    ) -> PolicyChoice:
        """The first message to commit among ``played`` (rehearsals from ``messages``, of which ``start``) and how
        it was chosen; with ``choose="draft"`` or ``"outcome"``, ``draft`` is the policy's own message ``(text,
        plan or None where it is no candidate, tokens)``. No action (the policy acts itself) where nothing is a
        candidate or the draft's plan stands."""
        candidates = _candidates(played, start)
        stats: dict[str, Any] = {
            "use": "select",
            "rehearsals": len(played),
            "candidates": len(candidates),
            "rehearsal_tokens": sum(rehearsal_tokens(t) for t in played),
            "judge_tokens": 0,
        }
        if draft is not None:
            stats["draft_tokens"] = draft[2]
        if not candidates and (draft is None or draft[1] is None):
            return PolicyChoice(None, {**stats, "choice": "fallback", "chosen": None, "votes": 0})
        if self.choose == "outcome":
            return self._by_outcome(candidates, played, start, draft, stats)
        votes = Counter(plan for _, _, plan in candidates)
        if draft is not None and draft[1] is not None:
            votes[draft[1]] += 1
            if votes[draft[1]] == max(votes.values()):  # the policy's own move stands unless outvoted
                # Not the draft's text: the policy acts as it would at budget 0 (its own generation in the
                # rollout's batch), so a kept draft is exactly budget 0's move, whatever batch numerics did.
                how = "draft" if votes[draft[1]] > 1 or not candidates else "draft-tie"
                return PolicyChoice(None, {**stats, "choice": how, "chosen": 0, "votes": votes[draft[1]]})
        top = max(votes.values())
        tied = [c for c in candidates if votes[c[2]] == top]  # in rehearsal order
        pick = None
        if self.choose == "judge" and len(votes) > 1:
            pick, stats["judge_tokens"] = self._verdict(candidates, played, start, messages)
            how = "judge" if pick is not None else "judge->agreement"
        elif len({c[2] for c in tied}) > 1 and self.judge is not None and draft is None:
            pick, stats["judge_tokens"] = self._verdict(tied, played, start, messages)
            how = "tie->judge" if pick is not None else "tie->earliest"
        else:
            how = "tie->earliest" if len({c[2] for c in tied}) > 1 else "agreement"
        index, text, plan = pick if pick is not None else tied[0]
        stats["rehearsal_tokens"] += stats["judge_tokens"]
        return PolicyChoice(text, {**stats, "choice": how, "chosen": index + 1, "votes": votes[plan]})

    def _by_outcome(
        self,
        candidates: Sequence[tuple[int, str, tuple]],
        played: Sequence[Trajectory],
        start: int,
        draft: tuple[str, tuple | None, int] | None,
        stats: dict[str, Any],
    ) -> PolicyChoice:
        """(choose="outcome") The first message whose rehearsals most often reached an answer with no error
        result; the draft's plan gets half a point, so it stands on a tie and where no rehearsal reached one."""
        reached = {k: _outcome(played[k], start).reached_answer for k, _, _ in candidates}
        score: Counter = Counter({plan: 0.0 for _, _, plan in candidates})
        for k, _, plan in candidates:
            score[plan] += reached[k]
        votes = Counter(plan for _, _, plan in candidates)
        plan_of_draft = draft[1] if draft is not None else None
        if plan_of_draft is not None:
            score[plan_of_draft] += 0.5
            votes[plan_of_draft] += 1
        stats["reached"] = sum(reached.values())
        best = max(score.values())
        if plan_of_draft is not None and score[plan_of_draft] == best:  # as in "draft": the policy acts itself
            return PolicyChoice(None, {**stats, "choice": "draft", "chosen": 0, "votes": votes[plan_of_draft]})
        # Among plans as good, the one more rehearsals began with, then the earliest.
        index, text, plan = max((c for c in candidates if score[c[2]] == best), key=lambda c: (votes[c[2]], -c[0]))
        return PolicyChoice(text, {**stats, "choice": "outcome", "chosen": index + 1, "votes": votes[plan]})

    def _drafts(
        self, observations: Sequence[Any], infos: Sequence[dict[str, Any]], sampling: SamplingConfig | None = None
    ) -> list[tuple[str, tuple | None, int]]:
        """(choose="draft" or "outcome") The policy's own next message in each env, as it would act now: its
        text, its plan (None where it is no candidate) and the tokens it took. An LM policy drafts all envs in one
        batched call with ``sampling`` (default its own); a text policy drafts through a copy (its episode state
        stays as it is)."""
        if self._is_lm:
            conversations = [(info["messages"], info["tools"]) for info in infos]
            gens = self.policy.act_batch(conversations, sampling or self.policy.sampling)
            texts, tokens = [g.text for g in gens], [len(g.token_ids) for g in gens]
        else:
            texts = [copy.deepcopy(self.policy).act(obs, info) for obs, info in zip(observations, infos, strict=True)]
            tokens = [0] * len(texts)
        return [(t, _draft_plan(t, info["tools"]), n) for t, info, n in zip(texts, infos, tokens, strict=True)]

    def _verdict(
        self, candidates: Sequence[tuple], played: Sequence[Trajectory], start: int, messages: Sequence[dict[str, Any]]
    ) -> tuple[tuple | None, int]:
        """The judge's pick among ``candidates`` (None: an unusable verdict) and the tokens it generated."""
        request = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        lines = [outcome_line(j, _outcome(played[k], start), 120) for j, (k, _, _) in enumerate(candidates, 1)]
        prompt = _JUDGE_PROMPT.format(request=request, rehearsals="\n".join(lines))
        sampling = None
        if is_lm_policy(self.judge):
            sampling = replace(self.judge.sampling, temperature=0.0, max_new_tokens=self.judge_tokens)
        gen = self.judge.act([{"role": "user", "content": prompt}], (), sampling)
        number = re.search(r"\d+", gen.text or "")
        n = int(number.group()) if number else 0
        return (candidates[n - 1] if 1 <= n <= len(candidates) else None), len(gen.token_ids)

    def _play(self, forks: Sequence[RehearsalFork], memos: Sequence[str | None]) -> list[Trajectory]:
        """One rehearsal on each fork (all in one ``collect`` call); ``memos[j]``: the note fork j's actor sees."""
        backend = BackendSpec.self_imagined_as(self.env_role_mode)
        blind = {"grounding": "none", "on_invalid": "end"}
        envs = [make_env(fork.sibling(), backend=backend, imaginer=self.imaginer, imagination=blind) for fork in forks]
        self._round += 1
        seed = self.seed + 1000 * self._round
        notes = {id(env): memo for env, memo in zip(envs, memos, strict=True)}
        if self._is_lm:
            sampling = replace(self.rehearsal_sampling or self.policy.sampling, temperature=self.temperature, seed=seed)
            actor: Any = _Noted(self.policy, notes)
            return collect(
                envs,
                actor,
                len(envs),
                sampling=sampling,
                seed=seed,
                progress=False,
                desc="rehearsal",
                env_role_sampling=self.rehearsal_sampling,
            )
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


def _user_tokens(fork: RehearsalFork) -> int:
    """Tokens the fork's imagined user generated (tau2, where the user is part of the world), else 0."""
    return fork.user.tokens if fork.user is not None else 0


def _outcome(trajectory: Trajectory, start: int) -> RehearsalOutcome:
    return condense(trajectory.messages, start, truncated=trajectory.truncated)


def _two_agree(outcomes: Sequence[RehearsalOutcome]) -> bool:
    plans = [o.plan() for o in outcomes]
    return len(set(plans)) < len(plans)


def _plans_agree(played: Sequence[Trajectory], start: int) -> bool:
    """(memory) Two rehearsals reached the same plan: calls in order and final answer."""
    return _two_agree([_outcome(t, start) for t in played])


def _candidates(played: Sequence[Trajectory], start: int) -> list[tuple[int, str, tuple]]:
    """(select) ``(rehearsal index, first message text, its plan)`` of each rehearsal whose first message the
    deterministic checks did not reject (a rejected one fails for real too)."""
    out = []
    for k, traj in enumerate(played):
        first = first_step(traj.messages, start)
        if first is not None and not any(call.rejected for call in first[1].calls):
            out.append((k, first[0], first[1].plan()))
    return out


def _draft_plan(text: str, tools: Sequence[Any]) -> tuple | None:
    """The plan of a message not yet sent (as `first_step` would read it once run), or None where
    it would fail for real whatever comes back: it does not parse, or it calls an undeclared tool."""
    parsed = parse_calls(text, tool_names_of(tools))
    if parsed.errors or any(call.name not in tool_names_of(tools) for call in parsed.calls):
        return None
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if parsed.calls:
        message["tool_calls"] = tool_calls_to_openai(parsed.calls)
    return condense([message], 0).plan()


def _first_messages_agree(played: Sequence[Trajectory], start: int) -> bool:
    """(select) Two candidate rehearsals began with the same message."""
    plans = [plan for _, _, plan in _candidates(played, start)]
    return len(set(plans)) < len(plans)
