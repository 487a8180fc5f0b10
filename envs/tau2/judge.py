"""An optional checklist judge for tau2's natural-language assertions (off by default).

tau2 grades ``nl_assertions`` with a remote LLM; here any object with ``act(messages) -> .text`` (an
`envace_gym.agents.LMPolicy`) can judge, one yes/no question per assertion. No task of the shipped
domains has ``NL_ASSERTION`` in its reward basis, so by default the verdicts are reported in
``info["tau2"]["nl_assertions"]`` and do not change the reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ChecklistJudge", "make_judge", "JUDGE_PROMPT"]

JUDGE_PROMPT = (
    "You grade a customer-service conversation. You are given the conversation and one statement about it. "
    "Answer YES if the conversation shows that the statement is true, otherwise NO. Answer with one word."
)


class ChecklistJudge:
    """``judge(assertions, transcript) -> [bool]``: each assertion is met when the model answers YES."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def __call__(self, assertions: Sequence[str], transcript: str) -> list[bool]:
        verdicts = []
        for assertion in assertions:
            messages = [
                {"role": "system", "content": JUDGE_PROMPT},
                {"role": "user", "content": f"Conversation:\n{transcript}\n\nStatement: {assertion}\n\nYES or NO?"},
            ]
            gen = self.policy.act(messages)
            text = str(getattr(gen, "text", gen)).strip().upper()
            verdicts.append(text.startswith("YES"))
        return verdicts


def make_judge(spec: Any) -> Any:
    """``None`` (no judge) | a callable ``(assertions, transcript) -> [bool]`` | an object with ``act``."""
    if spec is None or (callable(spec) and not hasattr(spec, "act")):
        return spec
    if hasattr(spec, "act"):
        return ChecklistJudge(spec)
    raise ValueError(f"judge must be None, a callable (assertions, transcript) -> [bool] or an LMPolicy, got {spec!r}")
