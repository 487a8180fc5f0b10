"""The one renderer of a chat history as readable text (``env.render()``, the env-role prompt, the demo)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["render_transcript"]


def _label(message: dict[str, Any]) -> str:
    return f"tool {message.get('name', '')}".strip() if message["role"] == "tool" else message["role"]


def render_transcript(
    messages: Sequence[dict[str, Any]], *, include_system: bool = True, markdown: bool = False
) -> str:
    """``[role] content`` lines (a tool message is labelled ``tool <name>``); ``markdown=True`` gives a bold
    label and a fenced block per message instead."""
    shown = [m for m in messages if include_system or m["role"] != "system"]
    if not markdown:
        return "\n".join(f"[{_label(m)}] {m.get('content', '')}" for m in shown)
    blocks = []
    for m in shown:
        label = f"tool `{m.get('name', '')}`" if m["role"] == "tool" else m["role"]
        blocks.append(f"**{label}**\n\n```\n{m.get('content', '')}\n```\n")
    return "\n".join(blocks)
