"""Env steps per second on the builtin mix: the old backend path (deep copies) vs the current one.

One process, one core: ``gym.make("EnvACE-ToolCall-v0", split="train").unwrapped`` (the bare env, without
gymnasium's checker wrappers; ``--wrapped`` keeps them) is stepped by a scripted policy, and each step is
timed end to end: the policy's ``act``, ``env.step`` and the ``reset`` that follows a finished episode.
Policies: ``random`` (schema-valid and invalid calls, broken JSON, unknown tools, answers) and ``oracle``
(each task's reference trajectory). Paths:

* ``old``: ``rollback="deepcopy"`` (the whole backend state deep-copied before every call and at every
  reset, a new watchdog thread per call, a JSON round trip per result) and every argument check through
  jsonschema (``envace_gym.tools.FAST_VALIDATION = False``);
* ``new``: copy-on-write rollback, the compiled argument check, and the builtin toolkits' tools run in
  the caller's thread (they declare ``run_inline``);
* ``new-watchdog`` (with ``--paths``): ``new`` but every call still handed to a (pooled) watchdog thread,
  as for toolkits that do not declare ``run_inline``;
* ``process`` (with ``--paths``): ``new`` with ``tool_isolation="process"`` (every call a round trip to a
  worker process, even for the builtin toolkits);
* ``user-thread`` and ``user-default``: the same tools as a user's toolkit would have them, one that does
  not declare ``run_inline`` (each builtin toolkit subclassed with ``run_inline = False`` and registered
  under ``user/<domain>``), run with ``tool_isolation="thread"`` (the opt-in: a watchdog thread per call,
  a hung call abandoned) and under the default (a worker process, a hung call killed).

What isolation costs: ``new`` (inline), ``user-thread`` and ``user-default`` are in the default run, and
the script prints each one's wall time per step and per executed call, and its ratio to inline.

Both paths play the same seeded episodes. The first ``--warmup`` steps of each run are not timed; tasks
met for the first time still fill per-task caches (the reference state hash, the task's ToolSpecs), which
a short run pays for and a long training run does not: ``--prewarm`` plays every train task once (oracle)
before timing, to measure that steady state. Runs alternate between the paths ``--repeat`` times and the
median is reported, since a shared machine is noisy.

    python benchmarks/env_step.py [--steps 20000] [--seconds 10] [--policies random oracle] [--json]
    python benchmarks/env_step.py --paths new user-thread user-default   # isolation costs only

Every run also steps Gymnasium's ``CartPole-v1`` (random actions) in slices interleaved with the env's steps
(`CartPoleSlices`) and prints the current path's rate per CPU second as a share of CartPole's ("per
CartPole", the median of the runs' ratios): a plain env step's overhead against the cheapest env there is,
on CPU time so that other jobs on the machine do not move it, interleaved so that the machine's drift does
not either.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

import envace_gym  # noqa: F401  (registers the env)
from envace_gym import tools
from envace_gym.agents.scripted import OraclePolicy, RandomPolicy
from envace_gym.backends import PythonBackend, make_backend, register_backend
from envace_gym.backends import python as python_backend
from envace_gym.suites import load_suite

PATHS = {
    "old": {"rollback": "deepcopy", "fast_validation": False, "inline": False},
    "new": {"rollback": "cow", "fast_validation": True, "inline": True},
    "new-watchdog": {"rollback": "cow", "fast_validation": True, "inline": False},
    # tool_isolation="process": every call a round trip to the backend's worker process (killable on a hang).
    "process": {"rollback": "cow", "fast_validation": True, "inline": True, "isolation": "process"},
    # The builtin tools as a toolkit that does not declare run_inline: thread mode (opt-in), the default.
    "user-thread": {"rollback": "cow", "fast_validation": True, "inline": True, "isolation": "thread", "user": True},
    "user-default": {"rollback": "cow", "fast_validation": True, "inline": True, "isolation": "auto", "user": True},
}
# The paths whose per-step cost the isolation summary compares (inline first: the others' ratios are to it).
ISOLATION_PATHS = ("new", "user-thread", "user-default")


def configure(path: str) -> None:
    python_backend.DEFAULT_ROLLBACK = PATHS[path]["rollback"]
    python_backend.INLINE_TOOLKITS = PATHS[path]["inline"]
    tools.FAST_VALIDATION = PATHS[path]["fast_validation"]


def user_tasks() -> list[Any]:
    """The builtin train mix, each task's backend the ``user/<domain>`` twin of its toolkit (registered here):
    the same tools and state, but a toolkit that does not declare ``run_inline``, as a user's would."""
    tasks = []
    for task in load_suite("builtin"):
        name = f"user/{task.backend}"
        if name not in _USER_BACKENDS:
            builtin = make_backend(task.backend, timeout=None).toolkit_cls
            user_cls = type(f"User{builtin.__name__}", (builtin,), {"run_inline": False})
            register_backend(name, lambda _cls=user_cls, **kw: PythonBackend(_cls, **kw), overwrite=True)
            _USER_BACKENDS.add(name)
        tasks.append(dataclasses.replace(task, backend=name))
    return tasks


