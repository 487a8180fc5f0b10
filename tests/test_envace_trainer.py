"""The EnvACE trainer: it learns (honestly, on a toy task), resumes bit for bit, grounds imagination, and
``envace train`` writes what a run needs."""

from __future__ import annotations

import copy
import dataclasses
import json

import gymnasium as gym
import pytest
import torch
from doubles import alternating_rewards
from forced import ForcedTokens
from safetensors.torch import load_file

import envace_gym  # noqa: F401
from envace_gym import ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import collect
from envace_gym.agents.scripted import OraclePolicy
from envace_gym.agents.train.config import EnvACEConfig, load_config
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.agents.train.sft import SFTConfig, SFTExample, train_sft
from envace_gym.imagination import RealResultImaginer, SelfRehearsalEnv, format_execution_result
from envace_gym.rewards import register_reward_basis


def _called_get_balance(ctx) -> float:
    return float(any(c.name == "get_balance" for c in ctx.record.calls))


register_reward_basis("toy_called_get_balance", _called_get_balance, overwrite=True)


@pytest.fixture(scope="module")
def toy():
    """A one-turn task rewarded 1 for calling get_balance, and a tiny model warm-started to call either
    get_balance or find_accounts (so that RL has something to choose between)."""
    base = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train").unwrapped
    task = next(t for t in base.pool if t.reference_calls and t.reference_calls[0].name == "get_balance")
    toy_task = dataclasses.replace(task, reward=("toy_called_get_balance",), max_turns=1)

    def make() -> gym.Env:
        return gym.make("EnvACE-ToolCall-v0", tasks=[toy_task], split=None)

    policy = tiny_policy(seed=0, sampling=SamplingConfig(1.0, 1.0, 40, 0))
    _, info = make().reset(seed=0)
    prompt, head = policy.encode_prompt(info["messages"], info["tools"])
    examples = []
    for call in (ToolCall("get_balance", task.reference_calls[0].arguments), ToolCall("find_accounts", {"owner": "X"})):
        target = policy.chat.encode(format_calls([call]) + "<|im_end|>")
        examples.append(SFTExample("toy", prompt + target, [0] * len(prompt) + [1] * len(target), head))
    train_sft(policy, examples, SFTConfig(steps=100, lr=1e-2, batch_size=2, warmup_steps=0, bf16=False), progress=False)
    return make, policy, toy_task


def _fresh(policy):
    clone = copy.copy(policy)
    clone.model = copy.deepcopy(policy.model)
    clone.engine = copy.copy(policy.engine)
    clone.engine.model = clone.model
    clone.engine.clear()
    return clone


def _toy_calls(policy, make, task) -> tuple[list[int], str, str]:
    """The toy's first prompt (token ids) and the warm start's two completions: the rewarded get_balance call and
    the unrewarded find_accounts call."""
    _, info = make().reset(seed=0)
    prompt, _ = policy.encode_prompt(info["messages"], info["tools"])
    good = format_calls([ToolCall("get_balance", task.reference_calls[0].arguments)])
    return prompt, good, format_calls([ToolCall("find_accounts", {"owner": "X"})])


def _probability(policy, prompt: list[int], text: str) -> float:
    """The probability that ``policy`` (at the rollouts' temperature 1) answers ``prompt`` with ``text`` and stops:
    teacher-forced, exact, nothing sampled."""
    completion = policy.chat.encode(text + "<|im_end|>")
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = policy.model(ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion)[:, None])
    return float(logp.sum().exp())


def _config(**kw) -> EnvACEConfig:
    base = dict(steps=8, tasks_per_step=1, group_size=16, lr=1e-3, max_new_tokens=40, bf16=False, save_every=100)
    return EnvACEConfig(**{**base, **kw})


