"""envace-gym: Gymnasium environments for tool-calling LM agents, on real or imagined tool backends."""

from __future__ import annotations

import gymnasium as gym

from .backends import Backend, PythonBackend, ReplayBackend, Toolkit, ToolResult, make_backend, register_backend, tool
from .calls import CallError, ErrorCode, ParsedAction, ToolCall, format_calls, parse_calls
from .rehearsal import ImagineRequest, SelfRehearsalEnv
from .suites import load_suite, register_suite, suite_names
from .tasks import RefCall, RefTurn, Task, TaskFormatError, TaskSuite
from .tools import SchemaError, ToolSpec

__version__ = "0.1.0"

BUILTIN_DOMAINS = ("bank", "files", "retail", "travel")

register_suite("builtin", "envace_gym.envs.builtin:load_mix")
for _domain in BUILTIN_DOMAINS:
    register_suite(f"builtin/{_domain}", f"envace_gym.envs.builtin:load_{_domain}")
    register_backend(f"builtin/{_domain}", f"envace_gym.envs.builtin.{_domain}:make_backend")

if "EnvACE-ToolCall-v0" not in gym.registry:
    gym.register(id="EnvACE-ToolCall-v0", entry_point="envace_gym.env:ToolCallEnv")


def _benchmark_suite(module: str, name: str) -> TaskSuite:
    import importlib

    return importlib.import_module(module).load_suite(name)


def _register_benchmarks() -> None:
    # Public benchmarks: their upstream packages (bfcl-eval, tau2) are imported only when a suite loads.
    from functools import partial

    from .envs.bfcl.categories import CATEGORIES
    from .envs.tau2.domains import DOMAINS

    for category in CATEGORIES:
        register_suite(f"bfcl/{category}", partial(_benchmark_suite, "envace_gym.envs.bfcl", category))
    for domain in DOMAINS:
        register_suite(f"tau2/{domain}", partial(_benchmark_suite, "envace_gym.envs.tau2", domain))
    if "EnvACE-BFCL-v0" not in gym.registry:
        gym.register(id="EnvACE-BFCL-v0", entry_point="envace_gym.envs.bfcl:BFCLEnv")
    if "EnvACE-Tau2-v0" not in gym.registry:
        gym.register(id="EnvACE-Tau2-v0", entry_point="envace_gym.envs.tau2:Tau2Env")


_register_benchmarks()


def __getattr__(name: str):
    # `envace_gym.agents.LMPolicy` works after a plain `import envace_gym`, without the core importing
    # the agents side (torch, transformers) up front.
    if name in ("agents", "envs"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "SelfRehearsalEnv",
    "ImagineRequest",
    "Backend",
    "PythonBackend",
    "ReplayBackend",
    "ToolResult",
    "Toolkit",
    "tool",
    "make_backend",
    "register_backend",
    "CallError",
    "ErrorCode",
    "ParsedAction",
    "ToolCall",
    "format_calls",
    "parse_calls",
    "load_suite",
    "register_suite",
    "suite_names",
    "RefCall",
    "RefTurn",
    "Task",
    "TaskFormatError",
    "TaskSuite",
    "SchemaError",
    "ToolSpec",
]