_USER_BACKENDS: set[str] = set()


def make_env(wrapped: bool, path: str = "new") -> Any:
    isolation = PATHS[path].get("isolation", "thread")
    tasks = user_tasks() if PATHS[path].get("user") else None
    env = gym.make("EnvACE-ToolCall-v0", split="train", tasks=tasks, tool_isolation=isolation)
    return env if wrapped else env.unwrapped


def make_policy(name: str, env: Any, seed: int) -> Any:
    return RandomPolicy(seed=seed) if name == "random" else OraclePolicy(env.unwrapped.suite)


def prewarm(env: Any) -> None:
    """One oracle episode per task of the pool: fills every per-task cache."""
    policy = OraclePolicy(env.unwrapped.suite)
    for task in env.unwrapped.pool:
        policy.reset()
        obs, info = env.reset(options={"task_id": task.id})
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
            done = terminated or truncated


class CartPoleSlices:
    """Gymnasium's ``CartPole-v1`` (``.unwrapped``, random actions, reset when done), stepped in slices
    between the env's own: the baseline of every "per CartPole" ratio. A machine's speed drifts over
    seconds (other jobs, the host's neighbours: CartPole's own rate moved 2x between back-to-back runs
    here), so timing the two envs one after the other made the ratio swing by as much; slices interleaved
    every few hundred steps see the same machine. CPU time of this process: what another job takes is
    not counted."""

    def __init__(self, seed: int) -> None:
        self.env = gym.make("CartPole-v1").unwrapped
        self.env.action_space.seed(seed)
        self.env.reset(seed=seed)
        self.steps, self.cpu = 0, 0.0

    def run(self, n: int, timed: bool = True) -> float:
        """Step ``n`` times; returns the CPU seconds spent (added to the totals when ``timed``)."""
        env = self.env
        start = time.process_time()
        for _ in range(n):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        cpu = time.process_time() - start
        if timed:
            self.steps += n
            self.cpu += cpu
        return cpu

    @property
    def rate(self) -> float:
        return self.steps / self.cpu if self.cpu > 0 else 0.0


# Env steps between two CartPole slices, and the CartPole steps of a slice (about as long as the env's).
SLICE_STEPS = 256
CARTPOLE_SLICE = 2_560


def run(path: str, policy_name: str, args: argparse.Namespace) -> dict[str, Any]:
    configure(path)
    env = make_env(args.wrapped, path)
    if args.prewarm:
        prewarm(env)
    policy = make_policy(policy_name, env, args.seed)
    policy.reset()
    cartpole = CartPoleSlices(args.seed)
    cartpole.run(args.warmup, timed=False)
    obs, info = env.reset(seed=args.seed)
    steps = episodes = calls = 0
    start = cpu_start = None
    away_wall = away_cpu = 0.0  # what the CartPole slices took, taken out of the env's time
    deadline = float("inf")
    total = args.warmup + args.steps
    for i in range(total):
        if i == args.warmup:
            start, cpu_start = time.perf_counter(), time.process_time()
            deadline = start + args.seconds
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        if terminated or truncated:
            policy.reset()
            obs, info = env.reset()
            if start is not None:
                episodes += 1
        if start is not None:
            steps += 1
            calls += len(info.get("tool_results", ()))
            if steps % SLICE_STEPS == 0:
                wall = time.perf_counter()
                away_cpu += cartpole.run(CARTPOLE_SLICE)
                away_wall += time.perf_counter() - wall
                if time.perf_counter() >= deadline:
                    break
    elapsed = time.perf_counter() - (start if start is not None else time.perf_counter()) - away_wall
    cpu = time.process_time() - (cpu_start if cpu_start is not None else time.process_time()) - away_cpu
    env.close()
    configure("new")
    rate_cpu = steps / cpu if cpu > 0 else 0.0
    return {
        "path": path,
        "policy": policy_name,
        "steps": steps,
        "episodes": episodes,
        "calls": calls,
        "seconds": round(elapsed, 3),
        "steps_per_s": steps / elapsed if elapsed > 0 else 0.0,
        "steps_per_cpu_s": rate_cpu,
        "cartpole_steps_per_cpu_s": cartpole.rate,
        "per_cartpole": rate_cpu / cartpole.rate if cartpole.rate else 0.0,
    }


