"""The rollout engine: step a batch of envs in lockstep, one batched generation per step.

Every env's conversation is kept as a role-tagged :class:`~.chat.TokenStream`; its engine KV cache is
kept between turns, so a turn encodes only the tokens that the env added (tool results, the next user
message). The result is a list of :class:`Trajectory`: token ids with a role per token, the logprobs that
generated the actor tokens, the reward and its components, the env-role samples. TRL (``env_mask``),
verl (``response_mask``) and our trainer read the same record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm.auto import tqdm

from envace_gym.agents.eval.evaluate import EpisodeResult
from envace_gym.agents.lm.chat import ROLES, TokenStream
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy

from envace_gym.rehearsal import EnvRoleSample

from .batching import BatchingImaginer, step_concurrently

__all__ = ["EnvRoleSample", "Trajectory", "collect", "save_trajectories", "load_trajectories"]


@dataclass
class Trajectory:
    """One episode as tokens: ``roles[i]`` tags ``token_ids[i]`` (prompt/actor/external/env_role/user)."""

    task_id: str
    domain: str
    token_ids: list[int]
    roles: list[str]
    logprobs: list[float]
    reward: float
    components: dict[str, float]
    success: bool
    truncated: bool
    turns: int
    calls_ok: int = 0
    calls_failed: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list, repr=False)
    env_role_samples: list[EnvRoleSample] = field(default_factory=list, repr=False)
    policy: str = ""

    def mask(self, *roles: str) -> list[int]:
        """1 where the token's role is one of ``roles`` (e.g. ``mask("actor")`` is the loss mask)."""
        wanted = set(roles)
        return [1 if r in wanted else 0 for r in self.roles]

    @property
    def actor_tokens(self) -> int:
        return sum(self.mask("actor"))

    def to_result(self) -> EpisodeResult:
        return EpisodeResult(
            self.task_id,
            self.domain,
            self.reward,
            self.success,
            self.components,
            self.turns,
            self.truncated,
            self.calls_ok,
            self.calls_failed,
            self.messages,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        data["env_role_samples"] = [EnvRoleSample(**s) for s in data.get("env_role_samples", [])]
        traj = cls(**data)
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
    out = []
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_dict(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a trajectory: {exc}") from None
    return out


@dataclass
class _Slot:
    env: gym.Env
    index: int
    episode: int = -1
    stream: TokenStream = field(default_factory=TokenStream)
    tools: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    calls_ok: int = 0
    calls_failed: int = 0
    prefix_len: int = 0  # shared system+tools head of the first prompt
    samples: list[EnvRoleSample] = field(default_factory=list)
    rehearsal: Any = None  # the SelfRehearsalEnv in this env's wrapper chain, if any

    @property
    def key(self) -> str:
        return f"slot{self.index}/ep{self.episode}"


def _rehearsal_wrapper(env: gym.Env) -> Any:
    """The first wrapper in ``env``'s chain that imagines tool results (it has ``set_actor_context`` and
    ``imaginer``, as ``SelfRehearsalEnv``); Gymnasium 1.x wrappers do not forward attribute lookups."""
    while env is not None:
        if getattr(type(env), "set_actor_context", None) is not None:
            return env
        env = getattr(env, "env", None)
    return None


def _step_all(slots: Sequence[_Slot], actions: Sequence[str], pool: ThreadPoolExecutor | None) -> list[tuple]:
    """``env.step`` for every slot. Where two or more envs share an env role that can batch
    (``imagine_batch``), their steps run in threads so that its requests go out as one batch."""
    groups: dict[int, list[int]] = {}
    for i, slot in enumerate(slots):
        imaginer = slot.rehearsal.imaginer if slot.rehearsal is not None else None
        if hasattr(imaginer, "imagine_batch"):
            groups.setdefault(id(imaginer), []).append(i)
    originals = {i: slots[i].rehearsal.imaginer for members in groups.values() if len(members) > 1 for i in members}
    if pool is None or not originals:
        return [slot.env.step(a) for slot, a in zip(slots, actions)]
    batchers = {
        key: BatchingImaginer(originals[members[0]], len(members))
        for key, members in groups.items()
        if len(members) > 1
    }
    batcher_of = {i: batchers[id(imaginer)] for i, imaginer in originals.items()}
    try:
        for i, batcher in batcher_of.items():
            slots[i].rehearsal.imaginer = batcher
        steps = [
            (lambda slot=slot, a=a: slot.env.step(a), batcher_of.get(i))
            for i, (slot, a) in enumerate(zip(slots, actions))
        ]
        return step_concurrently(pool, steps)
    finally:
        for i, original in originals.items():
            slots[i].rehearsal.imaginer = original


def _splice_inline(stream: TokenStream, sample: EnvRoleSample) -> bool:
    """Append an inline env-role answer to the actor's stream as generated: the tool-message header the
    policy encoded (``external``), then the sampled result tokens (``env_role``). False (nothing appended)
    when the sample does not continue the stream; the next render then re-encodes that message."""
    ids, text = sample.prompt_ids, sample.prompt_text
    n = len(stream.ids)
    if not text.startswith(stream.text) or ids[:n] != stream.ids or not sample.completion_ids:
        return False
    stream.extend(ids[n:], "external", text[len(stream.text) :])
    stream.extend(sample.completion_ids, "env_role", sample.completion_text, sample.logprobs)
    return True


def _as_env_list(envs: Sequence[gym.Env] | gym.vector.VectorEnv) -> list[gym.Env]:
    if isinstance(envs, gym.vector.SyncVectorEnv):
        return list(envs.envs)  # stepped directly: conversations need per-env control of resets
    if isinstance(envs, gym.vector.VectorEnv):
        raise TypeError(
            "collect() takes a list of envs or a SyncVectorEnv; AsyncVectorEnv sub-envs live in other processes"
        )
    envs = list(envs)
    if not envs:
        raise ValueError("collect() needs at least one env")
    return envs


def collect(
    envs: Sequence[gym.Env] | gym.vector.VectorEnv,
    policy: LMPolicy,
    episodes: int,
    sampling: SamplingConfig | None = None,
    task_ids: Sequence[str] | None = None,
    seed: int = 0,
    progress: bool = True,
    desc: str = "rollout",
) -> list[Trajectory]:
    """Run ``episodes`` episodes over ``envs`` in lockstep and return their trajectories (in episode order).

    Args:
        envs: the envs to step (each runs one episode at a time; ``len(envs)`` is the batch size).
        policy: the :class:`LMPolicy` whose engine generates every actor turn.
        episodes: how many episodes in total.
        sampling: overrides ``policy.sampling``; ``sampling.seed`` makes the whole collection reproducible.
        task_ids: task of episode ``i`` is ``task_ids[i % len]``; default: ``reset(seed=seed + i)`` draws one.
        seed: base seed for env resets.
    """
    sampling = sampling or policy.sampling
    slots = [_Slot(env, i) for i, env in enumerate(_as_env_list(envs))]
    results: dict[int, Trajectory] = {}
    next_episode = 0
    bar = tqdm(total=episodes, desc=desc, disable=not progress, unit="ep")
    import torch

    generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else None

    def start(slot: _Slot) -> bool:
        nonlocal next_episode
        if next_episode >= episodes:
            return False
        slot.episode, next_episode = next_episode, next_episode + 1
        options = {"task_id": task_ids[slot.episode % len(task_ids)]} if task_ids else None
        _, info = slot.env.reset(seed=seed + slot.episode, options=options)
        slot.info, slot.tools = info, info["tools"]
        slot.stream = TokenStream()
        slot.calls_ok = slot.calls_failed = 0
        slot.samples = []
        ids, slot.prefix_len = policy.encode_prompt(info["messages"], slot.tools)
        slot.stream.extend(ids, "prompt", policy.prompt_text(info["messages"], slot.tools))
        return True

    def finish(slot: _Slot, reward: float, truncated: bool, info: dict[str, Any]) -> None:
        policy.engine.drop(slot.key)
        s = slot.stream
        results[slot.episode] = Trajectory(
            task_id=info["task_id"],
            domain=info.get("domain", ""),
            token_ids=s.ids,
            roles=s.roles,
            logprobs=s.logprobs,
            reward=float(reward),
            components=info.get("reward_components", {}),
            success=bool(info.get("success", False)),
            truncated=truncated,
            turns=info.get("turn", 0),
            calls_ok=slot.calls_ok,
            calls_failed=slot.calls_failed,
            messages=info["messages"],
            env_role_samples=slot.samples,
            policy=policy.name,
        )
        bar.update(1)

    for slot in slots:
        slot.rehearsal = _rehearsal_wrapper(slot.env)
    # Threads only to batch the env role across envs (see _step_all); generation stays in one thread.
    pool = (
        ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="envace-step")
        if len(slots) > 1 and any(s.rehearsal for s in slots)
        else None
    )
    active = [s for s in slots if start(s)]
    while active:
        # Episodes that would overflow the model's context end here, truncated, with reward 0.
        for slot in [s for s in active if len(s.stream.ids) + sampling.max_new_tokens > policy.max_context]:
            finish(slot, 0.0, True, slot.info)
            active.remove(slot)
            if start(slot):
                active.append(slot)
        if not active:
            break
        gens = policy.generate_ids(
            [s.stream.ids for s in active],
            keys=[s.key for s in active],
            sampling=sampling,
            generator=generator,
            prefix_lens=[s.prefix_len for s in active],
        )
        for slot, gen in zip(active, gens):
            slot.stream.extend(gen.token_ids, "actor", gen.text + gen.stop_text, gen.logprobs)
            if slot.rehearsal is not None:  # an inline env role continues this exact context
                slot.rehearsal.set_actor_context(slot.stream.ids, slot.stream.text, slot.key)
        outcomes = _step_all(active, [g.text for g in gens], pool)
        still = []
        for slot, (_, reward, terminated, truncated, info) in zip(active, outcomes):
            spliced = True
            for sample in info.get("rehearsal", []):
                slot.samples.append(sample)
                if sample.mode == "inline" and sample.valid and spliced:
                    spliced = _splice_inline(slot.stream, sample)
            slot.calls_ok, slot.calls_failed = info["call_counts"]["ok"], info["call_counts"]["failed"]
            slot.info = info
            if terminated or truncated:
                finish(slot, reward, truncated, info)
                if start(slot):
                    still.append(slot)
                continue
            role = "user" if info["messages"][-1]["role"] == "user" else "external"
            slot.stream.append_render(policy.chat, policy.prompt_text(info["messages"], slot.tools), role)
            still.append(slot)
        active = still
    bar.close()
    if pool is not None:
        pool.shutdown()
    return [results[i] for i in sorted(results)]
