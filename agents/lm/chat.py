"""Prompt rendering with tools, and role-tagged token streams that grow turn by turn.

The conversation is rendered with the tokenizer's chat template. When the template takes ``tools=``, the
schemas go there; otherwise (SmolLM2's template has no tool support) a Hermes-style ``<tools>`` block is
added to the system message, telling the model the call format that `envace_gym.calls` parses.

A `TokenStream` holds the token ids of one conversation with a role tag per token. New messages are
appended as the *text difference* between successive renders, so the tokens the policy generated are kept
exactly as sampled (re-tokenising generated text need not give the same ids).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envace_gym.tools import compact_signature

__all__ = [
    "GENERATED_ROLES",
    "ROLES",
    "ChatFormat",
    "TokenStream",
    "TemplateError",
    "assistant_text",
    "compact_signature",
]

#: The one role vocabulary. The roles the model generates as (and training can target): the tool-calling
#: assistant and the environment role that imagines tool results.
GENERATED_ROLES = ("actor", "env_role")
#: Per-token role tags of a trajectory: the generated roles and what they read (the opening prompt, real
#: tool results, later user turns).
ROLES = ("prompt", *GENERATED_ROLES, "external", "user")

_HERMES_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>\n'
    "Several <tool_call> blocks in one message run in parallel. When no more calls are needed, answer the "
    "user in plain text without any tool call."
)


_COMPACT_TOOLS = (
    "You can call these tools:\n{tools}\n"
    'To call a tool, write <tool_call>{{"name": "<tool>", "arguments": {{<JSON arguments>}}}}</tool_call>; '
    "several blocks in one message run in parallel. When you have what you need, answer in plain text "
    "without any tool call."
)


class TemplateError(RuntimeError):
    """The chat template does not render conversations as a growing prefix."""


class ChatFormat:
    """Renders messages (+ tool schemas) to prompt text for one tokenizer.

    Args:
        tokenizer: a tokenizer with a chat template.
        tool_format: for templates without native tool support, how tools are described in the system
            message: ``"compact"`` (one signature line per tool; the default, about 10x fewer prompt tokens,
            which matters on CPU) or ``"hermes"`` (the full JSON schemas in a ``<tools>`` block).
    """

    def __init__(self, tokenizer: Any, tool_format: str = "compact") -> None:
        if tool_format not in ("compact", "hermes"):
            raise ValueError(f"tool_format must be 'compact' or 'hermes', got {tool_format!r}")
        self.tokenizer = tokenizer
        self.tool_format = tool_format
        template = getattr(tokenizer, "chat_template", None) or ""
        if not template:
            raise TemplateError("the tokenizer has no chat template")
        self.native_tools = "tools" in template
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
        specials |= {t.content for t in decoder.values() if getattr(t, "special", False)}
        #: Control-token strings (longest first) that message contents may not spell as control tokens.
        self.control_tokens = sorted((t for t in specials if len(t) > 1), key=len, reverse=True)

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        add_generation_prompt: bool = True,
    ) -> str:
        msgs = [self._plain(m) for m in messages]
        kwargs: dict[str, Any] = {}
        if tools and self.native_tools:
            kwargs["tools"] = list(tools)
        elif tools:
            if self.tool_format == "compact":
                block = _COMPACT_TOOLS.format(tools="\n".join(compact_signature(t) for t in tools))
            else:
                block = _HERMES_TOOLS.format(tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
            if msgs and msgs[0]["role"] == "system":
                msgs[0] = {"role": "system", "content": f"{msgs[0]['content']}\n\n{block}"}
            else:
                msgs.insert(0, {"role": "system", "content": block})
        return self.tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def tool_turn(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], name: str = ""
    ) -> tuple[str, str]:
        """The conversation rendered up to where a new ``tool`` message's content starts, and the template
        text that closes that content before the end-of-turn token (empty for ChatML): what an inline env
        role continues, and what to strip from its answer."""
        sentinel = "\u2063ENVACE_TOOL_CONTENT\u2063"
        full = self.render(
            [*messages, {"role": "tool", "name": name, "content": sentinel}], tools, add_generation_prompt=False
        )
        at = full.rfind(sentinel)
        if at < 0:
            raise TemplateError("the chat template does not show tool message contents")
        closing = full[at + len(sentinel) :]
        eot = self.tokenizer.eos_token or ""
        return full[:at], closing.split(eot)[0] if eot and eot in closing else ""

    def _plain(self, message: dict[str, Any]) -> dict[str, Any]:
        # Assistant messages keep their raw text (which already holds the <tool_call> blocks), so the parsed
        # tool_calls are dropped here: rendering both would show every call twice. They are the policy's own
        # tokens, kept as sampled; every other content (tool results, real or imagined, user and system
        # text) is escaped, so that it cannot forge a turn.
        content = message.get("content") or ""
        out = {"role": message["role"], "content": content if message["role"] == "assistant" else self.escape(content)}
        if message["role"] == "tool" and message.get("name"):
            out["name"] = message["name"]
        return out

    def escape(self, text: str) -> str:
        """``text`` with each control-token string (``<|im_end|>``, ``<|im_start|>``, ...) broken by a word
        joiner (U+2060) after its first character: it reads the same but encodes as plain text, never as a
        control token, so content cannot end a turn or open one with another role."""
        for token in self.control_tokens:
            if token in text:
                text = text.replace(token, token[0] + "\u2060" + token[1:])
        return text

    def spells_control_token(self, text: str) -> bool:
        """Whether ``text``, less the control tokens it may end with (its end of turn), spells one: such text
        renders escaped (`escape`), so tokens sampled for it cannot stand in the stream as they are."""
        body, trimmed = text.rstrip(), True
        while trimmed:
            trimmed = False
            for token in self.control_tokens:
                if body.endswith(token):
                    body, trimmed = body[: -len(token)].rstrip(), True
        return self.escape(body) != body

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class TokenStream:
    """The token ids of one conversation so far, a role per token, and actor logprobs (0.0 elsewhere)."""

    ids: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""  # the rendered text these tokens stand for
    head: int = 0  # length of the shared system+tools prefix, when it was encoded on its own

    def extend(self, ids: Sequence[int], role: str, text: str, logprobs: Sequence[float] | None = None) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        self.ids.extend(ids)
        self.roles.extend([role] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.text += text

    def append_render(self, fmt: ChatFormat, rendered: str, role: str) -> None:
        """Append what ``rendered`` (a full render of the conversation) adds beyond ``self.text``."""
        if not rendered.startswith(self.text):
            raise TemplateError(
                "the chat template re-renders earlier turns differently, so turns cannot be appended "
                "token-exactly; use a template whose renders grow as a prefix (ChatML, Llama 3, Qwen)"
            )
        suffix = rendered[len(self.text) :]
        if suffix:
            self.extend(fmt.encode(suffix), role, suffix)


def assistant_text(
    fmt: ChatFormat, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], before: str
) -> str:
    """What the last of ``messages``, an assistant message, adds to a stream whose text is ``before`` (the
    conversation up to its generation prompt): its content and end-of-turn token, the text the actor
    generates for it (the template text after that belongs to the next turn). Encoded with ``fmt.encode``,
    these are the ``actor`` tokens of the message, as SFT trains on them and as the rollout loop commits a
    message that a policy chose instead of generating it."""
    upto = fmt.render(messages, tools, add_generation_prompt=False)
    if not upto.startswith(before):
        raise TemplateError("the chat template does not render conversations as a growing prefix")
    added = upto[len(before) :]
    eot = fmt.tokenizer.eos_token or ""
    cut = added.find(eot, len(messages[-1].get("content") or "")) if eot else -1
    return added[: cut + len(eot)] if cut >= 0 else added


def encode_conversation(
    fmt: ChatFormat,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
    tool_results_role: str = "external",
) -> TokenStream:
    """A finished conversation as a role-tagged stream: what SFT trains on (loss on ``actor`` tokens).

    Each assistant message is tagged ``actor`` up to and including its end-of-turn token; template text
    after that (newlines, the next header) is ``external``, user turns ``user``. Tool results are
    ``external``, or with ``tool_results_role="env_role"`` their content and end-of-turn token are tagged
    ``env_role``: the inline env role's targets, laid out as an inline rollout lays them out.
    """
    first_assistant = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    stream = TokenStream()
    if messages and messages[0]["role"] == "system":
        # The system message with the tool list is its own token prefix, shared by every task of a domain.
        stream.append_render(fmt, fmt.render(messages[:1], tools, add_generation_prompt=False), "prompt")
        stream.head = len(stream.ids)
    stream.append_render(fmt, fmt.render(messages[:first_assistant], tools, add_generation_prompt=True), "prompt")
    eot = fmt.tokenizer.eos_token or ""
    for i in range(first_assistant, len(messages)):
        role = messages[i]["role"]
        if role == "assistant":
            actor_text = assistant_text(fmt, messages[: i + 1], tools, stream.text)
            stream.extend(fmt.encode(actor_text), "actor", actor_text)
            continue
        if role == "tool" and tool_results_role != "external":
            header, closing = fmt.tool_turn(messages[:i], tools, messages[i].get("name", ""))
            stream.append_render(fmt, header, "external")
            target = (messages[i].get("content") or "") + closing + eot
            stream.extend(fmt.encode(target), tool_results_role, target)
        nxt = messages[i + 1]["role"] if i + 1 < len(messages) else None
        rendered = fmt.render(messages[: i + 1], tools, add_generation_prompt=nxt == "assistant")
        stream.append_render(fmt, rendered, "user" if role == "user" else "external")
    return stream
