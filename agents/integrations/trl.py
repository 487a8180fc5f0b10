"""TRL's ``GRPOTrainer`` over envace-gym envs: a ``rollout_func`` that runs our episode loop, and an
``environment_factory`` adapter.

``make_rollout_func`` plays each TRL prompt (a task id, see `task_dataset`) as one episode of our env
through `collect`, with the trainer's own model wrapped as an
`LMPolicy`, against any backend (``real``, ``replay:``, ``mcp:``, or
``self`` / ``self-inline``: imagined by that same model). It returns to TRL the token ids, logprobs and
``env_mask`` taken from the trajectory's per-token role tags (exact: nothing is re-tokenized), and the
episode's reward as the extra key ``envace_reward``, which `env_reward` passes on::

    rollout = make_rollout_func("EnvACE-ToolCall-v0", backend="real", suite="builtin/bank", max_turns=3)
    trainer = GRPOTrainer(model, reward_funcs=env_reward, args=GRPOConfig(num_generations=4, ...),
                          train_dataset=task_dataset("builtin/bank", "train"), processing_class=tok,
                          rollout_func=rollout)

``make_environment_factory`` instead gives TRL's own tool loop one object per episode whose public methods
are the tasks' tools (dispatched by name to our env's ``step``), with ``reset(**row)`` and ``get_reward()``.
"""

from __future__ import annotations

import inspect
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from envace_gym import make_env
from envace_gym.agents.integrations.rows import split_trajectory, trained_roles
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rollout import Trajectory, collect
from envace_gym.backends.spec import SELF_KINDS
from envace_gym.calls import ToolCall, format_calls
from envace_gym.suites import load_suite

__all__ = [
    "EnvACERolloutFunc",
    "EnvACEToolEnv",
    "env_reward",
    "make_environment_factory",
    "make_rollout_func",
    "split_trajectory",
    "task_dataset",
]


# ---------------------------------------------------------------------------------------------- data
def task_dataset(suite: str = "builtin", split: str | None = "train", domain: str | None = None, chat: bool = False):
    """A ``datasets.Dataset`` with one row per task: ``task_id`` and ``prompt``.

    ``prompt`` is the task id (what `make_rollout_func` reads), or with ``chat=True`` the task's opening
    conversation (system + first user turn), what TRL renders itself under ``environment_factory``.
    """
    from datasets import Dataset

    tasks = load_suite(suite).filter(split=split, domain=domain)
    if len(tasks) == 0:
        raise ValueError(f"suite {suite!r} has no tasks for split={split!r}, domain={domain!r}")
    rows = []
    for t in tasks:
        if chat:
            system = [{"role": "system", "content": t.system}] if t.system else []
            prompt: Any = system + [{"role": "user", "content": t.user_turns[0]}]
        else:
            prompt = t.id
        rows.append({"prompt": prompt, "task_id": t.id})
    return Dataset.from_list(rows)


def env_reward(completions: Sequence[Any] = (), envace_reward: Sequence[float] | None = None, **_: Any) -> list[float]:
    """A TRL reward function: the episode reward that `make_rollout_func` returned (``envace_reward``)."""
    if envace_reward is None:
        raise ValueError("env_reward needs the rollout function from make_rollout_func (no 'envace_reward' key)")
    return [float(r) for r in envace_reward]


