"""Stable-Baselines3 PPO on the text tool-calling env, through the pure-Gymnasium wrappers.

SB3 has no text spaces, so ``CandidateActions`` turns the action into ``Discrete(k)`` over candidate
messages (calls filled with visible values, answers quoting what the tools returned) and
``FeatureObservation`` turns the history into a ``Box`` of hashed n-grams. PPO("MlpPolicy") trains on
``builtin/bank`` one-turn tasks whose solution takes at most one call (chosen on the train split: the
depth a flat MLP policy handles in a few minutes on 2 cores), over SB3 vector envs, and is scored on the
held-out **test** tasks of that subset before (uniform random, and the untrained PPO policy) and after.

    python examples/sb3_ppo.py                                  # real Python tool backends
    python examples/sb3_ppo.py --backend replay:runs/bank.jsonl # recorded first on the real backend if missing
    python examples/sb3_ppo.py --backend self --policy tiny --timesteps 256   # tool results imagined by an LM

With ``--backend self`` the policy's own LM imagines every tool result during training
(``SelfRehearsalEnv``); evaluation is then on the real backend. The candidate builder never sees the
tasks' reference calls: the coverage figure printed first checks, with the reference, how often the
oracle's first call is among the candidates it built without it.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

import envace_gym
from envace_gym import TaskSuite
from envace_gym.agents.eval.stats import wilson_interval
from envace_gym.backends import parse_backend_spec
from envace_gym.calls import parse_calls
from envace_gym.imagination import Imaginer
from envace_gym.rewards import call_match
from envace_gym.wrappers import CandidateActions, FeatureObservation


def subset(split: str, max_calls: int) -> list[Any]:
    """One-turn bank tasks of ``split`` whose reference takes at most ``max_calls`` calls."""
    suite = envace_gym.load_suite("builtin/bank").filter(split=split)
    return [t for t in suite if len(t.user_turns) == 1 and len(t.reference_calls) <= max_calls]


def lm_embedder(spec: str):
    """``embed(text)``: the mean of a frozen LM's last hidden states, L2-normalised, cached per text."""
    from functools import lru_cache

    from envace_gym.agents.lm.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(spec, progress=False)
    model.eval()

    @lru_cache(maxsize=65_536)
    def embed(text: str) -> np.ndarray:
        with torch.no_grad():
            ids = tokenizer(text or " ", return_tensors="pt")
            hidden = model(**ids, output_hidden_states=True).hidden_states[-1][0].float().mean(0).numpy()
        return hidden / max(float(np.linalg.norm(hidden)), 1e-6)

    return embed


EMBED = None  # set by --embed


def make_env(tasks: list[Any], backend: str, args: argparse.Namespace, imaginer: Imaginer | None = None) -> gym.Env:
    """ToolCallEnv over ``tasks`` -> (SelfRehearsalEnv) -> CandidateActions -> FeatureObservation."""
    env = envace_gym.make_env(  # backend self: wrapped so that imaginer answers the tool calls
        "EnvACE-ToolCall-v0",
        backend=backend,
        imaginer=imaginer,
        tasks=TaskSuite(tasks, "bank-subset"),
        split=None,
        max_turns=3,
    )
    return FeatureObservation(CandidateActions(env, k=args.k), dim=args.dim, embed=EMBED)


def first_call_covered(task: Any, candidates: list[str]) -> bool:
    """Whether a candidate matches the task's first reference call (``call_match`` semantics). Reference data
    is read here, by the evaluation, after the candidates were built."""
    expected = [task.expected_calls[0]]
    return any(call_match(parse_calls(text).calls, expected) == 1.0 for text in candidates)


def coverage(tasks: list[Any], k: int) -> tuple[int, int]:
    env = CandidateActions(gym.make("EnvACE-ToolCall-v0", tasks=TaskSuite(tasks, "cov"), split=None), k=k)
    with_calls = [t for t in tasks if t.reference_calls]
    hits = 0
    for task in with_calls:
        _, info = env.reset(options={"task_id": task.id})
        hits += first_call_covered(task, info["candidates"])
    return hits, len(with_calls)


def evaluate(env: gym.Env, tasks: list[Any], act) -> tuple[int, int]:
    """Each task once; ``act(obs, info) -> index``. Returns (successes, episodes)."""
    wins = 0
    for task in tasks:
        obs, info = env.reset(options={"task_id": task.id})
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(act(obs, info))
            done = terminated or truncated
        wins += bool(info.get("success"))
    return wins, len(tasks)


def record_replay(path: Path, tasks: list[Any], args: argparse.Namespace) -> int:
    """Fill a replay cache from the real backend: every real candidate of every task's first step (the
    calls a one-call policy can make). Later calls of an episode that are not cached replay as errors."""
    env = make_env(tasks, f"cache:{path}", args)
    steps = 0
    for task in tasks:
        _, info = env.reset(options={"task_id": task.id})
        for index in np.flatnonzero(info["action_mask"]):
            if parse_calls(info["candidates"][index]).calls:
                env.reset(options={"task_id": task.id})
                env.step(int(index))
                steps += 1
    return steps


