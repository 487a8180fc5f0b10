"""Does the env role foresee a call that fails? Real against imagined errors on the learning benchmark's tasks.

Select mode's ``choose="outcome"`` scores a rehearsal by whether it reached an answer with no error result, so
it can only tell a wrong move from a right one where the env role imagines the wrong move's error. This
measures exactly that. For each task of the learning benchmark's pool (``--split train`` by default: the
split designs are chosen on) whose first reference call names an ``account_id``, two calls:

* the reference call itself (it succeeds for real), and
* the same call on an account the task's state does not hold (it fails for real: the rehearsal's guessed id).

Each runs on the task's real backend (the truth: a result or an error) and is imagined by each policy's env
role as a rehearsal imagines it: the env-role prompt over the blind task (``task.blind()``), no reference
examples (``grounding="none"``), after the user's message and the call; greedy. Printed: per policy, how
often the env role imagines an error where the real call fails and where it succeeds, and how many answers
were no result at all. Nothing here is trained.

    python benchmarks/error_foresight.py --policy warm=ckpt:runs/learning-22/warm \\
        --policy envace-log=ckpt:runs/learning-22/envace-log-seed0/ckpt-40 --out runs/error-foresight
    python benchmarks/error_foresight.py --write-docs docs/results/error_foresight_2026-12-05.json   # the docs' table
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import envace_gym  # noqa: F401  (registers the envs)
from envace_gym.agents.eval.stats import wilson_interval
from envace_gym.agents.rehearsal.memory import predicted_error
from envace_gym.backends import ToolResult, make_backend
from envace_gym.calls import ToolCall, tool_calls_to_openai
from envace_gym.imagination import ImaginedBackend, ImagineRequest
from envace_gym.imagination.halfstep import answer_requests
from envace_gym.imagination.prompt import parse_execution_result

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the learning benchmark's task pool and policy loading: one of each)
from _docs import write_block  # noqa: E402

from envace_gym.agents.provenance import run_environment  # noqa: E402


def absent_account(task, account: str) -> str:
    """An ``A-NNNN`` id that appears nowhere in the task's initial state (so the real call fails)."""
    state = json.dumps(task.initial_state)
    digits = int(re.sub(r"\D", "", account) or 0)
    for step in range(1, 9000):
        candidate = f"A-{(digits + 37 * step) % 9000 + 1000}"
        if candidate not in state:
            return candidate
    raise ValueError(f"task {task.id}: no free account id")


def probes(tasks) -> list[tuple[Any, ToolCall, bool]]:
    """``(task, call, is_wrong)``: each eligible task's first reference call and its absent-account twin."""
    out = []
    for task in tasks:
        calls = task.reference_calls
        if not calls or "account_id" not in calls[0].arguments:
            continue
        right = ToolCall(calls[0].name, dict(calls[0].arguments), "probe_0")
        absent = absent_account(task, right.arguments["account_id"])
        wrong = ToolCall(right.name, {**right.arguments, "account_id": absent}, "probe_0")
        out += [(task, right, False), (task, wrong, True)]
    return out


def real_fails(task, call: ToolCall) -> bool:
    backend = make_backend(task.backend)
    backend.reset(task)
    return backend.execute(call).error is not None


def request_for(task, call: ToolCall, imaginer) -> ImagineRequest:
    """The env-role request a rehearsal would make for ``call`` as the agent's first message."""

    def no_real_backend(_task):
        raise RuntimeError("imagined only")

    backend = ImaginedBackend(imaginer, grounding="none", real_backend=no_real_backend)
    backend.reset(task.blind())
    messages = ([{"role": "system", "content": task.system}] if task.system else []) + [
        {"role": "user", "content": task.user_turns[0]},
        {"role": "assistant", "content": "", "tool_calls": tool_calls_to_openai([call])},
    ]
    backend.bind_conversation(messages)
    pending = backend.run(call)
    if isinstance(pending, ToolResult):
        raise ValueError(f"task {task.id}: {call.name} was answered without the env role: {pending}")
    return next(pending)  # the request it waits on; never answered here


