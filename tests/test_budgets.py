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
    assert "none" in metrics["fidelity_before"] and "success_ci" in metrics["after"]
    # before and after on the same test-id tasks: the paired difference, from the outcomes kept
    assert metrics["outcomes"]["before"].keys() == metrics["outcomes"]["after"].keys()
    assert all("-test-id-" in task for task in metrics["outcomes"]["before"]) and metrics["paired"]["tasks"] == 3
    assert metrics["calls"]["groups"] == 2 and 0 <= metrics["calls"]["groups_with_spread"] <= 2
    for name in ("plot.png", "transcript.md", "envace/learning_curve.png", "envace/ckpt-2/model.safetensors"):
        assert (run / name).exists(), name
    transcript = (run / "transcript.md").read_text()
    assert "One imagined episode" in transcript and "One real episode" in transcript


def _learning_bench():
    spec = importlib.util.spec_from_file_location("learning_bench", ROOT / "benchmarks" / "learning.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_learning_benchmark_runs_its_steps_and_episodes_on_a_slow_clock(tmp_path, slow_clock):
    bench = _learning_bench()
    argv = ["--policy", "tiny", "--out", str(tmp_path), "--arms", "untrained,envace-log", "--seeds", "0,1"]
    argv += ["--steps", "2", "--tasks-per-step", "2", "--group-size", "2", "--warm", "train", "--warm-steps", "2"]
    argv += ["--eval-episodes", "3", "--test-episodes", "2", "--max-new-tokens", "8", "--device", "cpu"]
    argv += ["--fidelity-episodes", "2"]
    report = bench.main(argv)
    arms = report["arms"]
    assert set(arms) == {"untrained", "envace-log"}
    log = arms["envace-log"]
    # every seed's steps, with the trainer's per-step record kept whole
    assert [[r["step"] for r in rs] for rs in log["records"].values()] == [[1, 2], [1, 2]]
    assert all({"trained_rows", "groups_with_spread", "rollout_s", "update_s"} <= set(r) for r in log["records"]["0"])
    assert log["live_calls"] == 0 and log["split"] == "test-id"
    # each seed on its own slice of test-id, the start on the same slices: paired task by task
    runs = {s: json.loads((tmp_path / f"envace-log-seed{s}" / "result.json").read_text()) for s in (0, 1)}
    slices = [set(runs[s]["evals"]["test-id"]["outcomes"]) for s in (0, 1)]
    assert len(slices[0]) == len(slices[1]) == 3 and not slices[0] & slices[1]
    assert log["test-id"]["episodes"] == arms["untrained"]["test-id"]["episodes"] == 6
    assert log["paired_vs_start"]["tasks"] == 6 and len(log["paired_vs_start"]["ci95"]) == 2
    assert log["test"]["episodes"] == arms["untrained"]["test"]["episodes"] == 4  # test: sliced per seed as well
    assert log["test"]["paired_vs_start"]["tasks"] == 4
    # the env role's fidelity: the same val calls for every run, paired with the start's call by call
    fidelity_tasks = set(bench.fidelity_tasks(bench.parse_args(argv)))
    assert len(fidelity_tasks) == 2 and all(t.startswith("bank-val-") for t in fidelity_tasks)
    for run in runs.values():
        assert {c["task_id"] for c in run["fidelity"]["calls_detail"]} == fidelity_tasks
        assert run["fidelity"]["grounding"] == "none" and "field_exact" in run["fidelity"]
    assert log["fidelity_vs_start"]["tasks"] == 2 and "field_exact" in arms["untrained"]["fidelity"]
    table = (tmp_path / "table.md").read_text()
    assert "| envace-log (2 seeds) |" in table and "paired vs start" in table and "env-role fields" in table
    # --resume keeps finished runs: nothing is trained again
    again = bench.main([*argv, "--resume"])
    assert again["arms"]["envace-log"]["records"] == log["records"]


def test_a_seed_slice_past_the_pool_is_refused_before_anything_trains(tmp_path):
    bench = _learning_bench()
    with pytest.raises(ValueError, match="seed 5 needs"):
        bench.main(["--policy", "tiny", "--out", str(tmp_path), "--seeds", "5", "--eval-episodes", "96"])
    assert not (tmp_path / "warm").exists()


def test_the_same_greedy_evaluation_gives_the_same_episodes_twice(tmp_path):
    """The benchmark's evaluation is fixed: the same tasks in the same batches, the engine's cache cleared, so a
    checkpoint's outcomes (and every generated token) repeat exactly, whatever the engine did before."""
    from envace_gym.agents.lm.policy import tiny_policy

    bench = _learning_bench()
    args = bench.parse_args(["--max-new-tokens", "12", "--eval-episodes", "20"])
    policy = tiny_policy(seed=3)
    tasks = bench.eval_slice(args, "test-id", 0)
    first = bench.evaluate_on(policy, args, "test-id", tasks)
    policy.sampling = policy.sampling.__class__(1.0, 1.0, 12, 7)  # something else in between: sampled episodes
    bench.collect([bench.env_factory(args, "val")() for _ in range(3)], policy, 5, progress=False)
    second = bench.evaluate_on(policy, args, "test-id", tasks)
    assert first["outcomes"] == second["outcomes"] and first["token_digest"] == second["token_digest"]
    assert len(first["token_digest"]) == 20 and len(set(first["token_digest"].values())) > 1


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
