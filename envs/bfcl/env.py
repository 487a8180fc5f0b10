"""``BFCLEnv`` (registered as ``EnvACE-BFCL-v0``): BFCL v4 categories as tool-calling episodes, scored by
BFCL's own checkers.

An episode is a BFCL entry: single-turn categories have one user turn (the agent calls, sees an
acknowledgement, then answers; irrelevance: it answers without calling); multi-turn categories have BFCL's
turns, with the held-out functions of ``miss_func`` offered only from the turn that adds them. The episode
is scored when the last turn is answered (see `scoring`); ``info["bfcl"]`` then holds the verdict.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from envace_gym.backends.base import Backend, ToolResult
from envace_gym.calls import ErrorCode, ToolCall
from envace_gym.env import DEFAULT_SYSTEM_PROMPT, ResetPlay, ToolCallEnv
from envace_gym.rewards import RewardContext
from envace_gym.tasks import Task

from . import upstream
from .categories import REWARD_BASIS, check_category
from .scoring import verdict

__all__ = ["BFCLEnv", "BFCL_SYSTEM_PROMPT", "hidden_tools", "bfcl_basis"]

BFCL_SYSTEM_PROMPT = DEFAULT_SYSTEM_PROMPT + (
    " If none of the functions fits the request, or the request lacks a parameter a function requires, "
    "say so in plain text instead of calling a function."
)


def hidden_tools(task: Task, turn: int) -> set[str]:
    """Tools of ``task`` not offered yet at user turn ``turn`` (miss_func: held out until a later turn)."""
    holdout = task.metadata.get("holdout") or {}
    return {name for at, names in holdout.items() if int(at) > turn for name in names}


class _TurnGate:
    """Wraps an episode's backend: tools not offered at the current turn (``turn``, kept by the env) are
    refused with TOOL_NOT_AVAILABLE. An imagined backend's calls (``run``) are gated the same way,
    and it is told which tools are offered (``offer_only``), so the env role's prompt lists only those."""

    def __init__(self, inner: Backend, task: Task, turn: int = 0) -> None:
        self.inner = inner
        self.task = task
        self.turn = turn

    def __getattr__(self, name: str) -> Any:  # state, state_hash, call_count, bind_conversation, answer_here...
        if name == "inner":  # not set yet (copying): no recursion
            raise AttributeError(name)
        attr = getattr(self.inner, name)
        if name == "run":  # only where the inner backend has one (an imagined backend)
            return self._gated(attr)
        return attr

    @property
    def turn(self) -> int:
        return self._turn

    @turn.setter
    def turn(self, value: int) -> None:
        self._turn = value
        offer = getattr(self.inner, "offer_only", None)
        if offer is not None:
            hidden = hidden_tools(self.task, value)
            offer([s.name for s in self.task.tool_specs if s.name not in hidden])

    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.inner.reset(task, seed=seed)
        self.turn = 0

    @property
    def tools(self) -> Sequence[Any]:
        hidden = hidden_tools(self.task, self.turn)
        return [s for s in self.inner.tools if s.name not in hidden]

    def _refusal(self, call: ToolCall) -> ToolResult | None:
        if call.name not in hidden_tools(self.task, self.turn):
            return None
        self.inner.call_count += 1
        available = ", ".join(sorted(s.name for s in self.tools)) or "none"
        return ToolResult.failure(
            call, ErrorCode.TOOL_NOT_AVAILABLE, f"tool {call.name!r} is not available; available: {available}"
        )

    def _gated(self, run: Any) -> Any:
        def gated_run(call: ToolCall) -> Any:
            refused = self._refusal(call)
            return refused if refused is not None else run(call)

        return gated_run

    def execute(self, call: ToolCall) -> ToolResult:
        refused = self._refusal(call)
        return refused if refused is not None else self.inner.execute(call)

    def copy(self) -> _TurnGate:
        return _TurnGate(self.inner.copy(), self.task, self.turn)


def bfcl_basis(ctx: RewardContext) -> float:
    """The ``bfcl`` reward basis: BFCL's own checker on the episode (``BFCLEnv.verdict``)."""
    if not isinstance(ctx.env, BFCLEnv):
        raise ValueError(f"task {ctx.task.id!r} is graded on {REWARD_BASIS!r}: play it in EnvACE-BFCL-v0")
    return 1.0 if ctx.env.verdict()["valid"] else 0.0


