"""Test-time private rehearsal, its env side: where an agent rehearses a task before its one real attempt.

* `fork`: `RehearsalFork`, a private, reference-free replay of a live episode from its current state (each
  rehearsal is one, wrapped in ``SelfRehearsalEnv`` so the policy imagines its tool results);
  `DetachedBackend`, the stand-in backend of its snapshot (nothing real is reached);
* `user`: `ImaginedUser`, the rehearsing policy playing the user where the user is part of the world
  (tau2's rehearsal forks use it instead of the user model that reads the task's scenario).

Why a package of its own, here: rehearsal is a use of imagination, not part of it. The env role's package
(`envace_gym.imagination`) answers tool calls; these blocks set up a blind episode that the env role then
plays, so they import it and it never imports them. They are Gymnasium envs and a user answerer with no
model inside, built on the env's own hooks (``ToolCallEnv.fork``, ``prepare_rehearsal``,
``rehearsal_metadata``), so they live in the core, torch-free, beside those hooks: the benchmark envs
(``envs/``) and any policy can use them without the agents package. The model side (sampling the
rehearsals, condensing them into a memory, choosing the message to commit: ``PrivateRehearsal``) is
`envace_gym.agents.rehearsal`.
"""

from .fork import DetachedBackend, RehearsalFork
from .user import ImaginedUser

__all__ = ["RehearsalFork", "DetachedBackend", "ImaginedUser"]
