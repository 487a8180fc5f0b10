"""A checklist reward graded by a judge model (the EnvACE paper's reward, CM2 style).

The env's own reward is verifiable (``call_match``, ``state_match``, ``answer_match``) and all-or-nothing.
As an option, a trainer can score an episode against a *checklist* instead: every reference call and every
required answer string of every user turn is one `ChecklistItem`; a judge reads each user turn's
transcript (tool calls and results included) and says whether that turn's items are met; the score is the
share of items met over the whole episode, a denser signal in [0, 1].

>>> judge = ChecklistJudge("ckpt:runs/judge")  # or any callable prompt -> reply, or an LMPolicy
>>> score = judge(task, traj.messages)         # traj from envace_gym.agents.rollout.loop.collect

Rules:

* one judge question per item; the reply's first word ``yes``/``true``/``met``/``1`` means met, anything
  else (and an exception from the judge) means not met, so grading never crashes a training run;
* items of a user turn the episode never reached are not met, without asking the judge;
* a task with no items (a reference with no calls and no required strings) scores 1.0 when the episode
  ended with an answer (its last message is an assistant message without tool calls), else 0.0;
* nothing is cached across episodes: every `ChecklistJudge.grade` asks afresh.

The embedded SmolLM2-135M-Instruct is far too small to judge well (its yes/no replies are close to
chance), so the tests use a scripted judge; use a larger checkpoint (``hf:...``, ``ckpt:...``) for real
runs. Importing this module needs no torch: a string spec is loaded with ``LMPolicy.from_spec`` on first
use.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envace_gym.transcript import render_transcript

if TYPE_CHECKING:
    from envace_gym.tasks import Task

__all__ = ["ChecklistItem", "ChecklistJudge", "checklist_items", "split_turns"]

logger = logging.getLogger(__name__)

_JUDGE_SYSTEM = (
    "You are a strict grader. You read one turn of a conversation between a user and a tool-calling "
    "assistant, and one requirement. Answer yes if the assistant met the requirement in this turn, "
    "otherwise no. Answer yes or no only."
)
_MET_WORDS = frozenset({"yes", "true", "met", "1"})


@dataclass(frozen=True)
class ChecklistItem:
    """One requirement of one user turn.

    ``kind`` is ``"call"`` (a reference call must have been made) or ``"answer"`` (a string the turn's
    answer must contain); ``text`` is the requirement as the judge sees it.
    """

    turn: int
    kind: str
    text: str


def _call_text(name: str, arguments: Any) -> str:
    return f"calls {name} with {json.dumps(arguments, ensure_ascii=False)}"


def checklist_items(task: Task) -> list[ChecklistItem]:
    """Each reference call and each required answer string of each user turn is one item."""
    items = []
    for turn, ref in enumerate(task.reference):
        items.extend(ChecklistItem(turn, "call", _call_text(c.name, c.arguments)) for c in ref.calls)
        items.extend(ChecklistItem(turn, "answer", f'the answer states "{s}"') for s in ref.answer_contains)
    return items


def split_turns(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The episode's messages cut into user turns: each chunk starts at a user message and runs to the next
    (system message excluded)."""
    chunks: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "user":
            chunks.append([message])
        elif chunks:  # anything before the first user message is the system prompt
            chunks[-1].append(message)
    return chunks


def _shown(message: dict[str, Any]) -> dict[str, Any]:
    # Executed calls are shown in the checklist's own wording, so the judge compares like with like; the raw
    # call syntax differs between call styles (tool_call, json, python).
    calls = message.get("tool_calls")
    if message["role"] != "assistant" or not calls:
        return message
    lines = []
    for call in calls:
        fn = call.get("function", {})
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (TypeError, ValueError):
            args = fn.get("arguments")
        lines.append(_call_text(fn.get("name", ""), args))
    return {**message, "content": "\n".join(lines)}


def _judge_prompt(turn_messages: Sequence[dict[str, Any]], item: ChecklistItem) -> list[dict[str, str]]:
    """The chat messages of one judge question: the grader instruction, then the turn and the requirement."""
    transcript = render_transcript([_shown(m) for m in turn_messages], include_system=False)
    user = (
        f"Conversation turn:\n{transcript}\n\nRequirement for the assistant: {item.text}\n\n"
        "Is the requirement met? Answer yes or no."
    )
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]


def _reply_is_met(reply: str) -> bool:
    """Whether a judge's reply says "met": its first word (punctuation and markdown stripped) is
    yes/true/met/1, case-insensitively."""
    words = reply.split()
    return bool(words) and re.sub(r"^\W+|\W+$", "", words[0]).lower() in _MET_WORDS


def _ended_with_answer(messages: Sequence[dict[str, Any]]) -> bool:
    return bool(messages) and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")


class ChecklistJudge:
    """Grades an episode's turns against the task's checklist; score = share of items met.

    Args:
        judge: a callable ``prompt_text -> reply_text`` (it gets the system instruction and the question as
            one text), an object with ``.act(messages)`` returning something with ``.text`` (an
            `LMPolicy`), or a policy spec (``"hf:..."``, ``"ckpt:DIR"``)
            loaded with ``LMPolicy.from_spec`` on first use.
        max_new_tokens: the judge's reply budget; an ``act`` that takes ``sampling`` decodes greedily.
    """

    def __init__(self, judge: Callable[[str], str] | Any | str, max_new_tokens: int = 8) -> None:
        self.judge = judge
        self.max_new_tokens = max_new_tokens
        self._sampling: Any = None

    def _backend(self) -> Any:
        if isinstance(self.judge, str):
            from envace_gym.agents.lm.policy import LMPolicy  # here, so that importing this module needs no torch

            self.judge = LMPolicy.from_spec(self.judge, progress=False)
        return self.judge

    def _ask(self, messages: list[dict[str, str]]) -> str:
        judge = self._backend()
        act = getattr(judge, "act", None)
        if act is None:
            return str(judge("\n\n".join(m["content"] for m in messages)))
        if "sampling" in inspect.signature(act).parameters:
            if self._sampling is None:
                from envace_gym.agents.lm.engine import SamplingConfig

                self._sampling = SamplingConfig(temperature=0, max_new_tokens=self.max_new_tokens)
            return act(messages, sampling=self._sampling).text
        return act(messages).text

    def grade(self, task: Task, messages: Sequence[dict[str, Any]]) -> tuple[float, list[tuple[ChecklistItem, bool]]]:
        """One judge question per item: the turn's transcript + the item; the reply is read as yes/no
        (first word yes/true/met/1 -> met; anything else -> not met; an exception from the judge -> not met,
        never a crash). Returns the score and each item's verdict."""
        items = checklist_items(task)
        if not items:
            return (1.0 if _ended_with_answer(messages) else 0.0), []
        turns = split_turns(messages)
        verdicts = []
        for item in items:
            met = False
            if item.turn < len(turns):  # a turn the episode never reached meets nothing
                try:
                    met = _reply_is_met(self._ask(_judge_prompt(turns[item.turn], item)))
                except Exception:  # a judge failure costs one item, never the training run
                    logger.warning("checklist judge failed on %r; counted as not met", item, exc_info=True)
            verdicts.append((item, met))
        return sum(met for _, met in verdicts) / len(verdicts), verdicts

    def __call__(self, task: Task, messages: Sequence[dict[str, Any]]) -> float:
        """The episode's checklist score only (see `grade`)."""
        return self.grade(task, messages)[0]
