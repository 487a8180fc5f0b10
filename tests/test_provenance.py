"""Every result says where it ran (code, kernels, precision, threads, versions), and greedy decoding runs at one
precision on every CPU."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import torch

import envace_gym  # noqa: F401
from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.lm import policy as policy_module
from envace_gym.agents.lm.models import tiny_model
from envace_gym.agents.lm.policy import LMPolicy, bf16_by_default
from envace_gym.agents.provenance import describe_environment, pairing_mismatch, run_environment
from envace_gym.agents.scripted import OraclePolicy


def test_the_environment_names_the_kernels_precision_threads_and_versions_of_this_process():
    env = run_environment(precision="float32")
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["threads"] == torch.get_num_threads()
    assert env["versions"]["torch"] == torch.__version__
    assert env["versions"]["gymnasium"] == gym.__version__
    assert env["code"]  # the suite runs from a git checkout: its code is named
    line = describe_environment(env)
    assert env["cpu_capability"] in line and "float32" in line and f"torch {torch.__version__}" in line


def test_auto_precision_is_float32_on_every_cpu_even_one_with_native_bf16(monkeypatch):
    """``bf16="auto"`` decoded under bf16 autocast on AVX-512 CPUs and in float32 elsewhere, so one command
    evaluated at two precisions on two machines. Now a CPU that claims native bf16 still gets float32."""
    monkeypatch.setattr(policy_module, "bf16_supported", lambda device="cpu": True)
    assert not bf16_by_default("cpu")
    model, tokenizer = tiny_model(0, 1, 32)
    assert LMPolicy(model, tokenizer, bf16="auto").engine.bf16 is False
    assert LMPolicy(model, tokenizer, bf16=True).engine.bf16 is True  # asked for outright: honoured
    assert run_environment(LMPolicy(model, tokenizer, bf16=True))["precision"] == "bf16"

    class Agent:  # an agent around the model's policy (PrivateRehearsal, VerifiedCalls) reports its precision
        policy = LMPolicy(model, tokenizer, bf16=True)

    assert run_environment(Agent())["precision"] == "bf16"


def test_an_evaluation_summary_records_where_it_ran():
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test")
    report = evaluate(env, OraclePolicy(env.unwrapped.suite), 2, progress=False)
    recorded = report.summary()["environment"]
    assert recorded["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert recorded["precision"] == "none"  # a scripted policy decodes nothing


def test_two_environments_pair_only_where_code_kernels_precision_device_and_versions_agree():
    here = run_environment(precision="float32")
    assert pairing_mismatch(here, dict(here)) == []
    assert pairing_mismatch(here, {**here, "threads": here["threads"] + 1}) == []  # threads: recorded, not compared
    assert pairing_mismatch(here, {**here, "cpu_capability": f"not {here['cpu_capability']}", "precision": "bf16"}) == [
        "cpu_capability",
        "precision",
    ]
    newer = {**here, "versions": {**here["versions"], "transformers": "9.0.0"}}
    assert pairing_mismatch(here, newer) == ["versions.transformers"]
    assert pairing_mismatch(here, None) == ["environment"]  # a result kept from before: nothing says it ran alike


def test_every_test_file_that_trains_is_run_again_under_other_kernels():
    """make test-kernels (run by .ci/run) re-runs the files that sample or train under the scalar kernels: a
    new test file that trains must be on its list, or a kernel-dependent outcome could slip through."""
    root = Path(__file__).resolve().parent.parent
    listed = set(
        re.findall(r"tests/test_\w+\.py", (root / "Makefile").read_text().split("KERNEL_TESTS :=")[1].split("\n\n")[0])
    )
    trains = {
        f"tests/{p.name}"
        for p in (root / "tests").glob("test_*.py")
        if re.search(r"EnvACETrainer\(|train_sft\(|train_envace\(", p.read_text()) and p.name != "test_seams.py"
    }
    assert trains and trains <= listed, sorted(trains - listed)
    assert all((root / name).is_file() for name in listed), "KERNEL_TESTS names a file that does not exist"
