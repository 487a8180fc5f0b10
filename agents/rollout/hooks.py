"""What a policy may add to `collect`'s loop: hooks, held by an explicit
object beside the policy that acts.

A `PolicyHooks` holds ``policy`` (the policy the loop drives: an LM policy's engine, or a text
policy's ``act``) and overrides either hook; test-time rehearsal, the call verifier and the trainer's
per-group rehearsal are such objects. Nothing is forwarded by attribute: the loop reads ``hooks.policy`` for
acting and calls the hooks it overrides, each with a `TurnContext` that carries the rollout's
sampling (a hook that generates uses it, not the policy's own default).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym

    from envace_gym.agents.lm.engine import SamplingConfig

__all__ = ["PolicyChoice", "PolicyHooks", "PolicyNote", "TurnContext"]


@dataclass
class PolicyNote:
    """What a policy's ``prepare_turns`` hook adds before it acts on a new user turn (see `collect`):
    ``text``, which the policy sees and the env never does, and ``stats``, kept with the text on the
    trajectory (``trajectory.notes``). Test-time private rehearsal gives its rehearsal memory this way."""

    text: str
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyChoice:
    """What a policy's ``choose_actions`` hook decides before an actor turn (see `collect`): ``action``,
    committed as the actor's message instead of one the policy generates (None: it acts as usual), and
    ``stats``, kept on the trajectory as a note without text (``trajectory.notes``), which nobody is shown.
    Test-time private rehearsal in select mode commits the first message of the rehearsal it chose this way."""

    action: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnContext:
    """What the loop tells a hook about the rollout it runs in: ``sampling``, the actor's sampling (None for
    text policies), ``env_role_sampling``, the env role's (None: each imaginer's own), and ``env_role_rng``,
    the rollout's env-role sampling stream (a ``torch.Generator`` seeded from ``env_role_sampling.seed``;
    None: each imaginer's own stream)."""

    sampling: SamplingConfig | None = None
    env_role_sampling: SamplingConfig | None = None
    env_role_rng: Any = None


class PolicyHooks:
    """Base class of an object that adds hooks to the policy it holds (``policy``, the one that acts).

    Override either hook; `overrides` tells the loop which ones to call. ``name`` names the
    trajectories it plays (default: the policy's).

    * ``prepare_turns(envs, infos, ctx) -> list[PolicyNote | None]``: called at each env's first turn and at
      every later user turn, for the envs that reached one (one call for the batch; a text policy: its own
      env). A `PolicyNote`'s text is shown to the policy from then on, as a system message where it was
      given (a text policy: ``info["note"]``); the env never sees it. Test-time private rehearsal gives its
      memory this way.
    * ``choose_actions(envs, observations, infos, ctx) -> list[PolicyChoice | None]``: called before every
      actor turn, for the active envs. A `PolicyChoice` with an ``action`` commits that text as the
      env's actor message instead of generating it (an LM policy: encoded as the actor tokens of an assistant
      message of that text, `assistant_text`, with logprobs 0.0; a text
      policy's ``act`` is skipped); its ``stats`` go onto ``trajectory.notes`` as a note without text, shown
      to nobody. Private rehearsal in select mode commits its chosen rehearsal's first message this way.
    """

    policy: Any
    name: str | None = None  # None: the trajectories carry the policy's name

    def prepare_turns(
        self, envs: Sequence[gym.Env], infos: Sequence[dict[str, Any]], ctx: TurnContext | None = None
    ) -> list[PolicyNote | None]:
        return [None] * len(envs)

    def choose_actions(
        self,
        envs: Sequence[gym.Env],
        observations: Sequence[Any],
        infos: Sequence[dict[str, Any]],
        ctx: TurnContext | None = None,
    ) -> list[PolicyChoice | None]:
        return [None] * len(envs)

    def overrides(self, hook: str) -> bool:
        """Whether this object's class overrides ``hook`` (the loop calls only those)."""
        return getattr(type(self), hook) is not getattr(PolicyHooks, hook)
