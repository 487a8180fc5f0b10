"""envace-gym: Gymnasium environments for tool-calling LM agents, on real or imagined tool backends."""

from __future__ import annotations

import gymnasium as gym

from .backends import Backend, PythonBackend, ReplayBackend, ToolResult, Toolkit, make_backend, register_backend, tool
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
