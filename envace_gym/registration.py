"""The one place where envs, suites and backends are registered.

Everything is registered by ``"module:attr"`` strings (Gymnasium's entry points): importing the core
imports neither ``envace_gym.envs`` nor ``envace_gym.agents``; a benchmark's upstream package is imported
only when one of its suites or envs is used.
"""

from __future__ import annotations

import gymnasium as gym

from .backends import backend_names, register_backend
from .suites import register_suite, register_suite_family, suite_names

__all__ = ["BUILTIN_DOMAINS", "ENV_IDS", "VECTOR_ENTRY_POINTS", "register_all"]

BUILTIN_DOMAINS = ("bank", "files", "retail", "travel")

#: Gymnasium id -> entry point.
ENV_IDS = {
    "EnvACE-ToolCall-v0": "envace_gym.env:ToolCallEnv",
    "EnvACE-BFCL-v0": "envace_gym.envs.bfcl:BFCLEnv",
    "EnvACE-Tau2-v0": "envace_gym.envs.tau2:Tau2Env",
}

#: Gymnasium id -> native vector env (``gym.make_vec(id, num_envs)``; other ids vectorize with ``sync``/``async``).
VECTOR_ENTRY_POINTS = {"EnvACE-ToolCall-v0": "envace_gym.vector:make_vector"}


def register_all() -> None:
    """Register the builtin suites and backends, the benchmark suite families and the env ids (idempotent)."""
    if "builtin" not in suite_names():
        register_suite("builtin", "envace_gym.envs.builtin:load_mix", info="envace_gym.envs.builtin:info_mix")
    for domain in BUILTIN_DOMAINS:
        if f"builtin/{domain}" not in suite_names():
            register_suite(
                f"builtin/{domain}",
                f"envace_gym.envs.builtin:load_{domain}",
                info=f"envace_gym.envs.builtin:info_{domain}",
            )
        if f"builtin/{domain}" not in backend_names():
            register_backend(f"builtin/{domain}", f"envace_gym.envs.builtin.{domain}:make_backend")
    # Public benchmarks: their suites are bfcl/<category> and tau2/<domain>.
    # (each with a cheap info function, for `envace list`)
    register_suite_family(
        "bfcl",
        "envace_gym.envs.bfcl.categories:CATEGORIES",
        "envace_gym.envs.bfcl:load_suite",
        "envace_gym.envs.bfcl:suite_info",
    )
    register_suite_family(
        "tau2",
        "envace_gym.envs.tau2.domains:DOMAINS",
        "envace_gym.envs.tau2:load_suite",
        "envace_gym.envs.tau2:suite_info",
    )
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, vector_entry_point=VECTOR_ENTRY_POINTS.get(env_id))
