"""World rehearsal: ``SelfRehearsalEnv`` answers tool calls with results imagined by the policy itself.

The deterministic checks come first and answer exactly as a real backend would
(``TOOL_NOT_AVAILABLE``, ``INVALID_PARAMETERS``); every call that passes them is answered by the policy in
its environment role, from a fresh simulator prompt (EnvACE's reference behaviour, ``mode="prompted"``):
the candidate tool schemas, few-shot (arguments, result) pairs from the task's reference trajectory, the
conversation so far, the actor's raw last message, and the current tool's name, schema and arguments.
The answer must be ``<execution_result>`` + a non-empty JSON object or array + ``</execution_result>``.

``mode="inline"`` (beyond the paper) instead lets the policy write the ``tool`` message inside the actor's
own context: the same conversation, continued with a tool-message header, so an engine that keeps the
actor's KV cache computes only the result's tokens. The answer is the bare JSON the real tool would return.

The wrapper needs only an object with ``imagine(ImagineRequest) -> generation`` (``.text``, and for RL
``.token_ids``/``.logprobs``/``.prompt_ids``): the core never imports the agents package.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from .backends import make_backend
from .backends.base import ToolResult, state_digest, validate_call
from .calls import ErrorCode, ToolCall
from .tasks import Task
from .tools import ToolSpec, compact_signature

__all__ = [
    "MODES",
    "ImagineRequest",
    "Imaginer",
    "SelfRehearsalEnv",
    "ImaginedBackend",
    "build_simulator_prompt",
    "parse_execution_result",
    "parse_inline_result",
    "SIMULATOR_SYSTEM_PROMPT",
    "RealResultImaginer",
    "format_execution_result",
]

SIMULATOR_SYSTEM_PROMPT = (
    "You are a precise tool simulator. Given tool schemas, examples of real calls with their results, the "
    "conversation so far and one new tool call, you return exactly what the real tool would return for "
    "that call: same structure, data types and facts as the examples and the conversation. Act as a silent "
    "function: no explanations, no hints, no instructions to the assistant. Answer with\n"
    "<execution_result>\n<a non-empty JSON object or array>\n</execution_result>\nand nothing else."
)


MODES = ("prompted", "inline")


@dataclass
class ImagineRequest:
    """One request to the environment role: its chat prompt and the call it is about.

    ``mode="prompted"``: ``messages`` is the simulator prompt (system + user). ``mode="inline"``:
    ``messages`` is the actor's own conversation up to this call (its assistant message and this step's
    earlier tool messages included) and ``tools`` the actor's tool schemas; the env role continues it with
    a ``tool`` message. ``context_ids``/``context_text`` are the actor's exact token context when the rollout
    engine knows it (its sampled tokens, which re-tokenising the text need not reproduce), and ``key`` the
    conversation whose KV cache the engine may reuse.
    """

    messages: list[dict[str, Any]]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    mode: str = "prompted"
    tools: list[dict[str, Any]] = field(default_factory=list)
    context_ids: list[int] | None = None
    context_text: str | None = None


class Imaginer(Protocol):
    def imagine(self, request: ImagineRequest) -> Any: ...


def _examples(task: Task, tool: str, limit: int) -> list[dict[str, Any]]:
    same = [c for c in task.reference_calls if c.name == tool]
    other = [c for c in task.reference_calls if c.name != tool]
    return [{"name": c.name, "arguments": c.arguments, "result": c.result} for c in (same + other)[:limit]]


def _transcript(messages: Sequence[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        if m["role"] == "system":
            continue
        label = f"tool {m.get('name', '')}".strip() if m["role"] == "tool" else m["role"]
        lines.append(f"[{label}] {m.get('content', '')}")
    return "\n".join(lines)


def build_simulator_prompt(
    task: Task,
    call: ToolCall,
    messages: Sequence[dict[str, Any]],
    specs: Sequence[ToolSpec],
    grounding: str = "reference",
    max_examples: int = 3,
) -> list[dict[str, Any]]:
    """The prompted-mode simulator prompt (system + user message) for one call."""
    spec = next((s for s in specs if s.name == call.name), None)
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))
    raw = messages[last].get("content", "") if last < len(messages) else ""
    history = list(messages[:last]) + list(messages[last + 1 :])  # later items: this step's earlier results
    examples = _examples(task, call.name, max_examples) if grounding == "reference" else []
    parts = [
        # Candidate tools as one signature line each; the current tool's full schema comes below.
        "## Candidate tools\n" + "\n".join(compact_signature(s.to_openai()) for s in specs),
        "## Examples of real calls and results\n"
        + ("\n".join(json.dumps(e, ensure_ascii=False) for e in examples) if examples else "<unavailable>"),
        "## Conversation so far\n" + _transcript(history),
        "## The assistant's last message\n" + raw,
        "## Tool call to simulate\n"
        + json.dumps(
            {"name": call.name, "schema": spec.to_openai()["function"] if spec else None, "arguments": call.arguments},
            ensure_ascii=False,
        ),
    ]
    return [{"role": "system", "content": SIMULATOR_SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_RESULT = re.compile(r"<execution_result>(.*?)</execution_result>", re.DOTALL)


def parse_execution_result(text: Any, max_chars: int = 16_384) -> tuple[Any, str | None]:
    """``(value, None)`` for a valid answer, else ``(None, reason)``. Never raises; bounded work."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty simulator answer"
    if len(text) > 4 * max_chars:
        return None, f"simulator answer is {len(text)} characters; the limit is {4 * max_chars}"
    visible = _THINK.sub("", text)
    match = _RESULT.search(visible)
    if match is None:
        return None, "no <execution_result>...</execution_result> block"
    return _json_result(match.group(1).strip(), max_chars, "execution result")


