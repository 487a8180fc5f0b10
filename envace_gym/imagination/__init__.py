"""Imagination: tool results imagined instead of executed, written by the env role (the policy itself, or a
separate model under the ``simulator`` backend).

One vocabulary here: an *imagined* result comes from an *imaginer* (whoever plays the env role, anything with
``imagine(ImagineRequest)``); the *env role* is the model that answers. Training with the policy as its own
env role is EnvACE's world rehearsal (``SelfRehearsalEnv`` keeps the method's name); test-time private
rehearsal's blocks are in `envace_gym.rehearsal`.

* `protocol`: `Request` (what a step waits on; `ImagineRequest`: what the env role is asked) and `EnvRoleSample` (what
  one answer leaves for training). The wrapper needs only an object with ``imagine(ImagineRequest)``: the
  core never imports the agents package.
* `prompt`: the prompted-mode env-role prompt (EnvACE's reference behaviour: candidate tool
  schemas, few-shot (arguments, result) pairs from the task's reference trajectory, the conversation so
  far, the actor's raw last message, the current tool's name, schema and arguments) and the parsers of
  ``<execution_result>`` (prompted) and bare-JSON (inline) answers.
* `answers`: `read_answer`, how an imaginer's answer is read: a generation as written, a script's data
  (a dict, a list) or text formatted for the mode.
* `backend`: `ImaginedBackend`, a backend like any other.
* `wrapper`: `SelfRehearsalEnv`, which gives that backend to the env it wraps;
  `RealResultImaginer`, a perfect env role (the real results).
* `halfstep`: `step_envs`: envs that step at the same time, their steps run as half-steps
  (``ToolCallEnv.begin_step``), send their env-role requests as one batch per round, with no thread (used by
  `envace_gym.vector`, the rollout loop and the fidelity report).

``mode="inline"`` (beyond the paper) lets the policy write the ``tool`` message inside the actor's own
context, so an engine that keeps the actor's KV cache computes only the result's tokens.
"""

from .answers import UnreadableAnswer, read_answer
from .backend import ImaginedBackend
from .halfstep import answer_model_requests, answer_requests, roles_of, step_envs, user_of
from .prompt import (
    ENV_ROLE_SYSTEM_PROMPT,
    GROUNDINGS,
    build_env_role_prompt,
    format_execution_result,
    format_result,
    parse_execution_result,
    parse_inline_result,
)
from .protocol import (
    MODES,
    BatchImaginer,
    EnvRoleAnswer,
    EnvRoleSample,
    Imaginer,
    ImagineRequest,
    JudgeRequest,
    Mode,
    ModelRole,
    ModelUser,
    Request,
    UserRequest,
)
from .wrapper import ON_INVALID, RealResultImaginer, SelfRehearsalEnv

__all__ = [
    "MODES",
    "Mode",
    "GROUNDINGS",
    "ON_INVALID",
    "ImagineRequest",
    "Imaginer",
    "BatchImaginer",
    "EnvRoleAnswer",
    "EnvRoleSample",
    "ImaginedBackend",
    "SelfRehearsalEnv",
    "RealResultImaginer",
    "JudgeRequest",
    "ModelRole",
    "ModelUser",
    "Request",
    "UserRequest",
    "step_envs",
    "answer_model_requests",
    "answer_requests",
    "roles_of",
    "user_of",
    "ENV_ROLE_SYSTEM_PROMPT",
    "build_env_role_prompt",
    "parse_execution_result",
    "parse_inline_result",
    "format_execution_result",
    "format_result",
    "read_answer",
    "UnreadableAnswer",
]
