"""Learning benchmark: does an arm beat its warm start on held-out tasks, played on the real backend?

Every arm starts from the same warm start and gets the same steps, tasks and group size:

* ``untrained``: the warm start itself;
* ``grpo-real``: plain GRPO on the real tools (every call live): the gain imagination is measured against;
* ``envace-log``: EnvACE world rehearsal (the policy imagines every tool result in its env role, both roles
  trained by the task reward), its env role shown few-shot real (arguments, result) pairs of the same tool
  from a log of *other* train tasks' results, never the task's own nor another split's (the paper's
  grounding); each real result shown counts as a logged result;
* ``envace-blind``: the same with no real result anywhere in the env role's prompt;
* both train by the task reward alone (``invalid_penalty=0``: a group whose rewards are all equal carries no
  signal), scored by the checklist bound to what each imagined episode showed (``imagined_reward="bound"``,
  `envace_gym.binding`); ``envace-log-penalty`` and ``envace-blind-penalty`` add the penalty on unusable
  output (0.1), ``envace-blind-refreward`` scores imagined episodes against the real values instead (the
  reward before the binding);
* ``envace-ref``: an ablation whose env role is shown the *same* task's reference results: it can copy the
  real values into its answers (a leak: the task's answers are in its prompt);
* older arms, kept for ``--arms``: ``envace-ref-targets`` (envace-ref plus the task's own logged results as
  supervised env-role targets: what ``envace-log`` meant before 2026-12-06), ``envace-ref-rehearsal``
  (half the task groups trained with a rehearsal memory), ``envace-frozen-env`` (the env role's samples
  masked), ``grpo-simulator`` (a frozen copy of the start imagines), ``grounded-0.25`` (a shadow real
  backend executes every call).

**Splits and statistics.** Settings are chosen on ``val`` (``--eval-split val``); final figures read
``test-id`` (the train split's phrasings, fresh tasks) once, and ``test`` (held-out phrasings) as the
generalisation figure. Seed ``k`` of every arm is evaluated greedily on its own slice ``k`` of the split's
pool (``--eval-episodes`` distinct tasks, disjoint between seeds; ``--test-episodes`` on ``test``), the start
on the same slices, so the primary figure is the **paired per-task difference from the start** with a
bootstrap 95% interval over tasks, pooled over seeds. Beside it: per-seed success with a t interval over
seeds, and the pooled Wilson interval.

**The env role's fidelity.** After each evaluation (the start's too), the policy's env role answers the
reference calls of ``--fidelity-episodes`` fixed ``val`` tasks (the same for every seed and arm), greedily and
shown no real result; each answer's share of the real result's fields right is paired, call by call, with the
start's answer to the same call: has training put an action -> response model into the weights?

**Raw results.** Each (arm, seed) run writes ``OUT/<arm>-seed<k>/result.json``: every training step's record
(rewards, ``trained_rows``, ``groups_with_spread``, ``rollout_s``, ``update_s``, live / logged / diagnostic /
verifier calls...), every evaluation episode's outcome by task id, and the env role's fidelity with its
per-call records. ``results.json`` aggregates them; ``table.md`` and ``learning.png`` are written from it, and
``--write-docs RESULTS.json`` renders the docs' tables and the README's headline from a kept one
(``--plot RESULTS.json`` its figure, as ``RESULTS.png`` beside it). ``--resume`` keeps finished runs and
continues an arm cut short from its newest checkpoint (LoRA arms from its adapter file, over the same start).

    python benchmarks/learning.py        # the default run: untrained, grpo-real, envace-blind, envace-blind-penalty
    python benchmarks/learning.py --eval-split val --arms untrained,envace-blind,envace-log --seeds 0  # go/no-go
    python benchmarks/learning.py --full --device cuda --jobs 8          # the GPU setting
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents import recipe
from envace_gym.agents.eval.fidelity import bootstrap_calls, call_differences, call_summary, fidelity_report
from envace_gym.agents.eval.stats import paired_bootstrap, t_interval, wilson_interval
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy
from envace_gym.agents.provenance import pairing_mismatch, run_environment
from envace_gym.agents.rollout import save_trajectories
from envace_gym.agents.rollout.loop import collect
from envace_gym.agents.train.checkpoint import latest_checkpoint
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.agents.train.sft import SFTConfig, build_sft_examples, train_sft
from envace_gym.imagination.prompt import is_result_shaped
from envace_gym.jsonl import read_jsonl

_REF_TARGETS = {"backend": "self", "tool_log": "reference"}  # the earlier setting's imagination recipe
# The paper's grounding: few-shot real (arguments, result) pairs of the same tool from other train tasks' results,
# never the task's own and no supervised target from them; the penalty on unusable output at its default (0.1)
_LOG = {"backend": "self", "grounding": "log", "tool_log": "reference", "log_targets": False}
ARMS: dict[str, dict[str, Any] | None] = {
    "untrained": None,
    "grpo-real": {"backend": "real"},
    "envace-ref": {"backend": "self", "grounding": "reference"},
    "envace-log": {**_LOG, "imagined_reward": "bound", "invalid_penalty": 0.0},
    "envace-blind": dict(recipe.IMAGINATION),  # the recipe's (chosen on val)
    "envace-log-penalty": _LOG,
    "envace-blind-penalty": {"backend": "self", "grounding": "none"},
    "envace-blind-refreward": {
        "backend": "self",
        "grounding": "none",
        "invalid_penalty": 0.0,
        "imagined_reward": "reference",
    },
    "envace-ref-targets": _REF_TARGETS,
    "envace-ref-rehearsal": {**_REF_TARGETS, "rehearsal_fraction": 0.5, "rehearsal_budget": 2},
    "envace-frozen-env": {"backend": "self", "train_env_role": False},
    "grpo-simulator": {"backend": "simulator"},
    "grounded-0.25": {"backend": "self", "real_fraction": 0.25},
}
#: The arms whose env role's answers reach the actor: the sim-to-real diagnostic applies to them.
IMAGINED = {name for name, arm in ARMS.items() if arm and arm["backend"] in ("self", "simulator")}

#: Steps between an arm's checkpoints: what a run cut short loses at most under ``--resume``.
SAVE_EVERY = 5

#: Evaluation episodes run in lockstep: fixed, so a task's greedy outcome does not depend on the machine.
EVAL_BATCH = 16

# The recipe's settings (agents/recipe.py, chosen on val) are the defaults: one definition.
DEFAULT = {
    "suite": "builtin/bank",
    "max_calls": 2,
    "max_turns": 3,
    "steps": 12,
    "tasks_per_step": recipe.RL_SETTINGS["tasks_per_step"],
    "group_size": recipe.RL_SETTINGS["group_size"],
    "lr": recipe.RL_SETTINGS["lr"],
    "lora": int(recipe.RL_SETTINGS["lora"]),
    "lora_rank": recipe.RL_SETTINGS["lora_rank"],
    "kl_coef": 0.0,
    "temperature": recipe.RL_SETTINGS["temperature"],
    "max_new_tokens": recipe.RL_SETTINGS["max_new_tokens"],
    "eval_split": "test-id",
    "eval_episodes": 96,
    "test_episodes": 32,
    "fidelity_episodes": 48,
    "warm": "adapter",
    "warm_scale": recipe.WARM_SCALE,
    "warm_steps": 60,
    "seeds": "0,1,2",
    "arms": "untrained,grpo-real,envace-blind,envace-blind-penalty",
}
FULL = {  # one GPU: all four domains, more steps and groups
    **DEFAULT,
    "suite": "builtin",
    "max_calls": -1,
    "max_turns": 4,
    "steps": 100,
    "tasks_per_step": 16,
    "max_new_tokens": 128,
    "eval_episodes": 600,
    "test_episodes": 600,
    "warm": "train",
    "warm_steps": 600,
    "arms": "untrained,grpo-real,envace-log,envace-blind,envace-ref",
}


def task_pool(args) -> list:
    """The suite's one-turn tasks that need at most ``--max-calls`` reference calls (-1: every task), all splits."""
    return recipe.task_pool(args.suite, args.max_calls)


