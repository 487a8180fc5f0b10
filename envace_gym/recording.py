"""Reference trajectories recorded by running the real tools: `ReferenceRecorder`.

A task's reference (the calls that solve it, with their results) grounds the oracle, ``state_match`` and
the env role's imagined results, so its results must be the ones the real tools give. The recorder runs
every reference call on a fresh real backend, reset on the task's initial state, and keeps the result it
returned: nobody writes a result by hand, and a call that fails (a bug in the task generator) raises.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any

from .backends import Backend, PythonBackend, Toolkit
from .calls import ToolCall
from .tasks import RefCall, RefTurn, Task

__all__ = ["ReferenceCallError", "ReferenceRecorder"]


class ReferenceCallError(RuntimeError):
    """A reference call that the real backend refused or that raised: the recorded trajectory would be wrong."""


class ReferenceRecorder:
    """Plays a reference solution on a real backend and records each call with its real result.

    Args:
        backend: a `Toolkit` subclass (its tools run on a `PythonBackend`, in this thread) or
            a zero-argument callable that returns a fresh `Backend`.
        initial_state: the task's initial state; the backend starts from a copy, and the calls change
            that copy, so state carries from one step to the next (as in an episode).
        backend_name: the registered backend name `build` writes into the task.

    Usage::

        rec = ReferenceRecorder(Library, state, backend_name="my/library")
        (book,) = rec.step(("find_book", {"title": "Dune"}))  # the real result
        rec.step(("borrow", {"book_id": book["book_id"], "member_id": "M-11"}))
        # a RefTurn; the next turn starts
        turn = rec.turn("Done: Dune is lent to M-11.", contains=["M-11"])
        # or Task(..., reference=(turn,))
        task = rec.build(id=..., user_turns=[...], reward=[...])
    """

    def __init__(
        self,
        backend: type[Toolkit] | Callable[[], Backend],
        initial_state: dict[str, Any],
        backend_name: str | None = None,
    ) -> None:
        self.initial_state = copy.deepcopy(initial_state)  # later edits by the caller must not leak in
        self.backend_name = backend_name
        if isinstance(backend, type) and issubclass(backend, Toolkit):
            self.toolkit: type[Toolkit] | None = backend
            self._backend: Backend = PythonBackend(backend, timeout=None)
        else:
            self.toolkit = None
            self._backend = backend()
        self._backend.reset(Task(id="recording", user_turns=("-",), initial_state=copy.deepcopy(initial_state)))
        self.turns: list[RefTurn] = []  #: the turns closed by `turn`, in order
        self._steps: list[tuple[RefCall, ...]] = []

    def step(self, *calls: tuple[str, dict[str, Any]] | ToolCall) -> list[Any]:
        """Execute one assistant step (several calls = parallel calls), each a ``(name, arguments)`` pair or a
        `ToolCall`; returns their real results. A failed call raises `ReferenceCallError`."""
        recorded = []
        for call in calls:
            name, arguments = (call.name, call.arguments) if isinstance(call, ToolCall) else call
            result = self._backend.execute(ToolCall(name, arguments))
            if not result.ok:
                args = json.dumps(arguments, default=str)
                raise ReferenceCallError(f"reference call {name}({args}) failed: {result.error}")
            recorded.append(RefCall(name, arguments, result.content))
        self._steps.append(tuple(recorded))
        return [call.result for call in recorded]

    def turn(self, answer: str, contains: Sequence[str] = ()) -> RefTurn:
        """Close the current user turn: its recorded steps, then the reference ``answer`` and the strings the
        agent's answer must contain (``answer_match``). Returns the `RefTurn`; later steps belong to
        the next turn."""
        ref = RefTurn(tuple(self._steps), answer, tuple(contains))
        self.turns.append(ref)
        self._steps = []
        return ref

    @property
    def state(self) -> dict[str, Any]:
        """The backend's state now (after the steps so far)."""
        return self._backend.state()

    def build(
        self,
        *,
        id: str,
        user_turns: Sequence[str],
        reward: Sequence[str],
        domain: str = "",
        split: str = "train",
        system: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Task:
        """The `Task` whose reference is the recorded turns (one per user turn), on the toolkit's tools
        and ``backend_name``; every step must be closed by `turn`."""
        if self._steps:
            raise ValueError("steps recorded after the last turn(); every user turn must end with an answer")
        if self.toolkit is None or self.backend_name is None:
            raise ValueError("build() needs a Toolkit class and backend_name; otherwise construct the Task yourself")
        return Task(
            id=id,
            user_turns=tuple(user_turns),
            tools=tuple(spec.to_openai() for spec in self.toolkit.tool_specs()),
            backend=self.backend_name,
            initial_state=self.initial_state,
            reference=tuple(self.turns),
            reward=tuple(reward),
            domain=domain,
            split=split,
            system=system,
            metadata=metadata or {},
        )
