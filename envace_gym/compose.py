"""The one composition point of an env and its backend: a real backend is the env's own, an imagined one
(``self``, ``self-inline``, ``simulator``) is the env on real backends wrapped in ``SelfRehearsalEnv`` with
the imagination mode the spec names.

Every caller composes here: the CLI, the trainer, the vector env, the fidelity report, the TRL integration,
benchmarks and examples. :func:`make_env` builds the env and composes; :func:`rehearse` composes an env
already built (a trainer's ``env_factory`` returns one on real backends).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from .backends.spec import IMAGINED_KINDS, BackendSpec, parse_backend_spec
from .env import EnvBackend
from .rehearsal.protocol import Imaginer
from .rehearsal.wrapper import SelfRehearsalEnv

__all__ = ["check_imaginer", "make_env", "rehearse"]


def rehearse(env: gym.Env, backend: str | BackendSpec, imaginer: Imaginer | None = None, **rehearsal: Any) -> gym.Env:
    """``env`` as ``backend`` answers its tool calls: unchanged for a kind the env builds itself (``real``,
    ``replay:``, ``cache:``, ``mcp:``), else ``SelfRehearsalEnv(env, imaginer, mode=<the spec's mode>,
    **rehearsal)`` (``rehearsal``: ``grounding``, ``on_invalid``, ``real_fraction``, ``log``, ...).

    ``env`` must run on real backends under imagination: the wrapper keeps them for grounding. A bad spec,
    an imagined one without ``imaginer``, or ``imaginer``/``rehearsal`` with a real one raise ``ValueError``.
    """
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
    rehearsal: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """``gym.make(env_id, backend=..., **env_kwargs)``, composed with ``backend`` by :func:`rehearse`.

    Args:
        env_id: a registered Gymnasium id.
        backend: a spec string or :class:`~envace_gym.backends.BackendSpec` (``real``, ``replay:PATH``,
            ``cache:PATH``, ``mcp:...``; imagined: ``self``, ``self-inline``, ``simulator``), or a callable
            ``task -> Backend``; None: the env's own default (``real``).
        imaginer: who imagines tool results under an imagined backend (anything with ``imagine(request)``,
            e.g. an ``LMPolicy``).
        rehearsal: more ``SelfRehearsalEnv`` kwargs (``grounding``, ``on_invalid``, ``real_fraction``, ...).
        env_kwargs: ``gym.make``'s kwargs (``suite``, ``split``, ``max_turns``, ``max_episode_steps``, ...).

    Example: ``make_env("EnvACE-ToolCall-v0", backend="self", imaginer=policy, suite="builtin/bank")``.
    """
    spec = check_imaginer(backend, imaginer, rehearsal)  # before building the env: it may start tool servers
    if backend is not None:
        env_kwargs["backend"] = spec.env_backend if isinstance(backend, str | BackendSpec) else backend
    return rehearse(gym.make(env_id, **env_kwargs), spec, imaginer, **(rehearsal or {}))