class BFCLEnv(ToolCallEnv):
    """BFCL v4 inside EnvACE.

    Args:
        category: a BFCL category (``simple_python``, ``multi_turn_base``, ...; see ``CATEGORIES``); its
            tasks are the suite ``bfcl/<category>``.
        split: BFCL tasks all have split ``"test"``.
        max_steps_per_turn: messages with calls allowed in one user turn (BFCL's limit, 20); one more
            force-quits the episode with reward 0, as BFCL does.
        system_prompt: defaults to `BFCL_SYSTEM_PROMPT`; a BFCL entry's own system message is appended.
        **kwargs: `ToolCallEnv`'s (``suite``, ``tasks``, ``backend``, ``max_turns``...);
            ``max_result_chars`` defaults to 65536 here, so long_context results are shown whole.
    """

    #: A private-rehearsal fork keeps the held-out schedule (``task.blind(keep=...)``). Not a leak: it says
    #: only which tools are offered from which user turn, and the live agent is offered them at that turn
    #: too (before it, rehearsal neither lists them nor lets them run, as live).
    rehearsal_metadata = ("holdout",)

    def __init__(
        self,
        category: str = "simple_python",
        split: str | None = "test",
        max_steps_per_turn: int | None = None,
        system_prompt: str = BFCL_SYSTEM_PROMPT,
        **kwargs: Any,
    ) -> None:
        self.category = check_category(category)
        kwargs.setdefault("suite", f"bfcl/{self.category}")
        # BFCL shows results whole; long_context ones run to ~32k characters (ToolCallEnv clips at 8k).
        kwargs.setdefault("max_result_chars", 65_536)
        super().__init__(split=split, system_prompt=system_prompt, **kwargs)
        self.max_steps_per_turn = max_steps_per_turn or upstream.max_steps_per_turn()
        self.check: dict[str, Any] | None = None  # BFCL's verdict on the last finished episode
        self._attempted: list[list[ToolCall]] = []
        self._executed: list[list[ToolCall]] = []
        self._call_steps = 0

    # ------------------------------------------------------------------ gym API
    def play_reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetPlay:
        observation, _ = yield from super().play_reset(seed=seed, options=options)
        assert self.task is not None
        meta = self.task.metadata
        if meta.get("system"):
            self.messages[0] = {"role": "system", "content": f"{self.messages[0]['content']}\n\n{meta['system']}"}
        if meta.get("history"):  # earlier conversation in a BFCL turn (live categories)
            self.messages[1:1] = copy.deepcopy(meta["history"])
        self._attempted = [[] for _ in self.task.user_turns]
        self._executed = [[] for _ in self.task.user_turns]
        self._call_steps = 0
        self.check = None
        return observation, self.build_info([], [])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = super().step(action)
        if not (terminated or truncated) and self._call_steps > self.max_steps_per_turn:
            info.update(self.abort(f"more than {self.max_steps_per_turn} steps with calls in one user turn"))
            self.check = {"valid": False, "error_type": "multi_turn:force_terminated", "error": info["aborted"]}
            reward, truncated = 0.0, True
        if self.check is not None:
            info["bfcl"] = dict(self.check)
        return observation, reward, terminated, truncated, info

    # ------------------------------------------------------------------ ToolCallEnv hooks
    def backend_for(self, task: Task, given: Backend | None = None) -> Backend:
        backend = super().backend_for(task, given)
        if task.metadata.get("holdout"):
            return _TurnGate(backend, task)  # type: ignore[return-value]
        return backend

    def fork(self, backend: Backend | None = None, task: Task | None = None) -> BFCLEnv:
        """``ToolCallEnv.fork``; a ``backend`` swapped in mid-episode is gated by turn as this episode's was
        (a rehearsal fork's imagined backend sees held-out tools only from their turn)."""
        fork = super().fork(backend=backend, task=task)
        if backend is not None and fork.task is not None and fork.task.metadata.get("holdout"):
            fork.backend = _TurnGate(backend, fork.task, fork.user_turn)  # type: ignore[assignment]
        return fork  # type: ignore[return-value]

    def on_calls(self, calls: list[ToolCall], errors: list[Any], results: list[ToolResult]) -> None:
        turn = self.user_turn
        self._attempted[turn].extend(ToolCall(c.name, c.arguments) for c in calls)
        for result in results:
            # Calls that ran (also those that raised) are what BFCL replays; refused and timed-out ones are not.
            if result.error is None or result.error.code == ErrorCode.TOOL_EXECUTION_ERROR:
                self._executed[turn].append(ToolCall(result.call.name, result.call.arguments))
        if calls:
            self._call_steps += 1

    def on_answer(self, content: str) -> tuple[str, bool]:
        observation, terminated = super().on_answer(content)
        self._call_steps = 0
        if isinstance(self.backend, _TurnGate):
            self.backend.turn = self.user_turn
        return observation, terminated

    def verdict(self) -> dict[str, Any]:
        """BFCL's checker on the episode so far (kept as ``check``; ``info["bfcl"]`` at the end)."""
        assert self.task is not None
        finished = bool(self.record.turn_answers) and self.record.turn_answers[-1] is not None
        self.check = verdict(self.task, self._attempted, self._executed, finished)
        return self.check

    def build_info(self, results: list[ToolResult], errors: list[Any]) -> dict[str, Any]:
        info = super().build_info(results, errors)
        if self.task is not None and self.task.metadata.get("holdout"):
            hidden = hidden_tools(self.task, self.user_turn)
            info["tools"] = [t for t in info["tools"] if t["function"]["name"] not in hidden]
        return info
