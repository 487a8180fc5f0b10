"""How the env reads an imaginer's answer (`read_answer`): one function for a backend's own calls and for
the rollout loop's batched answers, so an env role scripted in a few lines works in either mode.

A script may answer with the result as data (a dict, a list: any JSON value but a string), which is
formatted for the request's mode, or as text in either mode's format. A model's generation (an answer with
``token_ids``) is read exactly as written.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .prompt import execution_block, format_result
from .protocol import EnvRoleAnswer

__all__ = ["UnreadableAnswer", "read_answer"]


class UnreadableAnswer(TypeError):
    """An imaginer's answer that is neither data, text nor a generation (it raised nothing: it returned
    this). The env reports it as an unusable imagined result, with this message."""


def read_answer(answer: object, mode: str) -> EnvRoleAnswer | Exception:
    """``answer`` (what an imaginer returned for a request in ``mode``, or the exception it raised) as an
    `EnvRoleAnswer`, or the exception (an `UnreadableAnswer` when it returned something unreadable).

    * a model's generation (anything with ``.text`` and ``token_ids``): as written. Training samples its
      tokens, so it must follow the mode's format rule itself; no rewrite would be in those tokens.
    * data (a dict, a list: any JSON value but a string): `format_result` writes it for ``mode``;
    * text (a string, or a generation without ``token_ids``): kept when it is in ``mode``'s format; bare
      JSON in prompted mode is put inside ``<execution_result>`` tags, and an ``<execution_result>``
      block in inline mode becomes its bare JSON. A script that returns JSON text clearly meant the result.

    An `EnvRoleAnswer` read once reads the same again, so the backend may read what the loop has read."""
    if isinstance(answer, Exception):
        return answer
    if isinstance(answer, str):
        return EnvRoleAnswer(_in_mode(answer, mode))
    if isinstance(getattr(answer, "text", None), str):
        gen = EnvRoleAnswer.of(answer)
        return gen if gen.token_ids else dataclasses.replace(gen, text=_in_mode(gen.text, mode))
    if answer is None:
        return UnreadableAnswer("the imaginer returned None: return the result as data (a dict or a list) or text")
    try:
        return EnvRoleAnswer(format_result(answer, mode))
    except (TypeError, ValueError, RecursionError) as exc:
        return UnreadableAnswer(
            f"the imaginer's answer is neither data (a JSON value), text nor a generation (.text): {exc}"
        )


def _in_mode(text: str, mode: str) -> str:
    """A text-only answer in ``mode``'s format, where it is plainly a result in the other one."""
    if mode == "inline":
        if _json(text) is not None:
            return text
        body = execution_block(text)
        return body if body is not None else text
    if "<execution_result>" in text or _json(text) is None:
        return text
    return f"<execution_result>\n{text.strip()}\n</execution_result>"


def _json(text: str) -> tuple[Any] | None:
    """``(value,)`` when ``text`` is JSON, else None."""
    try:
        return (json.loads(text),)
    except (ValueError, RecursionError):
        return None
