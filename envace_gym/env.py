"""``ToolCallEnv`` (registered as ``EnvACE-ToolCall-v0``): a tool-calling conversation as a Gymnasium env.

Action: the assistant's message text. Each step parses it with `envace_gym.calls.parse_calls`;
calls are executed by the episode's backend (after its deterministic checks) and the observation is
their results; a message with no call is an answer, which moves to the next user turn or ends the
episode with the task's reward. Bad actions never raise: they become structured error observations.
Benchmark envs (BFCL, tau2) subclass it through the public hooks listed in `ToolCallEnv`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym

from .backends import CALL_KINDS, LEDGER, Backend, ReplayBackend, ToolResult, is_self_accounting, make_backend
from .backends.base import PendingCall, RequestingBackend, reference_state_hash
from .backends.isolated import TOOL_ISOLATIONS, real_backend
from .backends.spec import parse_backend_spec
from .binding import BOUND_BASES, bound_score
from .calls import (
    INVALID_CALL_CODES,
    CallError,
    ErrorCode,
    ParsedAction,
    ToolCall,
    json_text,
    parse_calls,
    tool_calls_to_openai,
    tool_names_of,
)
from .kept import KeptByIdentity
from .rewards import EpisodeRecord, score_episode
from .spaces import UnicodeText
from .suites import load_suite
from .task_checks import check_reference_calls
from .tasks import Task, TaskFormatError, TaskSuite
from .transcript import render_transcript
from .worker import PerEnvCall

if TYPE_CHECKING:
    from .imagination.protocol import (
        EnvRoleAnswer,
        JudgeRequest,
        ModelRequest,
        ModelUser,
        Request,
        UserRequest,
    )

__all__ = [
    "ToolCallEnv",
    "PendingStep",
    "StepPlay",
    "StepOutcome",
    "ResetPlay",
    "AnswerTurn",
    "EndTurn",
    "DEFAULT_SYSTEM_PROMPT",
    "clip",
    "play_here",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that can call tools. To call a tool, write "
    '<tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>; several such blocks '
    "in one message are run in parallel. When you have what you need, answer the user in plain text "
    "without any tool call."
)

EnvBackend = str | Callable[[Task], Backend]  # what ToolCallEnv(backend=...) takes

#: An answer's consequence as `ToolCallEnv.answer_turn` plays it: yields each simulated-user request,
#: is sent its answer, returns ``(observation, terminated)``.
AnswerTurn = Generator["UserRequest", "str | Exception | None", tuple[str, bool]]
#: An episode's end as `ToolCallEnv.end_turn` plays it: yields each judge request, is sent its answer,
#: returns ``(reward, components)``.
EndTurn = Generator["JudgeRequest", "str | Exception | None", tuple[float, dict[str, float]]]


T = TypeVar("T")


def play_here(
    turn: Generator[ModelRequest, Any, T],
    answer: Callable[[ModelRequest], str | Exception],
    sent: str | Exception | None = None,
) -> T:
    """Run a turn (`AnswerTurn`, `EndTurn`, or any generator of user and judge requests) to its end here,
    each request it yields answered by ``answer``; returns what the turn returns (``sent``: what it is sent
    first; None starts it)."""
    try:
        request = turn.send(sent)
        while True:
            request = turn.send(answer(request))
    except StopIteration as end:
        return end.value


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` with a visible marker of how much was dropped."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"...[truncated {len(text) - max_chars} chars]"


def _new_call_counts() -> dict[str, int]:
    """An episode's ``info["call_counts"]`` at its start: ``ok`` (calls that passed the deterministic checks)
    and ``failed`` (calls they rejected: did not parse, unknown tool, arguments outside the schema), the
    ``imagined`` calls among the ok ones (answered by the env role), and the episode's call-ledger bookings by
    kind (`envace_gym.backends.ledger`: ``live``, ``logged``, ``verifier``, ``diagnostic``)."""
    return {"ok": 0, "failed": 0, "imagined": 0, **dict.fromkeys(CALL_KINDS, 0)}


#: How an imagined episode is scored (``ToolCallEnv(imagined_reward=...)``).
IMAGINED_REWARDS = ("bound", "reference")


@dataclass
class PendingStep:
    """A step that `ToolCallEnv.begin_step` began and that waits for answers to its requests.

    ``requests`` are the requests to answer now: an env-role request (`ImagineRequest`) for an imagined call,
    a `UserRequest` for a simulated user's turn where a model plays the user, or a `JudgeRequest` for a
    judge's verdict on the ended episode where a model judges; each names who answers it (``role``). At most
    one, because each call of a message is asked with the answers to the calls before it in view (prompted:
    the conversation so far; inline: the actor's context), a user's turn follows the answer it replies to,
    and the judge reads the whole episode; empty when the step can finish. Plain data, so that a worker
    process can hand it to its parent.
    """

    step: int  # the episode's step it belongs to (``env.steps``)
    requests: list[Request] = field(default_factory=list)


#: What `ToolCallEnv.step` returns: ``(observation, reward, terminated, truncated, info)``.
StepOutcome = tuple[str, float, bool, bool, dict[str, Any]]
#: One step as `ToolCallEnv.play_step` plays it: yields each request (an imagined call's, a user's turn, a
#: judge's verdict), is sent its answer, returns the step's outcome.
StepPlay = Generator["Request", Any, StepOutcome]

#: Backend class -> whether its calls may wait on a model (`RequestingBackend`: it has ``run``), decided by
#: its class, once.
_REQUESTING: dict[type, bool] = {}


#: The start of an episode as `ToolCallEnv.play_reset` plays it: yields each request (a model user's opening
#: turn), is sent its answer, returns ``(observation, info)``.
ResetPlay = Generator["Request", Any, tuple[str, dict[str, Any]]]


@dataclass
class _Reset:
    """What a reset in flight began with: ``reset`` with the same seed and options ends it."""

    seed: int | None
    options: dict[str, Any] | None


@dataclass
class _StepInFlight:
    """A step begun by `ToolCallEnv.begin_step`: its play, the request it waits on, or (played out) its outcome."""

    action: Any  # step(action) ends the step with the same action
    play: StepPlay
    request: Request | None = None
    outcome: StepOutcome | None = None


class ToolCallEnv(PerEnvCall, gym.Env[str, str]):
    """A multi-turn tool-calling task as a Gymnasium environment.

    In a process vector env's worker, `PerEnvCall` lets the parent run its half-step with the worker's own
    action or answer (``envace_gym.worker``).

    Args:
        suite: a registered suite name (``"builtin"``, ``"builtin/retail"``) or a ``.jsonl`` task file.
        split: which split `reset` draws from (builtin: ``"train"``, ``"val"``, ``"test-id"``, ``"test"``;
            tau2, BFCL: ``"train"``, ``"test"``); ``None`` for all.
        tasks: tasks to use instead of ``suite`` (a `TaskSuite` or a list of `Task`).
        backend: ``"real"`` (each task's registered real backend), ``"replay:PATH"`` (results from a
            JSONL cache; a miss is an error), ``"cache:PATH"`` (cache first, then the real backend, whose
            answers are written back: recording), ``"mcp:COMMAND"`` (an MCP server over stdio, started with
            COMMAND, e.g. ``mcp:python -m envace_gym.envs.builtin.mcp_server``),
            ``"mcp:http://127.0.0.1:PORT/mcp"`` (a running MCP server over loopback HTTP), or a callable
            ``task -> Backend``. Imagined results: wrap the env in `envace_gym.SelfRehearsalEnv`.
        max_turns: assistant messages per episode before truncation (a task's own ``max_turns`` wins).
        tool_timeout: seconds one tool call may run before it becomes a ``TOOL_TIMEOUT`` error.
        tool_isolation: where the real backend's tools run: ``"auto"`` (the default: a toolkit that does not
            declare ``run_inline`` in a worker process, the builtin toolkits and BFCL/tau2 in this one; see
            `envace_gym.backends.isolated.real_backend`), ``"process"`` (every registered backend in a
            worker process per backend, killed and rebuilt when a call passes ``tool_timeout``; one IPC
            round trip per call) or ``"thread"`` (in this process; a hung call is abandoned, not stopped:
            for trusted, fast tools; toolkits that declare ``run_inline`` run in the caller's thread).
        tool_memory_mb: with ``tool_isolation="process"``, megabytes a worker may allocate beyond its start
            (a tool that allocates without bound then gets a ``TOOL_EXECUTION_ERROR``); None: no cap.
        max_action_chars: longer actions are refused with an error observation (and kept in history).
        max_calls_per_step: parallel calls beyond this are refused.
        max_result_chars: each tool result shown to the agent is cut to this length.
        system_prompt: used for tasks that carry no system message of their own.
        render_mode: ``"ansi"`` (``render()`` returns the transcript), ``"human"`` (prints it) or None
            (``render()`` warns and returns None, as Gymnasium's envs do; `transcript` gives the text).
        imagined_reward: how an episode whose results were imagined (`SelfRehearsalEnv`) is scored:
            ``"bound"`` (the default): against its task's checklist bound to what the episode showed
            (`envace_gym.binding`; the reward against the real values is reported as
            ``info["reward_reference"]``); ``"reference"``: against the real values, as a real episode is.
            Tasks graded on other bases (tau2, BFCL) keep their own checkers either way.

    ``reset(options=...)`` takes ``task_id``, ``suite``, ``split``, and ``backend``: a `Backend` that
    answers this one episode's calls instead of the env's own (the seam `SelfRehearsalEnv` uses;
    the env's configuration is not changed). `fork` copies an env at its current state.

    **Hooks for benchmark envs.** A subclass (see ``envs/bfcl/env.py``, ``envs/tau2/env.py``) overrides
    any of these public methods, calls ``super()`` where it extends rather than replaces, and returns what
    each documents; none of them is called by the user:

    * `backend_for` ``(task, given) -> Backend``: the backend that answers this episode (``given``:
      the one passed to ``reset``, if any); e.g. wrap it to hide tools that a turn has not offered yet.
      A wrapping backend should implement ``copy()`` too, so that `fork` works.
    * `on_calls` ``(calls, errors, results) -> None``: one message's calls once they ran (``errors``:
      its format errors; ``results``: what each call gave, in order); default nothing. Extend it to log
      calls. The env executes them itself (`play_step`).
    * `on_answer` ``(content) -> (observation, terminated)``: an assistant message without calls;
      default: the next scripted user turn, or the end of the episode.
    * `answer_turn` ``(content)``: the same as a generator that yields a
      `UserRequest` wherever a model must write the user's turn and is sent
      its answer; default: `on_answer`, with no request. Replace it to ask a simulated user (tau2),
      and `answer_user` to answer its requests in a whole step.
    * `end_turn` ``()``: the end of an episode as a generator that yields a `JudgeRequest`
      wherever a model must judge and is sent its answer, returning ``(reward, components)``; default:
      `end_episode`, with no request. Replace it where a model judges (tau2's NL assertions), and
      `answer_judge` to answer its requests in a whole step.
    * `score` ``() -> (reward, components)``: at the end of an episode. Default: the task's reward
      bases, each scored by the function registered with `envace_gym.rewards.register_reward_basis`
      (which receives the env as ``ctx.env``), multiplied; register your benchmark's basis there.
    * `build_info` ``(results, errors) -> dict``: the ``info`` of a step or reset; extend it to add
      or filter keys (e.g. hide tools).
    * `abort` ``(reason) -> dict``: end the episode now with reward 0; returns the ``info`` keys to
      report. Extend it to record how your benchmark names such an end.
    * `limit_reached` ``() -> bool``: whether the episode ends, truncated, with this step; default: the
      turn limit. Extend it for a benchmark's own limit (tau2's ``max_errors``): the step then plays the
      episode's end (`end_turn`), its judge's requests included.
    * `end_episode` ``() -> (reward, components)``: mark the episode over and score it (what `end_turn`
      returns by default).
    * `prepare_rehearsal` ``(user) -> None``: called on a private-rehearsal snapshot (a fork holding
      the blind task); default nothing. Override it where more than the tools is part of the world (tau2's
      simulated user reads the task's scenario: its fork hands the user's turns to ``user``, an imagined user).
      `rehearsal_metadata` names the task metadata keys the snapshot keeps (default none).

    **A step is one generator** (`play_step`, how a rollout loop batches the models of many envs): it yields
    a request wherever a model must answer (an imagined call's result, from a backend whose calls wait on a
    model, `envace_gym.backends.RequestingBackend` such as `ImaginedBackend`; a simulated user's turn a model
    writes, `answer_turn`; a judge's verdict a model gives, `end_turn`), is sent the answer, and returns the
    step's outcome. ``step(action)`` plays it here, each request answered by this env's own answerers.
    `begin_step` ``(action) -> PendingStep`` plays it to its first request, `continue_step` ``(answers)``
    hands over an answer and plays on to the next, and ``step(action)`` with the same action, on the
    outermost wrapper, ends the step: every wrapper sees it as an ordinary step (an action wrapper maps the
    action again, to the text the step began with). Begin through the wrappers with
    `envace_gym.imagination.halfstep.begin_step`, which applies each ``gym.ActionWrapper``'s mapping on the
    way in. Hooks run as in a whole step.

    State a hook may read: ``task``, ``backend``, ``parsed`` (the step's `ParsedAction`: hooks reuse
    it instead of parsing the message again), ``messages`` (the chat so far, OpenAI format),
    ``user_turn`` (index of the current user turn; ``on_answer`` advances it), ``record`` (successful calls
    and per-turn answers, what the builtin bases score), ``steps`` (assistant messages so far).
    """

    metadata = {"render_modes": ["ansi", "human"], "render_fps": 4}

    #: Attributes that `fork` shares with the copy instead of copying (large and never mutated by an
    #: episode; ``spec``, gym.make's, holds the make kwargs, a whole task list among them). A subclass adds its
    #: own (a user played by a model, say).
    fork_shared: tuple[str, ...] = (
        "suite", "pool", "task", "backend_spec", "observation_space", "action_space", "spec",
    )  # fmt: skip
    #: Task metadata keys a private-rehearsal fork keeps (``task.blind(keep=...)``): only keys that schedule
    #: what the agent is shown, never ground truth (BFCL: ``holdout``, the turn each held-out tool is offered).
    rehearsal_metadata: tuple[str, ...] = ()

    def __init__(
        self,
        suite: str = "builtin",
        split: str | None = "train",
        tasks: TaskSuite | Sequence[Task] | None = None,
        backend: EnvBackend = "real",
        max_turns: int = 12,
        tool_timeout: float | None = 5.0,
        tool_isolation: str = "auto",
        tool_memory_mb: int | None = None,
        max_action_chars: int = 65_536,
        max_calls_per_step: int = 16,
        max_result_chars: int = 8_192,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        render_mode: str | None = None,
        imagined_reward: str = "bound",
    ) -> None:
        if imagined_reward not in IMAGINED_REWARDS:
            raise ValueError(f"imagined_reward must be one of {IMAGINED_REWARDS}, got {imagined_reward!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        if isinstance(backend, str):
            spec = parse_backend_spec(backend)
            if spec.imagined:
                raise ValueError(
                    f"backend {backend!r} is imagined: wrap the env in envace_gym.SelfRehearsalEnv(env, imaginer) "
                    "(the CLI's --backend self does this), or use gym.make_vec(..., backend=..., imaginer=policy)"
                )
        if isinstance(tasks, TaskSuite):
            self.suite = tasks
        else:
            self.suite = TaskSuite(tasks, "custom") if tasks is not None else load_suite(suite)
        self.split = split
        self.pool = self._pool(self.suite, split)
        self.backend_spec = backend
        if tool_isolation not in TOOL_ISOLATIONS:
            raise ValueError(f"tool_isolation must be one of {TOOL_ISOLATIONS}, got {tool_isolation!r}")
        self.max_turns = max_turns
        self.tool_timeout = tool_timeout
        self.tool_isolation = tool_isolation
        if tool_memory_mb is not None and tool_isolation != "process":
            raise ValueError("tool_memory_mb applies to tool_isolation='process' only")
        self.tool_memory_mb = tool_memory_mb
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
        self.record = EpisodeRecord()
        self.reward_reference: float | None = None  # an imagined episode's reward against the real values
        self.imagined_reward = imagined_reward
        self.user_turn = 0
        self.steps = 0
        self.done = True
        self.call_counts = _new_call_counts()
        self._call_seq = 0
        self.parsed = ParsedAction("", [], [])
        self._in_flight: _StepInFlight | None = None  # the step begun and not finished (see begin_step)
        self.episode_index = -1  # counts resets: lets observers tell episodes apart
        self.scored = True  # False on private rehearsal forks: episodes end unscored
        # The offered tool names (`offered_tool_names`), read once per task's list of tools, not at every step
        # and every reset; a backend's list (a task that lists none) until the backend hands out another.
        self._offered_by_task: KeptByIdentity[frozenset[str]] = KeptByIdentity(65_536)
        self._offered_by_backend: tuple[Any, frozenset[str]] = (None, frozenset())

    @property
    def backend(self) -> Backend | None:
        """The backend answering this episode's calls."""
        return self._backend

    @backend.setter
    def backend(self, backend: Backend | None) -> None:
        # Whether its calls may wait on a model: a Protocol check costs tens of microseconds (a third of a plain
        # step), and a mixed suite switches backends every episode, so it is made once per backend class.
        kind = type(backend)
        requesting = _REQUESTING.get(kind)
        if requesting is None:
            requesting = _REQUESTING[kind] = isinstance(backend, RequestingBackend)
        self._requesting = requesting
        self._backend = backend

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode: `play_reset` played here, its requests answered by this env's own answerers (a
        step in flight is abandoned). After `begin_reset` and a `continue_step` per request, ``reset`` with the
        same seed and options ends that reset. ``options``: ``task_id``, or ``suite`` and/or ``split`` to draw
        from; ``backend`` (a `Backend`) answers this episode instead of the env's own."""
        flight, self._in_flight = self._in_flight, None
        if flight is not None and flight.action == _Reset(seed, options):
            if flight.outcome is None:
                self._in_flight = flight
                raise ValueError("the reset's requests wait for answers: hand them over with continue_step()")
            return flight.outcome  # type: ignore[return-value]
        with LEDGER.tally(self.call_counts):  # the episode's bookings (info["call_counts"])
            return play_here(self.play_reset(seed=seed, options=options), self._answer_here)

    def begin_reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> PendingStep:
        """The first half of `reset`: `play_reset` up to its first request (a model user's opening turn), or to
        its end; `continue_step` answers each request, ``reset`` with the same seed and options ends it."""
        self._in_flight = _StepInFlight(_Reset(seed, options), self.play_reset(seed=seed, options=options))
        return self._play_on(None)

    def play_reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetPlay:
        """The start of an episode, as a generator (see `ResetPlay`): the task drawn, its backend reset, the
        first observation returned. It yields no request here; an env whose opening is a model's turn (tau2's
        model user) extends it, ``yield from super().play_reset(...)`` first."""
        yield from ()
        gym.Env.reset(self, seed=seed)
        options = dict(options or {})
        override = options.pop("backend", None)
        self.task = self._select_task(options)
        self.backend = self.backend_for(self.task, override)
        self.call_counts.clear()  # in place: a tally books into it (what the backend's reset books included)
        self.call_counts.update(_new_call_counts())
        self.backend.reset(self.task, seed=seed)
        if not self.task.tools and self.task.reference:
            self._check_reference(self.task)
        self.messages = [{"role": "system", "content": self.task.system or self.system_prompt}]
        self.messages.append({"role": "user", "content": self.task.user_turns[0]})
        self.record = EpisodeRecord(turn_answers=[None] * len(self.task.user_turns))
        self.reward_reference: float | None = None
        self.user_turn = 0
        self.steps = 0
        self._call_seq = 0
        self.done = False
        self.episode_index += 1
        return self.task.user_turns[0], self.build_info([], [])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Gymnasium's step: `play_step` played here, its requests answered by this env's own answerers (an
        imagined call by its backend's env role, a user's turn by `answer_user`, a verdict by `answer_judge`).
        After `begin_step` ``(action)`` and a `continue_step` per request, ``step(action)`` with the same
        action ends that step (see the class docstring)."""
        if isinstance(action, PendingStep):
            raise TypeError("step() takes the action: end a half-step with step(action), the action begin_step took")
        flight = self._in_flight
        if flight is None:
            with LEDGER.tally(self.call_counts):  # the episode's bookings (info["call_counts"])
                return play_here(self.play_step(action), self._answer_here)
        if isinstance(flight.action, _Reset):
            raise RuntimeError("a reset is in flight: end it with reset() on the same seed and options")
        if flight.action is not action and flight.action != action:
            raise RuntimeError(
                f"a step begun with {clip(repr(flight.action), 80)} is in flight: end it with step() on that "
                "action (a wrapper between begin_step and step must map actions as a gym.ActionWrapper does)"
            )
        if flight.outcome is None:
            raise ValueError("the step's requests wait for answers: hand them over with continue_step()")
        self._in_flight = None
        return flight.outcome

    def begin_step(self, action: str) -> PendingStep:
        """The first half of `step`: `play_step` up to its first request (in ``pending.requests``), or to its
        end where it makes none; `continue_step` answers each request, ``step(action)`` ends the step."""
        if self._in_flight is not None:
            raise RuntimeError("a step is in flight: end it with step(action) first")
        self._in_flight = _StepInFlight(action, self.play_step(action))
        return self._play_on(None)

    def continue_step(self, answers: Sequence[EnvRoleAnswer | str | Exception | None]) -> PendingStep:
        """Answer the step's request; play on to the next one. An env-role request's answer is a generation, a
        string, or the exception the env role raised (the episode sees it as that call's error); a user
        request's is the user's message, the exception the user raised, or None (this env's own user answers
        it, `answer_user`); a judge request's the same of the judge (`answer_judge`)."""
        flight = self._in_flight
        if flight is None or flight.request is None:
            raise RuntimeError("no request waits for an answer (begin_step first)")
        if len(answers) != 1:
            raise ValueError(f"{len(answers)} answers for 1 request")
        answer = answers[0]
        if answer is None and flight.request.role != "env_role":
            answer = self._answer_here(flight.request)
        return self._play_on(answer)

    def play_step(self, action: str) -> StepPlay:
        """One step, as one generator (see `StepPlay`): parse ``action`` and run its checks; run each call
        on the episode's backend (a call that waits on a model, an imagined one, yields its request); report
        the calls (`on_calls`), or play the answer's consequence (`answer_turn`: a model user's turn is a
        request); where the step ends the episode, its end (`end_turn`: a model judge's verdicts are
        requests); return ``(observation, reward, terminated, truncated, info)``. `step` plays it here;
        `begin_step`/`continue_step` let a rollout loop (or a worker's parent) answer the requests, batched
        across envs. No model is called here: every model's turn is a request."""
        if self.done or self.task is None:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        self.steps += 1
        parsed, refusal = self._parse(action)
        self.parsed = parsed  # the step's one parse, for hooks (an over-long action is never parsed)
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
        results: list[ToolResult] = []
        if calls or errors:
            shown = self._show_errors(errors)
            for call in calls:
                result = self._call(call, stopped=any(r.fatal for r in results))
                if not isinstance(result, ToolResult):  # the call waits on a model: its request goes out
                    try:
                        result = yield from result
                    except Exception as exc:  # a backend must not raise; contain one that does
                        message = f"backend error: {type(exc).__name__}: {exc}"
                        result = ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, message)
                results.append(result)
                shown.append(self._record_result(call, result))
            self.on_calls(calls, errors, results)
            observation = "\n".join(f"<tool_response>\n{c}\n</tool_response>" for c in shown)
            terminated = False
        else:
            observation, terminated = yield from self.answer_turn(self.parsed.content)
        truncated = not terminated and not self.done and self.limit_reached()
        reward, components = 0.0, {}
        # A step whose imagined result was unusable ends in abort (below), unless it ends at a limit anyway.
        if terminated or truncated:
            reward, components = yield from self.end_turn()
        self._count_calls(results, errors)
        fatal = next((r for r in results if r.fatal), None)
        ended: dict[str, Any] = {}
        if fatal is not None and not truncated and not self.done:
            # The backend's message says what was unusable ("imagined result unusable: ..."): reported as is.
            ended = self.abort(fatal.error.message if fatal.error else "imagined result unusable")
            terminated = True
        info = self.build_info(results, errors)
        if components:
            info["reward_components"] = components
            info["success"] = reward >= 1.0
            if self.reward_reference is not None:
                info["reward_reference"] = self.reward_reference
        info.update(ended)
        if self.render_mode == "human":
            self.render()
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        """The episode's transcript as Gymnasium renders: returned under ``render_mode="ansi"``, printed
        under ``"human"`` (None returned); with no render mode, None and a warning (`transcript` returns
        the text whatever the mode)."""
        if self.render_mode is None:
            env_id = self.spec.id if self.spec is not None else "EnvACE-ToolCall-v0"
            gym.logger.warn(
                "You are calling render method without specifying any render mode. "
                "You can specify the render_mode at initialization, "
                f'e.g. gym.make("{env_id}", render_mode="ansi"); env.unwrapped.transcript() returns the text'
            )
            return None
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

    # ------------------------------------------------------------------ public helpers
    def transcript(self) -> str:
        """The episode so far as readable text."""
        return render_transcript(self.messages)

    def evaluation_order(self, episodes: int | None = None, seed: int = 0) -> list[str]:
        """The task ids of this env's pool in its seeded evaluation order (``pool.episode_order``), as plain
        strings, for callers that reach the env only through calls (a process-based vector env's ``call``)."""
        return [task.id for task in self.pool.episode_order(episodes, seed)]

    def fork(self, backend: Backend | None = None, task: Task | None = None) -> ToolCallEnv:
        """An independent copy of this env at its current state, backend included: steps on the copy do not
        affect this env, nor the other way round (test-time rehearsal runs on forks). The task suite and
        the other attributes in `fork_shared` are shared.

        Args:
            backend: answers the fork's calls from now on (reset to the fork's task; it sees the conversation
                so far through ``bind_conversation`` if it has one) instead of a copy of this env's backend,
                which is then never touched: a mid-episode swap to an imagined backend. Default: a copy,
                which raises `BackendCopyError` when the episode's backend cannot be copied (an MCP
                server).
            task: the fork's task from now on, e.g. ``task.blind()`` for a fork that must not see the
                reference; the fork's cached reference state hashes are dropped with it.
        """
        memo: dict[int, Any] = {
            id(getattr(self, name)): getattr(self, name) for name in self.fork_shared if hasattr(self, name)
        }
        if self.backend is not None:
            memo[id(self.backend)] = backend if backend is not None else self.backend.copy()
        # Backends built for other tasks are not the episode's: the fork builds its own when it needs them.
        memo[id(self._backends)] = {}
        memo[id(self._in_flight)] = None  # a step in flight is this env's to end (its play cannot be copied)
        if task is not None:
            memo[id(self._expected_hashes)] = {}
        fork = copy.deepcopy(self, memo)
        if task is not None:
            fork.task = task
        if backend is not None:
            fork.backend = backend
            backend.reset(fork.task)
        return fork

    def prepare_rehearsal(self, user: ModelUser | None) -> None:
        """Hook: make this fork (already holding the blind task and a detached backend) fit for private
        rehearsal (`RehearsalFork` calls it once on its snapshot). ``user``: an
        `ImaginedUser` (the rehearsing policy playing the user from the visible
        conversation), or None when none was given. The default does nothing: the scripted user turns of a
        task are part of the conversation."""

    def real_backend_for(self, task: Task) -> Backend:
        """A fresh real backend for ``task``: the reference state for ``state_match`` always comes from one,
        whatever backend answers the agent's calls."""
        if task.backend:
            return make_backend(task.backend, timeout=self.tool_timeout)
        if callable(self.backend_spec):
            return self.backend_spec(task)
        raise ValueError(f"task {task.id!r} names no backend")

    # ------------------------------------------------------------------ hooks (see the class docstring)
    def backend_for(self, task: Task, given: Backend | None = None) -> Backend:
        """The backend that answers ``task``'s episode: ``given`` (the one passed to ``reset`` with
        ``options={"backend": ...}``) when there is one, else the env's own (built once per backend name,
        then reset per episode). Override it to wrap either."""
        if given is not None:
            return given
        if callable(self.backend_spec):
            return self.backend_spec(task)
        spec = parse_backend_spec(self.backend_spec)
        if spec.kind == "mcp":  # one server for every task: it resets itself to each task's initial state
            if "mcp" not in self._backends:
                from .backends.mcp import MCPBackend

                self._backends["mcp"] = MCPBackend(spec.target, timeout=self.tool_timeout or 10.0)
            return self._backends["mcp"]
        if not task.backend:
            raise ValueError(f"task {task.id!r} names no backend; set Task.backend or pass backend=<callable>")
        if task.backend not in self._backends:
            if spec.kind == "replay":
                built: Backend = ReplayBackend(spec.target, on_miss="error")
            elif spec.kind == "cache":
                real = self._make_real(task.backend)
                built = ReplayBackend(spec.target, fallback=real, on_miss="fallback", write_back=True)
            else:
                built = self._make_real(task.backend)
            self._backends[task.backend] = built
        return self._backends[task.backend]

    def _make_real(self, name: str) -> Backend:
        return real_backend(name, self.tool_isolation, timeout=self.tool_timeout, memory_mb=self.tool_memory_mb)

    def on_calls(self, calls: list[ToolCall], errors: list[CallError], results: list[ToolResult]) -> None:
        """One message's ``calls`` once they ran (``errors``: its format errors; ``results``: what each call
        gave, in order; after a ``fatal`` result the rest were not run). Default: nothing."""

    def answer_turn(self, content: str) -> AnswerTurn:
        """An answer's consequence, as a generator (see `AnswerTurn`): it yields a
        `UserRequest` wherever a model must write the user's turn, so that
        the rollout loop can batch those turns across envs. Default: `on_answer`, with no request."""
        yield from ()
        return self.on_answer(content)

    def answer_user(self, request: UserRequest) -> str | Exception:
        """This env's own answer to one of its user requests (a whole step; a worker whose parent cannot
        reach its user): the user's message, or the exception it raised. Default: none is ever asked."""
        raise NotImplementedError(f"{type(self).__name__} asks no user requests")

    def end_turn(self) -> EndTurn:
        """The episode's end, as a generator (see `EndTurn`): it yields a `JudgeRequest` wherever a model
        must judge, so that the rollout loop can batch the verdicts across envs. Default: `end_episode`,
        with no request."""
        yield from ()
        return self.end_episode()

    def answer_judge(self, request: JudgeRequest) -> str | Exception:
        """This env's own answer to one of its judge requests (a whole step; a worker): the judge's reply, or
        the exception it raised. Default: none is ever asked."""
        raise NotImplementedError(f"{type(self).__name__} asks no judge requests")

    def on_answer(self, content: str) -> tuple[str, bool]:
        """An answer (a message without calls): the next user turn, or the end of the episode."""
        assert self.task is not None
        self.record.turn_answers[self.user_turn] = content
        if self.user_turn + 1 < len(self.task.user_turns):
            self.user_turn += 1
            user = self.task.user_turns[self.user_turn]
            self.messages.append({"role": "user", "content": user})
            return user, False
        return "", True

    def limit_reached(self) -> bool:
        """Whether the episode ends, truncated, with this step: its turn limit (the task's ``max_turns``, else
        the env's). Extend it for a benchmark's own limit (tau2's ``max_errors``)."""
        assert self.task is not None
        return self.steps >= (self.task.max_turns or self.max_turns)

    def score(self) -> tuple[float, dict[str, float]]:
        """The episode's reward and its components, from the task's registered reward bases."""
        assert self.task is not None and self.backend is not None
        task, backend, record = self.task, self.backend, self.record

        def final() -> str:  # hashed only when a basis asks (most tasks are not graded on state)
            if record.final_state_hash is None:
                record.final_state_hash = backend.state_hash()
            return record.final_state_hash

        def expected() -> str:
            if task.id not in self._expected_hashes:
                self._expected_hashes[task.id] = reference_state_hash(task, lambda: self.real_backend_for(task))
            return self._expected_hashes[task.id]

        reward, components = score_episode(task, record, expected_state_hash=expected, env=self, final_state_hash=final)
        if self.bound_reward_applies():
            # The actor saw imagined results: score it against what it was shown (the checklist), and keep the
            # reward against the real world's values beside it, to report how often the binding changed it.
            self.reward_reference = reward
            return bound_score(task, record)
        return reward, components

    def bound_reward_applies(self) -> bool:
        """Whether this episode is scored by its task's checklist bound to observations (`envace_gym.binding`):
        its results were imagined (the backend says ``imagined``), ``imagined_reward`` is ``"bound"``, and the
        task is graded on bases a checklist can score (tau2's and BFCL's checkers are kept)."""
        return (
            self.imagined_reward == "bound"
            and bool(getattr(self.backend, "imagined", False))
            and self.task is not None
            and all(b in BOUND_BASES for b in self.task.reward)
        )

    def offered_tool_names(self) -> frozenset[str]:
        """The names of the tools this episode offers the agent (the ``info["tools"]`` it is shown: the
        task's, else its backend's); what `parse_calls` is given as declared."""
        if self.task is None or not self.task.tools:
            if self.backend is None:
                return frozenset()
            tools = self.backend.tools  # read once until the backend hands out another list
            seen, names = self._offered_by_backend
            if tools is not seen:
                names = tool_names_of(tools)
                self._offered_by_backend = (tools, names)
            return names
        tools = self.task.tools
        names = self._offered_by_task.get(tools)
        return names if names is not None else self._offered_by_task.put(tools, tool_names_of(tools))

    def build_info(self, results: list[ToolResult], errors: list[CallError]) -> dict[str, Any]:
        """The ``info`` dict of a reset or step (see the README for its keys)."""
        assert self.task is not None
        info = {
            "task_id": self.task.id,
            "domain": self.task.domain,
            "messages": copy.copy(self.messages),
            "tools": list(self.task.tools) or [s.to_openai() for s in (self.backend.tools if self.backend else [])],
            "tool_results": [r.to_dict() for r in results],
            "errors": [e.to_dict() for e in errors] + [r.error.to_dict() for r in results if r.error is not None],
            "user_turn": self.user_turn,
            "turn": self.steps,
            "call_counts": dict(self.call_counts),
        }
        samples = [r.sample for r in results if r.sample is not None]
        if samples:
            info["env_role_samples"] = samples
        return info

    def abort(self, reason: str) -> dict[str, Any]:
        """End the episode now with reward 0 (e.g. an unusable imagined result); returns the info to report."""
        assert self.task is not None
        self.done = True
        components = {basis: 0.0 for basis in self.task.reward}
        return {"reward_components": components, "success": False, "aborted": reason}

    def end_episode(self) -> tuple[float, dict[str, float]]:
        """Mark the episode over and score it (`score`), unless the env is not ``scored`` (a private
        rehearsal fork: reward 0, and nothing of the reference is read)."""
        self.done = True
        return self.score() if self.scored else (0.0, {})

    # ------------------------------------------------------------------ internals
    def _play_on(self, answer: Any) -> PendingStep:
        """Send the step in flight ``answer`` (None starts it) and keep what it yields next: a request, or its
        outcome; a hook or check that raised ends the step, as it does in a whole step."""
        flight = self._in_flight
        assert flight is not None
        try:
            with LEDGER.tally(self.call_counts):  # the episode's bookings (info["call_counts"])
                flight.request = flight.play.send(answer)
        except StopIteration as done:
            flight.request, flight.outcome = None, done.value
        except BaseException:
            self._in_flight = None
            raise
        return PendingStep(self.steps, [flight.request] if flight.request is not None else [])

    def _answer_here(self, request: Request) -> Any:
        """This env's own answer to a request: an imagined call's by its backend's env role (``answer_here``),
        a user's turn by `answer_user`, a verdict by `answer_judge`."""
        if request.role == "judge":
            return self.answer_judge(request)  # type: ignore[arg-type]
        if request.role == "user":
            return self.answer_user(request)  # type: ignore[arg-type]
        return self.backend.answer_here(request)  # type: ignore[union-attr]

    def _show_errors(self, errors: list[CallError]) -> list[str]:
        """Show the backend the conversation, and the agent its format ``errors`` (no call to run); returns the
        tool messages shown so far."""
        assert self.backend is not None
        bind = getattr(self.backend, "bind_conversation", None)
        if bind is not None:  # a backend whose answers depend on the conversation (an imagined one)
            bind(self.messages)
        shown = []
        for err in errors:
            payload = {"error": {"code": err.code.value, "message": err.message}}
            content = clip(json_text(payload), self.max_result_chars)
            call_id = self._next_call_id()
            self.messages.append({"role": "tool", "tool_call_id": call_id, "name": err.tool or "", "content": content})
            shown.append(content)
        return shown

    def _call(self, call: ToolCall, stopped: bool) -> ToolResult | PendingCall:
        """``call`` run on the episode's backend: its result, or (a backend whose calls wait on a model, an
        imagined one) maybe the call pending on its request. ``stopped``: an earlier result of the message
        was fatal, so it is not run."""
        backend = self.backend
        assert backend is not None
        if stopped:
            message = "not run: an earlier imagined result was unusable"
            return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, message)
        try:
            if self._requesting:
                return backend.run(call)  # type: ignore[attr-defined]  # books its own calls (the ledger): imagined ones reach no real tool
            result = backend.execute(call)
        except Exception as exc:  # a backend must not raise; contain one that does
            message = f"backend error: {type(exc).__name__}: {exc}"
            return ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, message)
        # The call ledger: a backend that books its own calls (replay) knows which reached a real tool; any
        # other backend is real, and each call that passed the checks ran on it.
        if not is_self_accounting(backend) and (result.error is None or result.error.code not in INVALID_CALL_CODES):
            LEDGER.record("live")
        return result

    def _record_result(self, call: ToolCall, result: ToolResult) -> str:
        """Record ``call``'s result in the episode (its record and messages); returns the content shown."""
        if result.ok:
            self.record.calls.append(ToolCall(call.name, call.arguments))
            self.record.results.append(result.content)
        content = clip(result.to_message_content(), self.max_result_chars)
        self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
        return content

    def _count_calls(self, results: list[ToolResult], errors: list[CallError]) -> None:
        # A call is valid when it parsed, named an offered tool and fit its schema; "no such order" or a
        # timeout is the world's answer to a valid call.
        invalid = len(errors) + sum(1 for r in results if r.error is not None and r.error.code in INVALID_CALL_CODES)
        self.call_counts["ok"] += len(results) + len(errors) - invalid
        self.call_counts["failed"] += invalid
        self.call_counts["imagined"] += sum(1 for r in results if r.sample is not None)  # the env role answered

    def _pool(self, suite: TaskSuite, split: str | None) -> TaskSuite:
        pool = suite.filter(split=split) if split is not None else suite
        if len(pool) == 0:
            raise ValueError(f"suite {suite.name!r} has no tasks in split {split!r}; splits: {suite.splits}")
        return pool

    def _check_reference(self, task: Task) -> None:
        # A task that lists no tools takes its backend's: only now can its reference calls be checked against
        # them (`check_reference_calls`), once per task. A backend that knows no tools of its own (replayed
        # or imagined results of a tool-less task) has nothing to check against.
        checked = self.__dict__.setdefault("_checked_tasks", {})
        if checked.get(task.id) is task or not self.backend.tools:
            return
        specs = {s.name: s for s in self.backend.tools}
        owner = f"the tools of backend {task.backend!r}" if task.backend else "the episode's backend's tools"
        problem = check_reference_calls(task, specs, owner=owner)
        if problem is not None:
            raise TaskFormatError(f"task {task.id!r}: {problem}")
        checked[task.id] = task

    def _select_task(self, options: dict[str, Any]) -> Task:
        unknown = set(options) - {"task_id", "suite", "split"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; use task_id, suite, split, backend")
        suite = load_suite(options["suite"]) if "suite" in options else self.suite
        if "task_id" in options:
            return suite.get(options["task_id"])
        if "suite" in options or "split" in options:
            pool = self._pool(suite, options.get("split", self.split))
        else:
            pool = self.pool
        return pool[int(self.np_random.integers(len(pool)))]

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
        # The declared tools decide whether prose that looks like a call ("Refund(s) processed ...") is one.
        parsed = parse_calls(action, self.offered_tool_names())
        if parsed.is_answer and not parsed.content.strip():
            msg = "empty message: write a tool call or an answer for the user"
            return parsed, CallError(ErrorCode.INVALID_TOOL_CALL_FORMAT, msg)
        return parsed, None