# ---------------------------------------------------------------------------------------------- rollout_func
@dataclass
class EnvACERolloutFunc:
    """TRL's ``rollout_func(prompts, trainer) -> dict``; made by `make_rollout_func`.

    Each prompt is a task id; TRL's sampler already repeats each one ``num_generations`` times in a row, and
    the rows come back in the prompts' order, so TRL's groups are the task's episodes. ``last`` holds the
    trajectories of the latest call and ``timings`` the seconds each call took (for tests and benchmarks).
    """

    env_factory: Callable[[], gym.Env]
    backend: str = "real"
    train_env_role: bool = False
    max_new_tokens: int = 96
    seed: int | None = 0
    last: list[Trajectory] = field(default_factory=list, repr=False)
    timings: list[float] = field(default_factory=list, repr=False)
    _envs: list[gym.Env] = field(default_factory=list, repr=False)
    _policy: LMPolicy | None = field(default=None, repr=False)
    _calls: itertools.count = field(default_factory=itertools.count, repr=False)

    def __post_init__(self) -> None:
        self.trained_roles  # noqa: B018 - a backend that cannot train the env role fails here, not mid-training

    @property
    def trained_roles(self) -> tuple[str, ...]:
        return trained_roles(self.backend, self.train_env_role, "TRL")

    def policy(self, trainer: Any) -> LMPolicy:
        """The trainer's model as an `LMPolicy` (the same weights, so rollouts follow the updates)."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self._policy is None or self._policy.model is not model:
            self._policy = LMPolicy(model, trainer.processing_class, name="trl")
            self._envs = []  # their imaginer is the old policy
        return self._policy

    def _env_batch(self, n: int, policy: LMPolicy) -> list[gym.Env]:
        while len(self._envs) < n:
            env = self.env_factory()
            env = make_env(env, backend=self.backend, policy=policy)  # the env role: see env_role_for
            self._envs.append(env)
        return self._envs[:n]

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        start = time.perf_counter()
        task_ids = [_task_id(p) for p in prompts]
        args = trainer.args
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training  # read first: building the engine switches the model to eval
        policy = self.policy(trainer)
        rank = getattr(trainer.accelerator, "process_index", 0)  # ranks must not draw the same tokens
        seed = (args.seed if self.seed is None else self.seed) * 1_000_003 + next(self._calls) * 7919 + rank * 101
        # Both roles sample at TRL's temperature, which its loss divides the logits by.
        sampling = SamplingConfig(args.temperature, args.top_p or 1.0, self.max_new_tokens, seed=seed)
        policy.reseed(seed)
        policy.engine.clear()  # the weights changed since the last call: cached keys and values are stale
        try:
            trajs = collect(
                self._env_batch(len(prompts), policy),
                policy,
                len(prompts),
                sampling=sampling,
                task_ids=task_ids,
                seed=seed,
                progress=False,
                desc="trl-rollout",
                env_role_sampling=sampling,
            )
        finally:
            policy.model.train(was_training)  # the engine switches it to eval; TRL reads the mode back
            policy.engine.clear()
        if [t.task_id for t in trajs] != task_ids:
            raise RuntimeError("rollout rows are out of order: TRL's groups would mix tasks")
        rows = [split_trajectory(t, self.trained_roles, args.max_completion_length) for t in trajs]
        self.last = trajs
        out = {key: [r[key] for r in rows] for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        out["envace_reward"] = [t.reward for t in trajs]
        out["envace_success"] = [float(t.success) for t in trajs]
        out["task_id"] = task_ids
        self.timings.append(time.perf_counter() - start)
        return out


def _task_id(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    raise TypeError(
        f"each prompt must be a task id string, got {type(prompt).__name__}: build the dataset with task_dataset()"
    )


def make_rollout_func(
    env_id: str = "EnvACE-ToolCall-v0",
    backend: str = "real",
    *,
    train_env_role: bool = False,
    max_new_tokens: int = 96,
    seed: int | None = 0,
    **env_kwargs: Any,
) -> EnvACERolloutFunc:
    """A TRL ``rollout_func`` that plays ``gym.make(env_id, **env_kwargs)`` episodes with the trainer's model.

    Args:
        env_id: a registered envace-gym env id.
        backend: ``real`` or any backend string the env takes (``replay:PATH``, ``mcp:...``), or ``self`` /
            ``self-inline``: the trainer's model imagines every tool result (from an env-role prompt, or in its
            own context).
        train_env_role: (``self-inline``) put the env role's tokens in ``env_mask`` too, so TRL trains them with
            the episode's advantage: EnvACE's joint objective with TRL's grouping by prompt.
        max_new_tokens: tokens per generated turn at most (TRL's ``max_completion_length`` bounds the episode).
        seed: base seed of env resets and sampling (None: the trainer's ``args.seed``).
        env_kwargs: passed to ``gym.make`` (``suite``, ``split``, ``max_turns``: the episode's turn bound).
    """
    if backend not in SELF_KINDS:
        env_kwargs["backend"] = backend

    def make() -> gym.Env:
        return gym.make(env_id, **env_kwargs)

    return EnvACERolloutFunc(make, backend, train_env_role, max_new_tokens, seed)


# ---------------------------------------------------------------------------------------------- environment_factory
_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


class EnvACEToolEnv:
    """One episode of an envace-gym env for TRL's ``environment_factory``: each public method is a tool.

    A subclass with the tools as methods is made by `make_environment_factory`; ``reset(task_id=...)``
    starts the task, a tool call is one env step (one assistant message with that call), ``get_reward()``
    ends the episode if it is still open and returns its reward.
    """

    _make_env: Callable[[], gym.Env]

    def __init__(self) -> None:
        self.env = type(self)._make_env()
        self.reward: float | None = None
        self.done = True

    def reset(self, task_id: str | None = None, **_: Any) -> None:
        """Start the episode of ``task_id`` (a dataset column); returns None: the prompt already holds the task."""
        if task_id is None:
            raise ValueError("the dataset needs a 'task_id' column (build it with task_dataset(..., chat=True))")
        self.env.reset(options={"task_id": task_id})
        self.reward, self.done = None, False

    def get_reward(self) -> float:
        """The episode's reward (scored now if the episode is still open: TRL's last answer never reaches us)."""
        if self.reward is None:
            self.reward = float(self.env.unwrapped.end_episode()[0]) if not self.done else 0.0
            self.done = True
        return self.reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.done:
            return "Error: the episode is over; answer the user without further tool calls."
        obs, reward, terminated, truncated, _ = self.env.step(format_calls([ToolCall(name, arguments)]))
        if terminated or truncated:
            self.reward, self.done = float(reward), True
        return obs


def _tool_method(spec: dict[str, Any]) -> Callable[..., str]:
    """A method named after the tool, with the signature, type hints and Google docstring that TRL (through
    transformers' ``get_json_schema``) turns back into the tool's schema; it dispatches by name."""
    fn_spec = spec.get("function", spec)
    name, params = fn_spec["name"], fn_spec.get("parameters") or {}
    props, required = params.get("properties", {}), set(params.get("required", []))

    def tool(self: EnvACEToolEnv, **arguments: Any) -> str:
        return self._call(name, {k: v for k, v in arguments.items() if v is not None or k in required})

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    lines = []
    for arg in sorted(props, key=lambda a: a not in required):  # required ones first, as Python wants
        schema = props[arg]
        tp = _JSON_TYPES.get(schema.get("type"), str) if isinstance(schema.get("type"), str) else str
        default = inspect.Parameter.empty if arg in required else None
        parameters.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=tp))
        annotations[arg] = tp
        desc = " ".join(str(schema.get("description") or arg).split())
        if "enum" in schema:
            desc += f" (choices: {json.dumps(schema['enum'])})"
        lines.append(f"    {arg}: {desc}")
    doc = " ".join(str(fn_spec.get("description") or name).split())
    tool.__doc__ = doc + ("\n\nArgs:\n" + "\n".join(lines) if lines else "") + "\n\nReturns:\n    The tool's result."
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def make_environment_factory(
    env_id: str = "EnvACE-ToolCall-v0",
    backend: str = "real",
    *,
    domain: str | None = None,
    **env_kwargs: Any,
) -> type[EnvACEToolEnv]:
    """A class to pass as TRL's ``environment_factory``: each instance plays one episode of ``env_id``.

    Its public methods are the tools of the env's tasks (of ``domain`` if given); TRL renders one tool list per
    factory, so the tasks' tools must agree by name. ``backend`` is a real one (``real``, ``replay:``,
    ``mcp:``): TRL's own loop has no place for an imagined result.
    """
    if backend in SELF_KINDS:
        raise ValueError(f"backend {backend!r} is imagined: use make_rollout_func for rehearsal under TRL")
    env_kwargs["backend"] = backend

    def make() -> gym.Env:
        return gym.make(env_id, **env_kwargs)

    probe = make()
    pool = [t for t in probe.unwrapped.pool if domain is None or t.domain == domain]
    probe.close()
    specs: dict[str, dict[str, Any]] = {}
    for task in pool:
        for spec in task.tools:
            name = spec.get("function", spec)["name"]
            if name.startswith("_") or name in ("reset", "get_reward"):
                raise ValueError(f"tool name {name!r} clashes with the environment's own methods")
            if specs.setdefault(name, spec) != spec:
                raise ValueError(f"tool {name!r} differs between tasks; pass domain= to use one tool set")
    if not specs:
        raise ValueError(f"{env_id} with {env_kwargs} (domain={domain!r}) has no tools")
    methods: dict[str, Any] = {name: _tool_method(spec) for name, spec in sorted(specs.items())}
    methods["_make_env"] = staticmethod(make)
    return type(f"EnvACETools_{domain or 'all'}", (EnvACEToolEnv,), methods)