def env_factory(args, split: str):
    tasks = task_pool(args)
    return lambda: gym.make("EnvACE-ToolCall-v0", tasks=tasks, split=split, max_turns=args.max_turns)


def eval_slice(args, split: str, seed: int) -> list[str]:
    """The task ids seed ``seed`` is evaluated on: slice ``seed`` of the split's pool in a fixed shuffle (seeded
    by the split's name, never by the run), ``--test-episodes`` tasks on ``test``, ``--eval-episodes`` on the
    others: disjoint between seeds, and the same for every arm (the start included)."""
    ids = sorted(t.id for t in task_pool(args) if t.split == split)
    random.Random(f"eval-slices/{split}").shuffle(ids)
    n = args.test_episodes if split == "test" else args.eval_episodes
    if (seed + 1) * n > len(ids):
        raise ValueError(
            f"the {split} pool has {len(ids)} tasks: seed {seed} needs tasks {seed * n}-{(seed + 1) * n - 1} "
            f"(--{'test' if split == 'test' else 'eval'}-episodes {n}); use fewer episodes or lower seeds"
        )
    return ids[seed * n : (seed + 1) * n]


def load(spec: str, args, seed: int) -> LMPolicy:
    policy = LMPolicy.from_spec(spec, sampling=SamplingConfig(0.0, 1.0, args.max_new_tokens, seed), progress=False)
    return policy.to(args.device)


def warm_start(args) -> str:
    """The shared starting checkpoint, kept in ``OUT/warm``: ``--warm adapter``, the embedded model with the
    shipped LoRA warm start merged at ``--warm-scale``; ``--warm train``, ``--warm-steps`` supervised steps of
    both roles; ``--warm DIR``, that checkpoint."""
    if args.warm not in ("adapter", "train"):
        return f"ckpt:{args.warm}"
    out = Path(args.out) / "warm"
    if (out / "sft_summary.json").exists():
        return f"ckpt:{out}"
    policy = load(args.policy, args, 0)
    if args.warm == "adapter":
        recipe.load_warm_adapter(policy, scale=args.warm_scale)
        policy.save(out)
        info = json.loads((recipe.WARM_ADAPTER / "warm_start.json").read_text())
        summary = {"adapter": str(recipe.WARM_ADAPTER), "scale": args.warm_scale, **info["summary"]}
        (out / "sft_summary.json").write_text(json.dumps(summary))
        return f"ckpt:{out}"
    env = env_factory(args, "train")()
    examples = build_sft_examples(env, policy, 400, seed=0, progress=False, roles=("actor", "env_role"))
    # A step count, not minutes: the starting point must not depend on how busy the machine is.
    cfg = SFTConfig(steps=args.warm_steps, lr=1e-4, seed=0)
    print(f"warm start: {len(examples)} examples, {args.warm_steps} steps", flush=True)
    train_sft(policy, examples, cfg, out, progress=False)
    return f"ckpt:{out}"


def _digest(token_ids: list[int]) -> str:
    return hashlib.sha256(json.dumps(token_ids).encode()).hexdigest()[:16]


def evaluate_on(policy: LMPolicy, args, split: str, task_ids: list[str], keep: Path | None = None) -> dict[str, Any]:
    """Greedy episodes on the real backend, one per task of ``task_ids``, :data:`EVAL_BATCH` in lockstep:
    outcome by task id, task kinds, valid-call rate and the share of result-shaped actor turns; ``keep``: a
    JSONL file for the episodes themselves (what the docs' readings of failures come from)."""
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, 0)
    policy.engine.clear()
    envs = [env_factory(args, split)() for _ in range(min(EVAL_BATCH, len(task_ids)))]
    t0 = time.monotonic()
    trajectories = collect(envs, policy, len(task_ids), task_ids=task_ids, seed=0, progress=False, desc=split)
    if keep is not None:
        save_trajectories(trajectories, keep)
    kinds = {t.id: t.metadata.get("kind", t.domain) for t in task_pool(args)}
    turns = [m for t in trajectories for m in t.messages if m.get("role") == "assistant"]
    calls_ok = sum(t.calls_ok for t in trajectories)
    calls = calls_ok + sum(t.calls_failed for t in trajectories)
    return {
        "outcomes": {t.episode.task_id: int(t.success) for t in trajectories},
        # a digest of each episode's tokens: two evaluations of one checkpoint can be compared token for token
        "token_digest": {t.episode.task_id: _digest(t.token_ids) for t in trajectories},
        "kinds": {t.episode.task_id: kinds.get(t.episode.task_id, "?") for t in trajectories},
        "valid_call_rate": calls_ok / calls if calls else None,
        "result_shaped": sum(map(is_result_shaped, turns)) / len(turns) if turns else 0.0,
        "seconds": round(time.monotonic() - t0, 1),
    }


def measure(policy: LMPolicy, args, seed: int, out: Path) -> dict[str, dict[str, Any]]:
    """The run's evaluations: its slice of ``--eval-split`` and, for final figures (``test-id``), its slice of
    ``test`` (held-out phrasings); their episodes go to ``out/eval-<split>.jsonl``."""
    splits = [args.eval_split] + (["test"] if args.eval_split == "test-id" and args.test_episodes > 0 else [])
    return {s: evaluate_on(policy, args, s, eval_slice(args, s, seed), out / f"eval-{s}.jsonl") for s in splits}


