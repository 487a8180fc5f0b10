"""The one episode loop: every episode, of a scripted or a language-model policy, runs through `collect`.

`collect` steps a batch of envs in lockstep. What acts is either

* an **LM policy** (`LMPolicy`): one batched engine call per step for
  all envs. Every env's `Conversation` keeps its role-tagged
  tokens (and the engine keeps its KV cache between turns, so a turn encodes only the tokens that the env
  added: tool results, the next user message); or
* **text policies** (`TextPolicy`: ``reset()``, ``act(obs, info)``), one
  instance per env since they keep per-episode state: a single one for a single env, else a list with one
  per env. Their trajectories carry no tokens.

One loop (`_play`) serves both, reading top to bottom: act, step, record; what differs between them
(how a turn is produced, what is kept of its tokens) is behind two small classes, ``_LMActors`` and
``_TextActors``.

Either way the result is a list of `Trajectory`: the `EpisodeResult` (reward, success, call
counts, messages) and, for an LM policy, the token-level record: token ids with a role per token, the
logprobs that generated them, the env-role samples. TRL (``env_mask``), verl (``response_mask``) and our
trainer read the same record. `evaluate` and
`play_episode` are thin calls of `collect`.

**The env role is a half-step the loop drives.** Each step, every env begins its step (``halfstep.begin_step``
through its action wrappers to ``ToolCallEnv.begin_step``: parse, checks, real calls) and hands back its imagined
calls, model users' turns and model judges' verdicts as requests (``halfstep.begin_steps``); the loop owns the
rounds: it adds each inline request's actor context (the token stream it holds, by env index), answers every
request of the round in one engine call per model (``halfstep.answer_round``: ``imagine_batch`` with
``env_role_sampling`` passed in, never set on the policy) and hands the answers back
(``halfstep.continue_steps``) until no env waits, top to bottom with no callback into the policy; then each env
ends its step through its wrappers (``env.step(action)``, the same action); a
process vector env's workers do the same, so the env role is batched across processes too (`remote`). We chose
this over an asyncio design (an episode coroutine per env, with one engine scheduler batching actor and env-role
requests): the env's hooks (``on_calls``, ``on_answer``, benchmark envs' overrides) and its backends are
synchronous, and an asyncio loop would need them all async (or threads again) to suspend at an imagined call; the
half-step needs one seam in the env (calls that can wait for an answer) and keeps each loop a straight sequence:
act, step, record. What asyncio would add, actor and env-role requests of different envs sharing one engine call, is
left for when an engine can run mixed batches that pay for it.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from tqdm.auto import tqdm

from envace_gym.agents.lm.chat import ROLES, TokenStream
from envace_gym.agents.lm.conversation import ActorContext, Conversation
from envace_gym.agents.lm.protocols import is_lm_policy
from envace_gym.agents.rollout.hooks import PolicyChoice, PolicyHooks, PolicyNote, TurnContext
from envace_gym.agents.rollout.remote import RemoteEnv, RemoteEnvs
from envace_gym.imagination import EnvRoleAnswer, EnvRoleSample, Imaginer, ModelRole
from envace_gym.imagination.halfstep import (
    EnvGroup,
    LocalEnvs,
    answer_round,
    begin_steps,
    continue_steps,
    imaginer_of,
    reset_envs,
    roles_of,
)
from envace_gym.jsonl import read_jsonl
from envace_gym.vector import ToolCallVectorEnv

if TYPE_CHECKING:
    import torch

    from envace_gym.agents.lm.engine import SamplingConfig
    from envace_gym.agents.lm.policy import LMPolicy
    from envace_gym.agents.lm.protocols import TextPolicy

__all__ = [
    "EpisodeResult",
    "EnvRoleSample",
    "PolicyChoice",
    "PolicyHooks",
    "PolicyNote",
    "Trajectory",
    "TurnContext",
    "collect",
    "save_trajectories",
    "load_trajectories",
]


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
    # an imagined episode scored against what it showed (the env's bound reward): its reward against the real
    # world's values, for the share of rewards the binding changed; None otherwise
    reward_reference: float | None = None
    # The episode's calls by what answered them (``info["call_counts"]``; `envace_gym.backends.ledger`'s kinds):
    # executed on a real backend, taken from a recorded log or replay cache, answered by the env role, and
    # replayed on a fresh backend only to compute the reward.
    calls_live: int = 0
    calls_logged: int = 0
    calls_imagined: int = 0
    calls_verifier: int = 0
    aborted: str | None = None  # why the env ended the episode early (``info["aborted"]``), if it did

    @classmethod
    def from_info(cls, info: dict[str, Any], reward: float, truncated: bool) -> EpisodeResult:
        """The result of an episode whose last ``info`` (with its call counts) is ``info``."""
        return cls(
            task_id=info["task_id"],
            domain=info.get("domain", ""),
            reward=float(reward),
            success=bool(info.get("success", False)),
            components=info.get("reward_components", {}),
            turns=info.get("turn", 0),
            truncated=bool(truncated),
            calls_ok=info["call_counts"]["ok"],
            calls_failed=info["call_counts"]["failed"],
            messages=info["messages"],
            reward_reference=info.get("reward_reference"),
            calls_live=info["call_counts"].get("live", 0),
            calls_logged=info["call_counts"].get("logged", 0),
            calls_imagined=info["call_counts"].get("imagined", 0),
            calls_verifier=info["call_counts"].get("verifier", 0),
            aborted=info.get("aborted"),
        )


def _from_episode(name: str) -> property:
    return property(attrgetter(f"episode.{name}"), doc=f"``episode.{name}``")


@dataclass
class Trajectory:
    """One episode: its `EpisodeResult` (``episode``) and the token-level record of an LM policy.

    ``roles[i]`` tags ``token_ids[i]`` (``prompt``/``actor``/``external``/``env_role``/``user``);
    ``logprobs[i]`` is the logprob that generated it (0.0 for tokens nobody sampled). The episode's fields
    read through: ``traj.reward``, ``traj.success``, ``traj.task_id``, ... A scripted policy's trajectory has
    empty token lists.

    **Env-role tokens are trained from one place only.** An inline env role (``SelfRehearsalEnv(...,
    mode="inline")``) writes each tool result inside the actor's own context, so its answer is recorded twice:
    spliced into ``token_ids`` tagged ``env_role`` (with its logprobs), and as an `EnvRoleSample` in
    ``env_role_samples``. The rule:

    * env-role training samples come **only** from ``env_role_samples``: each one RL sample with its own
      prompt (``prompt_ids``) and completion (``completion_ids``, ``logprobs``), for either mode;
    * ``env_role``-tagged tokens in ``token_ids`` are **context for the actor**, like ``external`` tool
      results: masked out of the actor's loss (`actor_mask`) and never trained from the stream.

    So a trainer that trains the actor on ``actor_mask()`` and the env role on ``env_role_samples`` counts
    every generated token exactly once.
    """

    episode: EpisodeResult
    token_ids: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_role_samples: list[EnvRoleSample] = field(default_factory=list, repr=False)
    policy: str = ""
    notes: list[dict[str, Any]] = field(default_factory=list, repr=False)  # PolicyNote: at, text, stats

    task_id = _from_episode("task_id")
    domain = _from_episode("domain")
    reward = _from_episode("reward")
    success = _from_episode("success")
    components = _from_episode("components")
    turns = _from_episode("turns")
    truncated = _from_episode("truncated")
    calls_ok = _from_episode("calls_ok")
    calls_failed = _from_episode("calls_failed")
    messages = _from_episode("messages")

    def mask(self, *roles: str) -> list[int]:
        """1 where the token's role is one of ``roles``."""
        wanted = set(roles)
        return [1 if r in wanted else 0 for r in self.roles]

    def actor_mask(self) -> list[int]:
        """The actor's loss mask: 1 on the tokens the actor generated, 0 elsewhere (``env_role`` included)."""
        return self.mask("actor")

    @property
    def actor_tokens(self) -> int:
        return sum(self.actor_mask())

    def to_dict(self) -> dict[str, Any]:
        """The JSONL record: ``{"episode": {...}, "policy", "token_ids", "roles", "logprobs", "env_role_samples"}``,
        and ``"notes"`` when the policy added any."""
        episode = asdict(self.episode)
        if episode["reward_reference"] is None:  # only an imagined episode scored by its bound checklist has one
            del episode["reward_reference"]
        out = {
            "episode": episode,
            "policy": self.policy,
            "token_ids": list(self.token_ids),
            "roles": list(self.roles),
            "logprobs": list(self.logprobs),
            "env_role_samples": [s.to_dict() for s in self.env_role_samples],
        }
        if self.notes:
            out["notes"] = [dict(n) for n in self.notes]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Read `to_dict`'s record."""
        data = dict(data)
        if "episode" not in data:
            raise ValueError("a trajectory record holds its episode under 'episode' (see Trajectory.to_dict)")
        episode = EpisodeResult(**data.pop("episode"))
        samples = [EnvRoleSample.from_dict(s) for s in data.pop("env_role_samples", [])]
        traj = cls(episode, env_role_samples=samples, **data)
        if not (len(traj.token_ids) == len(traj.roles) == len(traj.logprobs)):
            raise ValueError(f"trajectory {traj.task_id}: token_ids, roles and logprobs differ in length")
        bad = set(traj.roles) - set(ROLES)
        if bad:
            raise ValueError(f"trajectory {traj.task_id}: unknown roles {sorted(bad)}")
        return traj