def parse_inline_result(text: Any, max_chars: int = 16_384) -> tuple[Any, str | None]:
    """An inline answer is the tool message itself: a non-empty JSON object or array, nothing else.
    ``(value, None)`` when valid, else ``(None, reason)``. Never raises; bounded work."""
    if not isinstance(text, str) or not text.strip():
        return None, "empty simulator answer"
    return _json_result(text, max_chars, "imagined result")


def _json_result(body: str, max_chars: int, what: str) -> tuple[Any, str | None]:
    if len(body) > max_chars:
        return None, f"{what} is {len(body)} characters; the limit is {max_chars}"
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return None, f"{what} is not JSON: {str(exc)[:100]}"
    if not isinstance(value, (dict, list)) or value == {}:
        return None, f"{what} must be a non-empty JSON object or an array"
    return value, None


@dataclass
class ActorContext:
    """What the actor's context holds right now: its token ids, their text, and its engine cache key."""

    ids: list[int]
    text: str
    key: str | None = None


class ImaginedBackend:
    """A :class:`~envace_gym.backends.Backend` whose results come from an :class:`Imaginer`.

    State is the list of calls it answered successfully; ``state_hash`` replays them on a fresh *real*
    backend (an offline check made once at the end of an episode, so ``state_match`` still works).
    """

    def __init__(
        self,
        imaginer: Imaginer,
        messages: Callable[[], list[dict[str, Any]]],
        grounding: str = "reference",
        max_result_chars: int = 16_384,
        real_backend: Callable[[Task], Any] | None = None,
        mode: str = "prompted",
    ) -> None:
        self.imaginer = imaginer
        self.messages = messages
        self.grounding = grounding
        self.max_result_chars = max_result_chars
        self.mode = mode
        self.context: ActorContext | None = None  # inline mode: the actor's exact context, when known
        self.end_on_failure = False  # set by SelfRehearsalEnv(on_invalid="end")
        self.real_backend = real_backend or (lambda task: make_backend(task.backend, timeout=None))
        self.task: Task | None = None
        self.tools: list[ToolSpec] = []
        self.call_count = 0
        self.samples: list[dict[str, Any]] = []  # env-role samples of the current step
        self.failed: str | None = None  # why the last answer could not be used
        self._ok_calls: list[ToolCall] = []

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.task = task
        self.tools = list(task.tool_specs) if task is not None else []
        self.call_count = 0
        self.samples = []
        self.failed = None
        self._ok_calls = []

    def execute(self, call: ToolCall) -> ToolResult:
        assert self.task is not None, "reset() first"
        self.call_count += 1
        error = validate_call(call, {s.name: s for s in self.tools})
        if error is not None:
            return ToolResult(call, None, error)
        if self.failed and self.end_on_failure:  # the episode ends after this step: imagine nothing more
            return ToolResult.failure(
                call, ErrorCode.TOOL_EXECUTION_ERROR, "not run: an earlier imagined result was unusable"
            )
        request = self._request(call)
        try:
            gen = self.imaginer.imagine(request)
            text = getattr(gen, "text", gen)
        except Exception as exc:  # an env role that crashes is contained like a crashing tool
            gen, text = None, None
            value, reason = None, f"env role raised {type(exc).__name__}: {exc}"
        else:
            parse = parse_inline_result if self.mode == "inline" else parse_execution_result
            value, reason = parse(text, self.max_result_chars)
        spec = next(s for s in self.tools if s.name == call.name)
        if reason is None and spec.validate_result(value):
            reason = "result breaks the tool's returns schema: " + "; ".join(spec.validate_result(value)[:3])
        sample = {
            "mode": self.mode,
            "tool": call.name,
            "valid": reason is None,
            "error": reason,
            "prompt_ids": list(getattr(gen, "prompt_ids", []) or []),
            "completion_ids": list(getattr(gen, "token_ids", []) or []),
            "logprobs": list(getattr(gen, "logprobs", []) or []),
        }
        if self.mode == "inline":
            # What the rollout engine needs to splice the result's tokens into the actor's stream.
            sample["prompt_text"] = getattr(gen, "prompt_text", "") or ""
            sample["completion_text"] = (text or "") + (getattr(gen, "stop_text", "") or "")
        self.samples.append(sample)
        if reason is not None:
            self.failed = reason
            return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, f"imagined result unusable: {reason}")
        self._ok_calls.append(call)
        if self.mode == "inline":
            if sample["prompt_ids"] and sample["prompt_text"]:  # the next call of this step continues from here
                key = self.context.key if self.context else None
                self.context = ActorContext(
                    sample["prompt_ids"] + sample["completion_ids"],
                    sample["prompt_text"] + sample["completion_text"],
                    key,
                )
            return ToolResult(call, value, text=text)
        return ToolResult(call, value)

    def _request(self, call: ToolCall) -> ImagineRequest:
        assert self.task is not None
        if self.mode == "prompted":
            prompt = build_simulator_prompt(self.task, call, self.messages(), self.tools, self.grounding)
            return ImagineRequest(prompt, call.name, call.arguments)
        ctx = self.context
        return ImagineRequest(
            list(self.messages()),
            call.name,
            call.arguments,
            key=ctx.key if ctx else None,
            mode="inline",
            tools=list(self.task.tools) or [s.to_openai() for s in self.tools],
            context_ids=list(ctx.ids) if ctx else None,
            context_text=ctx.text if ctx else None,
        )

    def state(self) -> dict[str, Any]:
        return {"calls": [c.to_dict() for c in self._ok_calls]}

    def state_hash(self) -> str:
        if self.task is None or not self.task.backend:
            return state_digest(self.state())
        real = self.real_backend(self.task)
        real.reset(self.task, seed=0)
        for call in self._ok_calls:
            real.execute(call)
        return real.state_hash()


