"""verl's multi-turn agent loop over envace-gym envs: `EnvACEAgentLoop`, registered as ``"envace"``.

verl (0.9) runs one ``AgentLoopBase.run`` coroutine per dataset row and sends every generation to its rollout
servers (vLLM or SGLang, behind ``server_manager.generate``). `EnvACEAgentLoop` plays the row's task as
one episode of our env through `collect`, the one episode loop, with a policy
whose engine is that server manager (`ServerEngine`), against any backend: ``real``, ``replay:``,
``mcp:``, or ``self`` / ``self-inline`` (tool results imagined by the same served model). It returns verl's
``AgentLoopOutput``: the token ids exactly as sampled (nothing is re-tokenized), ``response_mask`` from the
trajectory's role tags (1 on the actor's tokens, 0 on tool results, user turns and the inline env role's
answers, unless ``train_env_role``: the same rows TRL gets, `rows`), and the env's reward as
``reward_score``.

verl builds the loop from an agent-loop config file (``examples/verl/agent_loops.yaml``)::

    - name: envace
      _target_: envace_gym.agents.integrations.verl.EnvACEAgentLoop
      backend: real
      env_kwargs: {suite: builtin/bank, max_turns: 4}

and each dataset row (`verl_dataset` writes them) names its task: ``task_id``, and optionally ``suite``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

try:
    from omegaconf import DictConfig, OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        f"envace_gym.agents.integrations.verl needs verl 0.9 and the modules its agent loop imports ({exc}); "
        "`make verl-setup` installs them in .venv-verl beside the pinned stack (see docs/verl.md)"
    ) from exc

from envace_gym.agents.integrations.rows import split_trajectory, trained_roles
from envace_gym.agents.lm.engine import Generation, SamplingConfig, _EngineBase
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.rollout import Trajectory, collect
from envace_gym.backends import parse_backend_spec
from envace_gym.compose import make_env

__all__ = ["EnvACEAgentLoop", "ServerEngine", "ServerPolicy", "verl_dataset"]

#: Keys of verl's sampling params that the episode loop sets per call (from its ``SamplingConfig``).
_PER_CALL = ("temperature", "top_p", "max_tokens", "max_new_tokens")
#: Episodes one verl worker process plays at once. Each runs in a thread that mostly waits for the servers,
#: so this is sized for verl's concurrency (every row of a worker's batch at once), not for the CPU cores.
EPISODE_THREADS = 512


class ServerEngine(_EngineBase):
    """An `Engine` that generates through verl's server manager.

    `collect` is synchronous, so the agent loop runs it in a worker thread;
    each ``generate`` hands its requests to the agent loop's event loop (``loop``) and waits for them there,
    all prompts of a call at once. Every request carries ``request_id``, verl's sticky session (one episode,
    one server, whose prefix cache stands in for our per-conversation KV caches). The server is expected to
    keep the stop token in ``token_ids``, as vLLM and SGLang do.

    Args:
        server_manager: verl's ``LLMServerClient`` (``await generate(request_id, prompt_ids=..., sampling_params=...)``
            returning a ``TokenOutput``).
        tokenizer: the served model's tokenizer.
        loop: the event loop the agent loop runs in.
        request_id: the episode's session id.
        sampling_params: verl's sampling params for this row (``top_k``, ``logprobs``, ...); temperature,
            top_p and the token budget come from each call's ``SamplingConfig``.
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        loop: asyncio.AbstractEventLoop,
        request_id: str,
        sampling_params: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(tokenizer)
        self.server_manager = server_manager
        self.loop = loop
        self.request_id = request_id
        params = dict(sampling_params or {})
        stop = set(params.pop("stop_token_ids", None) or []) | set(self.stop_token_ids)
        self.params = {k: v for k, v in params.items() if k not in _PER_CALL} | {"stop_token_ids": sorted(stop)}
        self.seconds = 0.0  # spent waiting for the server (verl's generate_sequences metric)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        keys: Sequence[str | None] | None = None,
        generator: Any = None,
        prefix_lens: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue each prompt on verl's servers (``keys``, ``generator`` and ``prefix_lens`` are ours: the
        server keeps its own caches and samples with its own seeds)."""
        if not prompts:
            return []
        if _running_loop() is self.loop:
            raise RuntimeError("ServerEngine.generate blocks: call it from a worker thread, not the event loop")
        params = {**self.params, "temperature": sampling.temperature, "top_p": sampling.top_p}
        params["max_tokens"] = sampling.max_new_tokens
        start = time.perf_counter()
        outputs = asyncio.run_coroutine_threadsafe(self._generate_all(prompts, params), self.loop).result()
        self.seconds += time.perf_counter() - start
        return [self._generation(p, o) for p, o in zip(prompts, outputs, strict=True)]

    async def _generate_all(self, prompts: Sequence[Sequence[int]], params: dict[str, Any]) -> list[Any]:
        return await asyncio.gather(
            *(
                # A copy per request: verl's servers pop keys out of the dict they are given.
                self.server_manager.generate(
                    request_id=self.request_id, prompt_ids=list(p), sampling_params=dict(params)
                )
                for p in prompts
            )
        )

    def _generation(self, prompt: Sequence[int], out: Any) -> Generation:
        ids = list(out.token_ids)
        logprobs = [float(x) for x in out.log_probs] if out.log_probs else [0.0] * len(ids)
        stopped = bool(ids) and ids[-1] in self.stop_token_ids
        self.stats["prompt_tokens"] += len(prompt)
        self.stats["generated_tokens"] += len(ids)
        return Generation(
            text=self.tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=False),
            token_ids=ids,
            logprobs=logprobs,
            finish_reason="stop" if stopped else "length",
            prompt_tokens=len(prompt),
            prompt_ids=list(prompt),
            stop_text=self.tokenizer.decode(ids[-1:], skip_special_tokens=False) if stopped else "",
        )


class ServerPolicy(LMPolicy):
    """An `LMPolicy` whose weights live on verl's rollout servers: it renders and encodes prompts with
    the served model's tokenizer and generates through a `ServerEngine`; ``max_context`` is verl's
    sequence budget (``rollout.prompt_length + rollout.response_length``). There is no local model."""

    def __init__(self, tokenizer: Any, engine: ServerEngine, sampling: SamplingConfig, max_context: int) -> None:
        super().__init__(None, tokenizer, sampling, name="verl", engine=engine)
        self._max_context = max_context

    @property
    def max_context(self) -> int:
        return self._max_context


def _plain(value: Any) -> Any:
    """An OmegaConf node (what hydra passes from the agent-loop config file) as plain Python."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value


