"""``RehearsalFork``: a private, reference-free replay of an episode from where it stands, for rehearsal.

Test-time private rehearsal (``envace_gym.agents.PrivateRehearsal``) plays imagined episodes of the task at
hand before the agent acts for real. Each one must start from the live episode's current state, touch
nothing real, and know nothing a test-time agent could not know. `RehearsalFork` is that start: built
from a live env, it keeps a snapshot (``env.fork``) whose task is ``task.blind()`` (no reference, no reward
bases, no metadata but the keys ``env.rehearsal_metadata`` names) and whose backend is
`DetachedBackend` (the live episode's backend is neither copied nor called). Each
`RehearsalFork.reset` forks the snapshot again with the backend given in ``options["backend"]``,
which is how `SelfRehearsalEnv` hands over its imagined backend:
``SelfRehearsalEnv(RehearsalFork(env, obs), policy, grounding="none")`` is one rehearsal env, reset once
per rehearsal. Its episodes end unscored (``env.scored = False``: reward 0, no ``success``).

Two env hooks adapt the snapshot to a benchmark: ``env.rehearsal_metadata`` names the task metadata the
blind task keeps (BFCL keeps ``holdout``, so held-out tools are offered from their turn, as live), and
``env.prepare_rehearsal(user)`` lets an env whose user is part of the world (tau2) hand the user's turns to
an `ImaginedUser` (``user=``: the model that plays it).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from ..backends.base import Backend, ToolResult
from ..calls import ErrorCode, ToolCall
from ..tasks import Task
from .user import ImaginedUser

if TYPE_CHECKING:
    from ..env import PendingStep, ToolCallEnv

__all__ = ["DetachedBackend", "RehearsalFork"]


class DetachedBackend:
    """The snapshot's stand-in backend: every call is an error, nothing real is reached. Each rehearsal's
    reset replaces it with the imagined backend, so it answers only if a fork is stepped without one."""

    def __init__(self, task: Task | None = None) -> None:
        self.call_count = 0
        self.reset(task)

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.tools = list(task.tool_specs) if task is not None else []

    def execute(self, call: ToolCall) -> ToolResult:
        self.call_count += 1
        return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, "rehearsal fork: no backend answers here")

    def state(self) -> dict[str, Any]:
        return {}

    def state_hash(self) -> str:
        return ""

    def copy(self) -> DetachedBackend:
        return self


class RehearsalFork(gym.Env[str, str]):
    """Imagined episodes of ``env``'s task from ``env``'s current state (see the module docstring).

    Args:
        env: the live env (a ``ToolCallEnv`` or a wrapper around one) at the state to rehearse from.
        obs: what that state's last ``reset``/``step`` returned; each rehearsal's ``reset`` returns it again,
            with an ``info`` built from the snapshot (so it holds nothing of the reference).
        user: the model that plays the user where the env's user is part of the world (anything with
            ``act(messages, tools)``, e.g. the rehearsing ``LMPolicy``); wrapped in an
            `ImaginedUser` (`user`, whose ``tokens`` count what it
            generated in all this fork's rehearsals). Envs with scripted user turns ignore it; tau2 needs it.
    """

    def __init__(self, env: gym.Env, obs: str, user: Any = None) -> None:
        live = env.unwrapped
        if live.task is None or live.done:
            raise RuntimeError("RehearsalFork needs an episode in progress (reset the env first)")
        task = live.task.blind(keep=getattr(live, "rehearsal_metadata", ()))
        self._snapshot = live.fork(backend=DetachedBackend(task), task=task)
        self._snapshot.scored = False  # its forks end unscored: no reward, no reference read
        self.user = ImaginedUser(user) if user is not None else None
        self._snapshot.prepare_rehearsal(self.user)
        self._obs = obs
        self.current = None  # the fork this rehearsal steps
        self._begun: tuple[tuple[Any, Any], tuple[str, dict[str, Any]]] | None = None  # a reset begun (begin_reset)
        self.observation_space, self.action_space = live.observation_space, live.action_space
        # What SelfRehearsalEnv reads from the env it wraps.
        self.max_result_chars = live.max_result_chars

    def sibling(self) -> RehearsalFork:
        """Another rehearsal env from the same snapshot (rehearsals played side by side each need one)."""
        other = copy.copy(self)
        other.current = None
        other._np_random = None
        other._begun = None
        return other

    @property
    def task(self) -> Task:
        """The blind task every rehearsal plays."""
        return self._snapshot.task

    def real_backend_for(self, task: Task) -> Backend:
        raise RuntimeError("rehearsal never reaches a real backend (no state replay, no grounding at test time)")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """A new rehearsal from the snapshot; ``options["backend"]`` answers its calls (required: a rehearsal
        has no backend of its own). Other options are refused: the task is fixed."""
        begun, self._begun = self._begun, None
        if begun is not None and begun[0] == (seed, options):
            return begun[1]  # the end of a reset begun with the same seed and options
        super().reset(seed=seed)
        options = dict(options or {})
        backend = options.pop("backend", None)
        if backend is None:
            raise ValueError("RehearsalFork.reset needs options['backend'] (wrap it in SelfRehearsalEnv)")
        if options:
            raise ValueError(f"RehearsalFork replays one fixed state; options {sorted(options)} do not apply")
        self.current = self._snapshot.fork(backend=backend)
        return self._obs, self.current.build_info([], [])

    def begin_reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> PendingStep:
        """A rehearsal's start asks no model (its opening is the live episode's): it resets here, and ``reset``
        with the same seed and options ends it (see ``ToolCallEnv.begin_reset``)."""
        from ..env import PendingStep

        outcome = self.reset(seed=seed, options=options)
        self._begun = ((seed, options), outcome)
        return PendingStep(0, [])

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._playing().step(action)

    def begin_step(self, action: str) -> PendingStep:
        """The fork's half-step (see ``ToolCallEnv.begin_step``), so rehearsals batch their env role too."""
        return self._playing().begin_step(action)

    def continue_step(self, answers: Sequence[Any]) -> PendingStep:
        return self._playing().continue_step(answers)

    def _playing(self) -> ToolCallEnv:
        if self.current is None:
            raise RuntimeError("call reset() first")
        return self.current

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.current.messages if self.current is not None else self._snapshot.messages
