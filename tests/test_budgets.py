"""The demo and the learning benchmark count their budgets in steps and episodes, never in minutes: on a
machine whose clock races (every reading 10 minutes after the last) they do exactly the same work."""

from __future__ import annotations

import importlib.util
import itertools
import json
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def slow_clock(monkeypatch):
    """Every ``time.monotonic()`` / ``time.time()`` reading is 10 minutes after the previous one."""
    ticks = itertools.count(1_000_000.0, 600.0)
    monkeypatch.setattr(time, "monotonic", lambda: next(ticks))
    monkeypatch.setattr(time, "time", lambda: next(ticks))


def test_the_demo_runs_its_steps_and_episodes_on_a_slow_clock(tmp_path, slow_clock):
    from envace_gym.agents.demo import DemoConfig, run_demo

    cfg = DemoConfig(
        policy="tiny", warm="sft", warm_steps=3, episodes=3, batch_size=3, max_new_tokens=8, sft_examples=2,
        rl_steps=2, rl_tasks=1, rl_group=2, fidelity_episodes=1, out_root=str(tmp_path),
    )  # fmt: skip
    run = run_demo(cfg)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["warm_start"]["steps"] == 3  # all warm-start steps, however late the clock says it is
    assert [r["step"] for r in metrics["envace"]] == [1, 2]
    assert metrics["before"]["episodes"] == metrics["after"]["episodes"] == 3
    assert metrics["calls"]["live_calls"] == 0  # imagination only: no live tool call in training
    assert {"reference", "none"} <= set(metrics["fidelity_before"]) and "success_ci" in metrics["after"]
    for name in ("plot.png", "transcript.md", "envace/learning_curve.png", "envace/ckpt-2/model.safetensors"):
        assert (run / name).exists(), name
    transcript = (run / "transcript.md").read_text()
    assert "One imagined episode" in transcript and "One real episode" in transcript


def test_the_learning_benchmark_runs_its_steps_and_episodes_on_a_slow_clock(tmp_path, slow_clock):
    spec = importlib.util.spec_from_file_location("learning_bench", ROOT / "benchmarks" / "learning.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = ["--policy", "tiny", "--out", str(tmp_path), "--arms", "untrained,envace-log", "--seeds", "0"]
    argv += ["--steps", "2", "--warm-steps", "2", "--eval-episodes", "3", "--fidelity-episodes", "1"]
    argv += ["--train-episodes", "4"]
    argv += ["--max-new-tokens", "8", "--device", "cpu"]
    report = bench.main(argv)
    arms = report["arms"]
    assert set(arms) == {"untrained", "envace-log"}
    assert arms["envace-log"]["episodes"] == arms["untrained"]["episodes"] == 3
    curve = arms["envace-log"]["curves"][0]
    assert [c["step"] for c in curve] == [1, 2] and all(c["live_calls"] == 0 for c in curve)
    assert arms["envace-log"]["calls"]["live_calls"] == 0
    warm = json.loads((tmp_path / "warm" / "sft_summary.json").read_text())
    assert warm["steps"] == 2
    table = (tmp_path / "table.md").read_text()
    assert "| envace-log | 1 |" in table
    # where the failures are: wins/episodes by task kind, the start on train tasks and each arm on test tasks
    assert sum(n for _, n in report["start_train_by_kind"].values()) == 4
    assert sum(n for _, n in arms["untrained"]["by_kind"].values()) == 3
    assert "| task kind | start, train tasks | untrained, test (1 seeds) |" in table
    # --resume keeps finished runs: nothing is trained again
    again = bench.main([*argv, "--resume"])
    assert again["arms"]["envace-log"]["curves"] == arms["envace-log"]["curves"]


def test_the_warm_start_adapter_round_trips_and_leaves_a_trainable_model(tmp_path):
    from envace_gym.agents.lm.policy import tiny_policy
    from envace_gym.agents.recipe import load_warm_adapter, train_warm_adapter

    info = train_warm_adapter(tmp_path, policy="tiny", device="cpu", progress=False, steps=2, examples=4, lr=1e-2)
    assert info["summary"]["steps"] == 2 and (tmp_path / "adapter_model.safetensors").stat().st_size > 0
    policy = tiny_policy(seed=0)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    load_warm_adapter(policy, tmp_path)
    after = policy.model.state_dict()
    assert before.keys() == after.keys()  # merged: a plain model again, no adapter modules
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(p.requires_grad for p in policy.model.parameters())  # RL can train it
    with pytest.raises(FileNotFoundError, match="make warm-adapter"):
        load_warm_adapter(policy, tmp_path / "missing")
