"""``VerifiedCalls``: the env role as a verifier. Before a state-changing call is sent for real, the policy's
own env role predicts its result; a message whose call is predicted to fail is revised once.

Hooks on a policy it holds (a `PolicyHooks`, like
`PrivateRehearsal`). Through ``collect``'s ``choose_actions`` hook, before every actor turn
of the committed episode:

1. the policy drafts its message as it would: one batched generation for all envs, from each env's
   conversation (``info["messages"]``, ``info["tools"]``, encoded with ``encode_prompt`` as the loop encodes
   it) at the rollout's sampling (the hook's ``TurnContext``: a ``sampling=`` given to ``collect``, else
   ``policy.sampling``);
2. the draft is parsed as the env parses it (``parse_calls``, at most the env's ``max_calls_per_step``
   calls). Each call that is **state-changing** (`is_read_only`) and passes the deterministic checks
   (a call they reject changes nothing and the env reports it anyway) is predicted by the env role, from
   the request an `ImaginedBackend` builds for it (the prompted env-role
   prompt, exactly as an imagined call of the env is asked, over the task made blind and without
   reference examples: nothing of the reference reaches it). Each call is predicted from the conversation
   up to and including the draft, without the results of the draft's other calls (they have not run).
   All envs' requests go out in one ``imagine_batch`` call;
3. a prediction that is an error (`predicted_error`: the env's ``{"error": {"code", "message"}}``,
   or ``{"error": "<text>"}``) **fires** the verifier: the policy writes its message again, once, from its
   conversation, its draft and a private note (``revise_prompt``: the predicted errors) as a system message;
   the revised message is committed as it is, unverified (at most one revision per turn). Otherwise (no
   state-changing call, every prediction a success, or an unusable answer) the draft is committed unchanged;
   so is it when the revision's prompt would not fit the model's context (``too_long``).

The draft and the note never enter the committed context: only the committed message does, as the actor
tokens of an assistant message of its text (``PolicyChoice``; logprobs 0.0, so these trajectories are for
evaluation, not for training). Each decision's statistics go onto the trajectory as a note without text:
``use="verify"``, ``calls`` (in the draft), ``predicted`` (calls the env role predicted), ``unusable`` (its
answers that were no result), ``fired`` (1 if revised), ``error_code`` (the first predicted error's),
``env_role_tokens``, ``revision_tokens``, ``verifier_tokens`` (their sum), ``verifier_seconds`` and, where the
revision would not fit the context, ``too_long``.

**Which calls are state-changing.** Tool specs here carry no side-effect flag, so the rule is: an explicit
MCP-style annotation in the tool's schema wins (``{"annotations": {"readOnlyHint": true|false}}``, on the
schema or its ``function``); otherwise a tool whose name starts with a read verb (`READ_ONLY_PREFIXES`:
``get_``, ``find_``, ``list_``, ``search_``...) is read-only, and every other tool is state-changing. Read-only
calls are not verified: they are harmless to run, and their real result tells the agent more than a
prediction. The heuristic errs towards verifying (a read-only tool with another name, such as the bank's
``convert_currency``, is verified: tokens spent, nothing sent). ``read_only=lambda name, schema: False``
verifies every call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envace_gym.agents.lm.protocols import is_lm_policy
from envace_gym.agents.rollout.hooks import PolicyChoice, PolicyHooks, TurnContext
from envace_gym.backends import ToolResult
from envace_gym.calls import ToolCall, canonical_json, parse_calls, tool_calls_to_openai
from envace_gym.imagination import ImaginedBackend, Imaginer, ImagineRequest
from envace_gym.imagination.halfstep import answer_requests
from envace_gym.imagination.prompt import parse_execution_result

from .memory import predicted_error

if TYPE_CHECKING:
    from envace_gym.agents.lm.protocols import LMPolicyLike
    from envace_gym.tasks import Task

__all__ = ["VerifiedCalls", "is_read_only", "predicted_error", "READ_ONLY_PREFIXES", "REVISE_PROMPT"]

#: Name prefixes of read-only tools (the part after a last ``.``, lower-cased), where no annotation says.
READ_ONLY_PREFIXES = ("get_", "find_", "list_", "search_", "lookup_", "read_", "query_", "show_", "view_", "describe_")
#: The private note the policy revises its message from; ``{errors}``: one line per predicted failure.
REVISE_PROMPT = "A private check predicts that your message fails:\n{errors}\nWrite your message again."


def _read_only_hint(schema: dict[str, Any] | None) -> bool | None:
    if not isinstance(schema, dict):
        return None
    for where in (schema, schema.get("function")):
        annotations = where.get("annotations") if isinstance(where, dict) else None
        if isinstance(annotations, dict) and isinstance(annotations.get("readOnlyHint"), bool):
            return annotations["readOnlyHint"]
    return None


def is_read_only(name: str, schema: dict[str, Any] | None = None) -> bool:
    """Whether a call of tool ``name`` (OpenAI ``schema``, if known) changes nothing: its MCP-style
    ``readOnlyHint`` annotation if it has one, else a read verb as its name's prefix (see the module docstring)."""
    hint = _read_only_hint(schema)
    if hint is not None:
        return hint
    return name.rsplit(".", 1)[-1].lower().startswith(READ_ONLY_PREFIXES)


