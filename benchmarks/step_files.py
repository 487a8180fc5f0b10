"""The files a reader follows through one step of a rollout: the hallway between the loop and the tool result.

One episode of the fixed workload of ``benchmarks/rollout_throughput.py`` (every actor turn one
``convert_currency`` call; the forward passes are real, a forward hook sets which token wins) runs under
``collect()`` with a profiler on. For every call of an *endpoint* (where the step's tool result is made, and
where it reaches the actor's tokens) the script takes the stack of frames from the loop (``_play``) down to
it; the files of those frames are the hallway: the code a reader must open to follow the step from the
actor's text to the observation. Helpers the path calls and returns from (the parser, the checks, the
ledger) are rooms off the hallway and are not counted, and so is the episode's scoring (a state-match reward
replays the calls on a fresh backend once the episode ends). Three paths:

* ``real``: a real backend answers every call (endpoints: the real backend's ``execute``, the
  conversation's ``render``);
* ``imagined-prompted`` and ``imagined-inline``: ``SelfRehearsalEnv`` with the same policy as env role
  (endpoints: ``LMPolicy.imagine_batch``, ``ImaginedBackend._result``, the conversation's ``render``, and
  inline its ``splice``).

    python benchmarks/step_files.py [--policy default|ckpt:DIR] [--json OUT] [--write-docs OUT.json]

``--write-docs`` writes the ``step-files`` block of ``docs/benchmarks.md`` from a JSON this script wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared workload lives beside this script

from _docs import write_block  # noqa: E402
from rollout_throughput import Workload, make_envs, scripted_policy, task_ids  # noqa: E402

import envace_gym  # noqa: E402
from envace_gym.agents.provenance import run_environment  # noqa: E402
from envace_gym.agents.rollout import collect  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("envace_gym", "agents", "envs")
LOOP = ("agents/rollout/loop.py", "_play")
SCORING = ("envace_gym/rewards.py", "score_episode")
ENDPOINTS: dict[str, set[tuple[str, str]]] = {
    "real": {("envace_gym/backends/python.py", "execute"), ("agents/lm/conversation.py", "render")},
    "imagined-prompted": {
        ("agents/lm/policy.py", "imagine_batch"),
        ("envace_gym/imagination/backend.py", "_result"),
        ("agents/lm/conversation.py", "render"),
    },
    "imagined-inline": {
        ("agents/lm/policy.py", "imagine_batch"),
        ("envace_gym/imagination/backend.py", "_result"),
        ("agents/lm/conversation.py", "splice"),
        ("agents/lm/conversation.py", "render"),
    },
}


def _repo_file(frame: FrameType) -> str | None:
    """The frame's file relative to the repository, for the project's own packages (resolved through the
    ``envace_gym/agents`` and ``envace_gym/envs`` links); None for anything else."""
    try:
        path = Path(frame.f_code.co_filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(path) if path.parts[0] in PACKAGES else None


def hallway(run: Callable[[], Any], endpoints: set[tuple[str, str]]) -> dict[str, Any]:
    """Run ``run`` under a profiler; the files (and functions) of the frames from the loop to each endpoint."""
    files: dict[str, set[str]] = {}
    reached: set[tuple[str, str]] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        here = (_repo_file(frame), frame.f_code.co_name)
        if here not in endpoints:
            return
        chain, f = [], frame
        while f is not None:
            where = (_repo_file(f), f.f_code.co_name)
            if where[0] is not None:
                chain.append(where)
            if where == LOOP:
                break
            f = f.f_back
        if not chain or chain[-1] != LOOP or SCORING in chain:
            return  # not on a step of the loop (the episode's first render), or the episode's scoring
        reached.add(here)
        for path, name in chain:
            files.setdefault(path, set()).add(name)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    missing = sorted(f"{p}:{n}" for p, n in endpoints - reached)
    if missing:
        raise SystemExit(f"the step never reached {missing}: the workload did not run the path it measures")
    return {"files": len(files), "by_file": {p: sorted(n) for p, n in sorted(files.items())}}


def measure(spec: str) -> dict[str, Any]:
    workload = Workload(turns=2)
    policy = scripted_policy(spec, workload)
    ids = task_ids(workload, 1)
    paths: dict[str, Any] = {}
    for path, endpoints in ENDPOINTS.items():
        envs = make_envs(1, workload)
        if path != "real":
            envs = [envace_gym.SelfRehearsalEnv(envs[0], policy, mode=path.split("-")[1])]
        paths[path] = hallway(lambda envs=envs: collect(envs, policy, 1, task_ids=ids, progress=False), endpoints)
    return {"policy": spec, "workload": vars(workload), "paths": paths, "environment": run_environment()}


def table(result: dict[str, Any]) -> str:
    lines = ["| path | files | the files, in the order of the package tree |", "|---|---|---|"]
    for path, found in result["paths"].items():
        names = ", ".join(f"`{p}`" for p in found["by_file"])
        lines.append(f"| {path} | {found['files']} | {names} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="default", help="default (the embedded model) or ckpt:DIR")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--write-docs", metavar="JSON", help="write docs/benchmarks.md's block from this result")
    args = parser.parse_args()
    if args.write_docs:
        result = json.loads(Path(args.write_docs).read_text(encoding="utf-8"))
        write_block("benchmarks.md", "step-files", table(result))
        print(table(result))
        return
    result = measure(args.policy)
    print(table(result))
    for path, found in result["paths"].items():
        print(f"{path}:")
        for file, names in found["by_file"].items():
            print(f"  {file}: {', '.join(names)}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