def fidelity_tasks(args) -> list[str]:
    """The ``val`` tasks the env role's fidelity is measured on: ``--fidelity-episodes`` of those with reference
    calls, in a fixed shuffle (seeded by a name, never by the run): the same calls for every seed and arm, so an
    arm's answers pair with the start's call by call."""
    ids = sorted(t.id for t in task_pool(args) if t.split == "val" and t.reference_calls)
    random.Random("fidelity/val").shuffle(ids)
    return ids[: args.fidelity_episodes]


def measure_fidelity(policy: LMPolicy, args) -> dict[str, Any] | None:
    """The policy's env role as a world model: greedy answers to the reference calls of `fidelity_tasks`,
    shown no real result (grounding none), scored against the real results: the report's summary and its
    per-call records (``calls_detail``). None with ``--fidelity-episodes 0``."""
    ids = fidelity_tasks(args)
    if not ids:
        return None
    policy.sampling = SamplingConfig(0.0, 1.0, args.max_new_tokens, 0)
    policy.engine.clear()
    t0 = time.monotonic()
    report = fidelity_report(
        env_factory(args, "val"), {"self": policy}, len(ids), progress=False, grounding="none",
        batch_size=EVAL_BATCH, task_ids=ids,
    )  # fmt: skip
    result = report["backends"]["self"]
    result.pop("environment")  # the run's own, recorded beside it
    return {"split": "val", "grounding": "none", **result, "seconds": round(time.monotonic() - t0, 1)}


def arm_config(name: str, args, seed: int) -> EnvACEConfig:
    return EnvACEConfig(
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        lora=bool(args.lora),
        lora_rank=args.lora_rank,
        lora_alpha=2 * args.lora_rank,  # the recipe's ratio (alpha 32 at rank 16)
        kl_coef=args.kl_coef,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=seed,
        # A checkpoint every few steps (only the newest kept): an arm cut short goes on under --resume.
        save_every=min(SAVE_EVERY, args.steps),
        keep_last=1,
        # Training transcripts (OUT/<arm>-seed<k>/trajectories/step-N.jsonl), to read what an arm learned from.
        log_trajectories_every=args.log_trajectories_every,
        sim_to_real=name in IMAGINED,  # a diagnostic: its calls are counted apart and never trained on
        **ARMS[name],
    )


def run_arm(name: str, start: str, args, seed: int) -> dict[str, Any]:
    """Train one arm from the start (nothing for ``untrained``), then evaluate it: ``result.json``'s content."""
    policy = load(start, args, seed)
    records: list[dict[str, Any]] = []
    out = Path(args.out) / f"{name}-seed{seed}"
    trained_by: dict[str, Any] = {"invalid_penalty": None, "reward": None}
    if ARMS[name] is not None:
        cfg = arm_config(name, args, seed)
        imagined = name in IMAGINED
        # which reward trained it: the env's (real episodes), the bound checklist or the real values (imagined)
        trained_by = {"invalid_penalty": cfg.invalid_penalty, "reward": cfg.imagined_reward if imagined else "env"}
        resume = args.resume and latest_checkpoint(out) is not None  # an arm cut short: on from its checkpoint
        if resume:
            print(f"{name}-seed{seed}: resuming from {latest_checkpoint(out).name}", flush=True)
        trainer = EnvACETrainer(policy, env_factory(args, "train"), cfg, out, progress=False, resume=resume)
        trainer.train()
        if cfg.lora:  # evaluate the merged weights, as a checkpoint loads them (and faster than the adapters)
            policy.model = policy.engine.model = trainer.model.merge_and_unload().eval()
            policy.engine.clear()
        # Every step's record, the ones of an earlier, interrupted process included (the trainer kept them).
        records = [r for _, r in read_jsonl(out / "metrics.jsonl") if isinstance(r, dict)]
    evals = measure(policy, args, seed, out)
    fidelity = measure_fidelity(policy, args)
    environment = run_environment(policy)
    keys = ("live_calls", "logged_calls_used", "diagnostic_calls", "verifier_calls")
    return {
        "arm": name,
        "seed": seed,
        **trained_by,
        "evals": evals,
        "fidelity": fidelity,
        "records": records,
        "calls": {k: sum(r.get(k) or 0 for r in records) for k in keys},
        # the same meaning for a fresh and a resumed run: the steps' own time, evaluation apart
        "train_s": round(sum(r["rollout_s"] + r["update_s"] for r in records), 1),
        "tokens": sum(r["actor_tokens"] + r["env_role_tokens"] + r.get("rehearsal_tokens", 0) for r in records),
        # where it ran (code, kernels, precision, threads, versions): a start and an arm pair only where these match
        "environment": environment,
        # the start evaluated here too, where the kept one ran elsewhere (see start_evaluation)
        "start": start_evaluation(name, start, args, seed, out, environment),
    }


#: How a logged imagined training episode ended (`transcript_outcomes`), in the order the docs list them.
OUTCOMES = {
    "bound_only": "rewarded for acting on what it was shown (0 against the real values)",
    "both": "rewarded under both rewards",
    "no_call": "not rewarded: answered without a call",
    "unusable": "not rewarded: the env role's answer was unusable (episode ended)",
    "failed": "not rewarded: calls or answer wrong",
}


def transcript_outcomes(out: Path) -> dict[str, int] | None:
    """Counts of `OUTCOMES` over the training episodes kept in ``out/trajectories/step-*.jsonl``; None where
    none was kept."""
    files = sorted((out / "trajectories").glob("step-*.jsonl"))
    if not files:
        return None
    counts = dict.fromkeys(OUTCOMES, 0)
    for path in files:
        for _, traj in read_jsonl(path):
            episode, samples = traj["episode"], traj.get("env_role_samples", [])
            if episode["reward"] >= 1.0:
                kind = "bound_only" if episode.get("reward_reference", episode["reward"]) < 1.0 else "both"
            elif episode["calls_ok"] + episode["calls_failed"] == 0:
                kind = "no_call"
            elif any(not s.get("valid", True) for s in samples):
                kind = "unusable"
            else:
                kind = "failed"
            counts[kind] += 1
    return counts