def _no_real_backend(task: Task) -> Any:
    raise RuntimeError("the verifier never reaches a real backend")


class VerifiedCalls(PolicyHooks):
    """A policy whose state-changing calls the env role checks before they are sent (see the module docstring).

    Args:
        policy: an LM policy (it drafts and revises; it also predicts, in its env role, unless ``imaginer``).
            Not one with hooks of its own (``PrivateRehearsal``): both would choose the committed message.
        imaginer: who predicts the results (anything with ``imagine(request)``, or ``imagine_batch``); default:
            the policy itself. It answers with its own sampling.
        revise_prompt: the private note the policy revises from; ``{errors}`` is replaced by one line per
            predicted failure (``name(arguments) -> code: message``).
        read_only: ``(tool name, OpenAI schema or None) -> bool``: calls it calls read-only are not verified;
            default `is_read_only`.
    """

    def __init__(
        self,
        policy: LMPolicyLike,
        imaginer: Imaginer | None = None,
        revise_prompt: str = REVISE_PROMPT,
        read_only: Callable[[str, dict[str, Any] | None], bool] = is_read_only,
    ) -> None:
        if isinstance(policy, PolicyHooks):
            raise ValueError("VerifiedCalls wraps a plain LM policy, not one with hooks of its own (PrivateRehearsal)")
        if not is_lm_policy(policy):
            raise ValueError("VerifiedCalls needs a language-model policy (it drafts and revises its messages)")
        if "{errors}" not in revise_prompt:
            raise ValueError("revise_prompt must hold {errors} (where the predicted failures go)")
        self.policy, self.revise_prompt, self.read_only = policy, revise_prompt, read_only
        self.imaginer = imaginer if imaginer is not None else policy
        self._generator: Any = None
        self.name = f"{getattr(policy, 'name', None) or type(policy).__name__}+verify"

    # ------------------------------------------------------------------ collect()'s hook
    def choose_actions(
        self,
        envs: Sequence[gym.Env],
        observations: Sequence[Any],
        infos: Sequence[dict[str, Any]],
        ctx: TurnContext | None = None,
    ) -> list[PolicyChoice | None]:
        """Draft each env's message, predict its state-changing calls, revise the ones predicted to fail;
        the message to commit and the decision's statistics, per env. Drafts and revisions are sampled as the
        rollout samples (``ctx.sampling``; without a context, the policy's own)."""
        t0 = time.monotonic()
        sampling = (ctx.sampling if ctx is not None else None) or self.policy.sampling
        drafts = self._generate([(info["messages"], info["tools"]) for info in infos], sampling)
        checks = [self._requests(env, info, d.text) for env, info, d in zip(envs, infos, drafts, strict=True)]
        flat = [request for _, asked in checks for _, request in asked]
        answers = iter(answer_requests(flat, [self.imaginer] * len(flat)) if flat else [])
        stats, failures = [], []
        for calls, asked in checks:
            errors, unusable, tokens = [], 0, 0
            for call, _ in asked:
                answer = next(answers)
                if isinstance(answer, Exception):
                    value, reason = None, "raised"
                else:
                    tokens += len(answer.token_ids)
                    value, reason = parse_execution_result(answer.text)
                error = predicted_error(value) if reason is None else None
                unusable += reason is not None
                if error is not None:
                    errors.append((call, error))
            failures.append(errors)
            stats.append(
                {
                    "use": "verify",
                    "calls": calls,
                    "predicted": len(asked),
                    "unusable": unusable,
                    "fired": int(bool(errors)),
                    "error_code": errors[0][1][0] if errors else None,
                    "env_role_tokens": tokens,
                    "revision_tokens": 0,
                }
            )
        texts = [d.text for d in drafts]
        revise = {k: self._revision_context(infos[k], texts[k], errors) for k, errors in enumerate(failures) if errors}
        for k in [k for k, context in revise.items() if not self._fits(context, sampling.max_new_tokens)]:
            del revise[k]  # no room in the model's context to revise: the draft goes out, as without the verifier
            stats[k].update(fired=0, too_long=1)
        if revise:
            for k, gen in zip(revise, self._generate(list(revise.values()), sampling), strict=True):
                texts[k] = gen.text
                stats[k]["revision_tokens"] = len(gen.token_ids)
        seconds = (time.monotonic() - t0) / len(envs)  # the batch's time, shared evenly
        for s in stats:
            s.update(verifier_tokens=s["env_role_tokens"] + s["revision_tokens"], verifier_seconds=round(seconds, 3))
        return [PolicyChoice(text, s) for text, s in zip(texts, stats, strict=True)]

    # ------------------------------------------------------------------ internals
    def _fits(self, conversation: tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]], max_new: int) -> bool:
        """Whether a revision from ``conversation`` fits the model's context, as the loop requires of a turn."""
        limit = getattr(self.policy, "max_context", None)
        if limit is None:
            return True
        ids, _ = self.policy.encode_prompt(*conversation)
        return len(ids) + max_new <= limit

    def _generate(
        self, conversations: Sequence[tuple[Sequence[dict[str, Any]], Sequence[dict[str, Any]]]], sampling: Any
    ) -> list:
        """The policy's next message for each ``(messages, tools)``, in one batched call at ``sampling``."""
        if self._generator is None and sampling.seed is not None:
            import torch

            self._generator = torch.Generator().manual_seed(sampling.seed + 2)  # its own stream, like the env role's
        encoded = [self.policy.encode_prompt(m, t) for m, t in conversations]
        return self.policy.generate_ids(
            [e[0] for e in encoded], sampling=sampling, generator=self._generator, prefix_lens=[e[1] for e in encoded]
        )

    def _requests(
        self, env: gym.Env, info: dict[str, Any], text: str
    ) -> tuple[int, list[tuple[ToolCall, ImagineRequest]]]:
        """The draft's number of calls, and an env-role request for each state-changing call that passes the
        deterministic checks, built as the env builds an imagined call's (blind task, no examples)."""
        if not hasattr(env, "unwrapped"):
            raise TypeError("VerifiedCalls reads the env's task: it needs envs in this process (not an AsyncVectorEnv)")
        base = env.unwrapped
        parsed = parse_calls(text).calls[: base.max_calls_per_step]
        calls = [ToolCall(c.name, c.arguments, c.id or f"verify_{i}") for i, c in enumerate(parsed)]
        schemas = {t.get("function", t).get("name"): t for t in info["tools"] if isinstance(t, dict)}
        todo = [c for c in calls if not self.read_only(c.name, schemas.get(c.name))]
        if not todo:
            return len(calls), []
        backend = ImaginedBackend(
            self.imaginer, grounding="none", real_backend=_no_real_backend, max_result_chars=base.max_result_chars
        )
        backend.reset(base.task.blind())
        assistant = {"role": "assistant", "content": text, "tool_calls": tool_calls_to_openai(calls)}
        backend.bind_conversation([*info["messages"], assistant])
        # each call's request to the env role (a call the checks refused makes none); never answered here
        asked = [(c, next(p)) for c in todo if not isinstance(p := backend.run(c), ToolResult)]
        return len(calls), asked

    def _revision_context(
        self, info: dict[str, Any], draft: str, errors: Sequence[tuple[ToolCall, tuple[str, str]]]
    ) -> tuple[list[dict[str, Any]], Any]:
        lines = [f"{c.name}({canonical_json(c.arguments)}) -> {code}: {message}" for c, (code, message) in errors]
        note = self.revise_prompt.format(errors="\n".join(lines))
        messages = [*info["messages"], {"role": "assistant", "content": draft}, {"role": "system", "content": note}]
        return messages, info["tools"]
