"""envace-gym: Gymnasium environments for tool-calling LM agents, on real or imagined tool backends.

The top level holds what a user of the envs writes: the envs and the one composition function, tasks and
suites, tools, calls and the registries. Everything else is imported from its own module:
`envace_gym.backends` (backends, specs, the call ledger), `envace_gym.calls` (parsing), `envace_gym.tools`,
`envace_gym.tasks`, `envace_gym.suites`, `envace_gym.recording`, `envace_gym.imagination` (the env role),
`envace_gym.rehearsal` (test-time rehearsal's env side), `envace_gym.compose`, `envace_gym.registration`;
policies, the episode loop and training from `envace_gym.agents`.
"""

from .backends import Toolkit, register_backend, tool
from .calls import ToolCall, format_calls
from .compose import make_env
from .env import ToolCallEnv
from .imagination import SelfRehearsalEnv
from .registration import register_all as _register_all
from .rewards import register_reward_basis
from .suites import load_suite, register_suite
from .tasks import RefCall, RefTurn, Task, TaskSuite
from .vector import ToolCallVectorEnv

__version__ = "0.1.0"

_register_all()


def __getattr__(name: str):
    # `envace_gym.agents.LMPolicy` works after a plain `import envace_gym`, without the core importing
    # the agents side (torch, transformers) up front.
    if name in ("agents", "envs"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    # envs, and the one way to compose one with a backend
    "ToolCallEnv",
    "ToolCallVectorEnv",
    "SelfRehearsalEnv",
    "make_env",
    # tasks and suites
    "Task",
    "TaskSuite",
    "RefCall",
    "RefTurn",
    "load_suite",
    "register_suite",
    # tools, calls and rewards
    "Toolkit",
    "tool",
    "register_backend",
    "register_reward_basis",
    "ToolCall",
    "format_calls",
]
