"""Does a grounded env role answer a wrong call with the task's real values? Reads a training run's
transcripts (``EnvACEConfig.log_trajectories_every``; the learning benchmark's ``--log-trajectories-every``)
and, for every imagined result of a call that is not one of the task's reference calls (another tool, or
other arguments), looks for a value of the task's reference results (a number, or an id such as ``A-1234``)
that neither the call's arguments nor the user's messages hold: such a value came from the reference
examples in the env role's prompt, not from the call (a leak). Prints the counts as JSON.

    python benchmarks/env_role_leaks.py runs/learning/envace-ref-seed2
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envace_gym.calls import canonical_json
from envace_gym.jsonl import read_jsonl
from envace_gym.suites import load_suite

ID = re.compile(r"[A-Z]+-\d+")


def leaves(value: Any) -> Iterator[str]:
    """The numbers and ids in a JSON value, as strings."""
    if isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, str) and ID.fullmatch(value):
        yield value


def classify(episode: dict[str, Any], task: Any) -> Iterator[str]:
    """The kind of each imagined result in ``episode``."""
    reference = {(c.name, canonical_json(c.arguments)) for c in task.reference_calls}
    reference_values = {v for c in task.reference_calls for v in leaves(c.result)}
    user = " ".join(m["content"] for m in episode["messages"] if m["role"] == "user")
    messages = episode["messages"]
    for i, message in enumerate(messages):
        calls = message.get("tool_calls") or [] if message["role"] == "assistant" else []
        results = [m for m in messages[i + 1 : i + 1 + len(calls)] if m["role"] == "tool"]
        for call, result in zip(calls, results, strict=False):
            arguments = json.loads(call["function"]["arguments"])
            if (call["function"]["name"], canonical_json(arguments)) in reference:
                yield "reference call"
                continue
            try:
                value = json.loads(result["content"])
            except ValueError:
                yield "off-reference call: unparsable result"
                continue
            if isinstance(value, dict) and "error" in value:
                yield "off-reference call: error"
                continue
            said = json.dumps(arguments) + user
            leaked = [v for v in leaves(value) if v in reference_values and v not in said]
            yield "off-reference call: holds a reference value" if leaked else "off-reference call: invented"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a training run's folder (with trajectories/step-N.jsonl)")
    parser.add_argument("--suite", default="builtin/bank")
    args = parser.parse_args()
    tasks = {t.id: t for t in load_suite(args.suite)}
    kinds, episodes = Counter(), Counter()
    files = sorted(Path(args.run, "trajectories").glob("step-*.jsonl"))
    for path in files:
        for _, row in read_jsonl(path):
            episode = row["episode"]
            found = list(classify(episode, tasks[episode["task_id"]]))
            kinds.update(found)
            leak = "off-reference call: holds a reference value" in found
            episodes[f"{'with' if leak else 'without'} a leak, reward {episode['reward']:.0f}"] += 1
    print(json.dumps({"steps": len(files), "results": dict(kinds), "episodes": dict(episodes)}, indent=1))


if __name__ == "__main__":
    main()