def docs_table(result: dict[str, Any]) -> str:
    """The Markdown table of ``docs/benchmarks.md`` from this script's ``--json`` output: steps/s of the
    old and the current path by policy, and their ratio."""
    lines = ["| policy | old path (steps/s) | current (steps/s) | current / old |", "|---|---|---|---|"]
    for row in result["results"]:
        old, new = row["old"]["steps_per_s"], row["new"]["steps_per_s"]
        lines.append(f"| {row['policy']} | {old:,} | {new:,} | {row['ratio']}x |")
    return "\n".join(lines)


def cartpole_table(result: dict[str, Any]) -> str:
    """The "per CartPole" table: the current path's steps per CPU second against CartPole-v1's, same runs
    (the median of the runs' ratios)."""
    lines = [
        "| policy | current path (steps per CPU s) | CartPole-v1 (steps per CPU s) | share of CartPole |",
        "|---|---|---|---|",
    ]
    for row in result["results"]:
        lines.append(
            f"| {row['policy']} | {row['new']['steps_per_cpu_s']:,} | {row['cartpole_steps_per_cpu_s']:,} "
            f"| {row['per_cartpole']:.3f} |"
        )
    return "\n".join(lines)


def write_docs(path: str) -> None:
    """Rewrite the env-step blocks of ``docs/benchmarks.md`` from a ``--json`` output file (the old-vs-current
    table when the run timed both paths, the per-CartPole table always); run nothing."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _docs import write_block

    result = json.loads(Path(path).read_text())
    blocks = {"env-step-cartpole": cartpole_table(result)}
    if all("old" in row for row in result["results"]):
        blocks["env-step"] = docs_table(result)
    for name, table in blocks.items():
        changed = write_block("benchmarks.md", name, table)
        print(f"docs/benchmarks.md: {name} {'rewritten' if changed else 'unchanged'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="timed steps per run (at most)")
    parser.add_argument("--seconds", type=float, default=10.0, help="stop a run after this many timed seconds")
    parser.add_argument("--warmup", type=int, default=500, help="untimed steps at the start of each run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per path and policy (median reported)")
    parser.add_argument("--policies", nargs="+", default=["random", "oracle"], choices=["random", "oracle"])
    parser.add_argument(
        "--paths", nargs="+", default=["old", "new", "user-thread", "user-default"], choices=list(PATHS)
    )
    parser.add_argument("--prewarm", action="store_true", help="play every train task once before timing")
    parser.add_argument("--wrapped", action="store_true", help="step gym.make's wrappers, not .unwrapped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument(
        "--write-docs",
        metavar="RESULT.json",
        help="measure nothing: rewrite docs/benchmarks.md's env-step table from a saved --json output "
        "(run with --prewarm --json > FILE first)",
    )
    args = parser.parse_args()
    if args.write_docs:
        write_docs(args.write_docs)
        return

    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for policy_name in args.policies:
            for path in args.paths:
                runs.setdefault((policy_name, path), []).append(run(path, policy_name, args))

    table = []
    for policy_name in args.policies:
        row: dict[str, Any] = {"policy": policy_name}
        for path in args.paths:
            rates = [r["steps_per_s"] for r in runs[(policy_name, path)]]
            cpu_rates = [r["steps_per_cpu_s"] for r in runs[(policy_name, path)]]
            row[path] = {
                "steps_per_s": round(statistics.median(rates)),
                "steps_per_cpu_s": round(statistics.median(cpu_rates)),
                "runs": [round(x) for x in rates],
                "steps": [r["steps"] for r in runs[(policy_name, path)]],
                "us_per_call": round(
                    statistics.median(r["seconds"] / r["calls"] * 1e6 for r in runs[(policy_name, path)] if r["calls"])
                    if any(r["calls"] for r in runs[(policy_name, path)])
                    else 0
                ),
            }
        if "new" in row:  # the env step's rate in CartPole's, each run's from its interleaved slices
            new_runs = runs[(policy_name, "new")]
            row["cartpole_steps_per_cpu_s"] = round(statistics.median(r["cartpole_steps_per_cpu_s"] for r in new_runs))
            row["per_cartpole_runs"] = [round(r["per_cartpole"], 4) for r in new_runs]
            row["per_cartpole"] = round(statistics.median(r["per_cartpole"] for r in new_runs), 4)
        if "old" in row and "new" in row and row["old"]["steps_per_s"]:
            row["ratio"] = round(row["new"]["steps_per_s"] / row["old"]["steps_per_s"], 1)
        table.append(row)

    setup = {
        "env": "gym.make('EnvACE-ToolCall-v0', split='train')" + ("" if args.wrapped else ".unwrapped"),
        "prewarm": args.prewarm,
        "warmup": args.warmup,
        "repeat": args.repeat,
        "cartpole": f"CartPole-v1 .unwrapped, {CARTPOLE_SLICE} steps after every {SLICE_STEPS} env steps",
    }
    if args.json:
        print(json.dumps({"setup": setup, "results": table}, indent=2))
        return
    print(f"env steps/s, one process; {setup['env']}; warm-up {args.warmup} steps; prewarm={args.prewarm}")
    print(f"median of {args.repeat} runs, each at most {args.steps} steps or {args.seconds:g}s")
    print("steps/s: wall clock; per CPU s: steps per second of this process's CPU time (all its threads)")
    header = f"{'policy':<8}" + "".join(f"{p + ' steps/s':>22}{'per CPU s':>11}" for p in args.paths)
    header += f"{'new/old':>9}" if "ratio" in table[0] else ""
    print(header)
    for row in table:
        line = f"{row['policy']:<8}" + "".join(
            f"{row[p]['steps_per_s']:>22,}{row[p]['steps_per_cpu_s']:>11,}" for p in args.paths
        )
        if "ratio" in row:
            line += f"{row['ratio']:>8}x"
        print(line)
    for row in table:
        if "per_cartpole" in row:
            print(
                f"{row['policy']}: current path {row['new']['steps_per_cpu_s']:,} steps per CPU s = "
                f"{row['per_cartpole']:.3f} of CartPole-v1's {row['cartpole_steps_per_cpu_s']:,} "
                f"(random actions, interleaved; runs: {', '.join(f'{x:.3f}' for x in row['per_cartpole_runs'])})"
            )
    isolation = [p for p in ISOLATION_PATHS if p in args.paths]
    if len(isolation) > 1 and isolation[0] == "new":
        print("what isolation costs a toolkit (wall time per step and per executed call; ratio: per step / inline):")
        for row in table:
            inline_us = 1e6 / row["new"]["steps_per_s"]
            parts = []
            for p in isolation:
                us = 1e6 / row[p]["steps_per_s"]
                label = {"new": "inline", "user-thread": "thread", "user-default": "process (default)"}[p]
                parts.append(f"{label} {us:,.0f} us/step, {row[p]['us_per_call']:,} us/call ({us / inline_us:.1f}x)")
            print(f"  {row['policy']:<7} " + " | ".join(parts))
    if "process" in args.paths and "new" in args.paths:
        for row in table:  # what running the tools in a worker process adds to each call
            extra = row["process"]["us_per_call"] - row["new"]["us_per_call"]
            print(
                f"{row['policy']}: wall time per executed call {row['new']['us_per_call']} us in-process, "
                f"{row['process']['us_per_call']} us with tool_isolation='process' (+{extra} us per call)"
            )


if __name__ == "__main__":
    main()
