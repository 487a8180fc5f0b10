"""``ImaginedBackend``: a backend like any other, whose results come from an env role (an `Imaginer`)."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Collection
from typing import Any

from ..backends import make_backend
from ..backends.base import Backend, PendingCall, ToolResult, replayed_state_hash, state_digest, validate_call
from ..backends.ledger import LEDGER
from ..backends.replay import History, ToolLog, result_from_record
from ..calls import ErrorCode, ToolCall
from ..tasks import Task
from ..tools import ToolSpec
from .answers import UnreadableAnswer, read_answer
from .fidelity import result_fidelity
from .prompt import (
    EXPECTED_BLOCK,
    GROUNDINGS,
    MAX_EXAMPLES,
    build_env_role_prompt,
    format_execution_result,
    parse_execution_result,
    parse_inline_result,
    reference_examples,
)
from .protocol import MODES, EnvRoleAnswer, EnvRoleSample, Imaginer, ImagineRequest

__all__ = ["ImaginedBackend"]

#: What the error of a text-only answer (a script's, no ``token_ids``) without a result block adds.
DATA_HINT = " (or return the value as data from your imaginer)"


class ImaginedBackend:
    """A `Backend` whose results come from an `Imaginer`.

    The deterministic checks answer first, exactly as a real backend would; every call that passes them is
    answered by the imaginer. Each answer's `EnvRoleSample` travels on its `ToolResult`
    (``result.sample``), so the env reports it in ``info["env_role_samples"]``. An unusable answer is a
    ``TOOL_EXECUTION_ERROR``, marked ``fatal`` when ``end_on_failure`` (the env then ends the episode).

    The env hands it the live conversation before each step's calls (`bind_conversation`). Its state
    is the list of calls it answered successfully; ``state_hash`` replays them on a fresh *real* backend (an
    offline check made once at the end of an episode, so ``state_match`` still works).

    Args:
        imaginer: who answers (``imagine(ImagineRequest)``); replaceable, e.g. by a batching imaginer.
        mode: ``"prompted"`` (an env-role prompt per call) or ``"inline"`` (the actor's own context).
        grounding: prompted mode's few-shot examples (`GROUNDINGS`):
            ``"reference"`` (the task's own reference results), ``"log"`` (other tasks' results from ``log``;
            the log is then never looked up for this task's own results: no fidelity score, no target) or
            ``"none"``. Every real result shown in a prompt is booked as a ``logged`` call.
        max_result_chars: longer answers are unusable.
        real_backend: ``task -> Backend`` for ``state_hash`` (default: the task's registered real backend).
        end_on_failure: mark unusable answers ``fatal`` (the paper's rule).
        real_fraction: grounded imagination: a shadow real backend runs every call that passes the checks
            (so its state follows the episode), and this share of the env-role samples, drawn at random, get
            the real result as ``sample.target``. What the actor sees is always the imagined result.
            (Live grounding: each shadow call is a live tool call.)
        log: grounding from a recorded `ToolLog` instead of live calls: an imagined
            call whose (task, calls before it, tool, arguments) the log holds gets ``sample.fidelity`` and
            ``sample.exact`` against the logged result and, with ``log_targets``, the logged result as
            ``sample.target``; a call outside the log gets neither. The actor still sees the imagined result.
        log_targets: give logged calls a supervised target (``sample.target``).

    It books its own calls in the call ledger (``self_accounting``): an imagined answer costs no tool call;
    each shadow execution of grounded imagination is a ``live`` one, each result taken from ``log`` a
    ``logged`` one.
    """

    self_accounting = True
    #: The agent sees imagined results: the env scores such an episode against what it showed (`envace_gym.binding`).
    imagined = True

    def __init__(
        self,
        imaginer: Imaginer,
        mode: str = "prompted",
        grounding: str = "reference",
        max_result_chars: int = 16_384,
        real_backend: Callable[[Task], Backend] | None = None,
        end_on_failure: bool = True,
        real_fraction: float = 0.0,
        log: ToolLog | None = None,
        log_targets: bool = True,
    ) -> None:
        if not 0.0 <= real_fraction <= 1.0:
            raise ValueError(f"real_fraction must be in [0, 1], got {real_fraction}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if grounding not in GROUNDINGS:
            raise ValueError(f"grounding must be one of {GROUNDINGS}, got {grounding!r}")
        if grounding == "log" and log is None:
            raise ValueError("grounding='log' draws its examples from a tool log: pass log=ToolLog(...)")
        self.imaginer = imaginer
        self.mode = mode
        self.grounding = grounding
        self.max_result_chars = max_result_chars
        self.real_backend = real_backend or (lambda task: make_backend(task.backend, timeout=None))
        self.end_on_failure = end_on_failure
        self.real_fraction = real_fraction
        self.log = log
        self.log_targets = log_targets
        self._history: History = []  # the calls that passed the checks so far: the log's state key
        self.task: Task | None = None
        self.tools: list[ToolSpec] = []
        self._narrowed = False  # offer_only: tools offered by turn, the task's schemas no longer all apply
        self.call_count = 0
        self._messages: list[dict[str, Any]] = []
        self._ok_calls: list[ToolCall] = []
        self._shadow: Backend | None = None  # grounded imagination's real backend, in step with the episode
        self._grounding_rng = random.Random(0)

    # ------------------------------------------------------------------ protocol
    def reset(self, task: Task | None = None, seed: int | None = None) -> None:
        self.task = task
        self.tools = list(task.tool_specs) if task is not None else []
        self._narrowed = False
        self.call_count = 0
        self._messages = []
        self._ok_calls = []
        self._history = []
        self._shadow = None
        if task is not None and self.real_fraction > 0:
            self._shadow = self.real_backend(task)
            self._shadow.reset(task, seed=seed)
            self._grounding_rng = random.Random(f"{seed}:{task.id}")  # str seeds hash the same in every process

    def offer_only(self, names: Collection[str] | None) -> None:
        """Offer only the tools ``names`` from now on (None: all the task's), for envs that offer tools by
        turn (BFCL's ``miss_func``): the others are refused as TOOL_NOT_AVAILABLE and left out of the env
        role's prompt. ``reset`` offers all again (before any reset there is nothing to narrow)."""
        if self.task is None:
            return
        specs = self.task.tool_specs
        self.tools = list(specs) if names is None else [s for s in specs if s.name in set(names)]
        self._narrowed = names is not None

    def bind_conversation(self, messages: list[dict[str, Any]]) -> None:
        """The env's live message list (read, never written): what the env role is shown. Called as each
        message's calls start."""
        self._messages = messages

    def execute(self, call: ToolCall) -> ToolResult:
        """One call, answered by `imaginer` now (`run`, then `answer_here` answers its request)."""
        pending = self.run(call)
        if isinstance(pending, ToolResult):
            return pending
        request = next(pending)
        try:
            return pending.send(self.answer_here(request))
        except StopIteration as done:
            return done.value

    def run(self, call: ToolCall) -> ToolResult | PendingCall:
        """The deterministic checks' result, or (the call passed them) the call pending on the env role: it
        yields the `ImagineRequest` once, is sent the answer (an `EnvRoleAnswer`, a generation with its
        fields, a string, data, or the exception the env role raised; see `read_answer`) and returns the
        result. How the env's step
        (``ToolCallEnv``) asks for answers that a rollout loop batches."""
        assert self.task is not None, "reset() first"
        self.call_count += 1
        error = validate_call(call, {s.name: s for s in self.tools})
        if error is not None:
            return ToolResult(call, None, error)
        return self._imagined(call, self._request(call))

    def answer_here(self, request: ImagineRequest) -> object:
        """`imaginer`'s answer to ``request``, or the exception it raised (contained like a crashing tool's)."""
        try:
            return self.imaginer.imagine(request)
        except Exception as exc:
            return exc

    def _imagined(self, call: ToolCall, request: ImagineRequest) -> PendingCall:
        answer = yield request
        return self._result(call, answer)

    def _result(self, call: ToolCall, answer: object) -> ToolResult:
        """The result of ``call`` given the env role's ``answer`` to its request (read by `read_answer`)."""
        read = read_answer(answer, self.mode)
        if isinstance(read, Exception):
            gen = EnvRoleAnswer("")
            said = f"env role raised {type(read).__name__}: {read}"
            value, reason = None, str(read) if isinstance(read, UnreadableAnswer) else said
        else:
            gen = read
            parse = parse_inline_result if self.mode == "inline" else parse_execution_result
            value, reason = parse(gen.text, self.max_result_chars)
            if reason is not None and not gen.token_ids:  # a script's text: it may return data instead
                reason = reason.replace(EXPECTED_BLOCK, EXPECTED_BLOCK + DATA_HINT, 1)
        text = gen.text
        spec = next(s for s in self.tools if s.name == call.name)
        if reason is None and spec.validate_result(value):
            reason = "result breaks the tool's returns schema: " + "; ".join(spec.validate_result(value)[:3])
        sample = EnvRoleSample(
            prompt_ids=gen.prompt_ids,
            completion_ids=gen.token_ids,
            logprobs=gen.logprobs,
            mode=self.mode,
            tool=call.name,
            valid=reason is None,
            error=reason,
            text=text,
        )
        before = list(self._history)
        self._history.append((call.name, call.arguments))  # it reached the (imagined) tool: the state moved on
        self._ground(call, before, sample, value if reason is None else None, gen.stop_text)
        if self.mode == "inline":
            # What the rollout engine needs to splice the result's tokens into the actor's stream.
            sample.prompt_text = gen.prompt_text
            sample.completion_text = text + gen.stop_text
        if reason is not None:
            message = f"imagined result unusable: {reason}"
            failure = ToolResult.failure(call, ErrorCode.TOOL_EXECUTION_ERROR, message)
            return ToolResult(call, None, failure.error, sample=sample, fatal=self.end_on_failure)
        self._ok_calls.append(call)
        if self.mode == "inline":
            return ToolResult(call, value, text=text, sample=sample)
        return ToolResult(call, value, sample=sample)

    def state(self) -> dict[str, Any]:
        return {"calls": [c.to_dict() for c in self._ok_calls]}

    def state_hash(self) -> str:
        task = self.task
        if task is None or not task.backend:
            return state_digest(self.state())
        return replayed_state_hash(lambda: self.real_backend(task), task, self._ok_calls)

    def copy(self) -> ImaginedBackend:
        """An independent backend at this point of the episode (the same imaginer answers both)."""
        clone = copy.copy(self)
        clone._ok_calls = list(self._ok_calls)
        clone._history = list(self._history)
        clone._shadow = self._shadow.copy() if self._shadow is not None else None
        clone._grounding_rng = random.Random()
        clone._grounding_rng.setstate(self._grounding_rng.getstate())
        return clone

    # ------------------------------------------------------------------ internals
    def _ground(self, call: ToolCall, history: History, sample: EnvRoleSample, value: Any, stop_text: str) -> None:
        """Compare the imagined ``value`` (None: unusable) with the real result where one is known, live (the
        shadow backend of grounded imagination) or logged (``log``): ``sample.exact``/``sample.fidelity``, and
        maybe the real result as ``sample.target`` (written as the env role should have written it, ending as
        its generation ended: ``stop_text``). A logged result counts only when it was recorded after the same
        calls (``history``): from the same state."""
        real = None
        keep = False
        if self._shadow is not None:
            real = self._shadow.execute(call)
            LEDGER.record("live")
            keep = self._grounding_rng.random() < self.real_fraction
        elif self.log is not None and self.task is not None and self.grounding != "log":
            rec = self.log.get(self.task.id, history, call.name, call.arguments)
            if rec is not None:
                LEDGER.record("logged")  # a recorded real result, used for training, without a live call
                real = result_from_record(call, rec)
                keep = self.log_targets
        if real is None:
            return
        sample.exact, sample.fidelity = result_fidelity(value, real.payload())
        if keep:
            inline = self.mode == "inline"
            answer = real.to_message_content() if inline else format_execution_result(real.payload())
            sample.target = answer + stop_text

    def _examples(self, call: ToolCall) -> list[dict[str, Any]]:
        """The few-shot real results the prompt shows for ``call`` under `grounding`."""
        assert self.task is not None
        if self.grounding == "reference":
            return reference_examples(self.task, call.name)
        if self.grounding == "log":
            assert self.log is not None
            return self.log.examples(call.name, self.task.id, MAX_EXAMPLES, key=f"{self.task.id}/{call.name}")
        return []

    def _request(self, call: ToolCall) -> ImagineRequest:
        assert self.task is not None
        if self.mode == "prompted":
            examples = self._examples(call)
            if examples:
                LEDGER.record("logged", len(examples))  # real results shown to the env role: counted
            prompt = build_env_role_prompt(
                self.task, call, self._messages, self.tools, self.grounding, examples=examples
            )
            return ImagineRequest(prompt, call.name, call.arguments)
        whole = self.task.tools and not self._narrowed  # the task's own schemas, unless offered by turn
        return ImagineRequest(
            list(self._messages),
            call.name,
            call.arguments,
            mode="inline",
            tools=list(self.task.tools) if whole else [s.to_openai() for s in self.tools],
        )
