"""The one composition point of an env and its backend: `make_env`. A real backend is the env's own; an
imagined one (``self``, ``self-inline``, ``simulator``) is the env on real backends wrapped in
``SelfRehearsalEnv`` with the imagination mode the spec names, its env role played by whom `env_role_for`
says.

Every caller composes here: the CLI, the trainer, the vector env, the fidelity report, the TRL and verl
integrations, benchmarks and examples. `make_env` builds the env from its id, or takes one already built (a
trainer's ``env_factory`` returns one on real backends), and composes it with the backend. It takes the env
role explicitly (``imaginer=``) or the candidates (``policy=``, ``simulator=``) and lets `env_role_for`
choose; `check_imaginer` is the check it runs first (the vector env runs it once, before its workers).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from .backends.spec import IMAGINED_KINDS, BackendSpec, parse_backend_spec
from .env import EnvBackend
from .imagination.protocol import Imaginer
from .imagination.wrapper import SelfRehearsalEnv

__all__ = ["check_imaginer", "env_role_for", "make_env"]


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


def check_imaginer(
    backend: EnvBackend | BackendSpec | None,
    imaginer: Imaginer | None = None,
    imagination: dict[str, Any] | None = None,
) -> BackendSpec:
    """The spec of ``backend`` (``real`` for None, the env's default, or a ``task -> Backend`` callable);
    ``ValueError`` if it is imagined and has no ``imaginer``, or is real and has one or ``imagination``."""
    spec = BackendSpec("real") if backend is None or callable(backend) else parse_backend_spec(backend)
    if spec.imagined and imaginer is None:
        raise ValueError(
            f"backend={str(spec)!r} imagines tool results: pass imaginer=<policy> (anything with imagine(request))"
        )
    if not spec.imagined and (imaginer is not None or imagination):
        kinds = ", ".join(repr(k) for k in IMAGINED_KINDS)
        raise ValueError(f"imaginer= and imagination= apply only to backend={kinds}; got backend={str(spec)!r}")
    return spec


def make_env(
    env: str | gym.Env = "EnvACE-ToolCall-v0",
    *,
    backend: EnvBackend | BackendSpec | None = None,
    imaginer: Imaginer | None = None,
    policy: Imaginer | None = None,
    simulator: Imaginer | None = None,
    imagination: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """An env whose tool calls ``backend`` answers: ``gym.make(env, backend=..., **env_kwargs)`` for an id,
    or ``env`` itself when it is already built; under an imagined backend, that env on its real backends
    wrapped in ``SelfRehearsalEnv(env, imaginer, mode=<the spec's mode>, **imagination)``.

    Args:
        env: a registered Gymnasium id, or an env already built on real backends (the wrapper keeps them for
            grounding; a built env is returned as it is under a backend it answers itself).
        backend: a spec string or `BackendSpec` (``real``, ``replay:PATH``,
            ``cache:PATH``, ``mcp:...``; imagined: ``self``, ``self-inline``, ``simulator``), or a callable
            ``task -> Backend``; None: the env's own default (``real``).
        imaginer: who imagines tool results under an imagined backend (anything with ``imagine(request)``,
            e.g. an ``LMPolicy``); or leave it to `env_role_for`, given ``policy`` and ``simulator``.
        policy: the actor, the env role under ``self``/``self-inline`` (ignored by other backends).
        simulator: a frozen model, the env role under ``simulator`` (ignored by other backends).
        imagination: more ``SelfRehearsalEnv`` kwargs (``grounding``, ``on_invalid``, ``real_fraction``,
            ``log``, ...).
        env_kwargs: ``gym.make``'s kwargs (``suite``, ``split``, ``max_turns``, ``max_episode_steps``, ...);
            none for a built env.

    A bad spec, an imagined one with no env role, ``imaginer``/``imagination`` with a real one, or
    ``env_kwargs`` with a built env raise ``ValueError`` (before any env is built: it may start tool servers).

    Example: ``make_env("EnvACE-ToolCall-v0", backend="self", policy=policy, suite="builtin/bank")``.
    """
    if imaginer is None and (policy is not None or simulator is not None):
        imaginer = env_role_for(backend, policy, simulator)
    spec = check_imaginer(backend, imaginer, imagination)
    if isinstance(env, str):
        if backend is not None:
            env_kwargs["backend"] = spec.env_backend if isinstance(backend, str | BackendSpec) else backend
        env = gym.make(env, **env_kwargs)
    elif env_kwargs:
        raise ValueError(f"make_env: {sorted(env_kwargs)} are gym.make's kwargs; an env already built takes none")
    if not spec.imagined:
        return env
    return SelfRehearsalEnv(env, imaginer, mode=spec.imagination_mode, **(imagination or {}))