@register("envace")
class EnvACEAgentLoop(AgentLoopBase):
    """verl's agent loop playing one envace-gym episode per dataset row (see the module docstring).

    verl builds it per row (``hydra.utils.instantiate`` of its agent-loop config entry); the keys below come
    from that entry, verl's own arguments pass through to ``AgentLoopBase``.

    Args:
        env_id: a registered envace-gym env id.
        backend: ``real``, ``replay:PATH``, ``cache:PATH``, ``mcp:...``, or ``self`` / ``self-inline``: the
            served model imagines every tool result (from an env-role prompt, or in its own context).
        env_kwargs: ``gym.make``'s kwargs (``suite``, ``split``, ``max_turns``, ...); a row's ``suite``
            overrides the suite.
        max_new_tokens: tokens per generated turn at most (``rollout.response_length`` bounds the episode).
        train_env_role: (``self-inline``) ``response_mask`` 1 on the inline env role's answers too, so verl
            trains them with the episode's advantage.
        imagination: more ``SelfRehearsalEnv`` kwargs under an imagined backend (``grounding``, ...).
    """

    def __init__(
        self,
        *args: Any,
        env_id: str = "EnvACE-ToolCall-v0",
        backend: str = "real",
        env_kwargs: dict[str, Any] | None = None,
        max_new_tokens: int = 256,
        train_env_role: bool = False,
        imagination: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("name", None)  # the config entry's own name, passed on by hydra
        kwargs.pop("tools", None)  # verl's tool list: our env brings its tools
        super().__init__(*args, **kwargs)
        self.env_id = env_id
        self.spec = parse_backend_spec(str(backend))
        if self.spec.imagined and not self.spec.self_imagined:
            raise ValueError(f"backend {str(self.spec)!r} needs a simulator model of its own: use self or self-inline")
        self.env_kwargs = dict(_plain(env_kwargs) or {})
        self.imagination = dict(_plain(imagination) or {})
        self.max_new_tokens = int(max_new_tokens)
        self.trained_roles = trained_roles(str(self.spec), bool(train_env_role), "verl")
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the row's task (``task_id``, optional ``suite``; at the top level or in ``extra_info``) and
        return it as verl's ``AgentLoopOutput``, with the env's reward as ``reward_score``."""
        task_id, suite = _row_task(kwargs)
        env_kwargs = {**self.env_kwargs, **({"suite": suite} if suite else {})}
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        traj, waited = await loop.run_in_executor(
            _episode_threads(), self._play, loop, dict(sampling_params), task_id, env_kwargs
        )
        elapsed = time.perf_counter() - start
        row = split_trajectory(traj, self.trained_roles)
        if len(row["prompt_ids"]) > self.prompt_length:
            raise ValueError(
                f"task {task_id}: its prompt has {len(row['prompt_ids'])} tokens, more than "
                f"rollout.prompt_length={self.prompt_length}: raise it"
            )
        n = self.response_length  # verl pads every row to this; a longer episode keeps its reward on the cut row
        return AgentLoopOutput(
            prompt_ids=row["prompt_ids"],
            response_ids=row["completion_ids"][:n],
            response_mask=row["env_mask"][:n],
            response_logprobs=row["logprobs"][:n] if sampling_params.get("logprobs") else None,
            reward_score=float(traj.reward),
            num_turns=sum(m["role"] != "system" for m in traj.messages),
            metrics=AgentLoopMetrics(generate_sequences=waited, tool_calls=elapsed - waited),
            # verl keeps these per row (None for rows of other agent loops in the same batch).
            extra_fields={
                "turn_scores": [],
                "tool_rewards": [],
                "envace_task_id": task_id,
                "envace_success": float(traj.success),
                "envace_truncated": float(traj.truncated or len(row["completion_ids"]) > n),
            },
        )

    def _play(
        self, loop: asyncio.AbstractEventLoop, sampling_params: dict[str, Any], task_id: str, env_kwargs: dict
    ) -> tuple[Trajectory, float]:
        """One episode, in a worker thread (the env and its backends are synchronous): the trajectory and the
        seconds spent waiting for the servers."""
        tokenizer = _own_tokenizer(self.tokenizer)
        engine = ServerEngine(self.server_manager, tokenizer, loop, uuid.uuid4().hex, sampling_params)
        sampling = SamplingConfig(
            temperature=float(sampling_params.get("temperature", 1.0)),
            top_p=float(sampling_params.get("top_p", 1.0)),
            max_new_tokens=self.max_new_tokens,
            seed=None,  # the servers sample with their own seeds
        )
        policy = ServerPolicy(tokenizer, engine, sampling, self.prompt_length + self.response_length)
        env = make_env(
            self.env_id,
            backend=self.spec,
            policy=policy,  # the env role under self/self-inline (env_role_for)
            imagination=self.imagination or None,
            **env_kwargs,
        )
        try:
            trajs = collect(
                [env],
                policy,
                1,
                sampling=sampling,
                task_ids=[task_id],
                seed=None,
                progress=False,
                desc="verl",
                env_role_sampling=sampling,
            )
        finally:
            env.close()
        return trajs[0], engine.seconds


@functools.cache
def _episode_threads() -> ThreadPoolExecutor:
    """The threads episodes run in (started on demand, up to `EPISODE_THREADS`): asyncio's default
    executor has a few per CPU core, which would cap how many episodes wait on the servers at once."""
    return ThreadPoolExecutor(max_workers=EPISODE_THREADS, thread_name_prefix="envace-verl")


_THREAD = threading.local()


def _own_tokenizer(tokenizer: Any) -> Any:
    """This thread's copy of ``tokenizer``: a fast tokenizer used from several threads at once can fail
    ("Already borrowed", tokenizers #537), and verl's worker uses the original in the event loop."""
    mine = _THREAD.__dict__.setdefault("tokenizers", {})
    entry = mine.get(id(tokenizer))
    if entry is None or entry[0] is not tokenizer:
        entry = mine[id(tokenizer)] = (tokenizer, copy.deepcopy(tokenizer))
    return entry[1]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _row_task(row: dict[str, Any]) -> tuple[str, str | None]:
    extra = row.get("extra_info") or {}
    task_id = row.get("task_id") or extra.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise ValueError("each verl row needs a 'task_id' (a column, or in extra_info): write it with verl_dataset()")
    suite = row.get("suite") or extra.get("suite")
    return task_id, (str(suite) if suite else None)


def verl_dataset(
    suite: str, split: str | None, path: str | Path, agent_name: str = "envace", domain: str | None = None
) -> Path:
    """Write a verl dataset (parquet) with one row per task of ``suite``: the task's opening conversation as
    ``prompt`` (what verl's ``RLHFDataset`` reads and filters by length; the episode renders its own), and
    ``task_id``, ``suite`` and ``agent_name`` (which agent loop plays it), the first two also in ``extra_info``."""
    from envace_gym.agents.integrations.trl import task_dataset

    data = task_dataset(suite, split, domain=domain, chat=True)

    def row(r: dict[str, Any], i: int) -> dict[str, Any]:
        return {
            "data_source": f"envace/{suite}",
            "agent_name": agent_name,
            "suite": suite,
            "extra_info": {"index": i, "task_id": r["task_id"], "suite": suite, "split": split or "all"},
        }

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data.map(row, with_indices=True).to_parquet(str(path))
    return path
