"""The one composition point of an env and its backend: a real backend is the env's own, an imagined one
(``self``, ``self-inline``, ``simulator``) is the env on real backends wrapped in ``SelfRehearsalEnv`` with
the imagination mode the spec names, its env role played by whom `env_role_for` says.

Every caller composes here: the CLI, the trainer, the vector env, the fidelity report, the TRL and verl
integrations, benchmarks and examples. `make_env` builds the env and composes; `rehearse`
composes an env already built (a trainer's ``env_factory`` returns one on real backends). Either takes the
env role explicitly (``imaginer=``) or the candidates (``policy=``, ``simulator=``) and lets
`env_role_for` choose.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from .backends.spec import IMAGINED_KINDS, BackendSpec, parse_backend_spec
from .env import EnvBackend
from .imagination.protocol import Imaginer
from .imagination.wrapper import SelfRehearsalEnv

__all__ = ["check_imaginer", "env_role_for", "make_env", "rehearse"]


def env_role_for(
    backend: EnvBackend | BackendSpec | None, policy: Imaginer | None = None, simulator: Imaginer | None = None
) -> Imaginer | None:
    """Who plays the env role under ``backend``: ``policy`` itself for ``self`` and ``self-inline`` (world
    rehearsal: the actor imagines its own tool results), ``simulator`` (a separate, frozen model) for
    ``simulator``, and nobody (None) for a backend that answers by itself (``real``, ``replay:``, ``cache:``,
    ``mcp:``, a callable). ``ValueError`` where the one it needs is not given."""
    spec = BackendSpec("real") if backend is None or callable(backend) else parse_backend_spec(backend)
    role = policy if spec.self_imagined else simulator if spec.imagined else None
    if spec.imagined and role is None:
        needs = "policy=<the actor> (it imagines its own results)" if spec.self_imagined else "simulator=<a model>"
        raise ValueError(f"backend={str(spec)!r} needs {needs}")
    return role


def rehearse(
    env: gym.Env,
    backend: str | BackendSpec,
    imaginer: Imaginer | None = None,
    *,
    policy: Imaginer | None = None,
    simulator: Imaginer | None = None,
    **rehearsal: Any,
) -> gym.Env:
    """``env`` as ``backend`` answers its tool calls: unchanged for a kind the env builds itself (``real``,
    ``replay:``, ``cache:``, ``mcp:``), else ``SelfRehearsalEnv(env, imaginer, mode=<the spec's mode>,
    **rehearsal)`` (``rehearsal``: ``grounding``, ``on_invalid``, ``real_fraction``, ``log``, ...). Without
    ``imaginer``, `env_role_for` picks it from ``policy`` and ``simulator``.

    ``env`` must run on real backends under imagination: the wrapper keeps them for grounding. A bad spec,
    an imagined one with no env role, or ``imaginer``/``rehearsal`` with a real one raise ``ValueError``.
    """
    if imaginer is None and (policy is not None or simulator is not None):
        imaginer = env_role_for(backend, policy, simulator)
    spec = check_imaginer(backend, imaginer, rehearsal)
    if not spec.imagined:
        return env
    return SelfRehearsalEnv(env, imaginer, mode=spec.imagination_mode, **rehearsal)


def check_imaginer(
    backend: EnvBackend | BackendSpec | None, imaginer: Imaginer | None = None, rehearsal: dict[str, Any] | None = None
) -> BackendSpec:
    """The spec of ``backend`` (``real`` for None, the env's default, or a ``task -> Backend`` callable);
    ``ValueError`` if it is imagined and has no ``imaginer``, or is real and has one or ``rehearsal``."""
    spec = BackendSpec("real") if backend is None or callable(backend) else parse_backend_spec(backend)
    if spec.imagined and imaginer is None:
        raise ValueError(
            f"backend={str(spec)!r} imagines tool results: pass imaginer=<policy> (anything with imagine(request))"
        )
    if not spec.imagined and (imaginer is not None or rehearsal):
        kinds = ", ".join(repr(k) for k in IMAGINED_KINDS)
        raise ValueError(f"imaginer= and rehearsal= apply only to backend={kinds}; got backend={str(spec)!r}")
    return spec


def make_env(
    env_id: str = "EnvACE-ToolCall-v0",
    *,
    backend: EnvBackend | BackendSpec | None = None,
    imaginer: Imaginer | None = None,
    policy: Imaginer | None = None,
    simulator: Imaginer | None = None,
    rehearsal: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """``gym.make(env_id, backend=..., **env_kwargs)``, composed with ``backend`` by `rehearse`.

    Args:
        env_id: a registered Gymnasium id.
        backend: a spec string or `BackendSpec` (``real``, ``replay:PATH``,
            ``cache:PATH``, ``mcp:...``; imagined: ``self``, ``self-inline``, ``simulator``), or a callable
            ``task -> Backend``; None: the env's own default (``real``).
        imaginer: who imagines tool results under an imagined backend (anything with ``imagine(request)``,
            e.g. an ``LMPolicy``); or leave it to `env_role_for`, given ``policy`` and ``simulator``.
        policy: the actor, the env role under ``self``/``self-inline`` (ignored by other backends).
        simulator: a frozen model, the env role under ``simulator`` (ignored by other backends).
        rehearsal: more ``SelfRehearsalEnv`` kwargs (``grounding``, ``on_invalid``, ``real_fraction``, ...).
        env_kwargs: ``gym.make``'s kwargs (``suite``, ``split``, ``max_turns``, ``max_episode_steps``, ...).

    Example: ``make_env("EnvACE-ToolCall-v0", backend="self", policy=policy, suite="builtin/bank")``.
    """
    if imaginer is None and (policy is not None or simulator is not None):
        imaginer = env_role_for(backend, policy, simulator)
    spec = check_imaginer(backend, imaginer, rehearsal)  # before building the env: it may start tool servers
    if backend is not None:
        env_kwargs["backend"] = spec.env_backend if isinstance(backend, str | BackendSpec) else backend
    return rehearse(gym.make(env_id, **env_kwargs), spec, imaginer, **(rehearsal or {}))
