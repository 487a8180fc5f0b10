"""envace-gym: Gymnasium environments for tool-calling LM agents, on real or imagined tool backends."""

from __future__ import annotations

from .backends import (
    Backend,
    BackendSpec,
    PythonBackend,
    ReplayBackend,
    Toolkit,
    ToolResult,
    make_backend,
    parse_backend_spec,
    register_backend,
    tool,
)
from .calls import CallError, ErrorCode, ParsedAction, ToolCall, format_calls, parse_calls
from .compose import env_role_for, make_env
from .env import ToolCallEnv
from .imagination import EnvRoleSample, ImagineRequest, SelfRehearsalEnv
from .recording import ReferenceCallError, ReferenceRecorder
from .registration import BUILTIN_DOMAINS, register_all
from .rewards import register_reward_basis
from .suites import SuiteInfo, load_suite, register_suite, suite_info, suite_names
from .tasks import RefCall, RefTurn, Task, TaskFormatError, TaskSuite
from .tools import SchemaError, ToolSpec
from .vector import ToolCallVectorEnv

__version__ = "0.1.0"

register_all()


def __getattr__(name: str):
    # `envace_gym.agents.LMPolicy` works after a plain `import envace_gym`, without the core importing
    # the agents side (torch, transformers) up front.
    if name in ("agents", "envs"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUILTIN_DOMAINS",
    "ToolCallEnv",
    "ToolCallVectorEnv",
    "make_env",
    "env_role_for",
    "SelfRehearsalEnv",
    "ImagineRequest",
    "EnvRoleSample",
    "register_reward_basis",
    "BackendSpec",
    "parse_backend_spec",
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
    "SuiteInfo",
    "suite_info",
    "suite_names",
    "RefCall",
    "RefTurn",
    "ReferenceCallError",
    "ReferenceRecorder",
    "Task",
    "TaskFormatError",
    "TaskSuite",
    "SchemaError",
    "ToolSpec",
]