def save_trajectories(trajectories: Iterable[Trajectory], path: str | Path) -> Path:
    """One JSON object per line (JSON, never pickle)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for t in trajectories:
            fh.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")
    return path


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read `save_trajectories`' file; a bad line raises ``ValueError("file:line: ...")``, a torn last
    line (a write a killed run did not finish) is skipped with a warning."""
    out = []
    for lineno, record in read_jsonl(path):  # a torn last line (a killed run) is skipped with a warning
        try:
            out.append(Trajectory.from_dict(record))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}:{lineno}: not a trajectory: {exc}") from None
    return out


# ---------------------------------------------------------------------------------------------- the loop
_RUNS = itertools.count()  # numbers collect() calls, so that their engine cache keys never collide


@dataclass
class _Slot:
    """One env of the batch and the episode it is playing."""

    env: gym.Env | RemoteEnv  # a RemoteEnv stand-in resets only; its steps go through the group
    index: int
    actor: TextPolicy | PolicyHooks | None = None  # this env's text policy; None under an LM policy
    imaginer: Imaginer | None = None  # who answers its env-role requests in the loop; None: the env itself
    roles: dict[str, ModelRole] = field(default_factory=dict)  # the model user/judge the loop asks; else the env's own
    episode: int = -1
    obs: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    conversation: Conversation | None = None  # under an LM policy: the episode's tokens
    tools: list[dict[str, Any]] = field(default_factory=list)
    samples: list[EnvRoleSample] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)  # the episode's PolicyNotes, with their place
    run: int = 0  # which collect() call: a nested one (rehearsal inside a policy's hook) shares the engine

    @property
    def key(self) -> str:
        """The engine's KV-cache key of this slot's conversation, unique across concurrent collect() calls."""
        return f"run{self.run}/slot{self.index}/ep{self.episode}"

    def seen(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The conversation as the policy sees it: each note with text as a system message where it was given
        (a note without text only keeps statistics)."""
        shown = [n for n in self.notes if n["text"]]
        if not shown:
            return messages
        out = list(messages)
        for note in reversed(shown):
            out.insert(note["at"], {"role": "system", "content": note["text"]})
        return out

    def note_text(self) -> str | None:
        return "\n\n".join(n["text"] for n in self.notes if n["text"]) or None

    def trajectory(self, reward: float, truncated: bool, info: dict[str, Any], policy: str) -> Trajectory:
        s = self.conversation.stream if self.conversation is not None else TokenStream()
        episode = EpisodeResult.from_info(info, reward, truncated)
        return Trajectory(episode, s.ids, s.roles, s.logprobs, self.samples, policy=policy, notes=self.notes)


def _as_env_list(envs: Sequence[gym.Env] | gym.vector.VectorEnv) -> tuple[list[gym.Env | RemoteEnv], EnvGroup]:
    """The envs to play and the group that steps them: a list as given, or the sub-envs of a vector env that
    steps them in this process (``gym.make_vec("EnvACE-ToolCall-v0")``'s native ``ToolCallVectorEnv``, or a
    ``SyncVectorEnv``), stepped directly (`LocalEnvs`); or stand-ins
    for the sub-envs of any other vector env (``AsyncVectorEnv``), driven through its batch API
    (`RemoteEnvs`)."""
    if isinstance(envs, gym.vector.SyncVectorEnv | ToolCallVectorEnv):
        env_list = list(envs.envs)  # stepped directly: conversations need per-env control of resets
    elif isinstance(envs, gym.vector.VectorEnv):
        remote = RemoteEnvs(envs)
        return [remote.env(i) for i in range(remote.num_envs)], remote
    else:
        env_list = list(envs)
    if not env_list:
        raise ValueError("collect() needs at least one env")
    return env_list, LocalEnvs(env_list)


def _text_policies(policy: Any, n_envs: int) -> list[TextPolicy]:
    """One text policy per env: ``policy`` itself for one env, else the list given."""
    actors = list(policy) if isinstance(policy, list | tuple) else [policy]
    if len(actors) != n_envs:
        raise ValueError(
            f"{len(actors)} text policies for {n_envs} envs: a text policy keeps per-episode state, "
            "so give one per env (a list as long as envs)"
        )
    for actor in actors:
        acting = _acting(actor)
        if not (callable(getattr(acting, "act", None)) and callable(getattr(acting, "reset", None))):
            raise TypeError(f"{acting!r} is neither an LM policy nor a text policy (reset(), act(obs, info))")
    return actors


def _acting(actor: Any) -> Any:
    """The policy that acts: the one a `PolicyHooks` holds, else ``actor`` itself."""
    return actor.policy if isinstance(actor, PolicyHooks) else actor


def _hook(actor: Any, name: str) -> Callable[..., list] | None:
    """``actor``'s hook ``name`` where it is a `PolicyHooks` that overrides it, else None."""
    return getattr(actor, name) if isinstance(actor, PolicyHooks) and actor.overrides(name) else None


def _imaginer(env: gym.Env | RemoteEnv, group: EnvGroup, index: int, lm: LMPolicy | None) -> Imaginer | None:
    """Who answers env ``index``'s env-role requests in the loop: its own imagination wrapper's imaginer (in this
    process), or the LM policy for a worker's whose imaginer is a copy of that policy (its ``name``); None
    where nothing is imagined, or a worker's env role answers in its own process."""
    if isinstance(group, RemoteEnvs):
        return lm if lm is not None and group.imaginer_names[index] == lm.name else None
    return imaginer_of(env)


def _env_role_stream(sampling: SamplingConfig | None) -> torch.Generator | None:
    """The rollout's env-role sampling stream: one per ``collect`` call, seeded from the env role's sampling
    seed (``seed + 1``: never the actor's stream), so that a rollout draws the same whatever ran before it;
    None where the env role's sampling is the imaginers' own."""
    if sampling is None or sampling.seed is None:
        return None
    import torch

    return torch.Generator().manual_seed(sampling.seed + 1)


def _roles(env: gym.Env | RemoteEnv) -> dict[str, ModelRole]:
    """The model user and judge whose requests the loop answers (one engine call per model and round); none
    where the env has none, or a worker's user and judge answer in its own process."""
    return {} if isinstance(env, RemoteEnv) else roles_of(env)


def _with_note(slot: _Slot) -> dict[str, Any]:
    """A text policy's ``info``: the env's, plus ``info["note"]`` (the episode's notes) when it has any."""
    note = slot.note_text()
    return slot.info if note is None else {**slot.info, "note": note}


def _policy_name(actor: Any) -> str:
    if isinstance(actor, PolicyHooks):
        return actor.name or _policy_name(actor.policy)
    return getattr(actor, "name", None) or type(actor).__name__


class _Episodes:
    """What both loops share: which episode a slot plays next (its task, seed and reset), the finished
    trajectories, ``on_episode`` and the progress bar."""

    def __init__(self, episodes: int, task_ids, seed, on_episode, bar) -> None:
        self.episodes, self.task_ids, self.seed, self.on_episode, self.bar = episodes, task_ids, seed, on_episode, bar
        self.next = 0
        self.results: dict[int, Trajectory] = {}
        # how a slot's env is reset (`_play` sets the loop's: a model's opening turn answered like a step's)
        self.reset: Callable[[_Slot, int | None, dict | None], tuple[Any, dict]] = lambda slot, seed, options: (
            slot.env.reset(seed=seed, options=options)
        )

    def start(self, slot: _Slot) -> bool:
        """Reset ``slot``'s env for the next episode; False when every episode has started."""
        if self.next >= self.episodes:
            return False
        slot.episode, self.next = self.next, self.next + 1
        options = {"task_id": self.task_ids[slot.episode % len(self.task_ids)]} if self.task_ids else None
        if slot.actor is not None:
            _acting(slot.actor).reset()
        seed = None if self.seed is None else self.seed + slot.episode
        slot.obs, slot.info = self.reset(slot, seed, options)
        slot.tools = slot.info["tools"]
        slot.conversation, slot.samples, slot.notes = None, [], []
        return True

    def finish(self, slot: _Slot, traj: Trajectory, info: dict[str, Any]) -> None:
        self.results[slot.episode] = traj
        if self.on_episode is not None:
            self.on_episode(traj, info)
        self.bar.update(1)

    def in_order(self) -> list[Trajectory]:
        return [self.results[i] for i in sorted(self.results)]


def _add_notes(slots: Sequence[_Slot], notes: Iterable[PolicyNote | None]) -> None:
    for slot, note in zip(slots, notes, strict=True):
        if note is not None:
            slot.notes.append({"at": len(slot.info["messages"]), "text": note.text, **note.stats})


def _chosen(slots: Sequence[_Slot], choices: Sequence[PolicyChoice | None]) -> list[str | None]:
    """Take in a ``choose_actions`` hook's choices: their statistics as notes without text; the actions."""
    _add_notes(slots, [PolicyNote("", c.stats) if c is not None and c.stats else None for c in choices])
    return [c.action if c is not None else None for c in choices]


def _ended(slot: _Slot, outcome: tuple) -> bool:
    """Take in a step's outcome; True when it ended the episode."""
    obs, _, terminated, truncated, info = outcome
    slot.obs, slot.info = obs, info
    return bool(terminated or truncated)


def collect(
    envs: Sequence[gym.Env] | gym.vector.VectorEnv,
    policy: LMPolicy | TextPolicy | PolicyHooks | Sequence[TextPolicy | PolicyHooks],
    episodes: int,
    sampling: SamplingConfig | None = None,
    task_ids: Sequence[str] | None = None,
    seed: int | None = 0,
    progress: bool = True,
    desc: str = "rollout",
    on_episode: Callable[[Trajectory, dict[str, Any]], None] | None = None,
    env_role_sampling: SamplingConfig | None = None,
) -> list[Trajectory]:
    """Run ``episodes`` episodes over ``envs`` in lockstep and return their trajectories (in episode order).

    Args:
        envs: the envs to step: a list, or a vector env (``gym.make_vec("EnvACE-ToolCall-v0", num_envs=n)``,
            sync or async); each env runs one episode at a time, so the number of envs is the batch size.
            Envs that share an env role send each step's requests as one batch. An in-process vector env's
            sub-envs are stepped directly (reset it before stepping it yourself again); a process-based one
            (``AsyncVectorEnv``) is driven through its batch API: all workers step at once, each episode
            starts with a masked reset, and under an LM policy the workers' env-role requests come back to
            be answered here, batched across processes (see `envace_gym.agents.rollout.remote`).
        policy: an `LMPolicy` (its engine generates every actor turn, for all envs in one call), or
            text policies: one ``TextPolicy`` for a single env, else a list with one per env (each is
            ``reset()`` at the start of each of its episodes); or a `PolicyHooks` (or one per env)
            holding such a policy, whose hooks the loop calls.
        episodes: how many episodes in total.
        sampling: (LM policy) overrides ``policy.sampling``; ``sampling.seed`` makes the collection reproducible.
        task_ids: task of episode ``i`` is ``task_ids[i % len]``; default: ``reset(seed=seed + i)`` draws one.
        seed: base seed for env resets (episode ``i`` resets with ``seed + i``); None: resets are not seeded.
        on_episode: called with each finished trajectory and the episode's last ``info``.
        env_role_sampling: how the env role samples (passed to each imaginer's ``imagine_batch``); None: each
            imaginer's own default (``policy.sampling`` for an LM policy).

    **Policy hooks**: a `PolicyHooks` holds the policy that acts and may add a note before a user turn
    (``prepare_turns``) or commit a message it chose (``choose_actions``); see its docstring.
    """
    hooks = policy if isinstance(policy, PolicyHooks) else None
    acting = hooks.policy if hooks is not None else policy
    lm = acting if is_lm_policy(acting) else None
    env_list, group = _as_env_list(envs)
    actors = [None] * len(env_list) if lm is not None else _text_policies(policy, len(env_list))
    run = next(_RUNS)
    slots = [
        _Slot(env, i, actor, _imaginer(env, group, i, lm), _roles(env), run=run)
        for i, (env, actor) in enumerate(zip(env_list, actors, strict=True))
    ]
    env_role_rng = _env_role_stream(env_role_sampling)
    if lm is not None:
        ctx = TurnContext(sampling or lm.sampling, env_role_sampling, env_role_rng)
        side: _LMActors | _TextActors = _LMActors(lm, hooks, ctx)
    else:
        side = _TextActors(TurnContext(None, env_role_sampling, env_role_rng))
    bar = tqdm(total=episodes, desc=desc, disable=not progress, unit="ep")
    book = _Episodes(episodes, task_ids, seed, on_episode, bar)
    try:
        _play(side, slots, group, book)
    finally:
        bar.close()
    return book.in_order()


def _play(side: _LMActors | _TextActors, slots: list[_Slot], group: EnvGroup, book: _Episodes) -> None:
    """The loop: ``side`` acts for every active env (an LM policy: one engine call), the envs step (their
    env-role requests answered in one call per imaginer and round, with the rollout's env-role sampling
    and stream), each outcome is recorded; an env whose episode ended starts the next one in its place in
    the batch."""
    imaginers, roles = [s.imaginer for s in slots], [s.roles for s in slots]
    env_role = (side.ctx.env_role_sampling, side.ctx.env_role_rng)
    book.reset = functools.partial(_reset, group, imaginers, roles, env_role)
    active = [s for s in slots if book.start(s)]
    side.begin(active)
    while active:
        active = _restart_overflowing(side, active, book)
        if not active:
            break
        actions = side.act(active)
        indices = [s.index for s in active]
        # The envs' steps, their requests answered round by round: one call per model and round.
        pending = begin_steps(group, indices, actions, imaginers, roles)
        while pending:
            contexts = side.contexts(pending)
            answers = answer_round(pending, imaginers, roles, *env_role, contexts=contexts)
            side.heard({i: answers[i] for i in contexts})
            pending = continue_steps(group, answers)
        outcomes = group.step(indices, actions)  # ends each step through its env's wrappers
        still, fresh, turned = [], [], []
        for slot, outcome in zip(active, outcomes, strict=True):
            side.observe(slot, outcome[4])
            if _ended(slot, outcome):
                _finish(side, book, slot, outcome[1], outcome[3], outcome[4])
                if book.start(slot):  # its place in the batch is kept, so sampling stays as it was
                    still.append(slot)
                    fresh.append(slot)
                continue
            if slot.info["messages"][-1]["role"] == "user":
                turned.append(slot)
            still.append(slot)
        side.prepare(turned)  # a new user turn: the policy may add a note before it acts on it
        side.render([s for s in still if all(s is not f for f in fresh)])
        side.begin(fresh)
        active = still


def _reset(group: EnvGroup, imaginers: list, roles: list, env_role: tuple, slot: _Slot, seed, options) -> tuple:
    """``slot``'s env reset; where a model plays a part of its world (tau2's model user, whose opening turn
    starts the episode), in halves, its requests answered here as a step's are (never inside ``reset``)."""
    return reset_envs(group, {slot.index: (slot.env, seed, options)}, imaginers, roles, *env_role)[slot.index]


def _restart_overflowing(side: _LMActors | _TextActors, active: list[_Slot], book: _Episodes) -> list[_Slot]:
    """Episodes that would overflow the model's context end here, truncated, with reward 0; their envs
    start their next episodes at the end of the batch."""
    overflow = side.overflowing(active)
    if not overflow:
        return active
    for slot in overflow:
        _finish(side, book, slot, 0.0, True, slot.info)
    restarted = [s for s in overflow if book.start(s)]
    side.begin(restarted)
    return [s for s in active if all(s is not o for o in overflow)] + restarted


def _finish(
    side: _LMActors | _TextActors, book: _Episodes, slot: _Slot, reward: float, truncated: bool, info: dict
) -> None:
    side.finish(slot)
    book.finish(slot, slot.trajectory(reward, truncated, info, side.name(slot)), info)


class _LMActors:
    """How an LM policy acts in the loop: every env's actor turn in one engine call, each env's tokens in its
    `Conversation`; the hooks of a `PolicyHooks` for the
    whole batch at once."""

    def __init__(self, lm: LMPolicy, hooks: PolicyHooks | None, ctx: TurnContext) -> None:
        import torch

        assert ctx.sampling is not None
        self.lm, self.ctx, self.sampling = lm, ctx, ctx.sampling
        seed = ctx.sampling.seed
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.prepare_hook, self.choose_hook = _hook(hooks, "prepare_turns"), _hook(hooks, "choose_actions")
        self.policy_name = _policy_name(hooks if hooks is not None else lm)
        self.by_index: dict[int, _Slot] = {}  # env index -> its slot: whose conversation a request continues

    def name(self, slot: _Slot) -> str:
        return self.policy_name

    def prepare(self, slots: list[_Slot]) -> None:
        """The policy's hook at a new user turn (one call for the batch)."""
        if self.prepare_hook is not None and slots:
            _add_notes(slots, self.prepare_hook([s.env for s in slots], [s.info for s in slots], self.ctx))

    def begin(self, slots: list[_Slot]) -> None:
        """New episodes: their notes, then their prompts start their conversations."""
        self.prepare(slots)
        for slot in slots:
            self.by_index[slot.index] = slot
            slot.conversation = Conversation(self.lm, slot.key, slot.tools)
            slot.conversation.begin(slot.seen(slot.info["messages"]))

    def overflowing(self, slots: list[_Slot]) -> list[_Slot]:
        return [s for s in slots if not _conversation(s).fits(self.sampling.max_new_tokens)]

    def act(self, slots: list[_Slot]) -> list[str]:
        """Each env's message: the one the policy's hook chose (committed), else one engine call for the rest."""
        chosen = self._choose(slots)
        acting = [_conversation(s) for s, text in zip(slots, chosen, strict=True) if text is None]
        gens = iter(
            self.lm.generate_ids(
                [c.stream.ids for c in acting],
                keys=[c.key for c in acting],
                sampling=self.sampling,
                generator=self.generator,
                prefix_lens=[c.prefix_len for c in acting],
            )
            if acting
            else []
        )
        actions = []
        for slot, text in zip(slots, chosen, strict=True):
            if text is None:
                text = _conversation(slot).take(next(gens))
            else:
                _conversation(slot).commit(slot.seen(slot.info["messages"]), text)
            actions.append(text)
        return actions

    def _choose(self, slots: list[_Slot]) -> list[str | None]:
        if self.choose_hook is None:
            return [None] * len(slots)
        choices = self.choose_hook([s.env for s in slots], [s.obs for s in slots], [s.info for s in slots], self.ctx)
        return _chosen(slots, choices)

    def contexts(self, requests: dict[int, Any]) -> dict[int, ActorContext]:
        """The actor's context of each env whose env role is asked inline (its exact tokens and cache key,
        which stay on this side, by env index)."""
        return {
            i: _conversation(self.by_index[i]).context()
            for i, r in requests.items()
            if r.role == "env_role" and r.mode == "inline"
        }

    def heard(self, answers: dict[int, Any]) -> None:
        """A round's inline answers (those asked with a context): an env's next inline call of this step
        continues the one it just heard."""
        for i, answer in answers.items():
            if isinstance(answer, EnvRoleAnswer):
                _conversation(self.by_index[i]).heard(answer)

    def observe(self, slot: _Slot, info: dict[str, Any]) -> None:
        """The step's env-role samples; inline answers continue the actor's stream."""
        samples = info.get("env_role_samples", [])
        slot.samples.extend(samples)
        _conversation(slot).splice(samples)

    def render(self, slots: list[_Slot]) -> None:
        """Episodes that go on: what their envs added since the actor's turn."""
        for slot in slots:
            role = "user" if slot.info["messages"][-1]["role"] == "user" else "external"
            _conversation(slot).render(slot.seen(slot.info["messages"]), role)

    def finish(self, slot: _Slot) -> None:
        self.lm.engine.drop(slot.key)


class _TextActors:
    """How text policies act in the loop: each env's own policy, its hooks for its own env (a text policy
    reads its notes from ``info["note"]``)."""

    def __init__(self, ctx: TurnContext) -> None:
        self.ctx = ctx

    def name(self, slot: _Slot) -> str:
        return _policy_name(slot.actor)

    def contexts(self, requests: dict[int, Any]) -> dict[int, Any]:
        return {}  # a text policy's env role is asked with no context from the loop

    def heard(self, answers: dict[int, Any]) -> None:
        pass

    def prepare(self, slots: list[_Slot]) -> None:
        """Each policy's own hook, one env at a time."""
        for slot in slots:
            hook = _hook(slot.actor, "prepare_turns")
            if hook is not None:
                _add_notes([slot], hook([slot.env], [slot.info], self.ctx))

    def begin(self, slots: list[_Slot]) -> None:
        self.prepare(slots)

    def overflowing(self, slots: list[_Slot]) -> list[_Slot]:
        return []  # no context to overflow

    def act(self, slots: list[_Slot]) -> list[str]:
        """Each env's message: the one its policy's hook chose, else its policy's ``act``."""
        actions = []
        for slot in slots:
            chooser = _hook(slot.actor, "choose_actions")
            chosen = (
                None if chooser is None else _chosen([slot], chooser([slot.env], [slot.obs], [slot.info], self.ctx))[0]
            )
            actions.append(chosen if chosen is not None else _acting(slot.actor).act(slot.obs, _with_note(slot)))
        return actions

    def observe(self, slot: _Slot, info: dict[str, Any]) -> None:
        slot.samples.extend(info.get("env_role_samples", []))

    def render(self, slots: list[_Slot]) -> None:
        pass  # a text policy reads the observation itself

    def finish(self, slot: _Slot) -> None:
        pass


def _conversation(slot: _Slot) -> Conversation:
    assert slot.conversation is not None, "an LM episode's conversation begins with the episode"
    return slot.conversation
