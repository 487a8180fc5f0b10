"""Rollout throughput on a fixed workload: our rollout engine vs a naive loop and vs raw batched decoding.

The workload does not depend on what the checkpoint happens to say. Every decoding step runs the model's
full forward pass, as sampling would, but a forward hook (:class:`ForcedDecoding`) sets which token wins:
each actor turn is ``--actor-tokens`` tokens (filler, then a real tool call, then the stop token), every
episode is ``--turns`` such turns (the env truncates it after the last), and the call runs on the real
backend and gets a real result. So each run decodes the same number of tokens per turn and the same
number of turns, on any checkpoint, before and after a change of the rollout code. The imagined-results
twin of this workload (the env role answering the calls) is ``benchmarks/rehearsal_throughput.py``.

All three run in one process on the same model, tasks and autocast setting, and the script prints generated
tokens per second and the two ratios:

* ours / naive: ``collect()`` over N envs against a loop that runs one env at a time and passes the whole
  re-rendered conversation to ``model.generate`` every turn. The naive loop's rate does not depend on N
  (one env at a time), so it is measured once, on ``--naive-episodes`` episodes, and every N is compared
  with it (target: >= 4x at 16 envs);
* ours / raw: raw batched ``model.generate`` of the same number of new tokens per row from the first-turn
  prompts, no env in the loop: the limit of this machine (issue 20's goal: >= 0.85 at 16 envs).

    python benchmarks/rollout_throughput.py [--policy default|ckpt:DIR] [--envs 1 4 16] [--out DIR] [--quick]

The script uses only public API (``collect``, ``LMPolicy``, ``HFEngine``, ``gym.make``), so that it runs
on the rollout code before and after a rewrite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import envace_gym  # noqa: F401  (registers the env)
from envace_gym import ToolCall, format_calls
from envace_gym.agents.lm.engine import HFEngine, SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.provenance import run_environment
from envace_gym.agents.rollout import collect
from envace_gym.imagination import ENV_ROLE_SYSTEM_PROMPT

#: The call every actor turn makes: valid in every ``builtin/bank`` task (a real answer, never an error), read-only.
ACTOR_CALL = ToolCall("convert_currency", {"amount": 1, "from_currency": "USD", "to_currency": "EUR"})
#: What the env role answers to it (padded to ``result_tokens`` inside the note).
IMAGINED_RESULT = {"amount": 0.93, "currency": "EUR", "note": ""}


@dataclass(frozen=True)
class Workload:
    """The fixed workload: every episode is ``turns`` actor turns of ``actor_tokens`` tokens each (stop token
    included), each turn one call; an imagined result is ``result_tokens`` tokens (stop token included)."""

    suite: str = "builtin/bank"
    turns: int = 3
    actor_tokens: int = 48
    result_tokens: int = 40

    @property
    def max_new_tokens(self) -> int:
        return max(self.actor_tokens, self.result_tokens)


class ForcedDecoding:
    """Makes ``model`` choose scripted token ids: a forward hook that, while :meth:`force` is active, sets
    the last position's logits of row ``i`` to pick ``rows[i][step]`` (then the stop token). The forward pass
    itself runs in full, so decoding costs what sampling would; only the winner is set.

    Forward calls without position ids, or whose batch is not the scripted one, are left alone: the engine
    encodes shared prompt heads that way (their logits are not sampled from), while its decoding steps and
    ``model.generate``'s pass position ids.
    """

    def __init__(self, model: torch.nn.Module, stop_id: int) -> None:
        self.stop_id = stop_id
        self._rows: list[list[int]] | None = None
        self._step = 0
        model.register_forward_hook(self._hook, with_kwargs=True)

    @contextlib.contextmanager
    def force(self, rows: Sequence[Sequence[int]]) -> Iterator[None]:
        self._rows, self._step = [list(r) for r in rows], 0
        try:
            yield
        finally:
            self._rows = None

    def _hook(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        rows = self._rows
        ids = kwargs.get("input_ids", args[0] if args else None)
        if rows is None or kwargs.get("position_ids") is None or ids is None or ids.shape[0] != len(rows):
            return None
        step, self._step = self._step, self._step + 1
        chosen = [row[step] if step < len(row) else self.stop_id for row in rows]
        last = output.logits[:, -1, :]
        last.fill_(float("-inf"))
        last[torch.arange(len(rows)), torch.tensor(chosen)] = 0.0
        return output


class Scripts:
    """The token ids each request is forced to, by who is asked: the actor (a call), the prompted env role
    (an ``<execution_result>`` block) or the inline env role (the bare JSON result), each padded with filler
    tokens to its fixed length and ended by the stop token."""

    def __init__(self, tokenizer: Any, stop_id: int, workload: Workload) -> None:
        self.tokenizer, self.stop_id = tokenizer, stop_id
        filler = self._encode(" ok")
        assert len(filler) == 1, "the filler must be one token"
        call = self._encode(format_calls([ACTOR_CALL]))
        self.actor = self._pad(filler * (workload.actor_tokens - 1 - len(call)) + call, workload.actor_tokens)
        head, tail = json.dumps(IMAGINED_RESULT)[:-2], '"}'
        body = self._encode(head)
        prompted = (self._encode("<execution_result>\n") + body, self._encode(tail + "\n</execution_result>"))
        inline = (body, self._encode(tail))
        self.prompted = self._pad(self._fill(*prompted, filler, workload.result_tokens), workload.result_tokens)
        self.inline = self._pad(self._fill(*inline, filler, workload.result_tokens), workload.result_tokens)
        self._env_role_head = ENV_ROLE_SYSTEM_PROMPT[:48]

    def for_prompt(self, prompt: Sequence[int]) -> tuple[str, list[int]]:
        """``(role, ids)`` for a prompt: ``"env_role_prompted"``, ``"env_role_inline"`` or ``"actor"``."""
        if self._env_role_head in self.tokenizer.decode(list(prompt[:64])):
            return "env_role_prompted", self.prompted
        if self.tokenizer.decode(list(prompt[-3:])).rstrip().endswith("tool"):  # an inline tool message's header
            return "env_role_inline", self.inline
        return "actor", self.actor

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @staticmethod
    def _fill(head: list[int], tail: list[int], filler: list[int], total: int) -> list[int]:
        return head + filler * (total - 1 - len(head) - len(tail)) + tail

    def _pad(self, ids: list[int], total: int) -> list[int]:
        if len(ids) != total - 1:
            raise ValueError(f"the scripted text needs {len(ids) + 1} tokens; the workload allows {total}")
        return ids + [self.stop_id]


class ScriptedEngine(HFEngine):
    """:class:`HFEngine` unchanged (batching, per-conversation KV caches, shared prefixes) whose token choices
    follow :class:`Scripts`. Counts what it is asked: engine calls, rows per role, generated tokens, and the
    calls in which actor and env-role requests were decoded together."""

    def __init__(self, model: Any, tokenizer: Any, workload: Workload, bf16: bool = False) -> None:
        super().__init__(model, tokenizer, bf16=bf16)
        stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.stop_id = stop if stop in self.stop_token_ids else self.stop_token_ids[0]
        self.scripts = Scripts(tokenizer, self.stop_id, workload)
        self.forcing = ForcedDecoding(model, self.stop_id)
        self.reset_counts()

    def reset_counts(self) -> None:
        self.engine_calls = 0
        self.shared_calls = 0  # calls with both actor and env-role rows
        self.rows: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()

    def generate(self, prompts, sampling, keys=None, generator=None, prefix_lens=None):  # noqa: D102
        chosen = [self.scripts.for_prompt(p) for p in prompts]
        roles = [role for role, _ in chosen]
        with self.forcing.force([ids for _, ids in chosen]):
            gens = super().generate(prompts, sampling, keys=keys, generator=generator, prefix_lens=prefix_lens)
        self.engine_calls += 1
        kinds = {role.split("_")[0] for role in roles}  # "actor" / "env"
        self.shared_calls += len(kinds) > 1
        self.rows.update(roles)
        for role, gen in zip(roles, gens, strict=True):
            self.tokens[role] += len(gen.token_ids)
        return gens


def scripted_policy(spec: str, workload: Workload) -> LMPolicy:
    """``LMPolicy.from_spec(spec)`` (greedy) with a :class:`ScriptedEngine` over its model."""
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=workload.max_new_tokens, seed=0)
    policy = LMPolicy.from_spec(spec, sampling=sampling, progress=False)
    policy.engine = ScriptedEngine(policy.model, policy.tokenizer, workload, bf16=policy.engine.bf16)
    return policy


def autocast(engine: HFEngine):
    return torch.autocast("cpu", dtype=torch.bfloat16) if engine.bf16 else contextlib.nullcontext()


def make_envs(n: int, workload: Workload) -> list[gym.Env]:
    return [
        gym.make("EnvACE-ToolCall-v0", suite=workload.suite, split="test", max_turns=workload.turns) for _ in range(n)
    ]


def task_ids(workload: Workload, n: int) -> list[str]:
    pool = make_envs(1, workload)[0].unwrapped.pool
    if len(pool) < n:
        raise ValueError(f"{workload.suite} has {len(pool)} test tasks; {n} envs need {n}")
    return [t.id for t in pool[:n]]


def ours(policy: LMPolicy, envs: list[gym.Env], ids: list[str]) -> dict[str, Any]:
    """``collect()`` over ``envs``, one episode per task: tokens generated (every role), seconds, episodes."""
    engine: ScriptedEngine = policy.engine
    engine.clear()
    engine.reset_counts()
    start = time.perf_counter()
    trajs = collect(envs, policy, len(ids), task_ids=ids, progress=False)
    seconds = time.perf_counter() - start
    return {
        "tokens": sum(engine.tokens.values()),
        "seconds": seconds,
        "engine_calls": engine.engine_calls,
        "shared_calls": engine.shared_calls,
        "rows": dict(engine.rows),
        "turns": [t.turns for t in trajs],
        "answered": sum(answered(t.messages) for t in trajs),
    }


def answered(messages: Sequence[dict[str, Any]]) -> int:
    """Tool messages that hold a result (real or imagined), not an error."""
    count = 0
    for message in messages:
        if message["role"] != "tool":
            continue
        try:
            content = json.loads(message["content"])
        except ValueError:
            continue
        count += not (isinstance(content, dict) and "error" in content)
    return count


def naive_turn(engine: ScriptedEngine, prompt: list[int], script: list[int], max_new_tokens: int) -> list[int]:
    """One request decoded alone by ``model.generate`` from its whole prompt, forced to ``script``."""
    ids = torch.tensor([prompt])
    with engine.forcing.force([script]), torch.inference_mode(), autocast(engine):
        out = engine.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=engine.stop_token_ids,
            pad_token_id=engine.pad_id,
        )
    return out[0, ids.shape[1] :].tolist()


def naive(policy: LMPolicy, env: gym.Env, ids: list[str], workload: Workload) -> dict[str, Any]:
    """One env at a time; every actor turn re-renders the conversation and decodes it with ``model.generate``."""
    engine: ScriptedEngine = policy.engine
    tokens = calls = 0
    start = time.perf_counter()
    for task_id in ids:
        _, info = env.reset(options={"task_id": task_id})
        done = False
        while not done:
            prompt = policy.chat.encode(policy.prompt_text(info["messages"], info["tools"]))
            new = naive_turn(engine, prompt, engine.scripts.actor, workload.max_new_tokens)
            tokens += len(new)
            text = policy.tokenizer.decode(new[:-1] if new[-1] in engine.stop_token_ids else new)
            _, _, terminated, truncated, info = env.step(text)
            done = terminated or truncated
        calls += answered(info["messages"])
    return {"tokens": tokens, "seconds": time.perf_counter() - start, "answered": calls}


def raw(policy: LMPolicy, workload: Workload, ids: list[str], new_per_row: int) -> dict[str, Any]:
    """Batched ``model.generate`` of ``new_per_row`` tokens for every first-turn prompt: no env, no turns."""
    env = make_envs(1, workload)[0]
    prompts = []
    for task_id in ids:
        _, info = env.reset(options={"task_id": task_id})
        prompts.append(policy.prompt_text(info["messages"], info["tools"]))
    tok = policy.tokenizer
    tok.padding_side = "left"
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    start = time.perf_counter()
    with torch.inference_mode(), autocast(policy.engine):
        out = policy.model.generate(
            **batch,
            max_new_tokens=new_per_row,
            min_new_tokens=new_per_row,
            do_sample=False,
            pad_token_id=policy.engine.pad_id,
        )
    seconds = time.perf_counter() - start
    return {"tokens": (out.shape[1] - batch["input_ids"].shape[1]) * len(prompts), "seconds": seconds}


def fixed(run: dict[str, Any], episodes: int, workload: Workload, per_episode: int) -> bool:
    """Whether a run of ``ours`` was the fixed workload: its tokens, its turns, every call answered."""
    return (
        run["tokens"] == episodes * per_episode
        and run["turns"] == [workload.turns] * episodes
        and run["answered"] == episodes * workload.turns
    )


def rate(run: dict[str, Any]) -> float:
    return run["tokens"] / run["seconds"] if run["seconds"] > 0 else 0.0


def measure(policy: LMPolicy, workload: Workload, envs: Sequence[int], naive_episodes: int) -> dict[str, Any]:
    """The benchmark: ours at each number of envs, the naive loop once, raw at each number of envs."""
    per_episode = workload.turns * workload.actor_tokens
    ids = task_ids(workload, max(max(envs), naive_episodes))
    ours(policy, make_envs(1, workload), ids[:1])  # warm-up (allocator, kernels), not reported
    slow = naive(policy, make_envs(1, workload)[0], ids[:naive_episodes], workload)
    # The workload is the fixed one when every episode decoded its tokens and every turn's call was answered.
    check = {
        "naive": slow["tokens"] == naive_episodes * per_episode and slow["answered"] == naive_episodes * workload.turns
    }
    rows = []
    for n in envs:
        fast = ours(policy, make_envs(n, workload), ids[:n])
        limit = raw(policy, workload, ids[:n], per_episode)
        check[f"ours@{n}"] = fixed(fast, n, workload, per_episode)
        rows.append(
            {
                "envs": n,
                "ours_tokens": fast["tokens"],
                "ours_s": round(fast["seconds"], 2),
                "ours_tok_s": round(rate(fast), 1),
                "naive_tok_s": round(rate(slow), 1),
                "raw_tokens": limit["tokens"],
                "raw_s": round(limit["seconds"], 2),
                "raw_tok_s": round(rate(limit), 1),
                "ours_vs_naive": round(rate(fast) / rate(slow), 2),
                "ours_vs_raw": round(rate(fast) / rate(limit), 2),
                "engine_calls": fast["engine_calls"],
                "calls_answered": fast["answered"],
            }
        )
    return {
        "workload": asdict(workload),
        "naive": {
            "episodes": naive_episodes,
            "tokens": slow["tokens"],
            "s": round(slow["seconds"], 2),
            "tok_s": round(rate(slow), 1),
        },
        "rows": rows,
        "fixed_workload_check": check,
    }


def machine() -> dict[str, Any]:
    return {"threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version()}


def write_json(out: str | None, name: str, result: dict[str, Any]) -> None:
    if out is None:
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path / name}")


#: (row label, run in the JSON file, mode of a rehearsal run) of the before/after table in docs/benchmarks.md.
DOCS_GROUPS = (
    ("real calls ({turns} turns x {actor_tokens} tokens)", "rollout_default", None),
    (
        "imagined, prompted ({turns} turns x {actor_tokens} actor + {result_tokens} env-role tokens)",
        "rehearsal_default",
        "prompted",
    ),
    ("imagined, inline", "rehearsal_default", "inline"),
)


def _round(x: float, step: str) -> str:
    """``x`` to ``step`` with halves rounded up (7.25 -> 7.3), as the figures were written by hand."""
    from decimal import ROUND_HALF_UP, Decimal

    return str(Decimal(str(x)).quantize(Decimal(step), rounding=ROUND_HALF_UP))


def before_after_table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The Markdown table of ``docs/benchmarks.md`` comparing two result files (each ``{"runs":
    {"rollout_default": <this script's JSON>, "rehearsal_default": <rehearsal_throughput.py's>}}``): ours /
    raw and ours / naive per workload and env count, the largest count of the after figures in bold."""
    lines = [
        "| workload | envs | ours / raw, before | ours / raw, after | ours / naive, before | ours / naive, after |",
        "|---|---|---|---|---|---|",
    ]
    for label, run, mode in DOCS_GROUPS:
        b, a = before["runs"][run], after["runs"][run]
        b_rows = b["modes"][mode]["rows"] if mode else b["rows"]
        a_rows = {r["envs"]: r for r in (a["modes"][mode]["rows"] if mode else a["rows"])}
        top = max(a_rows)
        for i, row in enumerate(b_rows):
            new = a_rows[row["envs"]]
            after_raw = _round(new["ours_vs_raw"], "0.01")
            cells = [
                label.format(**a["workload"]) if i == 0 else "",
                str(row["envs"]),
                _round(row["ours_vs_raw"], "0.01"),
                f"**{after_raw}**" if row["envs"] == top else after_raw,
                _round(row["ours_vs_naive"], "0.1") + "x",
                _round(new["ours_vs_naive"], "0.1") + "x",
            ]
            lines.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return "\n".join(lines)


