"""What dropping finished rows from the decoding batch (``HFEngine.drop_finished``) saves in a training rollout.

The learning benchmark's training step (update_cost.py's set-up: the embedded model with its warm start, the
recipe's 4 tasks x group 8 at temperature 1.0, 96 new tokens, on the real tools, LoRA) is played ``--repeats``
times with the switch off and on, alternated (so a load change touches both alike), each time from the same
seeds and with the engine's caches cleared. It prints the median rollout and decoding seconds of each and their
ratios, and writes JSON (every run kept).

Then the check: the same step played greedily, off and on, must give the same token ids. In float32 a row's
logits do not depend on which rows share its batch beyond float rounding, so greedy and seeded sampled tokens
are the same off and on; under bf16 autocast (the policy's default on CPUs with native bf16) other batch shapes
round differently, by up to a few tenths of a logit, so a near tie can go the other way. Where the rollouts ran
in bf16 the greedy check is also made in float32, where it must hold.

    python benchmarks/decode_compaction.py --out runs/decode_compaction.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (the benchmark's task pool and envs: one definition)
import update_cost  # noqa: E402  (its trainer: the same policy, warm start and step)

from envace_gym.agents import recipe  # noqa: E402
from envace_gym.agents.provenance import run_environment  # noqa: E402


def play(trainer: Any, drop: bool, step: int) -> tuple[dict[str, Any], list[list[int]]]:
    """One rollout of ``step`` with the switch as given: its figures and every episode's token ids."""
    engine = trainer.policy.engine
    engine.drop_finished = drop
    engine.clear()  # every run encodes the same prompts (shared prefixes included)
    before = dict(engine.stats)
    t0 = time.monotonic()
    trajs, _ = trainer.rollout(step)
    seconds = time.monotonic() - t0
    delta = {k: engine.stats[k] - before[k] for k in ("prefill_s", "decode_s", "generated_tokens", "dropped_rows")}
    run = {"drop_finished": drop, "bf16": engine.bf16, "temperature": trainer.cfg.temperature}
    run |= {"seconds": round(seconds, 2), **{k: round(v, 2) for k, v in delta.items()}}
    return run, [t.token_ids for t in trajs]


def greedy_check(trainer: Any, step: int, bf16: bool) -> tuple[bool, list[dict[str, Any]]]:
    """The step played greedily off and on (``bf16`` or float32): whether the token ids agree, and the runs."""
    engine, cfg = trainer.policy.engine, trainer.cfg
    saved = engine.bf16, cfg.temperature
    engine.bf16, cfg.temperature = bf16, 0.0
    try:
        (off, off_ids), (on, on_ids) = (play(trainer, drop, step) for drop in (False, True))
    finally:
        engine.bf16, cfg.temperature = saved
    return off_ids == on_ids, [off, on]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step", type=int, default=1, help="the training step whose rollout is played")
    parser.add_argument("--no-check", action="store_true", help="skip the greedy off/on comparison")
    parser.add_argument("--out", default="runs/decode_compaction.json")
    args = parser.parse_args(argv)
    args.suite, args.max_calls, args.max_turns = learning.DEFAULT["suite"], learning.DEFAULT["max_calls"], 3
    trainer = update_cost.trainer(args, recipe.RL_SETTINGS["lora"])

    runs: list[dict[str, Any]] = []
    tokens: dict[bool, list[list[list[int]]]] = {False: [], True: []}
    for _ in range(args.repeats):
        for drop in (False, True):
            run, ids = play(trainer, drop, args.step)
            runs.append(run)
            tokens[drop].append(ids)
            print(json.dumps(run), flush=True)
    sampled_same = all(ids == tokens[False][0] for ids in tokens[False] + tokens[True])
    greedy_same: dict[str, bool] = {}
    if not args.no_check:
        for bf16 in sorted({trainer.policy.engine.bf16, False}, reverse=True):
            same, checked = greedy_check(trainer, args.step, bf16)
            greedy_same["bf16" if bf16 else "float32"] = same
            runs += [{**run, "check": True} for run in checked]
            print(json.dumps(checked), flush=True)

    def median(key: str, drop: bool) -> float:
        return statistics.median(r[key] for r in runs if r["drop_finished"] == drop and not r.get("check"))

    keys = ("seconds", "decode_s", "prefill_s", "generated_tokens", "dropped_rows")
    medians = {("on" if drop else "off"): {key: median(key, drop) for key in keys} for drop in (False, True)}
    result = {
        "workload": "update_cost.py's step: 4 tasks x group 8, temperature 1.0, 96 new tokens, real tools, LoRA",
        "bf16": trainer.policy.engine.bf16,
        "repeats": args.repeats,
        "runs": runs,
        "median": medians,
        "rollout_on_over_off": round(medians["on"]["seconds"] / max(medians["off"]["seconds"], 1e-9), 3),
        "decode_on_over_off": round(medians["on"]["decode_s"] / max(medians["off"]["decode_s"], 1e-9), 3),
        # The sampled runs play the same tokens off and on in float32 only (see above): decoding time per token
        # generated corrects for a bf16 run's other episode lengths.
        "decode_per_token_on_over_off": round(
            (medians["on"]["decode_s"] / max(medians["on"]["generated_tokens"], 1))
            / max(medians["off"]["decode_s"] / max(medians["off"]["generated_tokens"], 1), 1e-9),
            3,
        ),
        "sampled_tokens_identical": sampled_same,
        "greedy_tokens_identical": greedy_same,
        "environment": run_environment(trainer.policy),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    off, on = medians["off"], medians["on"]
    print(
        f"median of {args.repeats}: rollout off {off['seconds']:.1f} s / on {on['seconds']:.1f} s "
        f"(on/off {result['rollout_on_over_off']:.2f}); decode off {off['decode_s']:.1f} s / on "
        f"{on['decode_s']:.1f} s (on/off {result['decode_on_over_off']:.2f}, per token generated "
        f"{result['decode_per_token_on_over_off']:.2f}); same tokens off and on: sampled "
        f"{sampled_same} ({'bf16' if result['bf16'] else 'float32'}), greedy {greedy_same or 'not checked'}"
    )
    return result


if __name__ == "__main__":
    main()
