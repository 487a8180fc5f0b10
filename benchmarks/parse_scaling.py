"""How parse time grows with the message: 10x the input should cost about 10x the time (linear).

The parser scans unclosed ``<think>`` blocks with one ``str.find`` pass; a regex or a rescan per block would
be quadratic (10x the input, about 100x the time). Prints each workload's best-of-5 time and the ratio
between sizes measured in this run; a ratio near 10 is linear.

    python benchmarks/parse_scaling.py
"""

from __future__ import annotations

import time

from envace_gym.calls import parse_calls

WORKLOADS = {
    "unclosed <think> before <tool_call>": "<think>a<tool_call>",
    "nested <think> tags": "<think><think></think>",
    "prose with parentheses": "Refund(s) processed (total 10). ",
}


def best_of(text: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        parse_calls(text)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    print(f"{'workload':40} {'2k reps (s)':>12} {'20k reps (s)':>13} {'ratio (10 = linear)':>20}")
    for name, unit in WORKLOADS.items():
        small, large = best_of(unit * 2_000), best_of(unit * 20_000)
        print(f"{name:40} {small:12.4f} {large:13.4f} {large / small:20.1f}")


if __name__ == "__main__":
    main()