def transcript_table(results: dict[str, Any]) -> str | None:
    """How the imagination arms' logged training episodes ended (`OUTCOMES`), pooled over seeds; None where no
    arm kept transcripts."""
    rows = {name: r["transcripts"] for name, r in results.items() if r.get("transcripts")}
    if not rows:
        return None
    lines = ["| arm | episodes | " + " | ".join(OUTCOMES.values()) + " |", "|---" * (len(OUTCOMES) + 2) + "|"]
    for name, counts in rows.items():
        n = sum(counts.values())
        cells = [f"{100 * counts[k] / n:.0f}%" for k in OUTCOMES]
        lines.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def start_evaluation(
    name: str, start: str, args, seed: int, out: Path, environment: dict[str, Any]
) -> dict[str, Any] | None:
    """The start's evaluation for a trained arm's seed, made here when the kept one (``OUT/untrained-seed<k>``)
    ran in another environment (code, kernels, precision, versions; `pairing_mismatch`) or is missing: greedy
    outcomes flip with the float kernels, so an arm is paired only with a start evaluated where it was. None where
    the kept one matches (or for ``untrained`` itself)."""
    if name == "untrained":
        return None
    kept = Path(args.out) / f"untrained-seed{seed}" / "result.json"
    if kept.exists() and not pairing_mismatch(json.loads(kept.read_text()).get("environment"), environment):
        return None
    print(f"{name}-seed{seed}: evaluating the start here too (the kept one is missing or ran elsewhere)", flush=True)
    policy = load(start, args, seed)
    (out / "start").mkdir(parents=True, exist_ok=True)
    return {
        "evals": measure(policy, args, seed, out / "start"),
        "fidelity": measure_fidelity(policy, args),
        "environment": run_environment(policy),
    }


