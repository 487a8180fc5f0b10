"""``ToolCallEnv`` (registered as ``EnvACE-ToolCall-v0``): a tool-calling conversation as a Gymnasium env.

Action: the assistant's message text. Each step parses it with :func:`envace_gym.calls.parse_calls`;
calls are executed by the episode's backend (after its deterministic checks) and the observation is
their results; a message with no call is an answer, which moves to the next user turn or ends the
episode with the task's reward. Bad actions never raise: they become structured error observations.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from .backends import Backend, ReplayBackend, ToolResult, make_backend
from .backends.mcp import MCPBackend
from .calls import CallError, ErrorCode, ParsedAction, ToolCall, parse_calls, tool_calls_to_openai
from .rewards import EpisodeRecord, reference_state_hash, score_episode
from .spaces import UnicodeText
from .suites import load_suite
from .tasks import Task, TaskSuite

__all__ = ["ToolCallEnv", "DEFAULT_SYSTEM_PROMPT", "clip"]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that can call tools. To call a tool, write "
    '<tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>; several such blocks '
    "in one message are run in parallel. When you have what you need, answer the user in plain text "
    "without any tool call."
)

BackendSpec = str | Callable[[Task], Backend]


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` with a visible marker of how much was dropped."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"...[truncated {len(text) - max_chars} chars]"


class ToolCallEnv(gym.Env[str, str]):
    """A multi-turn tool-calling task as a Gymnasium environment.

    Args:
        suite: a registered suite name (``"builtin"``, ``"builtin/retail"``) or a ``.jsonl`` task file.
        split: which split :meth:`reset` draws from (``"train"``, ``"test"``); ``None`` for all.
        tasks: tasks to use instead of ``suite`` (a :class:`TaskSuite` or a list of :class:`Task`).
        backend: ``"real"`` (each task's registered real backend), ``"replay:PATH"`` (results from a
            JSONL cache; a miss is an error), ``"cache:PATH"`` (cache first, then the real backend, whose
            answers are written back: recording), ``"mcp:COMMAND"`` (an MCP server over stdio, started with
            COMMAND, e.g. ``mcp:python -m envace_gym.envs.builtin.mcp_server``), ``"mcp:http://127.0.0.1:PORT/mcp"``
            (a running MCP server over loopback HTTP), or a callable ``task -> Backend``.
        max_turns: assistant messages per episode before truncation (a task's own ``max_turns`` wins).
        tool_timeout: seconds one tool call may run before it becomes a ``TOOL_TIMEOUT`` error.
        max_action_chars: longer actions are refused with an error observation (and kept in history).
        max_calls_per_step: parallel calls beyond this are refused.
        max_result_chars: each tool result shown to the agent is cut to this length.
        system_prompt: used for tasks that carry no system message of their own.
        render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        suite: str = "builtin",
        split: str | None = "train",
        tasks: TaskSuite | Sequence[Task] | None = None,
        backend: BackendSpec = "real",
        max_turns: int = 12,
        tool_timeout: float | None = 5.0,
        max_action_chars: int = 65_536,
        max_calls_per_step: int = 16,
        max_result_chars: int = 8_192,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if (
            isinstance(backend, str)
            and backend != "real"
            and backend.partition(":")[0] not in ("replay", "cache", "mcp")
        ):
            raise ValueError(
                f"unknown backend {backend!r}; use 'real', 'replay:PATH', 'cache:PATH', 'mcp:COMMAND' or a callable task -> Backend "
                "(imagined results: wrap the env in envace_gym.SelfRehearsalEnv)"
            )
        self.suite = (
            tasks
            if isinstance(tasks, TaskSuite)
            else TaskSuite(tasks, "custom")
            if tasks is not None
            else load_suite(suite)
        )
        self.split = split
        self.pool = self._pool(self.suite, split)
        self.backend_spec = backend
        self.max_turns = max_turns
        self.tool_timeout = tool_timeout
        self.max_action_chars = max_action_chars
        self.max_calls_per_step = max_calls_per_step
        self.max_result_chars = max_result_chars
        self.system_prompt = system_prompt
        self.render_mode = render_mode

        self.action_space = UnicodeText(max_action_chars)
        # Every shown result is clipped, so this bounds any observation.
        self.observation_space = UnicodeText(max((max_result_chars + 64) * (2 * max_calls_per_step + 2), 1 << 16))

        self._backends: dict[str, Backend] = {}
        self._expected_hashes: dict[str, str] = {}
        self.backend: Backend | None = None
        self.task: Task | None = None
        self.messages: list[dict[str, Any]] = []
        self._record = EpisodeRecord()
        self._user_turn = 0
        self._steps = 0
        self._done = True
        self._call_seq = 0
        self.episode_index = -1  # counts resets: lets observers tell episodes apart

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode. ``options``: ``task_id``, or ``suite`` and/or ``split`` to draw from."""
        super().reset(seed=seed)
        options = options or {}
        self.task = self._select_task(options)
        self.backend = self._backend_for(self.task)
        self.backend.reset(self.task, seed=seed)
        self.messages = [{"role": "system", "content": self.task.system or self.system_prompt}]
        self.messages.append({"role": "user", "content": self.task.user_turns[0]})
        self._record = EpisodeRecord(turn_answers=[None] * len(self.task.user_turns))
        self._user_turn = 0
        self._steps = 0
        self._call_seq = 0
        self._done = False
        self.episode_index += 1
        return self.task.user_turns[0], self._info([], [])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done or self.task is None:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        self._steps += 1
        parsed, refusal = self._parse(action)
        text = action if isinstance(action, str) else repr(action)
        calls = parsed.calls[: self.max_calls_per_step]
        # Bounded so that no action can produce an observation outside observation_space.
        errors = list(parsed.errors[: self.max_calls_per_step]) + ([refusal] if refusal else [])
        if len(parsed.calls) > self.max_calls_per_step:
            errors.append(
                CallError(
                    ErrorCode.INVALID_TOOL_CALL_FORMAT,
                    f"{len(parsed.calls)} calls in one message; at most {self.max_calls_per_step} are run",
                )
            )
        calls = [ToolCall(c.name, c.arguments, c.id or self._next_call_id()) for c in calls]
        assistant: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            assistant["tool_calls"] = tool_calls_to_openai(calls)
        self.messages.append(assistant)

        terminated = False
        results: list[ToolResult] = []
        if errors or calls:
            observation = self._run_calls(calls, errors, results)
        else:
            observation, terminated = self._answer(parsed.content)
        truncated = not terminated and self._steps >= (self.task.max_turns or self.max_turns)
        reward, components = 0.0, {}
        if terminated or truncated:
            self._done = True
            reward, components = self._score()
        info = self._info(results, errors)
        if components:
            info["reward_components"] = components
            info["success"] = reward >= 1.0
        if self.render_mode == "human":
            self.render()
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        text = self.transcript()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Stop what the backends started (MCP server processes)."""
        for backend in self._backends.values():
            if hasattr(backend, "close"):
                backend.close()
        self._backends.clear()
        super().close()

    # ------------------------------------------------------------------ helpers
    def transcript(self) -> str:
        """The episode so far as readable text."""
        lines = []
        for msg in self.messages:
            role = msg["role"]
            label = f"tool {msg.get('name', '')}".strip() if role == "tool" else role
            lines.append(f"[{label}] {msg.get('content', '')}")
        return "\n".join(lines)

    @property
    def record(self) -> EpisodeRecord:
        """Successful calls, per-turn answers and (after the episode) the final state hash."""
        return self._record

    def _pool(self, suite: TaskSuite, split: str | None) -> TaskSuite:
        pool = suite.filter(split=split) if split is not None else suite
        if len(pool) == 0:
            raise ValueError(f"suite {suite.name!r} has no tasks in split {split!r}; splits: {suite.splits}")
        return pool

    def _select_task(self, options: dict[str, Any]) -> Task:
        unknown = set(options) - {"task_id", "suite", "split"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; use task_id, suite, split")
        suite = load_suite(options["suite"]) if "suite" in options else self.suite
        if "task_id" in options:
            return suite.get(options["task_id"])
        pool = (
            self._pool(suite, options.get("split", self.split))
            if ("suite" in options or "split" in options)
            else self.pool
        )
        return pool[int(self.np_random.integers(len(pool)))]

    def _backend_for(self, task: Task) -> Backend:
        if callable(self.backend_spec):
            return self.backend_spec(task)
        kind, _, rest = self.backend_spec.partition(":")
        if kind == "mcp":  # one server for every task: it resets itself to each task's initial state
            if "mcp" not in self._backends:
                self._backends["mcp"] = MCPBackend(rest, timeout=self.tool_timeout or 10.0)
            return self._backends["mcp"]
        if not task.backend:
            raise ValueError(f"task {task.id!r} names no backend; set Task.backend or pass backend=<callable>")
        if task.backend not in self._backends:
            real = make_backend(task.backend, timeout=self.tool_timeout)
            if kind == "replay":
                real = ReplayBackend(rest, on_miss="error")
            elif kind == "cache":
                real = ReplayBackend(rest, fallback=real, on_miss="fallback", write_back=True)
            self._backends[task.backend] = real
        return self._backends[task.backend]

    def _next_call_id(self) -> str:
        self._call_seq += 1
        return f"call_{self._call_seq}"

    def _parse(self, action: Any) -> tuple[ParsedAction, CallError | None]:
        if not isinstance(action, str):
            msg = f"action must be a string (the assistant's message), got {type(action).__name__}"
            return ParsedAction("", [], []), CallError(ErrorCode.INVALID_TOOL_CALL_FORMAT, msg)
        if len(action) > self.max_action_chars:
            msg = f"action is {len(action)} characters; the limit is {self.max_action_chars}"
            return ParsedAction("", [], []), CallError(ErrorCode.INVALID_TOOL_CALL_FORMAT, msg)
        parsed = parse_calls(action)
        if parsed.is_answer and not parsed.content.strip():
            msg = "empty message: write a tool call or an answer for the user"
            return parsed, CallError(ErrorCode.INVALID_TOOL_CALL_FORMAT, msg)
        return parsed, None

    def _run_calls(self, calls: list[ToolCall], errors: list[CallError], results: list[ToolResult]) -> str:
        assert self.backend is not None
        shown: list[str] = []
        for err in errors:  # format problems: no call to run, but the agent is told what was wrong
            content = clip(
                json.dumps({"error": {"code": err.code.value, "message": err.message}}, ensure_ascii=False),
                self.max_result_chars,
            )
            self.messages.append(
                {"role": "tool", "tool_call_id": self._next_call_id(), "name": err.tool or "", "content": content}
            )
            shown.append(content)
        for call in calls:
            try:
                result = self.backend.execute(call)
            except Exception as exc:  # a backend must not raise; contain one that does
                result = ToolResult.failure(
                    call, ErrorCode.TOOL_EXECUTION_ERROR, f"backend error: {type(exc).__name__}: {exc}"
                )
            results.append(result)
            if result.ok:
                self._record.calls.append(ToolCall(call.name, call.arguments))
            content = clip(result.to_message_content(), self.max_result_chars)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
            shown.append(content)
        return "\n".join(f"<tool_response>\n{c}\n</tool_response>" for c in shown)

    def _answer(self, content: str) -> tuple[str, bool]:
        assert self.task is not None
        self._record.turn_answers[self._user_turn] = content
        if self._user_turn + 1 < len(self.task.user_turns):
            self._user_turn += 1
            user = self.task.user_turns[self._user_turn]
            self.messages.append({"role": "user", "content": user})
            return user, False
        return "", True

    def _score(self) -> tuple[float, dict[str, float]]:
        assert self.task is not None and self.backend is not None
        task = self.task
        self._record.final_state_hash = self.backend.state_hash()

        def expected() -> str:
            if task.id not in self._expected_hashes:
                self._expected_hashes[task.id] = reference_state_hash(task, lambda: self.real_backend_for(task))
            return self._expected_hashes[task.id]

        return score_episode(task, self._record, expected_state_hash=expected)

    def real_backend_for(self, task: Task) -> Backend:
        """A fresh real backend for ``task``: the reference state for ``state_match`` always comes from one,
        whatever backend answers the agent's calls."""
        if task.backend:
            return make_backend(task.backend, timeout=self.tool_timeout)
        if callable(self.backend_spec):
            return self.backend_spec(task)
        raise ValueError(f"task {task.id!r} names no backend")

    def abort(self, reason: str) -> dict[str, Any]:
        """End the episode now with reward 0 (e.g. an unusable imagined result); returns the info to report."""
        assert self.task is not None
        self._done = True
        components = {basis: 0.0 for basis in self.task.reward}
        return {"reward_components": components, "success": False, "aborted": reason}

    def _info(self, results: list[ToolResult], errors: list[CallError]) -> dict[str, Any]:
        assert self.task is not None
        return {
            "task_id": self.task.id,
            "domain": self.task.domain,
            "messages": copy.copy(self.messages),
            "tools": list(self.task.tools) or [s.to_openai() for s in (self.backend.tools if self.backend else [])],
            "tool_results": [r.to_dict() for r in results],
            "errors": [e.to_dict() for e in errors] + [r.error.to_dict() for r in results if r.error is not None],
            "user_turn": self._user_turn,
            "turn": self._steps,
        }
