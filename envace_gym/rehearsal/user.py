"""``ImaginedUser``: in private rehearsal, the policy plays the user too, where the user is part of the world.

In a benchmark whose user is simulated from a scenario the agent never sees (tau2), a rehearsal cannot ask
that user model: it reads the scenario, which is test-time knowledge the agent does not have. The fork gives
the user's turns to an `ImaginedUser` instead: the rehearsing policy (or any model with
``act(messages, tools)``) writes the user's next message from the prompt the env builds out of the
conversation the agent saw. It has one job: generate that message and count the tokens it cost. The rollout
loop batches its turns across rehearsals (a `ModelUser`: one engine call per round).
"""

from __future__ import annotations

from typing import Any

from ..calls import parse_calls
from ..imagination.protocol import UserRequest

__all__ = ["ImaginedUser"]


class ImaginedUser:
    """A user whose turns ``model`` imagines (the users protocol of ``envs/tau2/users.py``:
    ``reply(messages, tools) -> str``; and `ModelUser`, so the loop batches its turns).

    Args:
        model: anything with ``act(messages, tools)`` returning a generation (``.text``, ``.token_ids``) or a
            string, e.g. the rehearsing ``LMPolicy``; it samples with its own settings.

    The imagined user acts only in words: it is offered no tools, and ``<tool_call>`` blocks in its message
    are dropped (nothing it writes reaches a real environment). `tokens` counts what it generated,
    over every rehearsal that shares it (forks and their deep copies share one count and the model).
    """

    def __init__(self, model: Any) -> None:
        if not hasattr(model, "act"):
            raise TypeError(f"an imagined user needs a model with act(messages, tools), got {type(model).__name__}")
        self.model = model
        self._tokens = [0]  # shared with deep copies: one count per rehearsal fork

    @property
    def tokens(self) -> int:
        """Tokens the model generated playing the user, so far."""
        return self._tokens[0]

    def __deepcopy__(self, memo: dict[int, Any]) -> ImaginedUser:  # a forked env shares the model and the count
        return self

    def conversation(self, request: UserRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """What the model continues: the request's messages, and no tools (the imagined user has none)."""
        return list(request.messages), []

    def read(self, generation: Any) -> str:
        """The user's message in ``generation`` (its tokens counted), tool-call blocks dropped."""
        self._tokens[0] += len(getattr(generation, "token_ids", None) or [])
        text = str(getattr(generation, "text", generation))
        parsed = parse_calls(text)
        return parsed.content if parsed.calls or parsed.errors else text

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return self.read(self.model.act(*self.conversation(UserRequest(messages, tools))))