class RealResultImaginer:
    """An env role that answers with what the real backend returns: a perfect simulator.

    It keeps a shadow real backend in step with the episode. Uses: the interchangeability check (an
    imagined run must then equal the real run), and targets for warm-starting the env role.
    """

    def __init__(self, env: gym.Env) -> None:
        self.env = env.unwrapped
        self._episode = None
        self._shadow: Any = None

    def imagine(self, request: ImagineRequest) -> Any:
        base = self.env
        if self._episode != base.episode_index:
            self._episode = base.episode_index
            self._shadow = base.real_backend_for(base.task)
            self._shadow.reset(base.task, seed=0)
        result = self._shadow.execute(ToolCall(request.tool, request.arguments))
        if request.mode == "inline":
            return _Text(result.to_message_content())
        return _Text(format_execution_result(result.payload()))


@dataclass
class _Text:
    text: str


def format_execution_result(value: Any) -> str:
    """The answer format the env role must produce."""
    return f"<execution_result>\n{json.dumps(value, ensure_ascii=False)}\n</execution_result>"


class SelfRehearsalEnv(gym.Wrapper):
    """The same env, with tool results imagined by ``policy`` in its environment role.

    Args:
        env: a ``ToolCallEnv`` (or a wrapper around one).
        policy: anything with ``imagine(ImagineRequest)``, e.g. ``envace_gym.agents.LMPolicy``.
        mode: ``"prompted"`` (a fresh simulator prompt per call, the paper's setting) or ``"inline"`` (the
            result is written as the tool message in the actor's own context; with the rollout engine,
            which reports that context through :meth:`set_actor_context`, its KV cache is reused and only
            the result's tokens are computed). ``grounding`` applies to prompted mode only.
        grounding: ``"reference"`` (few-shot pairs from the task's reference trajectory) or ``"none"``.
        on_invalid: ``"end"`` (an unusable answer ends the episode with reward 0, the paper's rule) or
            ``"error_observation"`` (the agent sees a ``TOOL_EXECUTION_ERROR`` and goes on).

    ``info["rehearsal"]`` holds this step's env-role samples (prompt ids, completion ids, logprobs, tool,
    valid flag) so a trainer can treat them as their own RL samples.
    """

    def __init__(
        self,
        env: gym.Env,
        policy: Imaginer,
        mode: str = "prompted",
        grounding: str = "reference",
        on_invalid: str = "end",
        max_result_chars: int = 16_384,
    ) -> None:
        super().__init__(env)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if grounding not in ("reference", "none"):
            raise ValueError(f"grounding must be 'reference' or 'none', got {grounding!r}")
        if on_invalid not in ("end", "error_observation"):
            raise ValueError(f"on_invalid must be 'end' or 'error_observation', got {on_invalid!r}")
        self.policy, self.mode, self.on_invalid = policy, mode, on_invalid
        base = env.unwrapped
        # An inline result becomes the message verbatim, so it must fit without the env clipping it.
        limit = min(max_result_chars, base.max_result_chars) if mode == "inline" else max_result_chars
        self.imagined = ImaginedBackend(
            policy,
            lambda: base.messages,
            grounding,
            limit,
            real_backend=lambda task: base.real_backend_for(task),
            mode=mode,
        )
        self.imagined.end_on_failure = on_invalid == "end"
        base.backend_spec = lambda task: self.imagined

    @property
    def imaginer(self) -> Imaginer:
        """Who answers tool calls (``policy`` unless replaced, e.g. by the rollout engine's batcher)."""
        return self.imagined.imaginer

    @imaginer.setter
    def imaginer(self, value: Imaginer) -> None:
        self.imagined.imaginer = value

    def set_actor_context(self, ids: Sequence[int], text: str, key: str | None = None) -> None:
        """Tell an inline env role what the actor's context holds before the next :meth:`step`: the exact
        token ids (as sampled), the text they stand for, and the engine cache key of that conversation.
        The rollout engine calls this; without it the env role re-renders the conversation."""
        self.imagined.context = ActorContext(list(ids), text, key)

    def reset(self, **kwargs: Any):
        self.imagined.context = None
        return self.env.reset(**kwargs)

    @property
    def spec(self):  # type: ignore[override]
        """The wrapped env's spec, marked nondeterministic: imagined results are sampled."""
        spec = self.env.spec
        return dataclasses.replace(spec, nondeterministic=True) if spec is not None else None

    def step(self, action: str):
        self.imagined.samples = []
        self.imagined.failed = None
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        finally:
            self.imagined.context = None  # valid for one step only: the rollout engine sets it anew
        info["rehearsal"] = list(self.imagined.samples)
        if self.imagined.failed and self.on_invalid == "end" and not (terminated or truncated):
            info.update(self.env.unwrapped.abort(f"unusable imagined result: {self.imagined.failed}"))
            reward, terminated = 0.0, True
        return obs, reward, terminated, truncated, info
