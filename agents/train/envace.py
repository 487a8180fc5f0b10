"""``EnvACETrainer``: role-wise GRPO that trains the actor and its environment role together.

One training step, top to bottom (`EnvACETrainer.step`):

1. draw ``tasks_per_step`` train tasks; each is played ``group_size`` times by `collect` (all envs in
   lockstep, the env role batched across envs), against the backend the config names: the policy's own
   imagination (``self``, ``self-inline``: EnvACE), the real tools (``real``: plain GRPO) or a frozen copy of
   the starting model (``simulator``); with ``rehearsal_fraction`` > 0, a share of the groups plays with a
   private-rehearsal memory in context (see `EnvACETrainer.rehearsal_groups`);
2. score each trajectory (the env's verifiable reward, or a checklist judge);
3. turn trajectories into samples (`objective`): one actor row per trajectory, one env-role row per
   env-role generation (same reward), grounding rows where the real result is known;
4. role-wise GRPO advantages; one PPO-clip update over micro-batches (token-mean over the step's tokens);
   the engine's KV caches are dropped, since the weights changed.

Each step's metrics count the tool calls it spent, from the process's call ledger
(`envace_gym.backends.ledger`): ``live_calls`` (run on a real backend during an episode),
``logged_calls_used`` (answered from a replay cache), ``verifier_calls`` (replayed only to compute a reward)
and ``diagnostic_calls`` (``sim_to_real``), each with its run total (``live_calls_total``, ...).

**Rehearsal-aware training** (``rehearsal_fraction``, ``rehearsal_budget``). Test-time private rehearsal
(`PrivateRehearsal`) puts a memory of imagined rehearsals in the policy's
context, which nothing else trains it to read. Here a seeded share of each step's task groups (whole GRPO
groups, so that every row of a group is compared with rows that had a memory too) is played by the policy
wrapped in ``PrivateRehearsal(policy, budget=rehearsal_budget, mode="parallel")`` (memory ``deterministic``,
256 tokens, actor at temperature 0.7: its test-time defaults). Before each episode of such a group the policy
rehearses the task on forks of the env (blind task, results imagined by the policy itself, whatever the run's
backend, ``env_role`` or simulator; no real backend, unscored), and the condensed memory enters the episode's
context as a system note after the user message. What is trained is that committed episode, on the run's
backend, with its own reward: the memory is part of its actor row's prompt (tagged ``prompt``, loss mask 0),
never of its completion. The rehearsals themselves are **not trained**: neither their actor tokens nor their
imagined env-role answers become rows (they are context only); their cost is in the step's metrics
(``rehearsed_episodes``, ``rehearsals``, ``rehearsal_tokens``) and in ``rollout_s``. Rehearsals make no live
call.

**Processes** (`distributed`). The trainer runs through ``accelerate.Accelerator``: model (as
`TokenLogprobs`, so that the loss's forward pass enters DDP/FSDP), optimizer and scheduler
through ``accelerator.prepare``; ``accelerator.backward``, ``accelerator.no_sync`` over micro-batches,
``accelerator.clip_grad_norm_``; metric sums and gathers with ``accelerator.reduce`` and
``accelerate.utils.gather_object``. One process behaves as a plain torch loop. Under ``accelerate launch``
(``accelerate launch --config_file examples/accelerate/ddp.yaml -m envace_gym.cli train ...``; an FSDP config
such as ``examples/accelerate/fsdp.yaml`` selects FSDP) the task groups of a step are split across ranks,
the step's gradient is the sum of the ranks' (each rank's loss is divided by the whole step's token count),
generation and checkpoints use the unwrapped model, and rank 0 writes metrics and checkpoints. See
``docs/training.md``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from safetensors.torch import load_file
from tqdm.auto import tqdm

from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy, bf16_by_default
from envace_gym.agents.lm.protocols import WeightSyncingEngine
from envace_gym.agents.provenance import run_environment
from envace_gym.agents.rehearsal import PrivateRehearsal
from envace_gym.agents.rollout import PolicyHooks, Trajectory, TurnContext, collect, save_trajectories
from envace_gym.backends import LEDGER, ToolLog, charged_as
from envace_gym.backends.spec import parse_backend_spec
from envace_gym.compose import make_env
from envace_gym.imagination.prompt import is_result_shaped
from envace_gym.jsonl import read_jsonl

from .checkpoint import ADAPTER_TENSORS, latest_checkpoint, load_checkpoint, save_checkpoint
from .config import EnvACEConfig, config_to_toml, default_lr
from .distributed import full_state_dict, idle_loss, make_accelerator, place_model, uses_fsdp
from .logprobs import TokenLogprobs
from .objective import Sample, build_samples, collate, compute_advantages, grounding_loss, micro_batches, sample_loss

__all__ = ["EnvACETrainer", "train_envace", "CALL_METRICS"]

#: Call-ledger kind -> the metrics key of that kind's calls in a step (``<key>_total``: in the run so far).
CALL_METRICS = {
    "live": "live_calls",
    "logged": "logged_calls_used",
    "verifier": "verifier_calls",
    "diagnostic": "diagnostic_calls",
}


class EnvACETrainer:
    """Role-wise GRPO over a `LMPolicy` (trained in place) and the envs ``env_factory`` makes.

    Args:
        policy: the model that acts and, under ``backend="self"``, imagines; its weights are updated in place.
        env_factory: ``() -> gym.Env`` with real backends whose pool holds the train split (the trainer wraps
            it for imagination as the config says); called once per env of a step's batch.
        config: the run's `EnvACEConfig`.
        out_dir: where ``config.toml``, ``metrics.jsonl``, ``trajectories/``, ``ckpt-N/`` and
            ``learning_curve.png`` go (None: nothing is written, nothing can resume).
        simulator: the external simulator for ``backend="simulator"`` (default: a frozen copy of ``policy``
            as it is now, i.e. the starting checkpoint).
        judge: for ``reward="checklist"``, a judge callable, an object with ``act``, or an LM spec
            (default: ``config.judge``).
        env_role: ``env -> imaginer``: who imagines under ``backend="self"`` (default: ``policy`` itself); e.g.
            ``RealResultImaginer`` for a scripted, perfect env role (its answers carry no tokens to train).
        resume: continue from the newest complete checkpoint in ``out_dir``.
    """

    def __init__(
        self,
        policy: LMPolicy,
        env_factory: Callable[[], gym.Env],
        config: EnvACEConfig,
        out_dir: str | Path | None = None,
        simulator: LMPolicy | None = None,
        judge: Any = None,
        env_role: Callable[[gym.Env], Any] | None = None,
        resume: bool = False,
        progress: bool = True,
    ) -> None:
        #: Every collective of the run goes through it (see `distributed`); one process: rank 0 of 1.
        self.accelerator = make_accelerator(policy.model)
        self.rank, self.world = self.accelerator.process_index, self.accelerator.num_processes
        self.is_main = self.accelerator.is_main_process  # rank 0: the one that writes
        self.fsdp = uses_fsdp(self.accelerator)
        place_model(policy, self.accelerator)
        self.out = Path(out_dir) if out_dir is not None else None
        #: Why the learning rate is what it is, when ``config.lr`` was None (left to the trainer); else None.
        self.lr_choice: str | None = None
        if config.lr is None:
            config, self.lr_choice = _resolve_lr(config, policy.model, self.out if resume else None)
        self.policy, self.cfg, self.progress = policy, config, progress
        cfg = config
        torch.manual_seed(cfg.seed)
        if self.fsdp and (cfg.lora or resume):
            raise ValueError("--lora and --resume are not supported under FSDP yet (use DDP: no fsdp_config)")
        if cfg.lora:
            from .sft import _apply_lora

            self.model = _apply_lora(policy, cfg)  # injects adapters in place: the engine generates with them
        else:
            self.model = policy.model
        if self.fsdp:
            # FSDP shards self.model's parameters in place (whole only inside its forward): generation and
            # checkpoints use a whole copy, refreshed after every update (_refresh_rollout_weights).
            policy.model = policy.engine.model = copy.deepcopy(self.model).eval()
        self.device = next(self.model.parameters()).device
        optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))
        # The loss's forward pass goes through self.wrapped (DDP or FSDP around self.model; self.model itself
        # when one process); generation and checkpoints use the unwrapped model.
        self.wrapped, self.optimizer, self.scheduler = self.accelerator.prepare(
            TokenLogprobs(self.model), optimizer, scheduler
        )
        auto = bf16_by_default(self.device)
        self.use_bf16 = auto if cfg.bf16 == "auto" else bool(cfg.bf16)
        self.ref_model = _frozen(policy.model) if cfg.kl_coef > 0 or cfg.env_role_kl_coef > 0 else None
        self.simulator = None
        if cfg.backend == "simulator":
            self.simulator = simulator or LMPolicy(
                _frozen(policy.model), policy.tokenizer, policy.sampling, name=f"simulator({policy.name})"
            )
        self.judge = None
        if cfg.reward == "checklist":
            from .checklist import ChecklistJudge

            if judge is None and not cfg.judge:
                raise ValueError("--reward checklist needs --judge SPEC (an LM spec) or, in Python, a judge")
            self.judge = ChecklistJudge(judge or cfg.judge)
        self.env_factory = env_factory
        self.env_role = env_role
        probe = env_factory()
        self.pool = list(probe.unwrapped.pool)
        self.tasks = {t.id: t for t in self.pool}
        self.tool_log = self._load_tool_log(probe.unwrapped.suite) if cfg.tool_log else None
        probe.close()
        if not self.pool:
            raise ValueError("env_factory's env has no tasks to train on")
        groups = range(self.rank, cfg.tasks_per_step, self.world)
        self.envs = [self._wrap(env_factory()) for _ in groups for _ in range(cfg.group_size)]
        if not self.envs:
            raise ValueError(f"--tasks-per-step {cfg.tasks_per_step} gives rank {self.rank} no task group")
        self.step_done = 0
        self.call_totals = dict.fromkeys(CALL_METRICS.values(), 0)  # tool calls of the run so far, by kind
        self._real_env: gym.Env | None = None  # sim_to_real's env, made on first use
        if self.out is not None and self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
        if resume:
            self._resume()
        elif self.out is not None and self.is_main:
            (self.out / "metrics.jsonl").write_text("")
        if self.out is not None and self.is_main:
            (self.out / "config.toml").write_text(config_to_toml(cfg))
            # where the run ran: the rollouts' decoding precision is the policy's, the update's its own
            environment = {**run_environment(policy), "update_precision": "bf16" if self.use_bf16 else "float32"}
            (self.out / "environment.json").write_text(json.dumps(environment, indent=2))

    # ------------------------------------------------------------------ set-up
    def _wrap(self, env: gym.Env) -> gym.Env:
        """``env`` as the run's backend answers it; the env role: the policy (``env_role(env)`` where given)
        under ``self``/``self-inline``, the frozen simulator under ``simulator`` (see ``env_role_for``)."""
        cfg = self.cfg
        spec = parse_backend_spec(cfg.backend)
        if not spec.imagined:
            return env
        env.unwrapped.imagined_reward = cfg.imagined_reward
        settings: dict[str, Any] = {"grounding": cfg.grounding}
        if spec.self_imagined:  # only the policy's own env role, the trained one, takes these
            settings.update(on_invalid=cfg.on_invalid, real_fraction=cfg.real_fraction, log=self.tool_log)
            settings.update(log_targets=cfg.log_targets)
        policy = self.env_role(env) if self.env_role is not None and spec.self_imagined else self.policy
        return make_env(env, backend=spec, policy=policy, simulator=self.simulator, imagination=settings)

    def _load_tool_log(self, suite: Any) -> ToolLog:
        """The env role's grounding log (``--tool-log``): written from the train pool's reference trajectories
        (``reference``), or read from a file, which must hold no task of another split (val, test-id, test)."""
        if self.cfg.tool_log == "reference":
            # Rank 0 keeps a copy in the run folder; every rank builds the same log in memory.
            keep = self.out is not None and self.is_main
            # Train-split tasks only, whatever split the env draws from: a held-out task's real results must not
            # reach the env role's prompts (``log`` grounding) or its targets.
            train = [t for t in self.pool if t.split == "train"]
            return ToolLog.from_reference(train, self.out / "tool_log.jsonl" if keep else None)
        log = ToolLog.load(self.cfg.tool_log)
        held_out = {t.id: t.split for t in suite if t.split != "train"}
        leaked = sorted(log.task_ids & held_out.keys())
        if leaked:
            splits = ", ".join(sorted({held_out[i] for i in leaked}))
            raise ValueError(
                f"{self.cfg.tool_log}: the tool log holds {len(leaked)} task(s) of the {splits} split "
                f"(e.g. {leaked[0]!r}); a log used for training must hold only train-split tasks"
            )
        return log

    def _resume(self) -> None:
        if self.out is None:
            raise ValueError("resume needs out_dir (--out DIR)")
        ckpt = latest_checkpoint(self.out)
        if ckpt is None:
            raise ValueError(f"{self.out}: no complete checkpoint to resume from")
        # A LoRA run resumes its adapters over the policy it was given, which must be the run's start (the
        # checkpoint's model holds the merged weights, for loading without peft).
        state = load_checkpoint(ckpt, self.model, self.optimizer, self.scheduler, load_weights=not self.cfg.lora)
        if self.cfg.lora:
            from peft import set_peft_model_state_dict

            if not (ckpt / ADAPTER_TENSORS).is_file():
                raise ValueError(f"{ckpt}: a LoRA run's checkpoint without {ADAPTER_TENSORS}: cannot resume it")
            set_peft_model_state_dict(self.model, load_file(str(ckpt / ADAPTER_TENSORS)))
        self.step_done = int(state["step"])
        totals = None
        if self.is_main:
            old = self.out / "config.toml"
            if old.exists():
                changed = _changed_keys(old.read_text(), config_to_toml(self.cfg))
                if changed:
                    print(f"resuming {ckpt} with changed settings: {', '.join(changed)}")
            metrics = self.out / "metrics.jsonl"
            if metrics.exists():  # steps after the checkpoint will be run again
                # read_jsonl drops a torn last line (the run was killed while writing it).
                kept = [r for _, r in read_jsonl(metrics) if isinstance(r, dict) and r.get("step", 0) <= self.step_done]
                metrics.write_text("".join(json.dumps(r) + "\n" for r in kept))
                if kept:  # the call totals go on from the last kept step
                    totals = {k: int(kept[-1].get(f"{k}_total", 0)) for k in self.call_totals}
            if self.step_done and metrics.exists() and metrics.stat().st_size:
                self.plot()
        # rank 0 read them: every rank agrees
        self.call_totals = self._gather(totals)[0] or self.call_totals

    # ------------------------------------------------------------------ one step
    def draw_tasks(self, step: int, batch: int = 0) -> list[str]:
        """The step's task ids, one per group (every rank draws the same ones, each plays its share); ``batch``
        > 0: the step's extra draws under ``filter_groups``."""
        rng = random.Random(self.cfg.seed * 1_000_003 + step + batch * 7_777_777)
        k = self.cfg.tasks_per_step
        if k <= len(self.pool):
            return [t.id for t in rng.sample(self.pool, k)]
        return [rng.choice(self.pool).id for _ in range(k)]

    def rehearsal_groups(self, step: int, batch: int = 0) -> list[int]:
        """Which of the step's groups (indices into `draw_tasks`; the same on every rank) play with a
        rehearsal memory: ``rehearsal_fraction`` of ``tasks_per_step``, rounded up or down at random so that the
        expected share is exact (0.5 of 4 groups: always 2), and which ones, drawn from the run's seed, the
        step and ``batch``."""
        n, fraction = self.cfg.tasks_per_step, self.cfg.rehearsal_fraction
        if fraction <= 0:
            return []
        rng = random.Random(f"rehearsal/{self.cfg.seed}/{step}/{batch}")
        share = round(fraction * n, 9)  # 0.3 * 10 is 3.0000000000000004
        k = int(share) + (rng.random() < share - int(share))
        return sorted(rng.sample(range(n), k))

    def _actor(self, step: int, batch: int, sampling: SamplingConfig, seed: int) -> Any:
        """What plays the step's episodes: the policy, or (where some of this rank's groups rehearse) the
        policy with `PrivateRehearsal`'s hook on those groups' envs."""
        cfg = self.cfg
        mine = range(self.rank, cfg.tasks_per_step, self.world)
        picked = set(self.rehearsal_groups(step, batch))
        # collect() plays episode i on env i (as many episodes as envs): group k of mine is envs[k*G:(k+1)*G].
        envs = [
            env
            for k, g in enumerate(mine)
            if g in picked
            for env in self.envs[k * cfg.group_size : (k + 1) * cfg.group_size]
        ]
        if not envs:
            return self.policy
        rehearsal = PrivateRehearsal(
            self.policy,
            budget=cfg.rehearsal_budget,
            mode="parallel",
            # The committed episodes' imagination mode (real tools: the env-role prompt).
            env_role_mode=parse_backend_spec(cfg.backend).imagination_mode or "prompted",
            seed=seed + 31,
            sampling=sampling,
        )
        return _RehearsingSome(self.policy, rehearsal, envs)

    def rollout(self, step: int, batch: int = 0) -> tuple[list[Trajectory], list[str]]:
        """Play this rank's groups of the step (``batch`` > 0: an extra draw); returns the trajectories and
        each one's group key."""
        cfg = self.cfg
        drawn = self.draw_tasks(step, batch)
        mine = list(range(self.rank, cfg.tasks_per_step, self.world))
        task_ids = [drawn[g] for g in mine for _ in range(cfg.group_size)]
        tag = f"s{step}" if batch == 0 else f"s{step}b{batch}"
        groups = [f"{tag}g{g}" for g in mine for _ in range(cfg.group_size)]
        seed = cfg.seed * 1_000_003 + step * 7919 + self.rank * 101 + batch * 104_729
        sampling = SamplingConfig(cfg.temperature, cfg.top_p, cfg.max_new_tokens, seed=seed)
        # The rollout keeps its env role's stream (collect seeds it from sampling.seed); the policy's own stream
        # serves what runs outside it (a nested rehearsal without its own env-role sampling): restarted per
        # step too, so a resumed run draws what an uninterrupted one did.
        self.policy.reseed(seed)
        if self.simulator is not None:
            self.simulator.reseed(seed + 17)
        self.model.eval()
        # Both roles sample as configured: the env role's recorded logprobs must be at the temperature the
        # update divides by.
        trajs = collect(
            self.envs,
            self._actor(step, batch, sampling, seed),
            len(task_ids),
            sampling=sampling,
            task_ids=task_ids,
            seed=seed,
            progress=False,
            env_role_sampling=sampling,
        )
        return trajs, groups

    def score(self, trajs: Sequence[Trajectory]) -> list[float]:
        """Each trajectory's reward: the env's, or the checklist judge's share of items met."""
        if self.judge is None:
            return [t.reward for t in trajs]
        return [self.judge(self.tasks[t.task_id], t.messages) for t in trajs]

    def samples(self, trajs: Sequence[Trajectory], groups: Sequence[str], rewards: Sequence[float]) -> list[Sample]:
        chat = self.policy.chat
        stop = self.policy.engine.stop_token_ids

        def encode_target(text: str) -> list[int]:
            ids = chat.encode(text)
            return ids if ids and ids[-1] in stop else ids + stop[:1]

        samples = build_samples(
            trajs,
            groups,
            rewards,
            train_env_role=self.cfg.trains_env_role,
            invalid_penalty=self.cfg.invalid_penalty,
            encode_target=encode_target if self.cfg.real_fraction > 0 or self.cfg.tool_log else None,
            env_role_reward=self.cfg.env_role_reward,
        )
        compute_advantages(samples, self.cfg.scale_rewards)
        return samples

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One PPO-clip update (``ppo_epochs`` passes) over the step's samples; returns loss statistics."""
        cfg = self.cfg
        rl = [s for s in samples if s.role != "grounding"]
        ground = [s for s in samples if s.role == "grounding"]
        # Token-mean over the whole step (all ranks): micro-batching and sharding leave the gradient unchanged.
        n_rl = self._sum(sum(s.tokens for s in rl))
        n_ground = self._sum(sum(s.tokens for s in ground))
        weight = {"actor": 1.0, "env_role": cfg.env_role_coef}
        kl_coef = {"actor": cfg.kl_coef, "env_role": cfg.env_role_kl_coef}
        # Rows with advantage 0 add nothing to the policy gradient; without KL they need no forward pass.
        active = [s for s in rl if (s.advantage != 0.0 and weight[s.role] > 0) or kl_coef[s.role] > 0]
        self.wrapped.train()
        stats = {"pg_loss": 0.0, "kl": 0.0, "clip_frac": 0.0, "grounding_loss": 0.0, "grad_norm": 0.0, "loss": 0.0}
        pad = self.policy.engine.pad_id
        # Under FSDP every rank must run the same layers in the same order: no prompt encoded apart.
        shared = cfg.detach_prompt and not self.fsdp
        # DDP and FSDP AVERAGE the ranks' gradients; each rank's loss is already divided by the whole step's
        # token count, so the step's gradient is their SUM: every backward is scaled by the number of ranks.
        scale = float(self.world)
        for _ in range(cfg.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            clipped = 0.0
            passes: list[tuple[str, list[Sample]] | None] = [
                ("rl", rows) for rows in micro_batches(active, cfg.micro_batch_tokens, shared)
            ]
            if cfg.grounding_coef > 0:
                passes += [("grounding", rows) for rows in micro_batches(ground, cfg.micro_batch_tokens, shared)]
            # The ranks' gradients are reduced in the backward of the last pass, which every rank must make:
            # ranks with fewer micro-batches (their rollouts differ) make up the count with passes that add
            # nothing (under FSDP every forward is a collective too).
            n_passes = max(self._gather(len(passes))) if self.world > 1 else len(passes)
            passes += [None] * (n_passes - len(passes))
            for i, item in enumerate(passes):
                last = i == n_passes - 1
                with contextlib.nullcontext() if last else self.accelerator.no_sync(self.wrapped):
                    if item is None:
                        self.accelerator.backward(idle_loss(self.wrapped, pad, self.device))
                        continue
                    kind, rows = item
                    batch = collate(rows, pad, shared)
                    if kind == "grounding":
                        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
                            ce, _ = grounding_loss(self.wrapped, batch)
                        self.accelerator.backward(cfg.grounding_coef * ce / max(n_ground, 1.0) * scale)
                        stats["grounding_loss"] += ce.item() / max(n_ground, 1.0)
                        continue
                    role = rows[0].role  # a micro-batch holds one group, so one role
                    with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.use_bf16):
                        parts = sample_loss(
                            self.wrapped,
                            batch,
                            clip_low=cfg.clip_low,
                            clip_high=cfg.clip_high,
                            dual_clip=cfg.dual_clip,
                            temperature=cfg.temperature,
                            ref_model=self.ref_model if kl_coef[role] > 0 else None,
                        )
                    loss = (weight[role] * parts.pg + kl_coef[role] * parts.kl) / max(n_rl, 1.0)
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"EnvACE loss became {loss.item()}; lower --lr")
                    self.accelerator.backward(loss * scale)
                    stats["loss"] += loss.item()  # what is minimised: role weights and per-role KL included
                    stats["pg_loss"] += parts.pg.item() / max(n_rl, 1.0)
                    stats["kl"] += parts.kl.item() / max(n_rl, 1.0)
                    clipped += parts.clipped
            stats["grad_norm"] = float(self.accelerator.clip_grad_norm_(self.wrapped.parameters(), cfg.grad_clip))
            self.optimizer.step()
            stats["clip_frac"] = self._sum(clipped) / max(n_rl, 1.0)
        self.scheduler.step()
        for key in ("pg_loss", "kl", "grounding_loss", "loss"):
            stats[key] = self._sum(stats[key]) / cfg.ppo_epochs
        stats["loss"] += cfg.grounding_coef * stats["grounding_loss"]  # pg_loss and kl: unweighted, all roles
        if self.fsdp:
            self._refresh_rollout_weights()
        self.policy.engine.clear()  # its caches hold keys and values of the old weights
        if isinstance(self.policy.engine, WeightSyncingEngine):  # e.g. a vLLM engine: push the new weights
            self.policy.engine.sync_weights(self.policy.model)
        self.wrapped.eval()
        return stats

    def _refresh_rollout_weights(self) -> None:
        """FSDP: copy the trained (sharded) weights, in full, into the whole copy generation uses."""
        prefix = "model."  # TokenLogprobs holds the model as .model
        weights = {k.removeprefix(prefix): v for k, v in full_state_dict(self.accelerator, self.wrapped).items()}
        missing, unexpected = self.policy.model.load_state_dict(weights, strict=False)
        tied = {"lm_head.weight"} if getattr(self.policy.model.config, "tie_word_embeddings", False) else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"FSDP weights do not fit the rollout model: missing {missing}, unexpected {unexpected}")

    def _sum(self, value: float) -> float:
        """``value`` summed over the ranks."""
        total = self.accelerator.reduce(torch.tensor([value], dtype=torch.float64, device=self.device), "sum")
        return float(total.item())

    def _gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (picklable objects; a collective: every rank calls it)."""
        from accelerate.utils import gather_object

        return gather_object([obj])

    def step(self, step: int) -> dict[str, Any]:
        """Rollout, score, samples, update: one training step; returns its metrics record."""
        before = LEDGER.snapshot()
        engine = getattr(self.policy.engine, "stats", {})  # an engine without timers (vLLM) reports 0
        engine_before = {k: engine.get(k, 0.0) for k in ("prefill_s", "decode_s")}
        t0 = time.monotonic()
        trajs, groups = self.rollout(step)
        rewards = self.score(trajs)
        # Dynamic sampling: more draws while too few of this rank's groups have rewards that differ.
        wanted = len(range(self.rank, self.cfg.tasks_per_step, self.world))
        batches = 1
        while batches <= self.cfg.filter_groups and len(_spread_groups(groups, rewards)) < wanted:
            more, more_groups = self.rollout(step, batches)
            trajs, groups, rewards = trajs + more, groups + more_groups, rewards + self.score(more)
            batches += 1
        t1 = time.monotonic()
        real = self.sim_to_real(trajs) if self.cfg.sim_to_real else None
        # This step's tool calls (this rank's; _metrics sums the ranks). The update runs no tool.
        calls = {kind: n - before[kind] for kind, n in LEDGER.snapshot().items()}
        t2 = time.monotonic()
        spread = _spread_groups(groups, rewards)
        kept = spread if self.cfg.filter_groups else set(groups)
        rows = [i for i, g in enumerate(groups) if g in kept]
        samples = self.samples([trajs[i] for i in rows], [groups[i] for i in rows], [rewards[i] for i in rows])
        stats = self.update(samples)
        t3 = time.monotonic()
        record = self._metrics(step, trajs, rewards, samples, stats, t1 - t0, t3 - t2, calls, real)
        # Summed over ranks (each rank draws again on its own), so every rank writes the same record.
        record["rollout_batches"] = int(self._sum(batches))
        record["groups_with_spread"] = int(self._sum(len(spread)))
        # where the rollout's time went (this rank's engine): encoding prompts vs decoding token by token
        for key, then in engine_before.items():
            record[f"rollout_{key}"] = round(engine.get(key, 0.0) - then, 2)
        if real is not None:
            record["sim_to_real_s"] = round(t2 - t1, 2)
        for name in CALL_METRICS.values():
            self.call_totals[name] += record[name]
            record[f"{name}_total"] = self.call_totals[name]
        self._write(step, record, trajs)
        return record

    def sim_to_real(self, trajs: Sequence[Trajectory]) -> list[tuple[float, bool]]:
        """Diagnostic only (``cfg.sim_to_real``): how the imagined episodes would have fared for real.

        Each trajectory's assistant messages are replayed, in order, as the actions of an episode of its task on
        a real env (one env from ``env_factory``, kept for the run; its backend is reset per episode) until that
        episode ends. Returns each one's (real reward, real success); an episode whose actions run out first
        (its imagined run was cut short by an unusable imagined result) earns 0. Every call made here, the
        reward's own replays included, is booked as ``diagnostic``; nothing of it reaches the samples.
        """
        if self._real_env is None:
            self._real_env = self.env_factory().unwrapped
        env = self._real_env
        out = []
        with charged_as("diagnostic"):
            for traj in trajs:
                _, info = env.reset(seed=0, options={"task_id": traj.task_id})
                reward, success = 0.0, False
                # Skip the opening messages the real reset already holds (a task's history may have assistant turns).
                actions = [m["content"] for m in traj.messages[len(info["messages"]) :] if m["role"] == "assistant"]
                for action in actions:
                    _, reward, terminated, truncated, info = env.step(action)
                    if terminated or truncated:
                        success = bool(info.get("success", False))
                        break
                out.append((float(reward), success))
        return out

    # ------------------------------------------------------------------ the run
    def train(self) -> list[dict[str, Any]]:
        """Run the remaining steps; checkpoint every ``save_every`` and after the last; plot at the end."""
        cfg = self.cfg
        records = []
        bar = tqdm(
            total=cfg.steps,
            initial=self.step_done,
            desc="envace",
            unit="step",
            disable=not (self.progress and self.is_main),
        )
        try:
            for step in range(self.step_done, cfg.steps):
                record = self.step(step + 1)
                records.append(record)
                self.step_done = step + 1
                if self.step_done % cfg.save_every == 0 or self.step_done == cfg.steps:
                    self.save()
                bar.update(1)
                bar.set_postfix(reward=f"{record['reward_actor']:.2f}", tok_s=f"{record['tokens_per_s']:.0f}")
        finally:
            bar.close()
        if self.out is not None and self.is_main:
            self.plot()
        return records

    def save(self) -> Path | None:
        """Write ``ckpt-<step>/`` (rank 0); it loads with ``--policy ckpt:DIR`` and resumes with ``--resume``."""
        path = None
        if self.out is not None and self.is_main:
            # The unwrapped weights (self.model; under FSDP, generation's whole copy of them). Under LoRA a
            # merged copy is saved (it loads without peft); training goes on with the adapters.
            model = copy.deepcopy(self.model).merge_and_unload() if self.cfg.lora else self.model
            adapter = None
            if self.cfg.lora:  # the adapters too: what a resume loads over the run's start
                from peft import get_peft_model_state_dict

                adapter = get_peft_model_state_dict(self.model)
            model = self.policy.model if self.fsdp else model
            path = save_checkpoint(
                self.out,
                self.step_done,
                model,
                self.policy.tokenizer,
                None if self.fsdp else self.optimizer,  # sharded under FSDP: no resume there yet
                None if self.fsdp else self.scheduler,
                config_to_toml(self.cfg),
                state={"policy": self.policy.name},
                keep_last=self.cfg.keep_last,
                adapter=adapter,
            )
        self.accelerator.wait_for_everyone()
        return path

    def plot(self) -> Path | None:
        if self.out is None:
            return None
        from .plots import plot_learning_curve

        return plot_learning_curve(self.out / "metrics.jsonl", self.out / "learning_curve.png")

    # ------------------------------------------------------------------ records
    def _metrics(
        self, step, trajs, rewards, samples, stats, rollout_s, update_s, calls=None, real=None
    ) -> dict[str, Any]:
        """The step's record; ``calls``: this rank's tool calls by ledger kind, ``real``: `sim_to_real`'s."""
        calls = calls if calls is not None else dict.fromkeys(CALL_METRICS, 0)
        env_samples = [(s, r) for t, r in zip(trajs, rewards, strict=True) for s in t.env_role_samples]
        diag = [(t.success, r, ok) for t, (r, ok) in zip(trajs, real, strict=True)] if real is not None else []
        local = {
            "rewards": list(rewards),
            "success": [float(t.success) for t in trajs],
            "calls_ok": sum(t.calls_ok for t in trajs),
            "calls_failed": sum(t.calls_failed for t in trajs),
            "actor_tokens": sum(t.actor_tokens for t in trajs),
            "env_role_tokens": sum(len(s.completion_ids) for s, _ in env_samples),
            "env_role_rewards": [r for _, r in env_samples],
            "env_role_valid": [float(s.valid) for s, _ in env_samples],
            "env_role_exact": [float(s.exact) for s, _ in env_samples if s.exact is not None],
            "env_role_fidelity": [s.fidelity for s, _ in env_samples if s.fidelity is not None],
            "actor_turns": sum(1 for t in trajs for m in t.messages if m.get("role") == "assistant"),
            "result_shaped": sum(1 for t in trajs for m in t.messages if is_result_shaped(m)),
            "grounded": sum(1 for s in samples if s.role == "grounding"),
            "rehearsed": sum(1 for t in trajs if any("rehearsals" in n for n in t.notes)),
            "rehearsals": sum(n.get("rehearsals", 0) for t in trajs for n in t.notes),
            "rehearsal_tokens": sum(n.get("rehearsal_tokens", 0) for t in trajs for n in t.notes),
            "trained_rows": sum(1 for s in samples if s.role != "grounding" and s.advantage != 0.0),
            # imagined episodes scored by the bound checklist, and those whose reward it changed from the reward
            # against the real values
            "bound_episodes": sum(1 for t in trajs if t.episode.reward_reference is not None),
            "binding_changed": sum(1 for t in trajs if t.episode.reward_reference not in (None, t.episode.reward)),
            **{CALL_METRICS[kind]: n for kind, n in calls.items()},  # summed over ranks below
            # sim_to_real: each episode's (imagined success, real reward, real success)
            "real_rewards": [r for _, r, _ in diag],
            "real_success": [float(ok) for _, _, ok in diag],
            "agree": [float(ok == imagined) for imagined, _, ok in diag],
        }
        parts = self._gather(local)
        merged: dict[str, Any] = {k: [] if isinstance(v, list) else 0 for k, v in local.items()}
        for p in parts:
            for k, v in p.items():
                merged[k] = merged[k] + v
        mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
        calls = merged["calls_ok"] + merged["calls_failed"]
        generated = merged["actor_tokens"] + merged["env_role_tokens"] + merged["rehearsal_tokens"]
        return {
            "step": step,
            "reward_actor": mean(merged["rewards"]),
            "success_actor": mean(merged["success"]),
            "reward_env_role": mean(merged["env_role_rewards"]),
            "valid_env_role": mean(merged["env_role_valid"]),
            # against the real result, where one is known (--tool-log, --real-fraction)
            "exact_env_role": mean(merged["env_role_exact"]),
            "fidelity_env_role": mean(merged["env_role_fidelity"]),
            "n_env_role_known": len(merged["env_role_fidelity"]),
            "result_shaped_actor": merged["result_shaped"] / merged["actor_turns"] if merged["actor_turns"] else None,
            "n_actor": len(merged["rewards"]),
            "n_env_role": len(merged["env_role_valid"]),
            "n_grounded": merged["grounded"],
            "trained_rows": merged["trained_rows"],
            "bound_episodes": merged["bound_episodes"],
            "binding_changed": merged["binding_changed"],
            "valid_call_rate": merged["calls_ok"] / calls if calls else None,
            "actor_tokens": merged["actor_tokens"],
            "env_role_tokens": merged["env_role_tokens"],
            # rehearsal-aware training: episodes played with a memory, rehearsals behind them, tokens they cost
            "rehearsed_episodes": merged["rehearsed"],
            "rehearsals": merged["rehearsals"],
            "rehearsal_tokens": merged["rehearsal_tokens"],
            **{k: round(v, 6) for k, v in stats.items()},
            "lr": self.scheduler.get_last_lr()[0],
            "rollout_s": round(rollout_s, 2),
            "update_s": round(update_s, 2),
            "tokens_per_s": round(generated / rollout_s, 1) if rollout_s > 0 else 0.0,
            **{name: merged[name] for name in CALL_METRICS.values()},
            **(
                {
                    "real_reward_imagined": mean(merged["real_rewards"]),
                    "real_success_imagined": mean(merged["real_success"]),
                    "sim_real_agreement": mean(merged["agree"]),
                }
                if real is not None
                else {}
            ),
        }

    def _write(self, step: int, record: dict[str, Any], trajs: Sequence[Trajectory]) -> None:
        every = self.cfg.log_trajectories_every
        gathered = self._gather(list(trajs)) if every and step % every == 0 and self.out is not None else None
        if self.out is None or not self.is_main:
            return
        with (self.out / "metrics.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        if gathered is not None:
            save_trajectories([t for part in gathered for t in part], self.out / "trajectories" / f"step-{step}.jsonl")


class _RehearsingSome(PolicyHooks):
    """``policy`` with ``rehearsal``'s ``prepare_turns`` hook on ``envs`` only (by identity), so one
    `collect` call plays plain and rehearsing groups in one engine batch. The rehearsals' trajectories
    stay inside the hook: only the memory note reaches the committed episode."""

    def __init__(self, policy: LMPolicy, rehearsal: PrivateRehearsal, envs: Sequence[gym.Env]) -> None:
        self.policy, self._rehearsal, self._ids = policy, rehearsal, {id(env) for env in envs}
        self.name = policy.name  # the trained policy's trajectories, with or without a memory

    def prepare_turns(
        self, envs: Sequence[gym.Env], infos: Sequence[dict[str, Any]], ctx: TurnContext | None = None
    ) -> list[Any]:
        picked = [i for i, env in enumerate(envs) if id(env) in self._ids]
        notes: list[Any] = [None] * len(envs)
        if picked:
            got = self._rehearsal.prepare_turns([envs[i] for i in picked], [infos[i] for i in picked], ctx)
            for i, note in zip(picked, got, strict=True):
                notes[i] = note
        return notes


def _spread_groups(groups: Sequence[str], rewards: Sequence[float]) -> set[str]:
    """The groups whose rewards are not all equal: the only ones with a policy gradient (an all-equal group's
    advantages are all 0)."""
    seen: dict[str, set[float]] = {}
    for g, r in zip(groups, rewards, strict=True):
        seen.setdefault(g, set()).add(r)
    return {g for g, rs in seen.items() if len(rs) > 1}


def _frozen(model: Any) -> Any:
    clone = copy.deepcopy(model).eval()
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone


def _resolve_lr(cfg: EnvACEConfig, model: Any, resumed_out: Path | None) -> tuple[EnvACEConfig, str]:
    """``cfg`` with its learning rate filled in, and why: a resumed run's own (its ``config.toml`` records the
    rate it started with), else `default_lr` of the model's parameter count."""
    import tomllib

    old = resumed_out / "config.toml" if resumed_out is not None else None
    if old is not None and old.is_file():
        lr = tomllib.loads(old.read_text()).get("lr")
        if isinstance(lr, int | float) and lr > 0:
            return dataclasses.replace(cfg, lr=float(lr)), f"the resumed run's, from {old}"
    n = sum(p.numel() for p in model.parameters())
    size = f"{n / 1e9:.1f}B" if n >= 1e9 else f"{round(n / 1e6)}M" if n >= 1e6 else f"{n:,}"
    return dataclasses.replace(cfg, lr=default_lr(n)), f"chosen for a {size}-parameter model"


def _changed_keys(old_toml: str, new_toml: str) -> list[str]:
    import tomllib

    old, new = tomllib.loads(old_toml), tomllib.loads(new_toml)
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def train_envace(
    policy: LMPolicy,
    env_factory: Callable[[], gym.Env],
    config: EnvACEConfig,
    out_dir: str | Path | None = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """``EnvACETrainer(policy, env_factory, config, out_dir, **kwargs).train()``."""
    return EnvACETrainer(policy, env_factory, config, out_dir, **kwargs).train()
