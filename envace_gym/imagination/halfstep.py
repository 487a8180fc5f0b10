"""One step of many envs, their env role answered in one call per imaginer and round (the rollout loop,
``envace_gym.agents.rollout.collect``, and the native vector env, `envace_gym.vector`, both step this way).

Each env's step runs in two halves (`begin_step` through the wrappers to ``ToolCallEnv.begin_step``,
``continue_step`` per request, then ``env.step(action)`` through the wrappers with the same action):
`step_envs` begins every env's step, sends all the env-role requests that wait (at most one per env) to their
imaginer as one ``imagine_batch`` call, hands each env its answer, and repeats while any env waits (a message with
several imagined calls needs one round per call: each call is asked with the answers before it in view), then
finishes every step. A simulated user played by a model (tau2's LM user, a rehearsal's imagined user) and a judge
played by a model (tau2's NL-assertion judge) are asked the same way: a user's turn is a `UserRequest`, a
verdict a `JudgeRequest`, a round's requests one call per model. No thread, no callback into the policy or
any model from inside ``env.step``: the loop that holds the actor's token stream drives the env role, with
its sampling passed in, and the models of the users and judges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym

from .answers import read_answer
from .protocol import (
    BatchImaginer,
    EnvRoleAnswer,
    Imaginer,
    ImagineRequest,
    ModelRequest,
    ModelRole,
    ModelUser,
    Request,
    SamplingLike,
)

if TYPE_CHECKING:
    from ..env import PendingStep

__all__ = [
    "EnvGroup",
    "HalfStepEnv",
    "LocalEnvs",
    "answer_model_requests",
    "answer_requests",
    "answer_round",
    "begin_reset",
    "begin_step",
    "begin_steps",
    "continue_steps",
    "half_step_route",
    "imaginer_of",
    "reset_envs",
    "roles_of",
    "step_envs",
    "user_of",
]


class HalfStepEnv(Protocol):
    """An env whose step runs in two halves (``ToolCallEnv`` and the rehearsal fork implement it)."""

    def begin_step(self, action: str) -> PendingStep: ...

    def continue_step(self, answers: Sequence[EnvRoleAnswer | str | Exception | None]) -> PendingStep: ...


class EnvGroup(Protocol):
    """Envs that `step_envs` steps together: `LocalEnvs` (this process) or the rollout loop's
    ``RemoteEnvs`` (worker processes)."""

    def begin_steps(self, indices: Sequence[int], actions: Sequence[Any]) -> list[PendingStep | None]: ...

    def continue_steps(
        self, indices: Sequence[int], answers: Sequence[EnvRoleAnswer | str | Exception | None]
    ) -> list[PendingStep]: ...

    def step(self, indices: Sequence[int], actions: Sequence[Any]) -> list[tuple]: ...


def half_step_route(env: gym.Env) -> tuple[HalfStepEnv, list[gym.ActionWrapper]] | None:
    """How ``env``'s half-steps run: the env that runs them (its ``unwrapped``) and the action wrappers on the
    way there, outermost first; None when the base has no half-steps (then ``env.step`` runs whole). A wrapper
    that changes the action space without being a ``gym.ActionWrapper`` is refused: its mapping lives inside
    its ``step``, where a half-step cannot apply it."""
    mappings: list[gym.ActionWrapper] = []
    inner = env
    while isinstance(inner, gym.Wrapper):
        if isinstance(inner, gym.ActionWrapper):
            mappings.append(inner)
        elif inner.action_space is not inner.env.action_space and inner.action_space != inner.env.action_space:
            raise TypeError(
                f"{type(inner).__name__} changes the action space inside step(); make it a gym.ActionWrapper so "
                "that a half-step (begin_step) can map actions on the way in"
            )
        inner = inner.env
    return (inner, mappings) if callable(getattr(inner, "begin_step", None)) else None


def begin_step(env: gym.Env, action: object) -> PendingStep:
    """Begin ``env``'s step with ``action`` as ``env.step(action)`` would: each action wrapper's ``action()``
    maps it on the way in, then the base begins (``ToolCallEnv.begin_step``). End the step with
    ``env.step(action)``, the same action, once every request is answered (``continue_step`` on the base)."""
    route = half_step_route(env)
    if route is None:
        raise TypeError(f"{type(env.unwrapped).__name__} has no half-steps (begin_step)")
    base, mappings = route
    for wrapper in mappings:
        action = wrapper.action(action)
    return base.begin_step(action)


def begin_reset(env: gym.Env, seed: int | None = None, options: dict[str, Any] | None = None) -> PendingStep:
    """Begin ``env``'s reset as ``env.reset(seed=..., options=...)`` would: each wrapper that resets with other
    options says which (``reset_options``, `SelfRehearsalEnv`'s imagined backend) on the way in, then the base
    begins (``ToolCallEnv.begin_reset``). End it with ``env.reset`` on the same seed and options once every
    request (a model user's opening turn) is answered (``continue_step`` on the base)."""
    inner = env
    while isinstance(inner, gym.Wrapper):
        to_options = getattr(type(inner), "reset_options", None)  # a class hook, as ActionWrapper.action is
        if to_options is not None:
            options = to_options(inner, options)
        inner = inner.env
    return inner.begin_reset(seed=seed, options=options)


def imaginer_of(env: gym.Env) -> Imaginer | None:
    """The env role of ``env``'s imagination wrapper (reached through any outer wrappers), or None."""
    return env.get_wrapper_attr("imaginer") if env.has_wrapper_attr("imaginer") else None


def user_of(env: gym.Env) -> ModelUser | None:
    """``env``'s simulated user where a model plays it (its turns can be batched by the loop), else None."""
    user = getattr(env.unwrapped, "user", None)
    return user if isinstance(user, ModelUser) else None


def roles_of(env: gym.Env) -> dict[str, ModelRole]:
    """The parts of ``env``'s world that a model plays and whose requests a loop may batch, by request
    ``role``: ``"user"`` (`user_of`), ``"judge"`` (a `ModelRole` judge, tau2's checklist judge)."""
    roles: dict[str, ModelRole] = {}
    user, judge = user_of(env), getattr(env.unwrapped, "judge", None)
    if user is not None:
        roles["user"] = user
    if isinstance(judge, ModelRole):
        roles["judge"] = judge
    return roles


def answer_model_requests(
    requests: Sequence[ModelRequest],
    roles: Sequence[ModelRole | None],
    sampling: SamplingLike | None = None,
    rng: object | None = None,
) -> list[str | Exception | None]:
    """Each user or judge request's answer from the model of its role (``roles[i]`` answers
    ``requests[i]``): one ``act_batch(conversations, sampling, generator=rng)`` call per model, given the
    rollout's sampling and random stream as the env role is (None: the model's own), or ``act`` one by one for
    a model without ``act_batch``; a model's failure is its answer (a user's ends the episode with a user
    error, a judge's rules no); None where no role is given (the env's own user or judge answers)."""
    answers: list[str | Exception | None] = [None] * len(requests)
    groups: dict[int, list[int]] = {}
    for i, role in enumerate(roles):
        if role is not None:
            groups.setdefault(id(role.model), []).append(i)
    for members in groups.values():
        model = roles[members[0]].model  # type: ignore[union-attr]
        asked = [roles[i].conversation(requests[i]) for i in members]  # type: ignore[union-attr]
        try:
            if callable(getattr(model, "act_batch", None)):
                gens: list[Any] = model.act_batch(asked, sampling, generator=rng)
            else:
                gens = [model.act(messages, tools) for messages, tools in asked]
        except Exception as exc:  # every request of the batch sees the failure
            gens = [exc] * len(members)
        for i, gen in zip(members, gens, strict=True):
            answers[i] = gen if isinstance(gen, Exception) else roles[i].read(gen)  # type: ignore[union-attr]
    return answers


def answer_requests(
    requests: Sequence[ImagineRequest],
    imaginers: Sequence[Imaginer | None],
    sampling: SamplingLike | None = None,
    rng: object | None = None,
    contexts: Sequence[object | None] | None = None,
) -> list[EnvRoleAnswer | Exception]:
    """Each request's answer from its imaginer: one ``imagine_batch(requests, sampling)`` call per imaginer
    (requests in the order given; ``generator=rng`` too where the rollout keeps the env role's sampling
    stream, ``contexts=`` where the agent side gave any: its own data, passed through unread), or
    ``imagine(request)`` one by one for an imaginer that cannot batch. Each answer is read by
    `read_answer` for its request's mode (a script's data formatted for it); an imaginer that raises (or
    answers with something that is no answer) answers with an exception, which the env turns into that
    call's error."""
    answers: list[Any] = [None] * len(requests)
    groups: dict[int, list[int]] = {}
    for i, imaginer in enumerate(imaginers):
        groups.setdefault(id(imaginer), []).append(i)
    for members in groups.values():
        imaginer = imaginers[members[0]]
        asked = [requests[i] for i in members]
        if imaginer is None:  # an env stepped in halves for its user, whose calls nobody here imagines
            for i in members:
                answers[i] = RuntimeError("no env role answers this env's imagined calls")
            continue
        if not isinstance(imaginer, BatchImaginer):
            for i, request in zip(members, asked, strict=True):
                try:
                    answers[i] = imaginer.imagine(request)
                except Exception as exc:  # contained like a crashing tool (the env reports it)
                    answers[i] = exc
            continue
        given = [contexts[i] for i in members] if contexts is not None else []
        try:
            if any(c is not None for c in given):
                gens = imaginer.imagine_batch(asked, sampling, generator=rng, contexts=given)
            elif sampling is None:
                gens = imaginer.imagine_batch(asked)
            elif rng is None:
                gens = imaginer.imagine_batch(asked, sampling)
            else:
                gens = imaginer.imagine_batch(asked, sampling, generator=rng)
        except Exception as exc:  # every request of the batch sees the failure
            gens = [exc] * len(asked)
        for i, gen in zip(members, gens, strict=True):
            answers[i] = gen
    # Read as the env's backend reads an answer it asked for itself (data formatted for the request's mode).
    return [read_answer(a, r.mode) for a, r in zip(answers, requests, strict=True)]


class LocalEnvs:
    """Envs stepped in this process, as `step_envs` sees a group of envs: ``begin_steps``,
    ``continue_steps`` and ``step`` over the envs at ``indices``."""

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)
        self._halves: dict[int, bool] = {}  # found on first use: only envs whose env role the caller answers

    def begin_steps(self, indices: Sequence[int], actions: Sequence[Any]) -> list[PendingStep | None]:
        """Each env's `begin_step`; None for an env without half-steps (it then steps whole)."""
        for i in indices:
            if i not in self._halves:
                self._halves[i] = half_step_route(self.envs[i]) is not None
        return [begin_step(self.envs[i], a) if self._halves[i] else None for i, a in zip(indices, actions, strict=True)]

    def continue_steps(
        self, indices: Sequence[int], answers: Sequence[EnvRoleAnswer | str | Exception | None]
    ) -> list[PendingStep]:
        return [self.envs[i].unwrapped.continue_step([a]) for i, a in zip(indices, answers, strict=True)]

    def step(self, indices: Sequence[int], actions: Sequence[Any]) -> list[tuple]:
        return [self.envs[i].step(a) for i, a in zip(indices, actions, strict=True)]


def begin_steps(
    group: EnvGroup,
    indices: Sequence[int],
    actions: Sequence[Any],
    imaginers: Sequence[Imaginer | None],
    roles: Sequence[Mapping[str, ModelRole]],
) -> dict[int, Request]:
    """Begin the steps of envs ``indices`` of ``group`` whose requests a caller answers (an env with an
    imaginer, ``imaginers[i]``, or a model role, ``roles[i]``); returns the request each waits on, by env
    index (an env that waits on none is not in it). The others step whole in `finish_steps` (their own
    answerers, if any, answer inside ``env.step``)."""
    halves = [(i, a) for i, a in zip(indices, actions, strict=True) if imaginers[i] is not None or roles[i]]
    if not halves:
        return {}
    begun = group.begin_steps([i for i, _ in halves], [a for _, a in halves])
    return {i: p.requests[0] for (i, _), p in zip(halves, begun, strict=True) if p is not None and p.requests}


def answer_round(
    requests: Mapping[int, Request],
    imaginers: Sequence[Imaginer | None],
    roles: Sequence[Mapping[str, ModelRole]],
    sampling: SamplingLike | None = None,
    rng: object | None = None,
    contexts: Mapping[int, object] | None = None,
) -> dict[int, EnvRoleAnswer | str | Exception | None]:
    """One round's answers, by env index: env-role requests by ``imaginers[i]`` (`answer_requests`: one call
    per imaginer, given the agent side's ``contexts[i]`` where it has one), user turns and verdicts by the
    model of ``roles[i][request.role]`` (`answer_model_requests`: one call per model); every answerer is
    given the rollout's world ``sampling`` and random stream ``rng`` (the env role's: a rollout draws the
    same whatever ran before it)."""
    turns = [i for i, r in requests.items() if r.role != "env_role"]
    calls = [i for i, r in requests.items() if r.role == "env_role"]
    answers: dict[int, EnvRoleAnswer | str | Exception | None] = {}
    said = answer_model_requests(
        [requests[i] for i in turns],  # type: ignore[misc]
        [roles[i].get(requests[i].role) for i in turns],
        sampling,
        rng,
    )
    answers.update(zip(turns, said, strict=True))
    said_calls = answer_requests(
        [requests[i] for i in calls],  # type: ignore[misc]
        [imaginers[i] for i in calls],
        sampling,
        rng,
        [contexts.get(i) for i in calls] if contexts else None,
    )
    answers.update(zip(calls, said_calls, strict=True))
    return answers


def continue_steps(
    group: EnvGroup, answers: Mapping[int, EnvRoleAnswer | str | Exception | None]
) -> dict[int, Request]:
    """Hand each env its answer (``continue_step``); returns the request each still waits on, by env index."""
    indices = list(answers)
    if not indices:
        return {}
    went_on = group.continue_steps(indices, [answers[i] for i in indices])
    return {i: p.requests[0] for i, p in zip(indices, went_on, strict=True) if p.requests}


def step_envs(
    group: EnvGroup,
    indices: Sequence[int],
    actions: Sequence[Any],
    imaginers: Sequence[Imaginer | None],
    sampling: SamplingLike | None = None,
    rng: object | None = None,
    roles: Sequence[Mapping[str, ModelRole]] | None = None,
) -> list[tuple]:
    """Step envs ``indices`` of ``group`` (`LocalEnvs`, or the rollout loop's ``RemoteEnvs`` for envs in
    worker processes) with ``actions``; results in order: `begin_steps`, then `answer_round` and
    `continue_steps` while any env waits, then ``env.step(action)`` through each env's wrappers. The rounds
    written out, for a caller with no context to add to a request (the native vector env); the rollout loop
    runs them itself, passing each inline request's actor context beside it."""
    played = list(roles) if roles is not None else [{}] * len(imaginers)
    pending = begin_steps(group, indices, actions, imaginers, played)
    while pending:
        pending = continue_steps(group, answer_round(pending, imaginers, played, sampling, rng))
    return group.step(list(indices), list(actions))  # ends each begun step through its wrappers


def reset_envs(
    group: EnvGroup,
    resets: Mapping[int, tuple[gym.Env, int | None, dict[str, Any] | None]],
    imaginers: Sequence[Imaginer | None],
    roles: Sequence[Mapping[str, ModelRole]],
    sampling: SamplingLike | None = None,
    rng: object | None = None,
) -> dict[int, tuple]:
    """Reset the envs of ``resets`` (env index -> the env, its seed, its options); each ``(obs, info)`` by index.
    Where a model plays a part of an env's world (``roles[i]``: tau2's model user, whose opening turn starts
    the episode) the reset runs in halves (`begin_reset`): the openings of all envs are answered in rounds, one
    call per model and round, as a step's requests are; then ``env.reset`` with the same seed and options
    ends each one. No model is called inside ``reset``."""
    halves = {i: begin_reset(env, seed, options) for i, (env, seed, options) in resets.items() if roles[i]}
    pending = {i: p.requests[0] for i, p in halves.items() if p.requests}
    while pending:
        pending = continue_steps(group, answer_round(pending, imaginers, roles, sampling, rng))
    return {i: env.reset(seed=seed, options=options) for i, (env, seed, options) in resets.items()}