@pytest.mark.parametrize("backend", ["real", "self"])
def test_trainer_raises_the_reward_of_a_toy_task(toy, backend, monkeypatch):
    """Honest learning, on the real backend and under SelfRehearsalEnv with a scripted (perfect) env role: the
    env rewards calling get_balance (1) over find_accounts (0), and training shifts the policy from the
    unrewarded call to the rewarded one. Nothing is left to chance: in every group the engine is made to write
    (`ForcedTokens`: its real logprobs, only the token choice scripted) each call twice, so every group has a
    spread, and the probabilities are exact (teacher-forced), not sampled.

    The margins were checked on 10 warm starts (tiny_policy seeds 0-4, each under ATEN_CPU_CAPABILITY=avx2 and
    =default, whose warm starts differ: p(rewarded call) 0.30 and 0.10 for seed 0, the one used here), both
    backends (identical figures): the odds of the rewarded call over the other grew x4.7 to x48 (x30 and x48
    for seed 0; asserted: x2), and the unrewarded call's probability fell to at most 0.39 of what it was (0.07
    for seed 0; asserted: 0.6). The rewarded call's own probability rose on all 10 (x1.2 to x5.1) but is not
    asserted, the least margin being thin: pushing the other call down also spreads mass over other text.
    """
    make, start, task = toy
    policy = _fresh(start)
    prompt, good, bad = _toy_calls(policy, make, task)
    before = _probability(policy, prompt, good), _probability(policy, prompt, bad)
    cfg = _config(backend=backend, steps=4, group_size=4, lr=3e-4)
    forced = ForcedTokens(policy, [good, bad] * 2 * cfg.steps)
    monkeypatch.setattr(engine_module, "_sample", forced.sample)
    trainer = EnvACETrainer(policy, make, cfg, env_role=RealResultImaginer, progress=False)
    records = trainer.train()
    after = _probability(policy, prompt, good), _probability(policy, prompt, bad)
    assert not forced.queue and [r["reward_actor"] for r in records] == [0.5] * cfg.steps  # the env's rewards
    assert all(r["trained_rows"] == 4 for r in records)
    odds = (after[0] / after[1]) / (before[0] / before[1])
    assert odds >= 2 and after[1] <= 0.6 * before[1], (before, after)
    if backend == "self":
        assert all(r["n_env_role"] == 4 for r in records)  # the calls were imagined (by the scripted env role)
    # the toy task is graded on a basis of its own: it keeps its checker under imagination too
    assert all(r["bound_episodes"] == 0 and r["binding_changed"] == 0 for r in records)


def _strip(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.endswith("_s") and k != "tokens_per_s"}


def _trainer(*args, **kwargs) -> EnvACETrainer:
    """An `EnvACETrainer` scored by `alternating_rewards` (each group 1, 0, 1, 0), so every step trains."""
    trainer = EnvACETrainer(*args, **kwargs)
    trainer.score = alternating_rewards
    return trainer