def before_after_plot(before: dict[str, Any], after: dict[str, Any], png: Path) -> None:
    """Ours / raw before and after, per workload and env count, as grouped bars (1.0: raw decoding's rate),
    drawn at a size legible at the docs' page width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DOCS_GROUPS), figsize=(7.7, 2.9), sharey=True, layout="constrained")
    for ax, (label, run, mode) in zip(axes, DOCS_GROUPS, strict=True):
        rows = {
            name: (res["runs"][run]["modes"][mode]["rows"] if mode else res["runs"][run]["rows"])
            for name, res in (("before", before), ("after", after))
        }
        envs = [r["envs"] for r in rows["before"]]
        for k, (name, colour) in enumerate((("before", "#9e9e9e"), ("after", "#1f77b4"))):
            ratios = [r["ours_vs_raw"] for r in rows[name]]
            ax.bar([i + (k - 0.5) * 0.38 for i in range(len(envs))], ratios, 0.38, label=name, color=colour)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_xticks(range(len(envs)), [str(n) for n in envs])
        ax.set_xlabel("envs")
        ax.set_title(label.split(" (")[0], fontsize=10)
    axes[0].set_ylabel("ours / raw decoding")
    axes[0].legend(fontsize=9, loc="lower left")
    fig.savefig(png, dpi=110)
    plt.close(fig)


def write_docs(before_path: str, after_path: str, block: str = "throughput-before-after") -> None:
    """Rewrite the before/after block ``block`` of ``docs/benchmarks.md`` from two result files, and its plot
    (``docs/results/<block>.png``); run nothing."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docs import DOCS, write_block

    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    changed = write_block("benchmarks.md", block, before_after_table(before, after))
    before_after_plot(before, after, DOCS / "results" / f"{block}.png")
    print(f"docs/benchmarks.md: {block} {'rewritten' if changed else 'unchanged'}; docs/results/{block}.png written")


