"""TRL's GRPOTrainer with our rollout function, and the environment_factory adapter.

The tiny random model plays scripted token choices (``ForcedTokens``: the real engine, logprobs and caches,
only the sampled token is chosen), so episodes have tool results, rewards that differ inside a group, and
exactly known token bookkeeping.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

import torch
from forced import ForcedTokens

import envace_gym
from envace_gym import ToolCall, format_calls
from envace_gym.agents.integrations.trl import (
    EnvACERolloutFunc,
    env_reward,
    make_environment_factory,
    make_rollout_func,
    split_trajectory,
    task_dataset,
)
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import EpisodeResult, Trajectory

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def _one_call_task(reward=None, suite="builtin/bank"):
    """A one-turn task answered by one call (of a given reward spec)."""
    return next(
        t
        for t in envace_gym.load_suite(suite)
        if len(t.reference) == 1
        and len(t.reference[0].steps) == 1
        and len(t.reference[0].steps[0]) == 1
        and (reward is None or t.reward == reward)
    )


def _wrong_call(task) -> str:
    other = next(t for t in task.tools if t["function"]["name"] != task.reference_calls[0].name)
    return format_calls([ToolCall(other["function"]["name"], {})])


def test_grpo_trainer_two_steps_gets_our_role_tags_as_env_mask(monkeypatch, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    task = _one_call_task()
    good = format_calls([task.reference_calls[0].call])
    answer = task.reference[0].answer
    group, batch, steps = 2, 4, 2
    policy = tiny_policy()
    rollout = make_rollout_func(suite="builtin/bank", split=None, max_turns=2, max_new_tokens=200)
    captured, rewarded = [], []

    def capture(prompts, trainer):
        out = rollout(prompts, trainer)
        captured.append((list(prompts), out, list(rollout.last)))
        return out

    def reward(completions, **kwargs):
        rewarded.append(kwargs)
        return env_reward(completions, **kwargs)

    dataset = task_dataset("builtin/bank", None).filter(lambda r: r["task_id"] == task.id)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=steps,
        learning_rate=1e-2,
        per_device_train_batch_size=batch,
        num_generations=group,
        max_completion_length=512,
        scale_rewards="none",
        beta=0.0,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=policy.model,
        reward_funcs=reward,
        args=args,
        train_dataset=dataset.select([0, 0]),  # two groups of the same task per step
        processing_class=policy.tokenizer,
        rollout_func=capture,
    )
    # Each group: one episode calls right and answers (reward 1), the other calls a wrong tool (reward 0).
    script = ([good, _wrong_call(task)] * (batch // group) + [answer] * batch) * steps
    forced = ForcedTokens(rollout.policy(trainer), script)
    monkeypatch.setattr(engine_module, "_sample", forced.sample)
    before = [p.detach().clone() for p in policy.model.parameters()]
    trainer.train()

    assert len(captured) == steps and not forced.queue
    for (prompts, out, trajs), kwargs in zip(captured, rewarded, strict=True):
        # Rows come back aligned with TRL's prompts: contiguous groups of num_generations of one task.
        assert out["task_id"] == prompts == [t.task_id for t in trajs] and len(prompts) == batch
        assert all(len(set(prompts[i : i + group])) == 1 for i in range(0, batch, group))
        for i, t in enumerate(trajs):
            n = len(out["prompt_ids"][i])
            # Token for token: the ids TRL trains on are the stream we sampled, the mask is our actor tag.
            assert out["prompt_ids"][i] + out["completion_ids"][i] == t.token_ids
            assert set(t.roles[:n]) == {"prompt"} and "prompt" not in t.roles[n:]
            assert out["env_mask"][i] == t.mask("actor")[n:] == [int(r == "actor") for r in t.roles[n:]]
            assert out["logprobs"][i] == t.logprobs[n:]
            assert 0 in out["env_mask"][i] and 1 in out["env_mask"][i]  # tool results are masked out
        # The episode reward reached the reward function; it differs inside each group.
        assert kwargs["envace_reward"] == [t.reward for t in trajs] == [1.0, 0.0] * (batch // group)
        assert kwargs["task_id"] == prompts
    # TRL read env_mask as its tool mask: it counts only mask-1 tokens as completion length.
    logged = [r["completions/mean_length"] for r in trainer.state.log_history if "completions/mean_length" in r]
    expected = [sum(map(sum, out["env_mask"])) / batch for _, out, _ in captured]
    assert logged == pytest.approx(expected)
    # Every episode ended on the engine's stop token, which TRL takes for EOS: no row looks truncated (with
    # mask_truncated_completions=True a truncated-looking row would lose its whole loss).
    clipped = [r["completions/clipped_ratio"] for r in trainer.state.log_history if "completions/clipped_ratio" in r]
    assert clipped == [0.0] * steps
    assert expected != pytest.approx([sum(map(len, out["completion_ids"])) / batch for _, out, _ in captured])
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True))


def _fake_trainer(policy, max_completion_length=None):
    return SimpleNamespace(
        model=policy.model,
        processing_class=policy.tokenizer,
        accelerator=SimpleNamespace(unwrap_model=lambda m: m),
        args=SimpleNamespace(seed=0, temperature=1.0, top_p=1.0, max_completion_length=max_completion_length),
    )


@pytest.mark.parametrize("train_env_role", [True, False])
def test_inline_imagination_env_mask_follows_train_env_role(monkeypatch, train_env_role):
    """self-inline: the env role's answer sits in the actor's stream; train_env_role puts it in env_mask."""
    task = _one_call_task()
    call = task.reference_calls[0]
    script = [format_calls([call.call]), json.dumps(call.result), task.reference[0].answer]
    policy = tiny_policy()
    trainer = _fake_trainer(policy)
    rollout = make_rollout_func(
        backend="self-inline", train_env_role=train_env_role, suite="builtin/bank", split=None, max_new_tokens=200
    )
    out = _run_forced(monkeypatch, rollout, trainer, script, [task.id])
    traj = rollout.last[0]
    n = len(out["prompt_ids"][0])
    env_role = [int(r == "env_role") for r in traj.roles[n:]]
    assert sum(env_role) > 0 and traj.env_role_samples[0].valid
    assert out["env_mask"][0] == traj.mask(*(("actor", "env_role") if train_env_role else ("actor",)))[n:]
    on_env_role = [m for m, e in zip(out["env_mask"][0], env_role, strict=True) if e]
    assert on_env_role == [int(train_env_role)] * sum(env_role)
    assert out["envace_reward"] == [traj.reward] == [1.0]  # imagined == real result: the episode succeeds


def _run_forced(monkeypatch, rollout: EnvACERolloutFunc, trainer, script, prompts):
    forced = ForcedTokens(rollout.policy(trainer), script)
    monkeypatch.setattr(engine_module, "_sample", forced.sample)
    return rollout(prompts, trainer)


def test_rollout_func_refuses_what_trl_cannot_group():
    with pytest.raises(ValueError, match="self-inline"):
        make_rollout_func(backend="self", train_env_role=True)
    with pytest.raises(ValueError, match="imagined backend"):
        make_rollout_func(backend="real", train_env_role=True)
    with pytest.raises(TypeError, match="task_dataset"):
        make_rollout_func(suite="builtin/bank")([[{"role": "user", "content": "hi"}]], _fake_trainer(tiny_policy()))


def test_split_trajectory_cuts_ids_mask_and_logprobs_together():
    roles = ["prompt"] * 3 + ["actor"] * 4 + ["external"] * 3 + ["actor"] * 2
    traj = Trajectory(
        EpisodeResult("t", "bank", 1.0, True, {}, 1, False, 1, 0),
        token_ids=list(range(12)),
        roles=roles,
        logprobs=[0.0] * 3 + [-1.0] * 4 + [0.0] * 3 + [-2.0] * 2,
    )
    row = split_trajectory(traj, ["actor"], max_completion=6)
    assert row["prompt_ids"] == [0, 1, 2]
    assert row["completion_ids"] == [3, 4, 5, 6, 7, 8]
    assert row["env_mask"] == [1, 1, 1, 1, 0, 0]
    assert row["logprobs"] == [-1.0] * 4 + [0.0] * 2
    assert len(split_trajectory(traj, ["actor"])["env_mask"]) == 9


def test_environment_factory_tools_dispatch_by_name_and_score():
    from transformers.utils import get_json_schema

    task = _one_call_task(reward=("call_match", "state_match"), suite="builtin/files")  # no answer graded
    call = task.reference_calls[0]
    factory = make_environment_factory(suite="builtin/files", split=None)
    tools = {t["function"]["name"]: t["function"] for t in task.tools}
    public = {n for n in vars(factory) if not n.startswith("_")}
    assert public == set(tools)  # TRL exposes every public method as a tool: exactly the task's tools
    for name, spec in tools.items():  # TRL (transformers) reads each method back as the tool's schema
        schema = get_json_schema(getattr(factory, name))["function"]
        assert schema["name"] == name and schema["description"] == spec["description"]
        assert set(schema["parameters"]["properties"]) == set(spec["parameters"]["properties"])
        assert sorted(schema["parameters"].get("required", [])) == sorted(spec["parameters"].get("required", []))

    env = factory()
    assert env.reset(task_id=task.id) is None
    out = getattr(env, call.name)(**call.arguments)
    assert json.loads(out.split("\n", 1)[1].rsplit("\n", 1)[0]) == call.result  # the real backend answered
    assert env.get_reward() == 1.0

    env.reset(task_id=task.id)
    wrong = next(n for n in tools if n != call.name)
    assert "error" in getattr(env, wrong)().lower()  # missing required arguments: the env's schema check
    assert env.get_reward() == 0.0
    assert env.get_reward() == 0.0  # scored once
    with pytest.raises(ValueError, match="task_id"):
        env.reset()
