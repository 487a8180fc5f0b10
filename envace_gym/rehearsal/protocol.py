"""The env role's protocol: what it is asked (:class:`ImagineRequest`) and what one answer leaves behind
(:class:`EnvRoleSample`, the record a trainer turns into an RL sample)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["MODES", "BatchImaginer", "ImagineRequest", "Imaginer", "EnvRoleSample"]

MODES = ("prompted", "inline")


@dataclass
class ImagineRequest:
    """One request to the environment role: its chat prompt and the call it is about.

    ``mode="prompted"``: ``messages`` is the simulator prompt (system + user). ``mode="inline"``:
    ``messages`` is the actor's own conversation up to this call (its assistant message and this step's
    earlier tool messages included) and ``tools`` the actor's tool schemas; the env role continues it with
    a ``tool`` message. ``context_ids``/``context_text`` are the actor's exact token context when the rollout
    engine knows it (its sampled tokens, which re-tokenising the text need not reproduce), and ``key`` the
    conversation whose KV cache the engine may reuse.
    """

    messages: list[dict[str, Any]]
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    mode: str = "prompted"
    tools: list[dict[str, Any]] = field(default_factory=list)
    context_ids: list[int] | None = None
    context_text: str | None = None


class Imaginer(Protocol):
    """Anything that answers env-role requests: ``imagine(request)`` returns a generation with ``.text``
    (and, for training, ``.prompt_ids``, ``.token_ids``, ``.logprobs``; inline: ``.prompt_text``,
    ``.stop_text``), or a plain string."""

    def imagine(self, request: ImagineRequest) -> Any: ...


@runtime_checkable
class BatchImaginer(Imaginer, Protocol):
    """An imaginer that answers many requests in one engine call (an ``LMPolicy``): the rollout loop and
    the vector envs send each round's env-role requests as one ``imagine_batch`` call, with the env role's
    sampling passed in (None: the imaginer's own)."""

    def imagine_batch(self, requests: Sequence[ImagineRequest], sampling: Any = None) -> list[Any]: ...


@dataclass
class EnvRoleSample:
    """One environment-role generation: its own RL sample, trained with the trajectory's reward.

    ``prompt_ids`` is what the env role saw (the simulator prompt, or inline the actor's context up to the
    tool-message header), ``completion_ids``/``logprobs`` what it generated. ``valid`` is False when the
    answer was unusable (``error`` says why). ``prompt_text``/``completion_text`` (inline mode) let the
    rollout engine splice the answer into the actor's token stream. ``target`` (grounded imagination) is
    what the env role should have answered, from the real backend or a tool log, when the real result is
    known; ``exact``/``fidelity`` compare the answer with that result (None: not known).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    mode: str = "prompted"
    tool: str = ""
    valid: bool = True
    error: str | None = None
    prompt_text: str = ""
    completion_text: str = ""
    target: str | None = None
    exact: bool | None = None  # equal to the real result, where one is known (live or logged)
    fidelity: float | None = None  # 1.0 if exact, else key/value F1 against the real result; None: unknown
    text: str = ""  # the answer as the env parsed it (either mode; "" when the env role raised)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvRoleSample:
        return cls(**data)