def repeats_table(repeats: dict[str, Any]) -> str:
    """The Markdown table of ``docs/benchmarks.md`` comparing repeated runs of this script before and after a
    change (``{"before": [<this script's JSON>, ...], "after": [...]}``, run alternately on one machine):
    per env count, the median ours tok/s before and after and their ratio, and the median ours / raw of
    each (raw is measured in the same run as ours, so it carries the same machine load)."""
    before, after = repeats["before"], repeats["after"]
    lines = [
        f"| envs | ours tok/s, before ({len(before)} runs) | ours tok/s, after ({len(after)} runs) | after / before "
        "| ours / raw, before | ours / raw, after |",
        "|---|---|---|---|---|---|",
    ]
    for n in [row["envs"] for row in before[0]["rows"]]:
        b, a = ([row for run in runs for row in run["rows"] if row["envs"] == n] for runs in (before, after))
        b_rate, a_rate = (statistics.median([r["ours_tok_s"] for r in rows]) for rows in (b, a))
        cells = [
            str(n),
            _round(b_rate, "0.1"),
            _round(a_rate, "0.1"),
            _round(a_rate / b_rate, "0.01") + "x",
            _round(statistics.median([r["ours_vs_raw"] for r in b]), "0.01"),
            _round(statistics.median([r["ours_vs_raw"] for r in a]), "0.01"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_repeats_docs(path: str) -> None:
    """Rewrite the repeated before/after block of ``docs/benchmarks.md`` from one result file; run nothing."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docs import write_block

    table = repeats_table(json.loads(Path(path).read_text()))
    changed = write_block("benchmarks.md", "throughput-repeats", table)
    print(f"docs/benchmarks.md: throughput-repeats {'rewritten' if changed else 'unchanged'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="default", help="default | tiny | ckpt:DIR | hf:PATH")
    parser.add_argument("--envs", type=int, nargs="+", default=None, help="default 1 4 16 (--quick: 1 4)")
    parser.add_argument("--turns", type=int, default=None, help="actor turns per episode (default 3, --quick 2)")
    parser.add_argument("--actor-tokens", type=int, default=48)
    parser.add_argument("--naive-episodes", type=int, default=None, help="default 4 (--quick: 2)")
    parser.add_argument("--quick", action="store_true", help="1 and 4 envs, 2 turns, 2 naive episodes")
    parser.add_argument("--out", default=None, help="write rollout_throughput.json into this directory")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--write-docs",
        nargs=2,
        metavar=("BEFORE.json", "AFTER.json"),
        help="measure nothing: rewrite docs/benchmarks.md's before/after table from two result files "
        "(e.g. docs/results/throughput_before_2026-12-05.json docs/results/throughput_after_2026-12-05.json)",
    )
    parser.add_argument(
        "--docs-block",
        default="throughput-before-after",
        help="with --write-docs: the marked block of docs/benchmarks.md to rewrite (and the PNG's name)",
    )
    parser.add_argument(
        "--write-repeats-docs",
        metavar="REPEATS.json",
        help="measure nothing: rewrite docs/benchmarks.md's table of repeated runs before and after a change from "
        'one file {"before": [result, ...], "after": [...]} (e.g. docs/results/throughput_engine_2026-12-05.json)',
    )
    args = parser.parse_args()
    if args.write_docs:
        write_docs(*args.write_docs, block=args.docs_block)
        return
    if args.write_repeats_docs:
        write_repeats_docs(args.write_repeats_docs)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    workload = Workload(turns=args.turns or (2 if args.quick else 3), actor_tokens=args.actor_tokens)
    envs = args.envs or ([1, 4] if args.quick else [1, 4, 16])
    naive_episodes = args.naive_episodes or (2 if args.quick else 4)

    policy = scripted_policy(args.policy, workload)
    print(
        f"model={args.policy} bf16={policy.engine.bf16} threads={torch.get_num_threads()} workload: "
        f"{workload.suite}, {workload.turns} turns x {workload.actor_tokens} tokens per episode, every turn "
        f"a real call ({ACTOR_CALL.name})",
        flush=True,
    )
    result = {"benchmark": "rollout_throughput", "policy": args.policy, "bf16": policy.engine.bf16, **machine()}
    result["environment"] = run_environment(policy)
    result.update(measure(policy, workload, envs, naive_episodes))
    naive_row = result["naive"]
    print(f"naive loop: {naive_row['tok_s']} tok/s ({naive_row['tokens']} tok in {naive_row['s']}s, one env at a time)")
    print(f"{'envs':>4} | {'ours tok/s':>10} | {'raw tok/s':>9} | {'ours/naive':>10} | {'ours/raw':>8} | engine calls")
    for row in result["rows"]:
        print(
            f"{row['envs']:>4} | {row['ours_tok_s']:>10} | {row['raw_tok_s']:>9} | {row['ours_vs_naive']:>9}x "
            f"| {row['ours_vs_raw']:>8} | {row['engine_calls']}"
        )
    if not all(result["fixed_workload_check"].values()):
        print(f"WARNING: the workload was not the fixed one: {result['fixed_workload_check']}")
    write_json(args.out, "rollout_throughput.json", result)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