@pytest.mark.parametrize("lora", [False, True])
def test_resume_gives_the_same_metrics_and_weights_as_an_uninterrupted_run(toy, tmp_path, lora):
    """Full weights, or LoRA adapters (resumed from the checkpoint's adapter file over the run's start). The
    rewards are scripted (`alternating_rewards`), so every step, the resumed one included, trains rows and moves
    the weights, whatever the model sampled: the comparison is never of two runs that did nothing."""
    make, start, _ = toy
    cfg = _config(backend="real", steps=3, group_size=4, tasks_per_step=2, save_every=1, keep_last=5, lora=lora)
    if lora:
        cfg = dataclasses.replace(cfg, lr=1e-2)  # adapters start at zero: a rate that moves them in 3 steps
    _trainer(_fresh(start), make, cfg, tmp_path / "a", progress=False).train()
    short = dataclasses.replace(cfg, steps=2)
    _trainer(_fresh(start), make, short, tmp_path / "b", progress=False).train()
    # a checkpoint cut off mid-write, and a folder without its trainer state: never loaded
    (tmp_path / "b" / ".ckpt-3.tmp-99999").mkdir()
    (tmp_path / "b" / "ckpt-7").mkdir()
    resumed = _trainer(_fresh(start), make, cfg, tmp_path / "b", resume=True, progress=False)
    assert resumed.step_done == 2
    (record,) = resumed.train()
    assert record["trained_rows"] == 8  # every row of the resumed step
    metrics = [[_strip(json.loads(x)) for x in (tmp_path / d / "metrics.jsonl").read_text().splitlines()] for d in "ab"]
    assert metrics[0] == metrics[1] and len(metrics[0]) == 3
    a = load_file(tmp_path / "a" / "ckpt-3" / "model.safetensors")
    b = load_file(tmp_path / "b" / "ckpt-3" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    s = load_file(tmp_path / "a" / "ckpt-2" / "model.safetensors")
    assert any(not torch.equal(a[k], s[k]) for k in a)  # the weights did move, in the step that was resumed
    assert (tmp_path / "b" / "learning_curve.png").stat().st_size > 0
    if lora:
        a, b = (load_file(tmp_path / d / "ckpt-3" / "adapter.safetensors") for d in "ab")
        assert a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _WrongBalance(RealResultImaginer):
    """A scripted env role whose answers are well-formed but wrong (every balance is 0)."""

    def imagine(self, request):
        real = json.loads(super().imagine(request).text.split("\n")[1])
        if isinstance(real, dict) and "balance" in real:
            real["balance"] = 0.0
        return type("Gen", (), {"text": format_execution_result(real)})()


@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_grounded_imagination_targets_are_the_real_results_and_the_actor_sees_the_imagined_ones(fraction):
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    task = next(t for t in env.unwrapped.pool if [c.name for c in t.reference_calls] == ["get_balance"])
    wrapped = SelfRehearsalEnv(env, _WrongBalance(env), real_fraction=fraction)
    (traj,) = collect([wrapped], OraclePolicy(env.unwrapped.suite), 1, task_ids=[task.id], progress=False)
    (sample,) = traj.env_role_samples
    tool_message = next(m for m in traj.messages if m["role"] == "tool")
    assert json.loads(tool_message["content"])["balance"] == 0.0  # what the actor saw: imagined
    if fraction == 0.0:
        assert sample.target is None
    else:
        assert sample.target == format_execution_result(task.reference_calls[0].result)


def test_config_from_toml_and_clear_errors(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('backend = "real"\ngroup_size = 3\n')
    cfg = load_config(path, steps=5)
    assert (cfg.backend, cfg.group_size, cfg.steps) == ("real", 3, 5)
    path.write_text("group_sise = 3\n")
    with pytest.raises(ValueError, match="c.toml: unknown EnvACEConfig key"):
        load_config(path)
    with pytest.raises(ValueError, match="--backend"):
        EnvACEConfig(backend="imagined")
    with pytest.raises(ValueError, match="--real-fraction"):
        EnvACEConfig(backend="real", real_fraction=0.5)


def test_default_lr_by_model_size_and_an_unset_lr_is_resolved_by_the_trainer(tmp_path):
    from envace_gym.agents.train.config import default_lr
    from envace_gym.agents.train.envace import _resolve_lr

    assert default_lr(134_515_008) == 2e-5  # the embedded SmolLM2-135M
    assert default_lr(1_000_000_000) == 2e-5 and default_lr(1_000_000_001) == 1e-6
    assert default_lr(7_000_000_000) == 1e-6
    with pytest.raises(ValueError, match="num_parameters"):
        default_lr(0)
    assert EnvACEConfig().lr is None  # "auto"
    with pytest.raises(ValueError, match="--lr"):
        EnvACEConfig(lr=0.0)
    model = torch.nn.Linear(1000, 1000)  # 1,001,000 parameters
    cfg, why = _resolve_lr(EnvACEConfig(), model, None)
    assert (cfg.lr, why) == (2e-5, "chosen for a 1M-parameter model")
    (tmp_path / "config.toml").write_text("lr = 0.003\nsteps = 3\n")
    cfg, why = _resolve_lr(EnvACEConfig(steps=5), model, tmp_path)  # resumed: the run's own rate
    assert (cfg.lr, cfg.steps) == (0.003, 5) and "resumed" in why
    (tmp_path / "config.toml").write_text("steps = 3\n")  # an older run folder without lr: by size
    assert _resolve_lr(EnvACEConfig(), model, tmp_path)[0].lr == 2e-5


def test_checklist_reward_replaces_the_env_reward(toy):
    make, start, _ = toy
    asked = []

    def judge(prompt: str) -> str:
        asked.append(prompt)
        return "yes"

    cfg = _config(backend="real", steps=1, group_size=2, reward="checklist")
    trainer = EnvACETrainer(_fresh(start), make, cfg, judge=judge, progress=False)
    trajs, groups = trainer.rollout(1)
    assert trainer.score(trajs) == [1.0, 1.0]  # every item "met" by the scripted judge
    assert asked
    with pytest.raises(ValueError, match="--judge"):
        EnvACETrainer(_fresh(start), make, cfg, progress=False)


def test_envace_train_cli_writes_metrics_checkpoint_plot_and_resumes(tmp_path, capsys):
    from envace_gym.cli import main

    out = tmp_path / "t"
    argv = ["train", "--env", "EnvACE-ToolCall-v0", "--policy", "tiny", "--backend", "self", "--steps", "2"]
    argv += ["--group-size", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    # no --lr: chosen by the model's size (the tiny model: 3.2M parameters), said once, and recorded
    assert "lr 2e-05 (chosen for a 3M-parameter model; set --lr to override)" in capsys.readouterr().out.splitlines()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    assert (out / "ckpt-2" / "model.safetensors").exists() and (out / "learning_curve.png").exists()
    assert 'backend = "self"' in (out / "config.toml").read_text()
    assert "lr = 2e-05" in (out / "config.toml").read_text().splitlines()
    (out / "config.toml").write_text((out / "config.toml").read_text().replace("lr = 2e-05", "lr = 0.001"))
    argv[argv.index("2")] = "3"  # --steps 3
    assert main([*argv, "--resume"]) == 0
    # a resumed run keeps the rate its config.toml records (here as if it had been started with --lr 1e-3)
    said = capsys.readouterr().out
    assert f"lr 0.001 (the resumed run's, from {out / 'config.toml'}; set --lr to override)" in said.splitlines()
    assert "with changed settings: steps\n" in said  # not lr
    assert "lr = 0.001" in (out / "config.toml").read_text().splitlines()
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert (out / "ckpt-3").exists()
    capsys.readouterr()
    ev = ["eval", "--policy", f"ckpt:{out / 'ckpt-3'}", "--episodes", "2", "--max-new-tokens", "8", "--json"]
    assert main([*ev, "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["episodes"] == 2
    assert main(["train", "--policy", "tiny", "--out", str(tmp_path / "x"), "--real-fraction", "2"]) == 2
    assert "--real-fraction" in capsys.readouterr().err


def test_log_grounded_training_supervises_logged_calls_and_reports_env_role_fidelity(toy):
    """--tool-log reference: the toy's reference call is in the log, so the env role's answer to it gets a
    grounding row and a fidelity score; the per-role settings are accepted and the weights move. (The actor is
    the oracle, so that its calls are the logged ones; the env role is the LM.)"""
    make, start, task = toy
    policy = _fresh(start)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    cfg = _config(backend="self", tool_log="reference", env_role_reward="mix", env_role_coef=0.5, steps=1)
    cfg = dataclasses.replace(cfg, group_size=4, env_role_kl_coef=0.1, on_invalid="error_observation")
    trainer = EnvACETrainer(policy, make, cfg, progress=False)
    assert len(trainer.tool_log) == len(task.reference_calls)
    oracles = [OraclePolicy(make().unwrapped.suite) for _ in trainer.envs]
    trajs = collect(trainer.envs, oracles, 4, task_ids=[task.id] * 4, progress=False)
    samples = trainer.samples(trajs, ["g"] * 4, [t.reward for t in trajs])
    stats = trainer.update(samples)
    record = trainer._metrics(1, trajs, [t.reward for t in trajs], samples, stats, 1.0, 1.0)
    assert record["n_env_role_known"] == 4 and record["n_grounded"] == 4  # one logged call per episode
    assert 0.0 <= record["fidelity_env_role"] <= 1.0 and record["exact_env_role"] is not None
    assert record["result_shaped_actor"] == 0.0  # the oracle writes calls and answers only
    assert stats["grounding_loss"] > 0
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


@pytest.mark.parametrize("filter_groups", [0, 2])
def test_filter_groups_draws_again_until_a_group_has_spread_and_trains_on_those_only(toy, filter_groups):
    """Dynamic sampling: the first draw's group is all ones (no gradient); with filter_groups the step draws
    again, keeps the group whose rewards differ, and trains on it alone."""
    make, start, _ = toy
    cfg = _config(backend="real", steps=1, group_size=4, filter_groups=filter_groups)
    trainer = EnvACETrainer(_fresh(start), make, cfg, progress=False)
    scripted = iter([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    trainer.score = lambda trajs: next(scripted)
    seen = []
    build = trainer.samples
    trainer.samples = lambda trajs, groups, rewards: seen.append(list(groups)) or build(trajs, groups, rewards)
    (record,) = trainer.train()
    if filter_groups:
        assert record["rollout_batches"] == 2 and record["groups_with_spread"] == 1
        assert seen == [["s1b1g0"] * 4] and record["trained_rows"] > 0  # the all-ones group is left out
    else:
        assert record["rollout_batches"] == 1 and record["groups_with_spread"] == 0
        assert seen == [["s1g0"] * 4]
    assert record["n_actor"] == 4 * record["rollout_batches"]  # metrics count every episode played
