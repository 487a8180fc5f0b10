"""Soak: many episodes in one process, looking for leaks (memory, file descriptors, threads) and slowdowns.

    python benchmarks/soak.py [--episodes 1000] [--imagined-episodes 200] [--envs 8]

Phase 1 (real backend): ``--episodes`` episodes of the random policy over ``--envs`` envs of the builtin mix,
through ``collect()``. Phase 2 (imagined backend): ``--imagined-episodes`` episodes of the random policy with
the tiny model as the env role (``SelfRehearsalEnv``: every call imagined). Each phase runs in chunks; the
first chunk is the warm-up, so "start" is measured after it and "end" after the last chunk: episodes per
second, resident memory (current and peak), open file descriptors and threads. Goals: RSS growth under
10% from start to end, no growth in descriptors or threads. Each phase runs in its own process; the imagined
phase runs three times: with glibc's default allocator settings, with ``MALLOC_ARENA_MAX=2`` and with
``MALLOC_TRIM_THRESHOLD_=0`` (the env role's tensors are allocated from the env-stepping threads, whose
per-thread malloc arenas keep freed memory: RSS grows without any Python object or tensor leaking).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym import make_env
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import RandomPolicy


def _status() -> dict[str, float]:
    fields = {}
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "Threads"):
                fields[key] = int(value.split()[0])
    return {
        "rss_mb": fields["VmRSS"] / 1024,
        "peak_rss_mb": fields["VmHWM"] / 1024,
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "os_threads": fields["Threads"],
    }


def soak(name: str, make_env, episodes: int, n_envs: int, chunks: int = 5) -> dict[str, float]:
    envs = [make_env() for _ in range(n_envs)]
    per_chunk = max(n_envs, episodes // chunks)
    done, start, t_start, seed = 0, None, None, 0
    while done < episodes:
        n = min(per_chunk, episodes - done)
        actors = [RandomPolicy(seed=seed + i) for i in range(n_envs)]
        collect(envs, actors, n, seed=seed, progress=False, desc=name)
        done, seed = done + n, seed + 1000
        if start is None:  # after the warm-up chunk
            start, t_start, first = _status(), time.perf_counter(), done
    end, seconds = _status(), time.perf_counter() - t_start
    for env in envs:
        env.close()
    measured = done - first
    return {
        "phase": name,
        "episodes": done,
        "episodes_per_s": measured / seconds if seconds > 0 and measured else float("nan"),
        "rss_start_mb": start["rss_mb"],
        "rss_end_mb": end["rss_mb"],
        "rss_growth": end["rss_mb"] / start["rss_mb"] - 1,
        "peak_rss_mb": end["peak_rss_mb"],
        "fds": (start["fds"], end["fds"]),
        "threads": (start["threads"], end["threads"]),
        "os_threads": (start["os_threads"], end["os_threads"]),
    }


PHASES = {
    "real": ({}, "real"),
    "imagined": ({}, "imagined"),
    "imagined, MALLOC_ARENA_MAX=2": ({"MALLOC_ARENA_MAX": "2"}, "imagined"),
    "imagined, MALLOC_TRIM_THRESHOLD_=0": ({"MALLOC_TRIM_THRESHOLD_": "0"}, "imagined"),
}


def run_phase(kind: str, args) -> dict[str, float]:
    def real() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", suite="builtin", split="train", max_turns=6)

    if kind == "real":
        return soak("real", real, args.episodes, args.envs)
    imaginer = tiny_policy(sampling=SamplingConfig(temperature=1.0, max_new_tokens=24, seed=0))

    def imagined() -> gym.Env:
        return make_env(real(), backend="self", imaginer=imaginer, imagination={"on_invalid": "error_observation"})

    return soak("imagined", imagined, args.imagined_episodes, args.envs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000, help="real-backend episodes")
    parser.add_argument("--imagined-episodes", type=int, default=200, help="episodes with the tiny model as env role")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--phase", choices=["real", "imagined"], help=argparse.SUPPRESS)  # run by the parent
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(run_phase(args.phase, args)))
        return
    rows = []
    for label, (env_vars, kind) in PHASES.items():  # each phase in its own process: its own RSS and allocator
        argv = [sys.executable, __file__, "--phase", kind, "--episodes", str(args.episodes),
                "--imagined-episodes", str(args.imagined_episodes), "--envs", str(args.envs)]  # fmt: skip
        out = subprocess.run(argv, env={**os.environ, **env_vars}, capture_output=True, text=True, check=True)
        rows.append({**json.loads(out.stdout.strip().splitlines()[-1]), "phase": label})
    print(
        f"{'phase':<36} {'episodes':>8} {'ep/s':>8} {'RSS start->end MB':>20} {'growth':>7} {'fds':>9} {'threads':>9}"
    )
    for r in rows:
        print(
            f"{r['phase']:<36} {r['episodes']:>8} {r['episodes_per_s']:>8.1f} "
            f"{r['rss_start_mb']:>9.0f} -> {r['rss_end_mb']:<7.0f} {100 * r['rss_growth']:>6.1f}% "
            f"{r['fds'][0]:>4}->{r['fds'][1]:<4} {r['threads'][0]:>4}->{r['threads'][1]:<4}"
        )
    for r in rows:
        ok = r["rss_growth"] < 0.10 and r["fds"][1] <= r["fds"][0] and r["threads"][1] <= r["threads"][0]
        print(f"{r['phase']}: {'goals met' if ok else 'GOALS NOT MET'} (RSS growth < 10%, no fd or thread growth)")


if __name__ == "__main__":
    main()