# ----------------------------------------------------------------------------------------- aggregation
def start_pairing(run: dict[str, Any], kept: dict[int, dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """The start's evaluation that an arm's run (one seed's ``result.json``) pairs with: the one the run made
    itself (``run["start"]``), else the kept ``untrained`` run of its seed (``kept``: by seed), whichever was
    evaluated in the same environment (`pairing_mismatch` empty: same code, kernels, precision, device and
    versions). None and what differs when neither was: that seed is refused, not paired."""
    differ: list[str] = ["no start evaluation of this seed"]
    for candidate in (run.get("start"), kept.get(run["seed"])):
        if candidate is None:
            continue
        mismatch = pairing_mismatch(run.get("environment"), candidate.get("environment"))
        if not mismatch:
            return candidate, []
        differ = mismatch
    return None, differ


def pairing(runs: list[dict[str, Any]], start: list[dict[str, Any]]) -> dict[str, Any]:
    """Which of an arm's seeds pair with a start evaluated in their environment (``paired``), and which were
    refused, with what differs (``refused``: seed -> keys, e.g. ``["cpu_capability"]``)."""
    kept = {r["seed"]: r for r in start}
    out: dict[str, Any] = {"paired": [], "refused": {}}
    for r in runs:
        match, differ = start_pairing(r, kept)
        if match is None:
            out["refused"][str(r["seed"])] = differ
        else:
            out["paired"].append(r["seed"])
    return out


def paired(runs: list[dict[str, Any]], start: list[dict[str, Any]], split: str) -> dict[str, Any] | None:
    """The arm's paired per-task difference from the start on ``split``: each task's outcome minus the
    start's on it (the start evaluated in the same environment as that seed: `start_pairing`; other seeds are
    left out), averaged over the seeds that played it; bootstrap 95% interval over tasks."""
    kept = {r["seed"]: r for r in start}
    per_task: dict[str, list[int]] = {}
    for r in runs:
        match, _ = start_pairing(r, kept)
        if match is None:
            continue
        before = match["evals"].get(split, {}).get("outcomes", {})
        for task, outcome in r["evals"].get(split, {}).get("outcomes", {}).items():
            if task in before:
                per_task.setdefault(task, []).append(outcome - before[task])
    if not per_task:
        return None
    return paired_bootstrap([sum(d) / len(d) for d in per_task.values()])


def paired_arms(arm: dict[str, Any], other: dict[str, Any], split: str) -> dict[str, Any] | None:
    """Two summarized arms against each other on ``split``: each task's outcome in ``arm`` minus ``other``'s on the
    same task of the same seed, averaged over seeds; bootstrap 95% interval over tasks. None where the two did not
    run in one recorded environment (`common_environment`) or share no task."""
    if common_environment([arm.get("environment"), other.get("environment")]) is None:
        return None
    theirs = other.get(split, {}).get("outcomes", {})
    per_task: dict[str, list[int]] = {}
    for seed, outcomes in arm.get(split, {}).get("outcomes", {}).items():
        for task, outcome in outcomes.items():
            if task in theirs.get(seed, {}):
                per_task.setdefault(task, []).append(outcome - theirs[seed][task])
    return paired_bootstrap([sum(d) / len(d) for d in per_task.values()]) if per_task else None


def fidelity_paired(runs: list[dict[str, Any]], start: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The arm's env-role fidelity against the start's, call by call: each reference call's ``fields`` score
    minus the start's on it (the start evaluated in the same environment as that seed: `start_pairing`),
    averaged over the seeds that measured it; bootstrap 95% interval over calls. None where nothing pairs."""
    kept = {r["seed"]: r for r in start}
    per_call: dict[tuple[str, int], list[float]] = {}
    for r in runs:
        match, _ = start_pairing(r, kept)
        if match is None or not match.get("fidelity") or not r.get("fidelity"):
            continue
        for key, d in call_differences(match["fidelity"]["calls_detail"], r["fidelity"]["calls_detail"]).items():
            per_call.setdefault(key, []).append(d)
    if not per_call:
        return None
    return bootstrap_calls({key: sum(d) / len(d) for key, d in per_call.items()})


def summarize(
    name: str, runs: list[dict[str, Any]], start: list[dict[str, Any]], split: str, group_size: int
) -> dict[str, Any]:
    """One arm over its seeds: pooled and per-seed success on ``split`` and ``test``, paired with the start,
    its costs per run, and every seed's step records."""
    out: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "split": split}
    for s in (split, "test"):
        played = [r["evals"][s] for r in runs if s in r["evals"]]
        if not played:
            continue
        outcomes = [o for e in played for o in e["outcomes"].values()]
        per_seed = [sum(e["outcomes"].values()) / len(e["outcomes"]) for e in played]
        kinds: dict[str, list[int]] = {}
        for e in played:
            for task, ok in e["outcomes"].items():
                tally = kinds.setdefault(e["kinds"][task], [0, 0])
                tally[0] += ok
                tally[1] += 1
        out[s] = {
            "success": sum(outcomes) / len(outcomes),
            "episodes": len(outcomes),
            "wilson95": wilson_interval(sum(outcomes), len(outcomes)),
            "per_seed": per_seed,
            "t95_seeds": t_interval(per_seed),
            "paired_vs_start": paired(runs, start, s) if name != "untrained" and start else None,
            "by_kind": dict(sorted(kinds.items())),
            # every episode's outcome by seed and task id: any figure above can be recomputed from these
            "outcomes": {str(r["seed"]): r["evals"][s]["outcomes"] for r in runs if s in r["evals"]},
        }
    if name != "untrained" and start:
        out["pairing"] = pairing(runs, start)
    measured = [r["fidelity"] for r in runs if r.get("fidelity")]
    if measured:  # the env role's fidelity on val reference calls, pooled over seeds
        out["fidelity"] = call_summary([c for f in measured for c in f["calls_detail"]])
        out["fidelity_vs_start"] = fidelity_paired(runs, start) if name != "untrained" and start else None
    main = out.get(split, {})
    records = [rec for r in runs for rec in r["records"]]
    n = len(runs)
    bound = sum(rec.get("bound_episodes", 0) for rec in records)
    out.update(
        invalid_penalty=runs[0].get("invalid_penalty"),
        reward=runs[0].get("reward"),
        # the share of imagined training episodes whose reward the binding changed (None: none was bound)
        binding_changed=sum(rec.get("binding_changed", 0) for rec in records) / bound if bound else None,
        success=main.get("success"),
        paired_vs_start=main.get("paired_vs_start"),
        live_calls=sum(r["calls"]["live_calls"] for r in runs) / n,
        logged_results=sum(r["calls"]["logged_calls_used"] for r in runs) / n,
        diagnostic_calls=sum(r["calls"]["diagnostic_calls"] for r in runs) / n,
        train_s=sum(r["train_s"] for r in runs) / n,
        tokens=sum(r["tokens"] for r in runs) / n,
        trained_rows=sum(rec.get("trained_rows", 0) for rec in records) / n,
        groups_with_spread=sum(rec.get("groups_with_spread", 0) for rec in records) / n,
        groups=sum(rec.get("n_actor", 0) for rec in records) / group_size / n,
        records={str(r["seed"]): r["records"] for r in runs},
        environments={str(r["seed"]): r.get("environment") for r in runs},
        # the one environment every seed ran in (code, kernels, precision, threads, versions), None if they differ
        environment=common_environment([r.get("environment") for r in runs]),
        transcripts=_pooled([r.get("transcripts") for r in runs]),
    )
    return out


def _pooled(counts: list[dict[str, int] | None]) -> dict[str, int] | None:
    kept = [c for c in counts if c]
    return {k: sum(c.get(k, 0) for c in kept) for k in OUTCOMES} if kept else None


def common_environment(environments: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The environment all of ``environments`` share for pairing (`pairing_mismatch` empty between the first
    and each other), or None where one is missing or differs."""
    first = environments[0] if environments else None
    if first is None or any(e is None or pairing_mismatch(first, e) for e in environments[1:]):
        return None
    return first


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None else f"{100 * lo:.0f}-{100 * hi:.0f}"


def _delta(d: dict[str, Any] | None) -> str:
    if not d or d["mean"] is None:
        return "-"
    lo, hi = d["ci95"]
    return f"{100 * d['mean']:+.1f} ({100 * lo:+.1f} to {100 * hi:+.1f}; {d['won']}/{d['lost']})"


def table(results: dict[str, Any]) -> str:
    """The results table: success on the evaluation split, paired with the start (the primary figure), the
    mean over seeds, ``test``, and what training cost in live calls and real results shown; where the runs
    measured it, the env role's fidelity on ``val`` reference calls (the share of the real results' fields it
    got right, shown no real result) and its per-call difference from the start."""
    split = next(iter(results.values()))["split"] if results else "test-id"
    fidelity = any(r.get("fidelity") for r in results.values())  # runs from before it was measured: no column
    lines = [
        f"| arm | {split}: success (Wilson 95%) | paired vs start, points (95% CI; won/lost) | mean of seeds (t 95%) "
        "| test, held-out phrasings: paired vs start | live calls per run | real results shown per run |"
        + (" env-role fields on val calls (vs start, points; won/lost calls) |" if fidelity else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if fidelity else ""),
    ]
    for name, r in results.items():
        main, test = r.get(split, {}), r.get("test", {})
        seeds = len(r["seeds"])
        row = (
            f"| {name} ({seeds} seed{'s' * (seeds != 1)}) | {_pct(main.get('success'))} of {main.get('episodes', 0)} "
            f"({_ci(*main.get('wilson95', (None, None)))}) | {_delta(r.get('paired_vs_start'))} | "
            f"{_ci(*main.get('t95_seeds', (None, None)))} | "
            f"{_pct(test.get('success'))}, {_delta(test.get('paired_vs_start'))} | {r['live_calls']:,.0f} | "
            f"{r['logged_results']:,.0f} |"
        )
        if fidelity:
            fields = (r.get("fidelity") or {}).get("field_exact")
            vs = r.get("fidelity_vs_start")
            row += f" {_pct(fields)}" + (f", {_delta(vs)}" if vs else "") + " |"
        lines.append(row)
    return "\n".join(lines)


def cost_table(results: dict[str, Any]) -> str:
    """Where a run's steps went: time, tokens, rows trained, groups whose rewards differed; what trained it (the
    reward and the penalty on unusable output) and the share of imagined episodes whose reward the binding
    changed (results kept before these were recorded show "-")."""
    lines = [
        "| arm | train time per run | per step: rollout (prefill + decode) / update | tokens per run "
        "| trained rows per run | groups with spread | reward, penalty (rewards the binding changed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        recs = [rec for seed in r["records"].values() for rec in seed]
        if not recs:
            continue
        keys = ("rollout_s", "update_s", "rollout_prefill_s", "rollout_decode_s")
        mean = {k: sum(x.get(k, 0.0) for x in recs) / len(recs) for k in keys}
        per_step = (
            f"{mean['rollout_s']:.0f} s ({mean['rollout_prefill_s']:.0f} + {mean['rollout_decode_s']:.0f}) / "
            f"{mean['update_s']:.0f} s"
        )
        trained_by = "-"
        if r.get("reward") is not None:
            changed = r.get("binding_changed")
            trained_by = f"{r['reward']}, {r['invalid_penalty']:g}" + (
                f" ({100 * changed:.0f}%)" if changed is not None else ""
            )
        lines.append(
            f"| {name} | {r['train_s'] / 60:.1f} min | {per_step} | {r['tokens']:,.0f} | "
            f"{r['trained_rows']:,.0f} | {r['groups_with_spread']:.0f} of {r['groups']:.0f} | {trained_by} |"
        )
    return "\n".join(lines)


def kind_table(results: dict[str, Any]) -> str:
    """Wins / episodes by task kind on the evaluation split, per arm."""
    split = next(iter(results.values()))["split"] if results else "test-id"
    columns = [(name, r[split]["by_kind"]) for name, r in results.items() if split in r]
    kinds = sorted({k for _, tally in columns for k in tally})
    lines = ["| task kind | " + " | ".join(n for n, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for kind in kinds:
        cells = [f"{t[kind][0]}/{t[kind][1]}" if kind in t else "-" for _, t in columns]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path, group_size: int) -> None:
    """Top: each arm's paired difference from the start with its interval; below, per step and per arm (mean
    over seeds): the training reward, and the share of groups with a reward spread. Sized to be read at a docs
    page's width (7 inches, 10-point text: about 10 points still at 700 px)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {n: f"C{i}" for i, n in enumerate(results)}
    from matplotlib.ticker import MaxNLocator

    fig = plt.figure(figsize=(7, 6.5), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=(0.85, 1))
    ax1, ax2, ax3 = fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    names = [n for n, r in results.items() if r.get("paired_vs_start")]
    for i, n in enumerate(names):
        d = results[n]["paired_vs_start"]
        ax1.errorbar(
            [100 * d["mean"]], [i], xerr=[[100 * (d["mean"] - d["ci95"][0])], [100 * (d["ci95"][1] - d["mean"])]],
            fmt="o", capsize=4, color=colors[n],
        )  # fmt: skip
    ax1.axvline(0, color="grey", lw=1)
    ax1.set_yticks(range(len(names)), [f"{n}\n{results[n]['live_calls']:,.0f} live calls" for n in names])
    ax1.set_ylim(-0.5, len(names) - 0.5)
    ax1.set_xlabel("paired difference from the start, points (95% CI)")
    for n, r in results.items():
        seeds = [s for s in r["records"].values() if s]
        if not seeds:
            continue
        steps = min(len(s) for s in seeds)
        reward = [sum(s[i]["reward_actor"] for s in seeds) / len(seeds) for i in range(steps)]
        ax2.plot(range(1, steps + 1), reward, color=colors[n], label=n)
        # groups of a step: its episodes over the group size (dynamic sampling may play more than tasks_per_step)
        share = [
            sum(s[i].get("groups_with_spread", 0) / max(1, s[i]["n_actor"] / group_size) for s in seeds) / len(seeds)
            for i in range(steps)
        ]
        ax3.plot(range(1, steps + 1), share, color=colors[n], label=n)
    for ax, label in ((ax2, "training reward"), (ax3, "share of groups with a reward spread")):
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(label, fontsize=10)
        ax.set_ylim(0, 1)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper left")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def key_results(results: dict[str, Any]) -> str:
    """The page's "Key results" admonition: each trained arm's paired difference from the start, what it cost,
    and whether the benchmark's goal holds (``grpo-real`` above the start; an imagination-only arm above it too
    and recovering at least half of ``grpo-real``'s gain)."""
    split = next(iter(results.values()))["split"]
    lines = ['!!! abstract "Key results"']
    real = (results.get("grpo-real") or {}).get("paired_vs_start")
    for name, r in results.items():
        d = r.get("paired_vs_start")
        if not d or d["mean"] is None:
            continue
        lo, hi = d["ci95"]
        verdict = "above the start" if lo > 0 else "below the start" if hi < 0 else "within noise of the start"
        seeds = len(r["seeds"])
        line = (
            f"    * `{name}` ({seeds} seed{'s' * (seeds != 1)}{': too few for a claim' * (seeds < 3)}): "
            f"{100 * d['mean']:+.1f} points on {split}, paired over "
            f"{d['tasks']} tasks (95% CI {100 * lo:+.1f} to {100 * hi:+.1f}): {verdict}; "
            f"{r['live_calls']:,.0f} live calls and {r['logged_results']:,.0f} real results shown per run"
        )
        if name != "grpo-real" and r["live_calls"] == 0 and real and real["mean"] and real["mean"] > 0:
            line += f"; {100 * d['mean'] / real['mean']:.0f}% of `grpo-real`'s gain"
            against = paired_arms(r, results["grpo-real"], split)
            if against and against["mean"] is not None:
                line += f", {_ci_points(against)} points against `grpo-real` on the same tasks"
        fidelity = r.get("fidelity_vs_start")
        if fidelity and fidelity["mean"] is not None:
            flo, fhi = fidelity["ci95"]
            line += (
                f"; its env role's fidelity on `val` calls {100 * fidelity['mean']:+.1f} points against the start's "
                f"(95% CI {100 * flo:+.1f} to {100 * fhi:+.1f})"
            )
        lines.append(line + ".")
    if real is not None:
        lines.append(f"    * {goal_check(results)}")
    return "\n".join(lines)


