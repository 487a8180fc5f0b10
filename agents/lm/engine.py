"""Generation engines: batched sampling with exact per-token logprobs and KV-cache reuse across turns.

`HFEngine` runs any transformers causal LM with its own decoding loop (not ``model.generate``) so
that it can (1) record the log-probability of every sampled token under the sampling distribution, and
(2) keep each conversation's KV cache between turns: the next turn of a conversation encodes only the
tokens added since its last generation (tool results, the next user message), in one batched forward
pass with the other conversations.

Batched layout, per row ``i`` with a reused cache of ``c_i`` tokens and ``s_i`` new tokens::

    [pad ... | cached c_i | pad ... | new s_i]   (attention mask 0 on pads, positions continue per row)

so every row's newest token sits in the last column and decoding proceeds in lockstep.

A call's batch cache is kept as it was left (a *live batch*): when the next call asks for the same
conversations in the same order and each prompt extends what was cached, the new tokens are appended to that
cache in place (``[live batch row | pad ... | new s_i]``), with no copy of what is cached. Any other call
copies the rows it needs out of the live batch and builds a new one, as above. Sampling runs on the model's
device; on a GPU the only per-token transfer to the host is the sampled ids and their logprobs.

Rows that have stopped leave the decoding batch (``drop_finished``): once a quarter of its rows have stopped,
their caches are copied out and the batch cache keeps only the rows still decoding, so later steps do not
run finished rows through the model. The survivors' batch is then the live batch, for its conversations.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["SamplingConfig", "Generation", "HFEngine", "VLLMEngine", "vllm_available"]

#: HFEngine.drop_finished drops stopped rows from the decoding batch once they are this share of it. Each drop
#: copies the batch cache (as a decoding step does, DynamicCache growing by concatenation). On the learning
#: benchmark's rollout (benchmarks/decode_compaction.py, float32, one CPU thread) 1/4 and 1/8 decoded in the same
#: time, dropping at every stop took 6% longer.
_DROP_SHARE = 0.25


@dataclass
class SamplingConfig:
    """How to sample. ``temperature=0`` is greedy decoding (logprobs are then at temperature 1).

    Recorded logprobs are of the full (untruncated) distribution at ``temperature``, which is what a
    teacher-forced forward pass at the same temperature gives; ``top_p`` only restricts what is drawn.
    """

    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 128
    seed: int | None = 0


@dataclass(frozen=True)
class Generation:
    """One sampled completion: its text (stop token removed), token ids (stop token kept) and logprobs.

    Immutable: a caller that re-frames it (the env role's inline answer) makes a new one with
    ``dataclasses.replace``."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (an end-of-turn token) or "length"
    prompt_tokens: int = 0  # tokens encoded for this call (after cache reuse)
    prompt_ids: list[int] = field(default_factory=list, repr=False)  # the whole prompt it continued
    stop_text: str = ""  # the text of the stop token that ended it ("" when cut by length)
    prompt_text: str = field(default="", repr=False)  # the prompt's text, where the caller rendered one


class _EngineBase:
    """The `Engine` fields the engines here share: the tokenizer, the tokens that end a
    turn (default: EOS and ``<|im_end|>`` if the tokenizer has it), the pad id and the token counters. No
    caches by default."""

    def __init__(self, tokenizer: Any, stop_token_ids: Sequence[int] | None = None, bf16: bool = False) -> None:
        self.tokenizer = tokenizer
        if stop_token_ids is None:
            stop = {tokenizer.eos_token_id}
            im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
            if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
                stop.add(im_end)
            stop_token_ids = sorted(s for s in stop if s is not None)
        self.stop_token_ids = list(stop_token_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.bf16 = bf16
        # reused_tokens: cached tokens not encoded again; repacked_tokens: those of them copied into a new batch
        # cache (a call that continues the previous call's batch copies none). prefill_s / decode_s: wall time
        # in encoding the prompts (cache packing included) and in the token-by-token loop: where a rollout's
        # time goes. dropped_rows: rows that left the decoding batch before it ended (HFEngine.drop_finished).
        self.stats: dict[str, float] = {
            "prompt_tokens": 0,
            "reused_tokens": 0,
            "repacked_tokens": 0,
            "generated_tokens": 0,
            "prefix_tokens": 0,
            "prefill_s": 0.0,
            "decode_s": 0.0,
            "dropped_rows": 0,
        }

    def drop(self, key: str) -> None:
        """Forget a conversation's cache (at the end of its episode)."""

    def clear(self) -> None:
        """Forget all caches (after the weights change)."""


@dataclass
class _CacheEntry:
    ids: list[int]  # the tokens whose keys/values are stored
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [1, kv_heads, len, head_dim]


@dataclass(eq=False)
class _LiveBatch:
    """A call's batch cache as the call left it: row ``i`` is conversation ``keys[i]``, its cached positions
    are where ``mask[i]`` is 1 (pads and the tokens of rows that stopped early are 0)."""

    keys: tuple[str, ...]
    cache: Any  # a DynamicCache, [rows, kv_heads, width, head_dim] per layer
    mask: torch.Tensor  # [rows, width]


@dataclass
class _LiveRow:
    """A conversation whose cache is row ``row`` of a live batch."""

    ids: list[int]
    batch: _LiveBatch
    row: int


class HFEngine(_EngineBase):
    """Batched generation over a transformers model, with per-conversation KV caches.

    Args:
        model: a causal LM (eval mode is set here).
        tokenizer: its tokenizer.
        stop_token_ids: token ids that end a turn (default: EOS and ``<|im_end|>`` if present).
        max_cached: conversations whose caches are kept (least recently used are dropped).
        bf16: run forward passes under bfloat16 autocast, on the CPU or a CUDA device (pays off on GPUs and
            on CPUs with native bf16, e.g. AVX512-BF16; logprobs then carry bf16 rounding). Weights stay in
            float32, so the trainer updates the same model.
        drop_finished: drop rows that have stopped from the decoding batch (once a quarter of its rows have
            stopped), so a forward pass costs only the rows still decoding. Every row's sample is still drawn
            from the random numbers it drew before, so in float32 the tokens are the same (logprobs differ at
            float rounding: other batch shapes); under ``bf16`` other batch shapes round by up to a few tenths
            of a logit, so a near tie may go the other way (still the same for a given seed). An attribute: a
            benchmark may switch it between calls.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        stop_token_ids: Sequence[int] | None = None,
        max_cached: int = 256,
        bf16: bool = False,
        drop_finished: bool = True,
    ) -> None:
        super().__init__(tokenizer, stop_token_ids, bf16)
        self.drop_finished = drop_finished
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.max_cached = max_cached
        self._caches: OrderedDict[str, _CacheEntry | _LiveRow] = OrderedDict()
        # Shared prompt prefixes (system message + tool list): computed once, reused by every conversation.
        self._prefixes: OrderedDict[tuple[int, ...], _CacheEntry] = OrderedDict()
        self._cache_kw = cache_kwarg(self.model)
        # A caller's CPU generator -> its twin on the model's device (seeded alike, advanced by every call).
        self._device_generators: weakref.WeakKeyDictionary[torch.Generator, torch.Generator] = (
            weakref.WeakKeyDictionary()
        )

    # ------------------------------------------------------------------ public
    def drop(self, key: str) -> None:
        self._caches.pop(key, None)

    def clear(self) -> None:
        self._caches.clear()
        self._prefixes.clear()

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        keys: Sequence[str | None] | None = None,
        generator: torch.Generator | None = None,
        prefix_lens: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Continue each prompt (token ids).

        Args:
            keys: conversation names; a conversation's cache is kept after the call and reused when its
                next prompt extends what was cached.
            prefix_lens: per prompt, the length of a prefix shared with other prompts (system message and
                tools); it is encoded once and reused when the conversation has no cache yet.
        """
        if not prompts:
            return []
        with (
            torch.inference_mode(),
            torch.autocast(
                self.device.type, dtype=torch.bfloat16, enabled=self.bf16 and self.device.type in ("cpu", "cuda")
            ),
        ):
            return self._generate(prompts, sampling, keys, generator, prefix_lens)

    def _generate(self, prompts, sampling, keys, generator, prefix_lens) -> list[Generation]:
        keys = list(keys) if keys is not None else [None] * len(prompts)
        prefix_lens = list(prefix_lens) if prefix_lens is not None else [0] * len(prompts)
        if generator is None and sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        generator = self._on_device(generator)
        started = time.perf_counter()
        live = self._live_batch(keys, prompts)
        if live is not None:
            reused: list[_CacheEntry | _LiveRow | None] = [self._caches.pop(k) for k in keys]
            batch = _Batch.extend(live, prompts, [len(r.ids) for r in reused], self.pad_id, self.device)
        else:
            reused = [
                self._reusable(k, p) or self._prefix(p, n) for k, p, n in zip(keys, prompts, prefix_lens, strict=True)
            ]
            batch = _Batch.build(prompts, reused, self.pad_id, self.device)
            self.stats["repacked_tokens"] += sum(len(r.ids) for r in reused if r)
        self.stats["prompt_tokens"] += sum(
            len(p) - (len(r.ids) if r else 0) for p, r in zip(prompts, reused, strict=True)
        )
        self.stats["reused_tokens"] += sum(len(r.ids) for r in reused if r)

        past = batch.cache  # a DynamicCache, grown in place by every forward pass
        out = self.model(
            input_ids=batch.input_ids,
            attention_mask=batch.mask,
            position_ids=batch.positions,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kw: past},
        )
        logits = out.logits[:, -1, :]
        decoding = time.perf_counter()
        self.stats["prefill_s"] += decoding - started
        n = len(prompts)
        gen_ids: list[list[int]] = [[] for _ in range(n)]
        gen_lps: list[list[float]] = [[] for _ in range(n)]
        finished = [False] * n
        reasons = ["length"] * n
        next_pos = batch.next_positions.clone()
        mask = batch.mask
        stop = torch.tensor(self.stop_token_ids, device=self.device)
        done = torch.zeros(n, dtype=torch.bool, device=self.device)
        # Batch row j decodes prompt rows[j] (sel: the same on the device); a row dropped from the batch leaves
        # its cache in kept[row].
        rows, sel = list(range(n)), torch.arange(n, device=self.device)
        kept: list[_CacheEntry | _LiveRow | None] = [None] * n

        def cached_ids(i: int) -> list[int]:  # what row i's cache holds: the last token is never fed back
            return list(prompts[i]) + gen_ids[i][:-1]

        for step in range(sampling.max_new_tokens):
            # Every row of the call is sampled (a dropped row's logits are zeros), so each row draws the random
            # numbers it drew before: in float32, the same tokens with rows dropped or not.
            tokens, lps = _sample(_all_rows(logits, sel, n), sampling, generator)
            tokens = tokens.to(self.device)
            is_stop = torch.isin(tokens, stop)
            # One transfer to the host per step (not one per row): the ids, logprobs and stops of all rows, as
            # float64 (exact for token ids and for float32 logprobs).
            step_ids, step_lps, step_stops = torch.stack([tokens.double(), lps.double(), is_stop.double()]).tolist()
            for i in range(n):
                if finished[i]:
                    continue
                gen_ids[i].append(int(step_ids[i]))
                gen_lps[i].append(step_lps[i])
                if step_stops[i]:
                    finished[i], reasons[i] = True, "stop"
            if all(finished) or step == sampling.max_new_tokens - 1:
                break
            done |= is_stop  # kept on the device, in step with `finished`
            stopped = [j for j, i in enumerate(rows) if finished[i]]
            # A forward pass costs about as much per row, stopped or not: rows that stopped leave the batch (their
            # caches copied out) once they are a share of it worth the copy.
            if self.drop_finished and stopped and len(stopped) >= _DROP_SHARE * len(rows):
                for j in stopped:
                    if keys[rows[j]] is not None:
                        kept[rows[j]] = _compact(cached_ids(rows[j]), past, j, mask[j])
                going = [j for j, i in enumerate(rows) if not finished[i]]
                going_t = torch.tensor(going, device=self.device)
                past, mask = _select_rows(past, mask, going_t)
                next_pos, sel, rows = next_pos[going_t], sel[going_t], [rows[j] for j in going]
                self.stats["dropped_rows"] += len(stopped)
            active = ~done[sel]
            feed = torch.where(active, tokens[sel], torch.full_like(next_pos, self.pad_id))
            mask = torch.cat([mask, active.long()[:, None]], dim=1)
            out = self.model(
                input_ids=feed[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                use_cache=True,
                **{self._cache_kw: past},
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + active.long()
        self.stats["decode_s"] += time.perf_counter() - decoding

        if None not in keys and len(set(keys)) == n:  # the rows still in the batch stay there, as a live batch
            live = _LiveBatch(tuple(keys[i] for i in rows), past, mask)
            for j, i in enumerate(rows):
                kept[i] = _LiveRow(cached_ids(i), live, j)
        else:
            for j, i in enumerate(rows):
                if keys[i] is not None:
                    kept[i] = _compact(cached_ids(i), past, j, mask[j])
        for key, entry in zip(keys, kept, strict=True):
            if key is not None:
                self._remember(key, entry)
        results = []
        for i in range(n):
            self.stats["generated_tokens"] += len(gen_ids[i])
            text_ids = gen_ids[i][:-1] if reasons[i] == "stop" else gen_ids[i]
            results.append(
                Generation(
                    text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
                    token_ids=gen_ids[i],
                    logprobs=gen_lps[i],
                    finish_reason=reasons[i],
                    prompt_tokens=len(prompts[i]) - (len(reused[i].ids) if reused[i] else 0),
                    prompt_ids=list(prompts[i]),
                    stop_text=self.tokenizer.decode(gen_ids[i][-1:], skip_special_tokens=False)
                    if reasons[i] == "stop"
                    else "",
                )
            )
        return results

    # ------------------------------------------------------------------ caches
    def _reusable(self, key: str | None, prompt: Sequence[int]) -> _CacheEntry | None:
        entry = self._caches.get(key) if key is not None else None
        if entry is None or not _extends(prompt, entry.ids):
            return None
        if isinstance(entry, _LiveRow):  # copied out of its live batch, which this call does not continue
            entry = _compact(entry.ids, entry.batch.cache, entry.row, entry.batch.mask[entry.row])
            self._caches[key] = entry
        self._caches.move_to_end(key)
        return entry

    def _live_batch(self, keys: Sequence[str | None], prompts: Sequence[Sequence[int]]) -> _LiveBatch | None:
        """The live batch this call continues: the last batch of exactly these conversations, in this order,
        each prompt extending its row, and not too ragged (else the rows are packed again)."""
        first = self._caches.get(keys[0]) if keys[0] is not None else None
        if not isinstance(first, _LiveRow) or first.batch.keys != tuple(keys):
            return None
        live = first.batch
        for i, (key, prompt) in enumerate(zip(keys, prompts, strict=True)):
            entry = self._caches.get(key)
            if not (isinstance(entry, _LiveRow) and entry.batch is live and entry.row == i):
                return None
            if not _extends(prompt, entry.ids):
                return None
        # Rows that stopped early or had shorter prompts leave masked columns that every later step attends
        # over; past a quarter of the longest row, packing the rows again (one copy) is the cheaper way on.
        longest = max(len(self._caches[k].ids) for k in keys)
        return live if live.mask.shape[1] - longest <= longest // 4 else None

    def _remember(self, key: str, entry: _CacheEntry | _LiveRow) -> None:
        self._caches[key] = entry
        self._caches.move_to_end(key)
        while len(self._caches) > self.max_cached:
            self._caches.popitem(last=False)

    def _on_device(self, generator: torch.Generator | None) -> torch.Generator | None:
        """``generator``, or where it lives on another device than the model, its twin on the model's device:
        seeded with its seed once, then advanced by every call, so a seeded run draws the same on the same
        device (on the CPU, the caller's generator itself, as before)."""
        if generator is None or generator.device.type == self.device.type:
            return generator
        twin = self._device_generators.get(generator)
        if twin is None:
            twin = torch.Generator(device=self.device).manual_seed(generator.initial_seed())
            self._device_generators[generator] = twin
        return twin

    def _prefix(self, prompt: Sequence[int], length: int) -> _CacheEntry | None:
        if not 0 < length < len(prompt):
            return None
        ids = tuple(prompt[:length])
        entry = self._prefixes.get(ids)
        if entry is None:
            cache = self._new_cache()
            self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True, **{self._cache_kw: cache})
            entry = _CacheEntry(list(ids), [(layer.keys, layer.values) for layer in cache.layers])
            self._prefixes[ids] = entry
            self.stats["prefix_tokens"] += length
            while len(self._prefixes) > 64:
                self._prefixes.popitem(last=False)
        self._prefixes.move_to_end(ids)
        return entry

    @staticmethod
    def _new_cache() -> Any:
        from transformers import DynamicCache

        return DynamicCache()


def _extends(prompt: Sequence[int], ids: list[int]) -> bool:
    """Whether ``prompt`` continues ``ids`` by at least one token (one must be fed to get the next logits)."""
    return len(ids) < len(prompt) and list(prompt[: len(ids)]) == ids


def _compact(ids: list[int], past: Any, row: int, row_mask: torch.Tensor) -> _CacheEntry:
    """Row ``row`` of a batch cache, its unmasked positions only, copied out."""
    keep = row_mask.nonzero().squeeze(-1)
    if keep.numel() != len(ids):  # pragma: no cover - a bookkeeping bug, never silently store garbage
        raise RuntimeError(f"cache bookkeeping mismatch: {keep.numel()} positions for {len(ids)} tokens")
    layers = [
        (layer.keys[row : row + 1, :, keep, :].clone(), layer.values[row : row + 1, :, keep, :].clone())
        for layer in past.layers
    ]
    return _CacheEntry(ids, layers)


def _select_rows(past: Any, mask: torch.Tensor, rows: torch.Tensor) -> tuple[Any, torch.Tensor]:
    """Rows ``rows`` of a batch cache and its mask, copied, without the columns that none of them attends to."""
    from transformers import DynamicCache

    mask = mask[rows]
    cols = mask.any(0).nonzero().squeeze(-1)
    trim = cols.numel() < mask.shape[1]
    layers = []
    for layer in past.layers:
        k, v = layer.keys[rows], layer.values[rows]
        layers.append((k[:, :, cols], v[:, :, cols]) if trim else (k, v))
    return DynamicCache(ddp_cache_data=layers), mask[:, cols] if trim else mask


def _all_rows(logits: torch.Tensor, sel: torch.Tensor, n: int) -> torch.Tensor:
    """Logits of all ``n`` rows of a call, from those of the batch rows ``sel`` (the rest zeros)."""
    if logits.shape[0] == n:
        return logits
    return logits.new_zeros((n, logits.shape[1])).index_copy_(0, sel, logits)


@dataclass
class _Batch:
    input_ids: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor
    next_positions: torch.Tensor
    cache: Any

    @classmethod
    def build(
        cls, prompts: Sequence[Sequence[int]], reused: Sequence[_CacheEntry | None], pad_id: int, device: torch.device
    ) -> _Batch:
        """Pack each row's reused cache (left-padded to the longest) and its new tokens into a new cache."""
        from transformers import DynamicCache

        cached = [len(r.ids) if r else 0 for r in reused]
        lc = max(cached)
        cached_mask = torch.zeros((len(prompts), lc), dtype=torch.long)
        for i, c in enumerate(cached):
            cached_mask[i, lc - c :] = 1
        cache = DynamicCache()
        if lc > 0:
            template = next(r for r in reused if r)
            layers = []
            for li, (k0, v0) in enumerate(template.layers):
                ks, vs = [], []
                for r, c in zip(reused, cached, strict=True):
                    pad = lc - c
                    k = r.layers[li][0] if r else k0.new_zeros((1, k0.shape[1], 0, k0.shape[3]))
                    v = r.layers[li][1] if r else v0.new_zeros((1, v0.shape[1], 0, v0.shape[3]))
                    if pad:
                        k = torch.cat([k.new_zeros((1, k.shape[1], pad, k.shape[3])), k], dim=2)
                        v = torch.cat([v.new_zeros((1, v.shape[1], pad, v.shape[3])), v], dim=2)
                    ks.append(k)
                    vs.append(v)
                layers.append((torch.cat(ks).to(device), torch.cat(vs).to(device)))
            cache = DynamicCache(ddp_cache_data=layers)
        return cls._append(prompts, cached, cached_mask.to(device), cache, pad_id, device)

    @classmethod
    def extend(
        cls,
        live: _LiveBatch,
        prompts: Sequence[Sequence[int]],
        cached: Sequence[int],
        pad_id: int,
        device: torch.device,
    ) -> _Batch:
        """Continue a live batch in place: its rows' new tokens go after what it holds, nothing is copied."""
        return cls._append(prompts, cached, live.mask, live.cache, pad_id, device)

    @classmethod
    def _append(
        cls,
        prompts: Sequence[Sequence[int]],
        cached: Sequence[int],
        cached_mask: torch.Tensor,
        cache: Any,
        pad_id: int,
        device: torch.device,
    ) -> _Batch:
        """The batch of each row's tokens after its ``cached`` ones, right-aligned after ``cached_mask``."""
        n = len(prompts)
        new = [list(p[c:]) for p, c in zip(prompts, cached, strict=True)]
        s = max(len(x) for x in new)
        input_ids = torch.full((n, s), pad_id, dtype=torch.long)
        positions = torch.ones((n, s), dtype=torch.long)
        new_mask = torch.zeros((n, s), dtype=torch.long)
        for i, (c, toks) in enumerate(zip(cached, new, strict=True)):
            new_mask[i, s - len(toks) :] = 1
            input_ids[i, s - len(toks) :] = torch.tensor(toks, dtype=torch.long)
            positions[i, s - len(toks) :] = torch.arange(c, c + len(toks))
        mask = torch.cat([cached_mask, new_mask.to(device)], dim=1)
        next_positions = torch.tensor([c + len(t) for c, t in zip(cached, new, strict=True)], dtype=torch.long)
        return cls(input_ids.to(device), mask, positions.to(device), next_positions.to(device), cache)


def cache_kwarg(module: Any) -> str:
    """The forward() keyword for a KV cache: transformers 5 renamed ``past_key_values`` to ``cache``."""
    return "cache" if "cache" in inspect.signature(module.forward).parameters else "past_key_values"


def _sample(
    logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float()
    if cfg.temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
        return tokens, logp.gather(1, tokens[:, None]).squeeze(1)
    logp = torch.log_softmax(logits / cfg.temperature, dim=-1)
    probs = logp.exp()
    if cfg.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        drop = sorted_p.cumsum(dim=-1) - sorted_p > cfg.top_p  # keep the smallest set reaching top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(1, order, sorted_p)
    # On the logits' device, with a generator there (HFEngine._on_device): no transfer to the host per token.
    tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


def vllm_available() -> bool:
    """vLLM is used only when importable and a CUDA device is present."""
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


class VLLMEngine(_EngineBase):  # pragma: no cover - needs a GPU and vllm; never required by tests
    """Generation through vLLM (GPU only). Same ``generate`` contract; prefix caching replaces our KV reuse
    (so ``drop`` and ``clear`` have nothing to forget)."""

    def __init__(
        self, model_path: str, tokenizer: Any, stop_token_ids: Sequence[int] | None = None, **kwargs: Any
    ) -> None:
        if not vllm_available():
            raise RuntimeError("VLLMEngine needs the vllm package and a CUDA GPU")
        # vLLM's V1 engine runs the model in a child process unless told otherwise; sync_weights reaches the
        # model in this process (llm_engine.model_executor exists only then), as TRL's colocate mode does.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        super().__init__(tokenizer, stop_token_ids)
        self.llm = LLM(model=model_path, enable_prefix_caching=True, **kwargs)

    def sync_weights(self, model: Any) -> None:
        """Load the trained transformers model's weights into vLLM's copy (after each training update).

        Reaches vLLM's in-process model runner (single-GPU set-ups; ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which
        the constructor sets unless the environment already says otherwise). ``tests/test_gpu_check.py``
        checks that generation after it follows the new weights, where vllm and a GPU are present."""
        executor = getattr(self.llm.llm_engine, "model_executor", None)
        if executor is None:
            raise RuntimeError(
                "VLLMEngine.sync_weights needs vLLM's engine in this process: unset VLLM_ENABLE_V1_MULTIPROCESSING "
                "or set it to 0 before the engine is made"
            )
        runner = executor.driver_worker.model_runner
        runner.model.load_weights(model.state_dict().items())
        self.llm.reset_prefix_cache()

    def generate(
        self, prompts, sampling: SamplingConfig, keys=None, generator=None, prefix_lens=None
    ) -> list[Generation]:
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
            logprobs=0,
            stop_token_ids=self.stop_token_ids,
        )
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        results = []
        for p, o in zip(prompts, outs, strict=True):
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [next(iter(d.values())).logprob for d in (c.logprobs or [])]
            stopped = bool(ids) and ids[-1] in self.stop_token_ids
            text_ids = ids[:-1] if stopped else ids
            results.append(
                Generation(
                    self.tokenizer.decode(text_ids),
                    ids,
                    lps,
                    "stop" if stopped else "length",
                    len(p),
                    list(p),
                    self.tokenizer.decode(ids[-1:]) if stopped else "",
                )
            )
        return results
