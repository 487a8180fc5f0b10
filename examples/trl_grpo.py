"""TRL's GRPOTrainer on envace-gym tasks, with our episode loop as its rollout function.

    python examples/trl_grpo.py --steps 2 --policy tiny                 # a CPU smoke run (random tiny model)
    python examples/trl_grpo.py --steps 20 --backend self-inline --train-env-role   # EnvACE inside TRL

The model and tokenizer are built in memory (``LMPolicy.from_spec``: the embedded SmolLM2-135M by default,
offline); nothing is downloaded. Each TRL prompt is a task id; each of its ``num_generations`` rows is one
episode played by ``collect()`` against ``--backend``; the reward is the env's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16


def build_trainer(policy, rollout, dataset, *, steps: int, tasks_per_step: int, group_size: int, lr: float, **kw):
    """A ``GRPOTrainer`` over ``policy``'s model whose step is ``tasks_per_step`` tasks x ``group_size``
    episodes, one generation and one update per step (GRPO without std scaling, KL off: as EnvACETrainer)."""
    from trl import GRPOConfig, GRPOTrainer

    from envace_gym.agents.integrations.trl import env_reward

    batch = tasks_per_step * group_size
    args = GRPOConfig(
        output_dir=kw.pop("output_dir", None) or tempfile.mkdtemp(prefix="trl-grpo-"),
        max_steps=steps,
        learning_rate=lr,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=group_size,
        generation_batch_size=batch,
        max_completion_length=kw.pop("max_completion_length", 1024),
        temperature=kw.pop("temperature", 1.0),
        scale_rewards="none",
        beta=0.0,
        epsilon=0.2,
        num_iterations=1,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=1.0,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=kw.pop("seed", 0),
        disable_tqdm=kw.pop("disable_tqdm", True),
        **kw,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GRPOTrainer(
            model=policy.model,
            reward_funcs=env_reward,
            args=args,
            train_dataset=dataset,
            processing_class=policy.tokenizer,
            rollout_func=rollout,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="default", help="LMPolicy spec: default | tiny | ckpt:DIR | ...")
    parser.add_argument("--suite", default="builtin/bank")
    parser.add_argument("--backend", default="real", help="real | self | self-inline | replay:PATH | mcp:...")
    parser.add_argument("--train-env-role", action="store_true", help="(self-inline) train the env role's tokens")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", default=None, help="TRL's output_dir (default: a temporary folder)")
    args = parser.parse_args()

    from envace_gym.agents.integrations.trl import make_rollout_func, task_dataset
    from envace_gym.agents.lm.policy import LMPolicy

    policy = LMPolicy.from_spec(args.policy)
    rollout = make_rollout_func(
        backend=args.backend,
        train_env_role=args.train_env_role,
        max_new_tokens=args.max_new_tokens,
        suite=args.suite,
        split="train",
        max_turns=args.max_turns,
    )
    trainer = build_trainer(
        policy,
        rollout,
        task_dataset(args.suite, "train"),
        steps=args.steps,
        tasks_per_step=args.tasks_per_step,
        group_size=args.group_size,
        lr=args.lr,
        output_dir=args.out,
    )
    trainer.train()
    for rec in trainer.state.log_history:
        if "reward" in rec:
            print(
                f"step {rec['step']}: reward {rec['reward']:.3f}  loss {rec.get('loss', float('nan')):.4f}  "
                f"model tokens/row {rec.get('completions/mean_length', 0):.0f}"
            )


if __name__ == "__main__":
    main()