def goal_check(results: dict[str, Any]) -> str:
    """Whether the benchmark's goal holds, and for each imagination-only arm (0 live calls) which part does not:
    its paired interval above 0, at least half of ``grpo-real``'s gain, 3 or more seeds, trained by the task reward
    alone (no penalty on unusable output), and its env role's fidelity above the start's, paired interval above 0."""
    real = (results.get("grpo-real") or {}).get("paired_vs_start")
    if not real or real["mean"] is None or real["ci95"][0] <= 0:
        return "Goal: not met (`grpo-real` is not above the start, so there is no gain to recover)."
    verdicts = []
    for name, r in results.items():
        d = r.get("paired_vs_start")
        if name in ("untrained", "grpo-real") or r["live_calls"] != 0 or not d or d["mean"] is None:
            continue
        missing = []
        if d["ci95"][0] <= 0:
            missing.append("its paired interval is not above 0")
        if d["mean"] < 0.5 * real["mean"]:
            missing.append(f"{100 * d['mean'] / real['mean']:.0f}% of `grpo-real`'s gain, under half")
        if len(r["seeds"]) < 3:
            missing.append("fewer than 3 seeds")
        if r.get("invalid_penalty") is None:  # the goal asks for the task reward alone
            missing.append("what trained it (the penalty on unusable output) was not recorded")
        elif r["invalid_penalty"]:
            missing.append(f"trained with the penalty on unusable output ({r['invalid_penalty']:g})")
        fidelity = r.get("fidelity_vs_start")
        if fidelity is None or fidelity["mean"] is None:
            missing.append("its env role's fidelity was not measured")
        elif fidelity["ci95"][0] <= 0:
            missing.append("its env role's fidelity interval is not above 0")
        verdicts.append((name, missing))
    met = [name for name, missing in verdicts if not missing]
    if met:
        return "Goal: **met** by " + ", ".join(f"`{n}`" for n in met) + "."
    if not verdicts:
        return "Goal: not met (no imagination-only arm in this table)."
    return "Goal: **not met**: " + "; ".join(f"`{n}`: {', '.join(m)}" for n, m in verdicts) + "."


