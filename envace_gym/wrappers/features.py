"""``FeatureObservation``: a text-observation env as a fixed-size ``Box`` of hashed n-gram features.

Each observation hashes word uni- and bigrams of the recent history into ``dim`` buckets, one field per
part: the latest user turn, the tool results since it, the agent's last message, and (when the env below
is a `CandidateActions`) what each candidate slot holds (which tool, or an
answer, or padding), so a policy can tell which indices are real. Digits are mapped to ``0`` so that
``A-5247`` and ``A-1180`` share features. Hashing uses ``blake2b``, not Python's salted ``hash``: the same
text gives the same vector in every process. An optional ``embed(text) -> np.ndarray`` of the latest user
turn (a frozen LM's sentence embedding, say: held-out phrasings share meaning, not n-grams) is appended.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from ..calls import parse_calls, tool_names_of

__all__ = ["FeatureObservation", "hashed_ngrams", "history_fields"]

_TOKEN = re.compile(r"[a-z0]+|[^\sa-z0]")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(re.sub(r"\d", "0", text.lower()))


def _bucket(feature: str, dim: int) -> int:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % dim


def hashed_ngrams(fields: Iterable[tuple[str, str]], dim: int, n: int = 2) -> np.ndarray:
    """Binary bag of word 1..``n``-grams of each ``(field, text)``, hashed (per field) into ``dim`` buckets."""
    out = np.zeros(dim, dtype=np.float32)
    for field, text in fields:
        toks = _tokens(text)
        for size in range(1, n + 1):
            for i in range(len(toks) - size + 1):
                out[_bucket(f"{field}|{' '.join(toks[i : i + size])}", dim)] = 1.0
        out[_bucket(f"{field}|<len:{min(len(toks), 64) // 8}>", dim)] = 1.0  # a coarse length
    return out


def _slot_text(text: str, tool_names: frozenset[str] | None = None) -> str:
    parsed = parse_calls(text, tool_names)
    if parsed.calls:
        call = parsed.calls[0]
        return f"call {call.name} " + " ".join(sorted(call.arguments))
    return "answer"


def history_fields(
    messages: Sequence[dict[str, Any]],
    candidates: Sequence[str] | None = None,
    mask: Sequence[bool] | None = None,
    tool_names: frozenset[str] | None = None,
) -> list[tuple[str, str]]:
    """The ``(field, text)`` parts an observation hashes (see the module docstring). ``tool_names``: the
    declared tools, so that a candidate that only looks like a call is hashed as an answer."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    user = str(messages[last_user].get("content") or "") if last_user >= 0 else ""
    results = [str(m.get("content") or "") for m in messages[last_user + 1 :] if m.get("role") == "tool"]
    actions = [str(m.get("content") or "") for m in messages[last_user + 1 :] if m.get("role") == "assistant"]
    fields = [("user", user), ("results", "\n".join(results[-4:])), ("action", actions[-1] if actions else "<none>")]
    fields.append(("steps", f"<{min(len(actions), 8)}>"))
    if candidates is not None:
        for i, text in enumerate(candidates):
            real = mask is None or bool(mask[i])
            fields.append((f"slot{i}", _slot_text(text, tool_names) if real else "<pad>"))
    return fields


class FeatureObservation(gym.Wrapper):
    """Replaces the text observation with a ``Box(dim + embed_dim,)`` of float32 features.

    Args:
        env: an env whose ``info`` carries ``messages`` (``EnvACE-ToolCall-v0`` and its wrappers).
        dim: hashed n-gram buckets.
        ngram: the longest word n-gram hashed.
        embed: optional ``embed(text) -> 1-D array`` of a fixed size, applied to the latest user turn.
        slots: hash ``info["candidates"]`` as well, when the env below provides them.
    """

    def __init__(
        self,
        env: gym.Env,
        dim: int = 1024,
        ngram: int = 2,
        embed: Callable[[str], np.ndarray] | None = None,
        slots: bool = True,
    ) -> None:
        super().__init__(env)
        if dim < 1 or ngram < 1:
            raise ValueError(f"dim and ngram must be >= 1, got dim={dim}, ngram={ngram}")
        self.dim, self.ngram, self.embed, self.slots = dim, ngram, embed, slots
        self.embed_dim = 0
        if embed is not None:
            probe = np.asarray(embed(""), dtype=np.float32)
            if probe.ndim != 1:
                raise ValueError(f"embed(text) must return a 1-D array, got shape {probe.shape}")
            self.embed_dim = int(probe.shape[0])
        low = np.concatenate([np.zeros(dim), np.full(self.embed_dim, -np.inf)]).astype(np.float32)
        high = np.concatenate([np.ones(dim), np.full(self.embed_dim, np.inf)]).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)

    def features(self, info: dict[str, Any]) -> np.ndarray:
        """The observation for a state described by ``info`` (``messages``, optionally ``candidates``)."""
        candidates = info.get("candidates") if self.slots else None
        tools = info.get("tools")
        names = tool_names_of(tools) if tools is not None else None
        fields = history_fields(info.get("messages", []), candidates, info.get("action_mask"), names)
        out = hashed_ngrams(fields, self.dim, self.ngram)
        if self.embed is not None:  # of the latest user turn: what is asked, in words n-grams may not share
            vec = np.asarray(self.embed(fields[0][1]), dtype=np.float32)
            out = np.concatenate([out, vec])
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        _, info = self.env.reset(seed=seed, options=options)
        return self.features(info), info

    def step(self, action: Any):
        _, reward, terminated, truncated, info = self.env.step(action)
        return self.features(info), reward, terminated, truncated, info
