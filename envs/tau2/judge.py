"""An optional checklist judge for tau2's natural-language assertions (off by default).

tau2 grades ``nl_assertions`` with a remote LLM; here any object with ``act(messages) -> .text`` (an
`envace_gym.agents.LMPolicy`) can judge, one yes/no question per assertion. No task of the shipped
domains has ``NL_ASSERTION`` in its reward basis, so by default the verdicts are reported in
``info["tau2"]["nl_assertions"]`` and do not change the reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envace_gym.imagination.protocol import JudgeRequest

__all__ = ["ChecklistJudge", "make_judge", "JUDGE_PROMPT"]

JUDGE_PROMPT = (
    "You grade a customer-service conversation. You are given the conversation and one statement about it. "
    "Answer YES if the conversation shows that the statement is true, otherwise NO. Answer with one word."
)


class ChecklistJudge:
    """``judge(assertions, transcript) -> [bool]``: each assertion is met when the model answers YES.

    Also a `ModelRole` (``model``, ``conversation``, ``read``): a tau2 env in a
    rollout loop asks each assertion as a `JudgeRequest` (`questions`), which
    the loop answers with one engine call per round across envs, and reads the verdicts with `verdict`.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    @property
    def model(self) -> Any:
        return self.policy

    def __deepcopy__(self, memo: dict[int, Any]) -> ChecklistJudge:  # a forked env shares the model
        return self

    def questions(self, assertions: Sequence[str], transcript: str) -> list[list[dict[str, Any]]]:
        """The chat asked for each assertion: the judge's instructions, the conversation and the statement."""
        return [
            [
                {"role": "system", "content": JUDGE_PROMPT},
                {"role": "user", "content": f"Conversation:\n{transcript}\n\nStatement: {assertion}\n\nYES or NO?"},
            ]
            for assertion in assertions
        ]

    def conversation(self, request: JudgeRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return list(request.messages), []

    def read(self, generation: Any) -> str:
        return str(getattr(generation, "text", generation))

    @staticmethod
    def verdict(reply: str | Exception) -> bool:
        """Whether a reply says YES (a judge that raised: no)."""
        return isinstance(reply, str) and reply.strip().upper().startswith("YES")

    def __call__(self, assertions: Sequence[str], transcript: str) -> list[bool]:
        asked = self.questions(assertions, transcript)
        return [self.verdict(self.read(self.policy.act(messages))) for messages in asked]


def make_judge(spec: Any) -> Any:
    """``None`` (no judge) | a callable ``(assertions, transcript) -> [bool]`` | an object with ``act``."""
    if spec is None or (callable(spec) and not hasattr(spec, "act")):
        return spec
    if hasattr(spec, "act"):
        return ChecklistJudge(spec)
    raise ValueError(f"judge must be None, a callable (assertions, transcript) -> [bool] or an LMPolicy, got {spec!r}")