def kernel_table(paths: list[str]) -> str:
    """How far one evaluation moves across environments: the same (arm, seed) ``result.json`` made under two or
    more kernel sets (or precisions, versions), task by task against the first. Trains nothing."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    split = next(iter(runs[0]["evals"]))
    base, base_tokens = (runs[0]["evals"][split][k] for k in ("outcomes", "token_digest"))
    lines = [
        f"| CPU kernels | precision | threads | torch | {split}: successes | outcomes that differ from the first "
        "row | episodes whose tokens differ |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        env, outcomes, tokens = (
            (r.get("environment") or {}),
            *(r["evals"][split][k] for k in ("outcomes", "token_digest")),
        )
        differ = sum(outcomes[t] != base[t] for t in base if t in outcomes)
        moved = sum(tokens.get(t) != base_tokens[t] for t in base_tokens)
        lines.append(
            f"| {env.get('cpu_capability', '?')} | {env.get('precision', '?')} | {env.get('threads', '?')} | "
            f"{env.get('versions', {}).get('torch', '?')} | {sum(outcomes.values())} of {len(outcomes)} | "
            f"{differ} of {len(base)} | {moved} of {len(base_tokens)} |"
        )
    return "\n".join(lines)


#: How the README's headline names each arm (arms not named here show their benchmark name).
HEADLINE_NAMES = {
    "grpo-real": "GRPO on the real tools",
    "envace-blind": "EnvACE under imagination, env role shown no real result, task reward alone",
    "envace-blind-penalty": "the same, plus the penalty on unusable output",
    "envace-log": "EnvACE under imagination, env role shown other train tasks' logged results, task reward alone",
    "envace-log-penalty": "the same, plus the penalty on unusable output",
    "envace-ref": "EnvACE under imagination, env role shown the task's own reference results (a leak)",
}


def headline(results: dict[str, Any]) -> str:
    """The README's headline table: each trained arm's success against the start on the evaluation split, the
    paired difference (bold where its interval is above 0), its env role's fidelity against the start's, and
    what training cost in live calls and real results shown."""
    split = next(iter(results.values()))["split"]
    start = results.get("untrained", {}).get(split, {})
    lines = [
        f"| arm | {split}, {start.get('episodes', 0)} tasks: start -> trained | paired difference, points (95% CI) "
        "| env role's fields on val calls, vs start (95% CI) | live tool calls in training (real results shown) |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        d = r.get("paired_vs_start")
        if name == "untrained" or not d or d["mean"] is None:
            continue
        paired_text = _ci_points(d)
        fid = r.get("fidelity_vs_start")
        live = f"{r['live_calls']:,.0f}"
        cells = (
            HEADLINE_NAMES.get(name, name),
            f"{_pct(start.get('success'))} -> {_pct(r.get(split, {}).get('success'))}",
            f"**{paired_text}**" if d["ci95"][0] > 0 else paired_text,
            "-" if not fid or fid["mean"] is None else _ci_points(fid),
            f"{f'**{live}**' if r['live_calls'] == 0 else live} ({r['logged_results']:,.0f})",
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ci_points(d: dict[str, Any]) -> str:
    """A paired figure in points with its interval: ``+4.5 (+1.0 to +8.3)`` (`_delta` adds won/lost)."""
    lo, hi = d["ci95"]
    return f"{100 * d['mean']:+.1f} ({100 * lo:+.1f} to {100 * hi:+.1f})"


def environment_note(results: dict[str, Any]) -> str:
    """One line on where the table's runs ran: the environment every arm's seeds share (code, CPU kernels,
    precision, threads, device, versions), or which arms ran elsewhere or were not recorded (results kept before
    environments were recorded)."""
    recorded = {name: r.get("environment") for name, r in results.items()}
    missing = [name for name, env in recorded.items() if env is None]
    shared = common_environment([env for env in recorded.values() if env is not None])
    if len(missing) == len(recorded):
        return "Environment: not recorded (these runs were made before the benchmark recorded it)."
    if shared is None:
        codes = ", ".join(
            f"`{n}` {e.get('code', '?')}/{e.get('cpu_capability', '?')}" for n, e in recorded.items() if e
        )
        return (
            f"Environment: **the arms ran in different environments** ({codes}); their pairings say which seeds pair."
        )
    versions = ", ".join(f"{k} {v}" for k, v in sorted(shared.get("versions", {}).items()))
    line = (
        f"Environment, the same for every run and its start: code `{shared.get('code', '?')}`, "
        f"device {shared.get('device', '?')}, CPU kernels {shared.get('cpu_capability', '?')}, "
        f"{shared.get('precision', '?')}, torch threads {shared.get('threads', '?')}, Python "
        f"{shared.get('python', '?')}; {versions}."
    )
    if missing:
        line += f" Not recorded for: {', '.join(f'`{n}`' for n in missing)}."
    return line


def write_docs(path: str, block: str | None = None) -> str:
    """Rewrite docs/learning.md's blocks from a kept ``results.json``: a ``val`` run (a go/no-go) writes
    ``block`` (default ``learning-val``; the page has one per go/no-go); a ``test-id`` run the blocks
    ``<block>-key``, ``-main``, ``-environment``, ``-cost`` and ``-kinds`` (default prefix ``learning``: the
    current table, which also writes the README's ``learning-headline``; an earlier table kept on the page has its
    own prefix). Where the run kept training transcripts, their outcomes go to ``<block>-transcripts``. Trains
    nothing; returns the main table."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docs import DOCS, write_block

    results = json.loads(Path(path).read_text())["arms"]
    text = table(results)
    is_val = next(iter(results.values()))["split"] == "val"
    if is_val:
        block = block or "learning-val"
        blocks = {block: text + "\n\n" + cost_table(results) + "\n\n" + kind_table(results)}
    else:
        block = block or "learning"
        blocks = {
            f"{block}-key": key_results(results),
            f"{block}-main": text,
            f"{block}-environment": environment_note(results),
            f"{block}-cost": cost_table(results),
            f"{block}-kinds": kind_table(results),
        }
    transcripts = transcript_table(results)
    if transcripts is not None:
        blocks[f"{block}-transcripts"] = transcripts
    for name, body in blocks.items():
        changed = write_block("learning.md", name, body)
        print(f"docs/learning.md: {name} {'rewritten' if changed else 'unchanged'}")
    if not is_val and block == "learning":  # the current table is the README's headline
        changed = write_block(DOCS.parent / "README.md", "learning-headline", headline(results))
        print(f"README.md: learning-headline {'rewritten' if changed else 'unchanged'}")
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the GPU-sized setting")
    parser.add_argument("--policy", default="default", help="the model the warm start starts from")
    parser.add_argument("--out", default="runs/learning", help="output folder")
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu or cuda")
    parser.add_argument("--jobs", type=int, default=1, help="(arm, seed) runs in parallel processes")
    parser.add_argument("--resume", action="store_true", help="keep finished (arm, seed) runs of --out")
    parser.add_argument("--report-only", action="store_true", help="train nothing: tabulate the finished runs of --out")
    parser.add_argument(
        "--log-trajectories-every",
        type=int,
        default=0,
        metavar="N",
        help="keep every Nth training step's episodes (imagined ones with the env role's answers) as JSONL; 0: none",
    )
    parser.add_argument(
        "--write-docs",
        metavar="RESULTS.json",
        help="train nothing: rewrite docs/learning.md's tables from a results file",
    )
    parser.add_argument(
        "--docs-block",
        default=None,
        metavar="NAME",
        help="with --write-docs: a val run's block (default learning-val; one per go/no-go), or the prefix of a "
        "test-id run's blocks (default learning: the current table)",
    )
    parser.add_argument(
        "--kernels",
        metavar="RESULT.json,RESULT.json",
        help="train nothing: write docs/learning.md's table of how far one run's greedy outcomes move between "
        "the environments of these result.json files (the same arm and seed, e.g. other CPU kernels)",
    )
    parser.add_argument(
        "--plot",
        metavar="RESULTS.json",
        help="train nothing: draw a results file's figure (a test-id run's) as RESULTS.png beside it",
    )
    for key, value in DEFAULT.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=None, help=f"default {value}")
    args = parser.parse_args(argv)
    base = FULL if args.full else DEFAULT
    for key, value in base.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    unknown = [a for a in args.arms.split(",") if a.strip() and a.strip() not in ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from {', '.join(ARMS)}")
    if args.eval_split not in ("val", "test-id"):
        parser.error(f"--eval-split is val (choosing settings) or test-id (final figures); got {args.eval_split!r}")
    return args


def _child_argv(args, name: str, seed: int, start: str) -> list[str]:
    argv = [sys.executable, __file__, "--arms", name, "--seeds", str(seed), "--resume", "--jobs", "1"]
    argv += ["--out", args.out, "--device", args.device, "--policy", args.policy]
    argv += ["--log-trajectories-every", str(args.log_trajectories_every)]
    for key in DEFAULT:
        if key not in ("arms", "seeds", "warm"):
            argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return [*argv, "--warm", start.removeprefix("ckpt:")]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.write_docs:
        return {"table": write_docs(args.write_docs, args.docs_block)}
    if args.kernels:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _docs import write_block

        text = kernel_table(args.kernels.split(","))
        write_block("learning.md", "learning-kernels", text)
        print(text)
        return {"table": text}
    if args.plot:
        kept = json.loads(Path(args.plot).read_text())
        plot(kept["arms"], Path(args.plot).with_suffix(".png"), kept["settings"]["group_size"])
        return {"plot": str(Path(args.plot).with_suffix(".png"))}
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    seeds = [int(s) for s in str(args.seeds).split(",")]
    for seed in seeds:  # a bad slice is an error before anything trains
        for split in (
            (args.eval_split, "test") if args.eval_split == "test-id" and args.test_episodes else (args.eval_split,)
        ):
            eval_slice(args, split, seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not args.report_only:
        start = warm_start(args)
        print(f"start: {start}; {json.dumps({k: getattr(args, k) for k in DEFAULT})}", flush=True)
        # Seed by seed (every arm's seed 0 first): a run cut short still has every arm, paired, on some seeds.
        todo = [
            (n, s) for s in seeds for n in arms if not (args.resume and (out / f"{n}-seed{s}" / "result.json").exists())
        ]
        if args.jobs > 1 and len(todo) > 1:
            # One process per (arm, seed), at most --jobs at once; each writes its result.json.
            procs: list[subprocess.Popen] = []
            for name, seed in todo:
                while len([p for p in procs if p.poll() is None]) >= args.jobs:
                    time.sleep(2)
                log = (out / f"{name}-seed{seed}.log").open("w")
                argv_child = _child_argv(args, name, seed, start)
                procs.append(subprocess.Popen(argv_child, stdout=log, stderr=subprocess.STDOUT))
            failed = [" ".join(p.args[3:7]) for p in procs if p.wait() != 0]
            if failed:
                print(f"runs that failed (see their .log under {out}): {failed}", flush=True)
        else:
            for name, seed in todo:
                r = run_arm(name, start, args, seed)
                path = out / f"{name}-seed{seed}"
                path.mkdir(parents=True, exist_ok=True)
                (path / "result.json").write_text(json.dumps(r, indent=1))
                ok = r["evals"][args.eval_split]["outcomes"].values()
                fields = (r["fidelity"] or {}).get("field_exact")
                print(f"{name} seed {seed}: {args.eval_split} {sum(ok)}/{len(ok)}, calls {r['calls']}, "
                      f"env-role fields {_pct(fields)}, {r['train_s']:.0f} s", flush=True)  # fmt: skip
    return report(args, arms, seeds, t0)


def report(args, arms: list[str], seeds: list[int], t0: float) -> dict[str, Any]:
    """Aggregate the finished (arm, seed) runs under ``--out``; write results.json, table.md, learning.png."""
    out = Path(args.out)
    runs: dict[str, list[dict[str, Any]]] = {}
    for name in arms:
        for seed in seeds:
            path = out / f"{name}-seed{seed}" / "result.json"
            if path.exists():
                run = json.loads(path.read_text())
                # what its logged training episodes ended in (--log-trajectories-every), read from the transcripts
                run["transcripts"] = transcript_outcomes(path.parent) if name in IMAGINED else None
                runs.setdefault(name, []).append(run)
    start = runs.get("untrained", [])
    results = {n: summarize(n, rs, start, args.eval_split, args.group_size) for n, rs in runs.items()}
    summary = {
        "settings": {k: getattr(args, k) for k in DEFAULT},
        "device": args.device,
        "arms": results,
        "minutes": round((time.monotonic() - t0) / 60, 1),
    }
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    parts = (table, environment_note, cost_table, kind_table)
    text = "\n\n".join(part(results) for part in parts) if results else ""
    if results and transcript_table(results):
        text += "\n\n" + transcript_table(results)
    (out / "table.md").write_text(text + "\n")
    if results:
        plot(results, out / "learning.png", args.group_size)
    print(text)
    for name, result in results.items():
        refused = result.get("pairing", {}).get("refused")
        if refused:
            why = "; ".join(f"seed {seed}: {', '.join(keys)}" for seed, keys in refused.items())
            print(
                f"refused to pair {name} with the start on seeds {list(refused)} (they ran in other environments: "
                f"{why}); evaluate them again here (delete those seed folders, --resume) to pair like with like"
            )
    print(f"total {(time.monotonic() - t0) / 60:.1f} min")
    return summary


if __name__ == "__main__":
    main()
