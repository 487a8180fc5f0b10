"""``SelfRehearsalEnv``: the same env, with tool results imagined by an imaginer in the environment role (the
policy itself in EnvACE's world rehearsal, or any other, a script included)."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym

from ..backends.ledger import LEDGER
from ..backends.replay import ToolLog
from ..calls import ToolCall
from .backend import ImaginedBackend
from .prompt import format_execution_result
from .protocol import EnvRoleAnswer, Imaginer, ImagineRequest

__all__ = ["SelfRehearsalEnv", "RealResultImaginer", "ON_INVALID"]

ON_INVALID = ("end", "error_observation")


class SelfRehearsalEnv(gym.Wrapper):
    """The same env, with tool results imagined by ``imaginer`` in the environment role.

    Args:
        env: a ``ToolCallEnv`` (or a wrapper around one).
        imaginer: the env role, anything with ``imagine(ImagineRequest)``: a policy in its environment role
            (``envace_gym.agents.LMPolicy``), or a script that returns each result as data (a dict, a
            list), which the env formats for ``mode``.
        mode: ``"prompted"`` (a fresh env-role prompt per call, the paper's setting) or ``"inline"`` (the
            result is written as the tool message in the actor's own context; the rollout loop, which
            holds that context, hands it over with each request of its half-step, so the actor's KV cache
            is reused and only the result's tokens are computed). ``grounding`` applies to prompted mode only.
        grounding: ``"reference"`` (few-shot pairs from the task's reference trajectory) or ``"none"``.
        on_invalid: ``"end"`` (an unusable answer ends the episode with reward 0, the paper's rule) or
            ``"error_observation"`` (the agent sees a ``TOOL_EXECUTION_ERROR`` and goes on).
        real_fraction: grounded imagination (see `ImaginedBackend`): this share of the env-role samples
            carries the real backend's answer as ``sample.target``; the actor still sees the imagined one.
        log: grounding from a recorded tool log, with no live call (see `ImaginedBackend`).
        log_targets: give logged calls a supervised target (``sample.target``).

    The wrapper configures and never patches: it owns an `ImaginedBackend` and gives it to the env
    for each episode through ``reset(options={"backend": ...})``; the wrapped env's own configuration is
    left as it was (the same env unwrapped still answers with its own backend). ``info["env_role_samples"]``
    holds the step's `EnvRoleSample` records, so a trainer can treat them as its own RL samples.
    """

    def __init__(
        self,
        env: gym.Env,
        imaginer: Imaginer,
        mode: str = "prompted",
        grounding: str = "reference",
        on_invalid: str = "end",
        max_result_chars: int = 16_384,
        real_fraction: float = 0.0,
        log: ToolLog | None = None,
        log_targets: bool = True,
    ) -> None:
        super().__init__(env)
        if on_invalid not in ON_INVALID:
            raise ValueError(f"on_invalid must be one of {ON_INVALID}, got {on_invalid!r}")
        self.mode, self.on_invalid = mode, on_invalid  # the env role: `imaginer`
        # ImaginedBackend checks mode and grounding.
        base = env.unwrapped
        # An inline result becomes the message verbatim, so it must fit without the env clipping it.
        limit = min(max_result_chars, base.max_result_chars) if mode == "inline" else max_result_chars
        self.imagined = ImaginedBackend(
            imaginer,
            mode=mode,
            grounding=grounding,
            max_result_chars=limit,
            real_backend=base.real_backend_for,
            end_on_failure=on_invalid == "end",
            real_fraction=real_fraction,
            log=log,
            log_targets=log_targets,
        )

    @property
    def imaginer(self) -> Imaginer:
        """Who answers tool calls (a rollout loop reads it to batch the env role across envs)."""
        return self.imagined.imaginer

    @property
    def imaginer_name(self) -> str:
        """The imaginer's ``name`` (or its type's): how a rollout loop in another process tells whether its
        own policy may answer for this wrapper's env role (see ``envace_gym.agents.rollout.remote``)."""
        return getattr(self.imaginer, "name", None) or type(self.imaginer).__name__

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.env.reset(seed=seed, options=self.reset_options(options))

    def reset_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        """The options this wrapper resets the env with: the imagined backend answers the episode (what a
        half-reset, ``halfstep.begin_reset``, applies on the way in)."""
        return {**(options or {}), "backend": self.imagined}

    @property
    def spec(self):  # type: ignore[override]
        """The wrapped env's spec, marked nondeterministic: imagined results are sampled."""
        spec = self.env.spec
        return dataclasses.replace(spec, nondeterministic=True) if spec is not None else None

    def step(self, action: Any):
        """Gymnasium's step (it also ends a half-step begun with the same action, see
        ``ToolCallEnv.begin_step``); ``info["env_role_samples"]`` always holds the step's env-role samples."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        info.setdefault("env_role_samples", [])
        return obs, reward, terminated, truncated, info


class RealResultImaginer:
    """An env role that answers with what the real backend returns: a perfect world model.

    It keeps a shadow real backend in step with the episode. Uses: the interchangeability check (an
    imagined run must then equal the real run), and targets for warm-starting the env role. Each answer
    runs the real tool, so it is booked as a ``live`` call in the call ledger.
    """

    def __init__(self, env: gym.Env) -> None:
        self.env = env.unwrapped
        self._episode = None
        self._shadow: Any = None

    def imagine(self, request: ImagineRequest) -> EnvRoleAnswer:
        base = self.env
        if self._episode != base.episode_index:
            self._episode = base.episode_index
            self._shadow = base.real_backend_for(base.task)
            self._shadow.reset(base.task, seed=0)
        result = self._shadow.execute(ToolCall(request.tool, request.arguments))
        LEDGER.record("live")
        if request.mode == "inline":
            return EnvRoleAnswer(result.to_message_content())
        return EnvRoleAnswer(format_execution_result(result.payload()))
