"""The env role's protocol: what it is asked (`ImagineRequest`), what it answers
(`EnvRoleAnswer`) and what one answer leaves behind (`EnvRoleSample`, the record a trainer turns
into an RL sample)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, Protocol, get_args, runtime_checkable

__all__ = [
    "MODES",
    "Mode",
    "Answer",
    "BatchImaginer",
    "EnvRoleAnswer",
    "ImagineRequest",
    "Imaginer",
    "JudgeRequest",
    "ModelRole",
    "ModelUser",
    "Request",
    "UserRequest",
    "EnvRoleSample",
    "SamplingLike",
]

#: How the env role is asked: ``prompted`` (the env-role prompt) or ``inline`` (it continues the actor's
#: own conversation with a tool message).
Mode = Literal["prompted", "inline"]
MODES: tuple[Mode, ...] = get_args(Mode)


@dataclass
class Request:
    """What a step (or a reset) waits on: a model's answer to ``messages``. ``role`` says who answers
    (``"env_role"``: the env role, an imagined tool result; ``"user"``: a simulated user's turn; ``"judge"``: a
    verdict), one answerer per role; each kind below adds what its answerer needs."""

    role: ClassVar[str]
    messages: list[dict[str, Any]]


@dataclass
class ImagineRequest(Request):
    """One request to the environment role: its chat prompt and the call it is about.

    ``mode="prompted"``: ``messages`` is the env-role prompt (system + user). ``mode="inline"``:
    ``messages`` is the actor's own conversation up to this call (its assistant message and this step's
    earlier tool messages included) and ``tools`` the actor's tool schemas; the env role continues it with
    a ``tool`` message. What the actor's engine knows of that conversation (its exact tokens, its KV-cache
    key) is not the env's: the agent side keeps it by env index and passes it to its own ``imagine_batch``.
    """

    role: ClassVar[str] = "env_role"  # answered by the env role (`Imaginer`)
    tool: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    mode: Mode = "prompted"
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class UserRequest(Request):
    """A request for a simulated user's next message, where a model plays the user (tau2's LM user, or the
    `ImaginedUser` of a private rehearsal): ``messages`` is the conversation
    from the user's side and ``tools`` the user's own tool schemas (telecom's device tools; else empty). The
    answer is the message text, the exception the user raised, or None: the env's own user answers (in
    the env's process; what a worker env does when its parent cannot reach its user)."""

    role: ClassVar[str] = "user"  # which of the env's model roles answers it (`ModelRole`)
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class JudgeRequest(Request):
    """A request for a judge's verdict at the end of an episode, where a model judges (tau2's checklist judge
    of natural-language assertions): ``messages`` is the question, one assertion about the transcript. The
    answer is the judge's reply text, the exception it raised, or None: the env's own judge answers."""

    role: ClassVar[str] = "judge"


#: A request the rollout loop answers with a model other than the env role's imaginer.
ModelRequest = UserRequest | JudgeRequest


@runtime_checkable
class ModelRole(Protocol):
    """A part of the world that a ``model`` plays (a simulated user, a judge), whose requests the rollout loop
    batches: the conversation the model continues for a request, and the answer its generation makes. An
    env names its roles by the requests' ``role`` (``"user"``, ``"judge"``)."""

    model: Any  # anything with act(messages, tools); act_batch([(messages, tools), ...], sampling, generator=) to batch

    def conversation(self, request: ModelRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...

    def read(self, generation: GenerationLike | str) -> str: ...


@runtime_checkable
class ModelUser(ModelRole, Protocol):
    """A user whose turns a ``model`` writes, which the rollout loop batches (a `ModelRole`).
    ``reply`` is the same, one at a time (the users protocol of ``envs/tau2/users.py``)."""

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str: ...


@dataclass
class EnvRoleAnswer:
    """One answer of the env role: its ``text`` and, where a model generated it (for training), the
    ``prompt_ids`` it saw, the ``token_ids`` and ``logprobs`` it sampled; inline: the ``prompt_text`` it
    continued and the ``stop_text`` that ended it. `of` reads any answer an imaginer gives."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    prompt_text: str = ""
    stop_text: str = ""

    @classmethod
    def of(cls, answer: object) -> EnvRoleAnswer:
        """``answer`` as an `EnvRoleAnswer`, as written: itself, a plain string (text only), or a generation
        (an engine's ``Generation``, or anything with ``.text`` and any of the fields above). The env reads
        an imaginer's answer with ``answers.read_answer``, which also takes data and fits text to the mode."""
        if isinstance(answer, cls):
            return answer
        if isinstance(answer, str):
            return cls(answer)
        if not isinstance(getattr(answer, "text", None), str):
            raise TypeError(f"an env-role answer is a string or has .text, got {type(answer).__name__}")
        return cls(
            answer.text,
            list(getattr(answer, "prompt_ids", None) or []),
            list(getattr(answer, "token_ids", None) or []),
            list(getattr(answer, "logprobs", None) or []),
            getattr(answer, "prompt_text", None) or "",
            getattr(answer, "stop_text", None) or "",
        )


class GenerationLike(Protocol):
    """A model's generation as an imaginer may return it (an ``LMPolicy``'s ``Generation``): its ``text`` and
    the fields of `EnvRoleAnswer` it has."""

    text: str


#: What an imaginer may answer with: an `EnvRoleAnswer`, a generation, a plain string, or the result as data
#: (a dict, a list: any JSON value but a string), formatted for the request's mode (see
#: `envace_gym.imagination.answers.read_answer`).
Answer = EnvRoleAnswer | GenerationLike | str | dict[str, Any] | list[Any]


class SamplingLike(Protocol):
    """How the env role samples, as the loop passes it to ``imagine_batch`` (``envace_gym.agents``'
    ``SamplingConfig`` is one)."""

    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int | None


class Imaginer(Protocol):
    """Anything that answers env-role requests: ``imagine(request)`` returns an `Answer`. A scripted one may
    return the result as data (``{"balance": 12.5}``) and leave its format to the env, in either mode."""

    def imagine(self, request: ImagineRequest) -> Answer: ...


@runtime_checkable
class BatchImaginer(Imaginer, Protocol):
    """An imaginer that answers many requests in one engine call (an ``LMPolicy``): the rollout loop and
    the vector envs send each round's env-role requests as one ``imagine_batch`` call, with the env role's
    sampling passed in (None: the imaginer's own) and, where the rollout keeps one, its sampling stream
    (``generator``: a ``torch.Generator`` for an ``LMPolicy``; None: the imaginer's own). An agent side that
    knows more of a request's context than the env (an LM actor's exact tokens and cache key, inline) passes
    it as ``contexts``, one per request, opaque to the env; only to an imaginer it gave that context for."""

    def imagine_batch(
        self,
        requests: Sequence[ImagineRequest],
        sampling: SamplingLike | None = None,
        generator: object | None = None,
        contexts: Sequence[object | None] | None = None,
    ) -> list[Answer]: ...


@dataclass
class EnvRoleSample:
    """One environment-role generation: its own RL sample, trained with the trajectory's reward.

    ``prompt_ids`` is what the env role saw (the env-role prompt, or inline the actor's context up to the
    tool-message header), ``completion_ids``/``logprobs`` what it generated. ``valid`` is False when the
    answer was unusable (``error`` says why). ``prompt_text``/``completion_text`` (inline mode) let the
    rollout engine splice the answer into the actor's token stream. ``target`` (grounded imagination) is
    what the env role should have answered, from the real backend or a tool log, when the real result is
    known; ``exact``/``fidelity`` compare the answer with that result (None: not known).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    mode: Mode = "prompted"
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
