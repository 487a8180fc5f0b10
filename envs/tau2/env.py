"""``Tau2Env`` (``EnvACE-Tau2-v0``): a tau2-bench domain as a Gymnasium env, scored as tau2 scores it.

The episode is tau2's conversation: the agent greets, a simulated user opens with the task's request, and
every agent message without a tool call goes to the user, whose reply is the next observation. The episode
ends when the user stops (a stop token) or a limit is hit (max_turns, max_errors, a failing user: reward 0,
as in tau2). As with tau2's conversational agent, the agent itself cannot end the conversation (``###STOP###``
is a solo-mode token there; solo mode is not offered). See `scoring` for the reward and `users`
for users.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Generator, Sequence
from typing import Any

from envace_gym.backends import LEDGER
from envace_gym.calls import (
    INVALID_CALL_CODES,
    ErrorCode,
    ToolCall,
    format_calls,
    parse_calls,
    tool_calls_to_openai,
    tool_names_of,
)
from envace_gym.env import AnswerTurn, EndTurn, ResetPlay, ToolCallEnv
from envace_gym.imagination.protocol import JudgeRequest, ModelRole, ModelUser, UserRequest
from envace_gym.tasks import Task, TaskSuite

from . import _runtime
from .backend import Tau2Backend, user_tool_schemas
from .domains import check_domain
from .judge import make_judge
from .scoring import assertions_to_judge, score_log, transcript
from .tasks import load_suite
from .trajectory import (
    EpisodeLog,
    LoggedCall,
    LoggedMessage,
    log_from_history,
    result_content,
)
from .users import imagined_user_view, is_stop, make_user, user_system_prompt

__all__ = ["Tau2Env", "GREETING"]

#: The agent's first message when a task has no message history (tau2's orchestrator sends one too).
GREETING = "Hi! How can I help you today?"


class Tau2Env(ToolCallEnv):
    """A tau2-bench domain as a Gymnasium env.

    Args:
        domain: ``"airline"``, ``"retail"``, ``"telecom"`` or ``"mock"``.
        user: who plays the customer: ``"scripted"`` (`ScriptedUser`, the default),
            ``"lm"`` (the embedded model), ``"lm:SPEC"`` (``LMPolicy.from_spec(SPEC)``), an LMPolicy, or any
            object with ``reply(messages, tools)`` (see `users`).
        judge: ``None`` (default: NL assertions are not graded), an LMPolicy, or a callable
            ``(assertions, transcript) -> [bool]`` (see `judge`).
        split: ``"test"`` (default), ``"train"`` (tau2's split files) or ``None`` for all tasks.
        max_turns: assistant messages before the episode is cut (reward 0, tau2's ``max_steps``).
        max_errors: failed tool calls before the episode is cut (reward 0, tau2's ``max_errors``).
        max_user_tool_rounds: user tool-call rounds in one user turn before the user is declared stuck.
        replay_on_score: replay the episode's calls on a fresh environment for the DB and assertion checks
            even when the backend is real (tau2's way; the same state, slower). Imagined results always replay.
        suite: ``"tau2/<domain>"`` (the CLI passes it); must agree with ``domain``.
        tasks: your own `TaskSuite` of tau2 tasks (e.g. from `tasks.build_task`).
        **kwargs: the rest of `ToolCallEnv`'s arguments (``backend``, ``render_mode``...).

    ``env.unwrapped.log`` is the episode as tau2 sees it (`EpisodeLog`; turn it into
    tau2 messages with `to_tau2_messages`). At the end, ``info["tau2"]`` holds the
    termination reason and what each check found.
    """

    #: The judge (possibly a model) is shared by forks; the user is copied (a scripted one keeps per-episode
    #: state; an LM user shares its model, see ``LMUser.__deepcopy__``).
    fork_shared = (*ToolCallEnv.fork_shared, "judge", "user_tools")

    def __init__(
        self,
        domain: str = "retail",
        user: Any = "scripted",
        judge: Any = None,
        split: str | None = "test",
        max_turns: int = 100,
        max_errors: int = 10,
        max_user_tool_rounds: int = 8,
        replay_on_score: bool = False,
        suite: str | None = None,
        tasks: TaskSuite | Sequence[Task] | None = None,
        **kwargs: Any,
    ) -> None:
        check_domain(domain)
        if suite is not None and suite != f"tau2/{domain}":
            raise ValueError(
                f"suite {suite!r} does not match domain {domain!r}; pass domain= only (suite tau2/{domain})"
            )
        super().__init__(
            split=split, tasks=tasks if tasks is not None else load_suite(domain), max_turns=max_turns, **kwargs
        )
        self.domain = domain
        self.user = make_user(user)
        self.judge = make_judge(judge)
        self.max_errors = max_errors
        self.max_user_tool_rounds = max_user_tool_rounds
        self.replay_on_score = replay_on_score
        self.user_tools = user_tool_schemas(domain)
        self.log = EpisodeLog()
        self._user_view: list[dict[str, Any]] = []
        self._errors = 0
        self._real = True
        self._shadow: Tau2Backend | None = None
        self._shadow_applied = 0
        self._history_calls = 0
        self._result_info: dict[str, Any] = {}
        self._tau2_score: Any = None
        self._verdicts: list[bool] | None = None

    # ------------------------------------------------------------------ episode
    def play_reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetPlay:
        """The episode's start; the user's opening turn is a request where a model plays the user (the rollout
        loop answers it, batched), else played here."""
        yield from super().play_reset(seed=seed, options=options)
        task = self.task
        assert task is not None
        meta = task.metadata.get("tau2")
        if not meta or meta.get("domain") != self.domain:
            raise ValueError(
                f"task {task.id!r} is not a tau2 {self.domain} task (build it with envace_gym.envs.tau2.build_task)"
            )
        tau = _runtime.parse_task(meta["task"])
        if (
            self.judge is None
            and tau.evaluation_criteria is not None
            and any(b.value == "NL_ASSERTION" for b in tau.evaluation_criteria.reward_basis)
        ):
            raise ValueError(f"task {task.id!r} is graded on NL_ASSERTION; pass judge=... to the env")
        history = list(tau.initial_state.message_history or []) if tau.initial_state is not None else []
        self._real = isinstance(self.backend, Tau2Backend)
        self._shadow, self._shadow_applied = None, 0
        self._errors = 0
        self._result_info = {}
        self._tau2_score = None
        self._verdicts = None
        self.log = EpisodeLog(log_from_history(history) if history else [LoggedMessage("assistant", GREETING)])
        self._history_calls = len(self.log.calls())
        self.messages = [
            {"role": "system", "content": task.system or self.system_prompt},
            *self._agent_view(self.log.messages),
        ]
        self._user_view = [
            {"role": "system", "content": user_system_prompt(meta.get("scenario", ""), bool(self.user_tools))},
            *self._user_view_of(self.log.messages),
        ]
        if hasattr(self.user, "reset"):
            self.user.reset(task)
        opening, ending = yield from self._user_turn()  # the opening: one per episode
        if ending is not None or not opening:
            # A user that stops (or fails) before saying anything: the scenario's own opening stands in.
            if ending == "user_stop":
                self.log.messages.pop()
                self._user_view.pop()
            opening = task.user_turns[0]
            self._user_view.append({"role": "assistant", "content": opening})
            self.log.messages.append(LoggedMessage("user", opening))
            self._result_info["opening_fallback"] = True
        self.messages.append({"role": "user", "content": opening})
        return opening, self.build_info([], [])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated or truncated:
            info["tau2"] = dict(self._result_info)
        return obs, reward, terminated, truncated, info

    def limit_reached(self) -> bool:
        """The turn limit, or tau2's ``max_errors`` failed calls: the episode is cut (tau2 scores it 0); its
        end is played by the step, so a model judge is asked through requests as on any other end."""
        if super().limit_reached():
            return True
        if self._errors >= self.max_errors:
            self.log.termination = "too_many_errors"
            return True
        return False

    def abort(self, reason: str) -> dict[str, Any]:
        """End now with reward 0 (an unusable imagined result); tau2 would call it an agent error."""
        self.log.termination = "agent_error"
        out = super().abort(reason)
        out["tau2"] = {"termination": "agent_error"}
        return out

    def prepare_rehearsal(self, user: Any) -> None:
        """A private-rehearsal snapshot (a fork holding the blind task): the user is part of the world, so
        its turns are imagined too. ``user`` (an `ImaginedUser`) replaces tau2's
        user simulator, which reads the task's scenario; its view is rebuilt from the messages the agent saw
        (`imagined_user_view`: no scenario, no guidelines naming it), and it has no tools, so
        no real environment is reached on its behalf. The committed episode keeps its own user."""
        if user is None:
            raise ValueError(
                "tau2 rehearsal imagines the user's turns too: give it a model to play the user "
                "(PrivateRehearsal(user=...); an LM policy plays it by default)"
            )
        self.user = user
        self.user_tools = ()
        self._user_view = imagined_user_view(self.messages)
        self._shadow, self._shadow_applied = None, 0
        self._real = False  # its forks' calls are imagined: no tau2 environment answers them

    # ------------------------------------------------------------------ agent side
    def on_calls(self, calls: list[ToolCall], errors: list[Any], results: list[Any]) -> None:
        logged = []
        for r in results:
            # Calls our checks refused never reached tau2; an imagined result that was unusable neither.
            if r.ok or (self._real and r.error.code == ErrorCode.TOOL_EXECUTION_ERROR):
                logged.append(self._logged(r, "assistant"))
        text = self.parsed.content or None  # the step's one parse (an over-long action is never parsed)
        self.log.messages.append(LoggedMessage("assistant", text, logged))
        self._errors += len(errors) + sum(1 for r in results if not r.ok)

    def _logged(self, result: Any, requestor: str, world: Tau2Backend | None = None) -> LoggedCall:
        """The log entry of an executed call, with tau2's own tool-message content where a real
        environment answered it."""
        world = world or (self.backend if self._real else None)
        raw = world.raw.get(result.call.id or "") if isinstance(world, Tau2Backend) else None
        if raw is None:  # imagined: the shown value stands in (the scorer only replays the call)
            raw = (result_content(result.content) if result.ok else result.error.message, not result.ok)
        return LoggedCall(result.call.id or "", result.call.name, result.call.arguments, requestor, raw[0], raw[1])

    def answer_turn(self, content: str) -> AnswerTurn:
        """The agent's message goes to the user; the user's reply is the observation. A model user's turns
        are requests the rollout loop answers (batched across envs), a scripted user's are played here."""
        self.log.messages.append(LoggedMessage("assistant", content))
        self._user_view.append({"role": "user", "content": content})
        text, ending = yield from self._user_turn()
        self.user_turn += 1
        if text:
            self.messages.append({"role": "user", "content": text})
        if ending is not None:
            self.log.termination = ending
            return text, True
        return text, False

    def score(self) -> tuple[float, dict[str, float]]:
        """tau2's reward (its product rule, its terminations) and the per-basis components."""
        result = self.tau2_score()
        return result.reward, result.components

    def tau2_score(self) -> Any:
        """The episode's `Tau2Score`, computed once at its end (the tau2 reward bases
        registered in `envace_gym.rewards` read their component from it)."""
        assert self.task is not None
        if self._tau2_score is not None:
            return self._tau2_score
        if self.log.termination is None:
            self.log.termination = "max_steps"
        # Real backend: every logged call ran on its environment, in order, so it is the replayed state.
        # Imagined results: the logged calls are replayed on a fresh real environment.
        final_env = self.backend.env if self._real and not self.replay_on_score else None
        data = self.task.metadata["tau2"]["task"]
        result = score_log(self.domain, data, self.log, self.judge, final_env, verdicts=self._verdicts)
        self._result_info.update(result.checks)
        self._tau2_score = result
        return result

    def end_turn(self) -> EndTurn:
        """The episode's end. A model judge's verdicts (one per NL assertion to rule on) are requests the
        rollout loop answers, batched across envs; any other judge rules inside `score`."""
        if self.scored and isinstance(self.judge, ModelRole) and self._tau2_score is None:
            assert self.task is not None
            asked = assertions_to_judge(self.task.metadata["tau2"]["task"], self.log)
            verdicts = []
            for question in self.judge.questions(asked, transcript(self.log)):
                reply = yield JudgeRequest(question)
                if isinstance(reply, Exception):  # a failing judge rules no: the assertion is not shown met
                    self._result_info["judge_error"] = f"{type(reply).__name__}: {reply}"
                verdicts.append(self.judge.verdict(reply))
            self._verdicts = verdicts
        return self.end_episode()

    def answer_judge(self, request: JudgeRequest) -> str | Exception:
        """The verdict of this env's own judge on ``request``; a crash is the answer."""
        try:
            return self.judge.read(self.judge.model.act(list(request.messages)))
        except Exception as exc:
            return exc

    # ------------------------------------------------------------------ user side
    def answer_user(self, request: UserRequest) -> str | Exception:
        """The user's reply to ``request`` from this env's own user; a crash is the answer."""
        try:
            return self.user.reply(list(request.messages), list(request.tools))
        except Exception as exc:  # a crashing user ends the episode like tau2's USER_ERROR
            return exc

    def _user_turn(self) -> Generator[UserRequest, str | Exception | None, tuple[str, str | None]]:
        """The user's next message to the agent, after any tool calls of its own; and how the episode
        ends with it (``"user_stop"``, ``"user_error"``) or ``None``. Each of a model user's replies is a
        request (yielded); any other user replies here."""
        for _ in range(self.max_user_tool_rounds + 1):
            request = UserRequest(list(self._user_view), list(self.user_tools))
            # continue_step turns a None answer (the caller left it to this env) into answer_user's
            raw = (yield request) if isinstance(self.user, ModelUser) else self.answer_user(request)
            if isinstance(raw, Exception):
                self._result_info["user_error"] = f"{type(raw).__name__}: {raw}"
                return "", "user_error"
            text = raw if isinstance(raw, str) else str(getattr(raw, "text", raw))
            parsed = parse_calls(text, tool_names_of(self.user_tools))  # the user's own tools (telecom)
            if not (parsed.calls or parsed.errors):
                visible = parsed.content
                if not visible.strip():
                    self._result_info["user_error"] = "empty user message"
                    return "", "user_error"
                self._user_view.append({"role": "assistant", "content": visible})
                self.log.messages.append(LoggedMessage("user", visible))
                return visible, ("user_stop" if is_stop(visible) else None)
            self._run_user_calls(text, parsed)
        self._result_info["user_error"] = f"more than {self.max_user_tool_rounds} user tool-call rounds in one turn"
        return "", "user_error"

    def _run_user_calls(self, text: str, parsed: Any) -> None:
        self._user_view.append({"role": "assistant", "content": text})
        logged = []
        for err in parsed.errors:
            self._user_view.append(
                {"role": "tool", "name": err.tool or "", "content": json.dumps({"error": err.to_dict()})}
            )
        for i, call in enumerate(parsed.calls):
            call = ToolCall(call.name, call.arguments, f"user_call_{len(self.log.messages)}_{i}")
            world = self._user_world()
            result = world.execute_user(call)
            if result.error is None or result.error.code not in INVALID_CALL_CODES:
                LEDGER.record("live")  # the user's own tool ran on a real environment
            if result.ok or result.error.code == ErrorCode.TOOL_EXECUTION_ERROR:
                logged.append(self._logged(result, "user", world))
            self._user_view.append({"role": "tool", "name": call.name, "content": result.to_message_content()})
        self.log.messages.append(LoggedMessage("user", parsed.content or None, logged))

    def _user_world(self) -> Tau2Backend:
        """The environment the user's own tools act on: the episode's backend when it is real; with imagined
        agent results, a private real environment kept in step with the agent's logged calls."""
        if self._real:
            assert isinstance(self.backend, Tau2Backend)
            return self.backend
        if self._shadow is None:
            self._shadow = Tau2Backend(self.domain)
            self._shadow.reset(self.task)  # applies the initial history's calls
            self._shadow_applied = self._history_calls
        calls = self.log.calls()
        for c in calls[self._shadow_applied :]:
            if c.requestor == "assistant":  # the user's own calls ran on the shadow already
                self._shadow.env.get_response(_runtime.tau2_call(c.id, c.name, copy.deepcopy(c.arguments), "assistant"))
                LEDGER.record("live")  # a real execution of an imagined call, to keep the user's world in step
        self._shadow_applied = len(calls)
        return self._shadow

    # ------------------------------------------------------------------ views
    @staticmethod
    def _agent_view(messages: Sequence[LoggedMessage]) -> list[dict[str, Any]]:
        """The agent's messages for the initial history (or the greeting): what tau2's agent would see."""
        out: list[dict[str, Any]] = []
        for m in messages:
            agent_calls = [c for c in m.calls if c.requestor == "assistant"]
            if m.role == "assistant" and agent_calls:
                calls = [ToolCall(c.name, c.arguments, c.id) for c in agent_calls]
                out.append(
                    {"role": "assistant", "content": format_calls(calls), "tool_calls": tool_calls_to_openai(calls)}
                )
                out.extend(
                    {"role": "tool", "tool_call_id": c.id, "name": c.name, "content": c.content or ""}
                    for c in agent_calls
                )
            elif m.text:
                out.append({"role": m.role, "content": m.text})
        return out

    @staticmethod
    def _user_view_of(messages: Sequence[LoggedMessage]) -> list[dict[str, Any]]:
        """The same history from the user's side: roles flipped, the agent's tool calls hidden."""
        out: list[dict[str, Any]] = []
        for m in messages:
            if m.text:
                out.append({"role": "user" if m.role == "assistant" else "assistant", "content": m.text})
            out.extend(
                {"role": "tool", "name": c.name, "content": c.content or ""} for c in m.calls if c.requestor == "user"
            )
        return out