class EpisodeTally(BaseCallback):
    """Counts training episodes, their successes, and those ended by an unusable imagined result."""

    def __init__(self) -> None:
        super().__init__()
        self.episodes = self.successes = self.aborted = 0

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"], strict=True):
            if done:
                self.episodes += 1
                self.successes += bool(info.get("success"))
                self.aborted += "aborted" in info
        return True


def line(name: str, wins: int, n: int) -> str:
    lo, hi = wilson_interval(wins, n)
    return f"{name:<28} {wins:>3}/{n:<3} = {wins / max(n, 1):.3f}  95% CI [{lo:.3f}, {hi:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="real", help="real | replay:PATH | cache:PATH | self")
    parser.add_argument("--policy", default="tiny", help="LM that imagines results for --backend self")
    parser.add_argument("--timesteps", type=int, default=32_768, help="PPO environment steps")
    parser.add_argument("--n-envs", type=int, default=4)
    parser.add_argument("--k", type=int, default=16, help="candidate actions per step")
    parser.add_argument("--dim", type=int, default=1024, help="hashed feature buckets")
    parser.add_argument("--max-calls", type=int, default=1, help="tasks whose reference takes at most this many")
    parser.add_argument("--eval-episodes", type=int, default=0, help="test tasks scored (0 = all of the subset)")
    parser.add_argument("--eval-split", default="test", help="score on test (default) or train (to choose a budget)")
    parser.add_argument("--embed", default="", help="append a frozen LM's embedding of the user turn (e.g. default)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    random.seed(args.seed)
    np.random.seed(args.seed)
    spec = parse_backend_spec(args.backend)
    if spec.kind not in ("real", "replay", "cache", "self"):
        parser.error(f"--backend {args.backend!r}: use real, replay:PATH, cache:PATH or self")
    train, test = subset("train", args.max_calls), subset(args.eval_split, args.max_calls)
    if args.eval_episodes:
        test = test[: args.eval_episodes]
    print(
        f"builtin/bank, one-turn tasks with <= {args.max_calls} call(s): {len(train)} train, "
        f"{len(test)} {args.eval_split} scored"
    )

    everything = envace_gym.load_suite("builtin/bank").filter(split=args.eval_split)
    for name, tasks in (("this subset", test), (f"all bank {args.eval_split} tasks", everything)):
        hits, n = coverage(list(tasks), args.k)
        print(f"oracle first call among the {args.k} candidates ({name}): {hits}/{n} = {hits / max(n, 1):.3f}")

    t0 = time.time()
    if args.embed:
        global EMBED
        EMBED = lm_embedder(args.embed)
    imaginer, train_backend, eval_backend = None, str(spec), str(spec)
    if spec.kind == "replay" and not Path(spec.target).exists():
        steps = record_replay(Path(spec.target), train + subset("test", args.max_calls), args)
        print(f"recorded {steps} calls on the real backend into {spec.target} ({time.time() - t0:.1f} s)")
    if spec.kind == "self":
        from envace_gym.agents.lm.engine import SamplingConfig
        from envace_gym.agents.lm.policy import LMPolicy

        imaginer = LMPolicy.from_spec(args.policy, sampling=SamplingConfig(max_new_tokens=48, seed=args.seed))
        eval_backend = "real"  # trained under imagination, scored on the real tools
    print(f"training on: {'self (' + args.policy + ')' if imaginer else train_backend}; evaluating on: {eval_backend}")

    eval_env = make_env(test, eval_backend, args)
    rng = np.random.default_rng(args.seed)
    before_random = evaluate(eval_env, test, lambda obs, info: int(rng.integers(args.k)))
    venv = DummyVecEnv([lambda: make_env(train, train_backend, args, imaginer) for _ in range(args.n_envs)])
    venv.seed(args.seed)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=64,
        batch_size=64,
        n_epochs=4,
        learning_rate=1e-3,
        ent_coef=0.05,  # keeps the rarer, two-slot-deep task kinds explored (chosen on train)
        gamma=1.0,
        policy_kwargs={"net_arch": [64]},
        seed=args.seed,
        device="cpu",
        verbose=0,
    )

    def greedy(obs: np.ndarray, info: dict[str, Any]) -> int:
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    before_ppo = evaluate(eval_env, test, greedy)
    t1 = time.time()
    tally = EpisodeTally()
    model.learn(total_timesteps=args.timesteps, callback=tally)
    train_s = time.time() - t1
    after = evaluate(eval_env, test, greedy)
    print(f"success on {len(test)} {args.eval_split} tasks ({eval_backend} backend):")
    print(line("random (uniform over k)", *before_random))
    print(line("PPO untrained", *before_ppo))
    print(line(f"PPO after {args.timesteps} steps", *after))
    print(
        f"training: {tally.episodes} episodes, {tally.successes} successes, {tally.aborted} ended by an unusable "
        f"imagined result; {train_s:.1f} s, total {time.time() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