def measure(name: str, spec: str, items, truth: list[bool], args) -> dict[str, Any]:
    policy = learning.load(spec, args, args.seed)  # greedy, as the learning benchmark loads every policy
    t0 = time.monotonic()
    requests = [request_for(task, call, policy) for task, call, _ in items]
    answers = []
    for i in range(0, len(requests), args.batch):  # the engine batches each chunk
        answers += answer_requests(requests[i : i + args.batch], [policy] * len(requests[i : i + args.batch]))
    imagined_error, unusable = [], 0
    for answer in answers:
        value, reason = (None, "raised") if isinstance(answer, Exception) else parse_execution_result(answer.text)
        unusable += reason is not None
        imagined_error.append(reason is None and predicted_error(value) is not None)
    row: dict[str, Any] = {"policy": name, "spec": spec, "calls": len(items), "unusable": unusable}
    for key, fails in (("real_error", True), ("real_ok", False)):
        hits = [e for e, t in zip(imagined_error, truth, strict=True) if t == fails]
        row[key] = {"calls": len(hits), "imagined_error": sum(hits), "ci": wilson_interval(sum(hits), len(hits))}
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def table(results: dict[str, Any]) -> str:
    lines = [
        "| policy | calls that fail for real: imagined as errors (95% CI) | calls that succeed: imagined as "
        "errors (95% CI) | answers that were no result |",
        "|---|---|---|---|",
    ]
    for row in results["rows"]:
        cells = []
        for key in ("real_error", "real_ok"):
            part = row[key]
            lo, hi = part["ci"]
            share = part["imagined_error"] / part["calls"] if part["calls"] else 0.0
            cells.append(f"{part['imagined_error']}/{part['calls']} = {share:.0%} ({lo:.0%}-{hi:.0%})")
        lines.append(f"| {row['policy']} | {cells[0]} | {cells[1]} | {row['unusable']}/{row['calls']} |")
    s = results["settings"]
    lines += [
        "",
        f"Raw results: `{results['path']}` ({s['tasks']} {s['split']} tasks of {s['suite']}, two calls each; greedy "
        f"env role, no reference examples; {results['minutes']:.1f} min on {results.get('machine', s['device'])}, "
        f"{results['date']}).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", action="append", default=[], metavar="NAME=SPEC", help="repeatable")
    parser.add_argument("--split", default="train", help="train (where designs are chosen) or test")
    parser.add_argument("--tasks", type=int, default=48, help="eligible tasks to probe (two calls each)")
    parser.add_argument("--batch", type=int, default=16, help="env-role requests per batched generation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="runs/error-foresight")
    parser.add_argument("--write-docs", metavar="RESULTS", help="rewrite docs/rehearsal.md's table; run nothing")
    for key, value in learning.DEFAULT.items():  # the learning benchmark's task pool and generation length
        if key in ("suite", "max_calls", "max_new_tokens"):
            parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value, help=f"default {value}")
    args = parser.parse_args()
    if args.write_docs:
        results = json.loads(Path(args.write_docs).read_text())
        kept = {**results, "path": f"docs/results/{Path(args.write_docs).name}"}
        write_block("rehearsal.md", "error-foresight-table", table(kept))
        return
    if not args.policy:
        raise SystemExit("error_foresight: give at least one --policy NAME=SPEC")
    tasks = [t for t in learning.task_pool(args) if t.split == args.split]
    items = probes(tasks)[: 2 * args.tasks]
    truth = [real_fails(task, call) for task, call, _ in items]
    if truth != [wrong for _, _, wrong in items]:
        odd = [task.id for (task, _, wrong), t in zip(items, truth, strict=True) if t != wrong]
        print(f"note: {len(odd)} probes did not fail or succeed as built (truth is the real backend's): {odd[:5]}")
    t0 = time.monotonic()
    rows = []
    for item in args.policy:
        name, sep, spec = item.partition("=")
        if not sep:
            raise SystemExit(f"--policy {item!r}: give NAME=SPEC")
        rows.append(measure(name, spec, items, truth, args))
        r = rows[-1]
        print(f"{name}: imagined an error for {r['real_error']['imagined_error']}/{r['real_error']['calls']} failing "
              f"calls, {r['real_ok']['imagined_error']}/{r['real_ok']['calls']} succeeding ones; "
              f"{r['unusable']} unusable ({r['seconds']} s)", flush=True)  # fmt: skip
    settings = {"split": args.split, "suite": args.suite, "tasks": len(items) // 2, "device": args.device,
                "max_new_tokens": args.max_new_tokens, "seed": args.seed}  # fmt: skip
    results = {"settings": settings, "rows": rows, "minutes": (time.monotonic() - t0) / 60,
               "date": time.strftime("%Y-%m-%d"), "environment": run_environment(device=args.device)}  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(table({**results, "path": str(out / "results.json")}))


if __name__ == "__main__":
    main()
