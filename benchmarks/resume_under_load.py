"""The kill-and-resume scenario of tests/test_reliability.py, N times (run it beside other CPU-bound jobs to
test it under load): a tiny EnvACE run trained whole, the same run SIGKILLed while checkpoint 2 is half
written and resumed; per run, one JSON line: are the final weights bit-identical (and the largest
difference), are the metrics exactly equal (floats included), and which metric differed.

    python benchmarks/resume_under_load.py --runs 10 > resume.jsonl
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

SCRIPT = str(Path(__file__).resolve().parent.parent / "tests" / "kill_train_script.py")


def _run(mode: str, out: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SCRIPT, mode, str(out)], text=True, **popen)


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_s") and k != "tokens_per_s"} for r in rows]


def once(i: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="resume-"))
    t0 = time.time()
    assert _run("run", tmp / "whole").wait(900) == 0
    stalled = _run("stall", tmp / "killed", stdout=subprocess.PIPE)
    assert stalled.stdout.readline().strip() == "stalled"
    stalled.send_signal(signal.SIGKILL)
    stalled.wait(60)
    assert _run("resume", tmp / "killed").wait(900) == 0
    a, b = (load_file(str(tmp / d / "final.safetensors")) for d in ("killed", "whole"))
    ma, mb = _metrics(tmp / "killed"), _metrics(tmp / "whole")
    return {
        "run": i,
        "weights_equal": all(torch.equal(a[k], b[k]) for k in b),
        "max_abs_diff": max((a[k] - b[k]).abs().max().item() for k in b),
        "metrics_equal": ma == mb,
        "differing": sorted({k for x, y in zip(ma, mb, strict=True) for k in y if x.get(k) != y.get(k)}),
        "seconds": round(time.time() - t0, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    for i in range(args.runs):
        print(json.dumps(once(i)), flush=True)


if __name__ == "__main__":
    main()
