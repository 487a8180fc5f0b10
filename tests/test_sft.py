import json

import gymnasium as gym
import torch

from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import LMPolicy, tiny_policy
from envace_gym.agents.rollout import collect
from envace_gym.agents.train.sft import SFTConfig, _collate, actor_token_loss, build_sft_examples, train_sft
from envace_gym.cli import main


def test_sft_lowers_actor_loss_and_checkpoint_round_trips(tmp_path):
    policy = tiny_policy(seed=1)
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    examples = build_sft_examples(env, policy, max_examples=4, progress=False)
    assert all(sum(e.loss_mask) > 0 and len(e.loss_mask) == len(e.input_ids) for e in examples)
    batch = _collate(examples, policy.engine.pad_id, 768)
    with torch.no_grad():
        before = float(actor_token_loss(policy.model, batch))
    summary = train_sft(
        policy, examples, SFTConfig(steps=12, lr=3e-3, batch_size=4, bf16=False), tmp_path / "ckpt", progress=False
    )
    with torch.no_grad():
        after = float(actor_token_loss(policy.model, batch))
    assert summary["steps"] == 12 and after < before * 0.8
    lines = (tmp_path / "ckpt" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 12 and json.loads(lines[-1])["step"] == 12
    loaded = LMPolicy.from_spec(f"ckpt:{tmp_path / 'ckpt'}", bf16=False)
    ids = torch.tensor([examples[0].input_ids[:64]])
    with torch.no_grad():
        assert torch.allclose(loaded.model(ids).logits, policy.model(ids).logits, atol=1e-5)


def test_cli_sft_then_eval_checkpoint(tmp_path, capsys):
    out = tmp_path / "s"
    assert (
        main(
            [
                "sft",
                "--env",
                "EnvACE-ToolCall-v0",
                "--suite",
                "builtin/bank",
                "--policy",
                "tiny",
                "--steps",
                "2",
                "--max-examples",
                "8",
                "--out",
                str(out),
                "--no-progress",
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 2 and (out / "model.safetensors").is_file()
    assert (
        main(
            [
                "eval",
                "--suite",
                "builtin/bank",
                "--policy",
                f"ckpt:{out}",
                "--episodes",
                "5",
                "--max-new-tokens",
                "8",
                "--max-turns",
                "2",
                "--json",
                "--no-progress",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 5 and 0.0 <= result["success_rate"] <= 1.0 and "bank" in result["by_domain"]


def test_cli_reports_a_missing_checkpoint_in_one_line(tmp_path, capsys):
    assert main(["eval", "--policy", f"ckpt:{tmp_path / 'nothing'}", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("envace: error:") and "envace sft" in err and err.count("\n") == 1


def test_embedded_model_plays_one_episode():
    policy = LMPolicy.default(sampling=SamplingConfig(temperature=0.0, max_new_tokens=48))
    assert policy.model.config.num_hidden_layers == 30 and policy.name == "default"
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=2)
    (traj,) = collect([env], policy, 1, progress=False)
    assert traj.actor_tokens > 0 and traj.turns >= 1
    assert any(m["role"] == "assistant" and m["content"].strip() for m in traj.messages)
    assert set(traj.components) == set(env.unwrapped.task.reward)


def test_lora_warm_start_merges_into_a_plain_checkpoint(tmp_path):
    policy = tiny_policy(seed=2)
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    examples = build_sft_examples(env, policy, max_examples=4, progress=False)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    train_sft(
        policy,
        examples,
        SFTConfig(steps=3, lr=1e-2, batch_size=2, lora=True, lora_rank=4, bf16=False),
        tmp_path / "lora",
        progress=False,
    )
    after = policy.model.state_dict()
    assert set(after) == set(before)  # merged: no adapter weights left
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed and all("proj" in k for k in changed)  # only the adapted projections moved
    loaded = LMPolicy.from_spec(f"ckpt:{tmp_path / 'lora'}", bf16=False)
    assert torch.equal(loaded.model.state_dict()[changed[0]], after[changed[0]])


def test_shared_head_gives_the_same_loss(tmp_path):
    policy = tiny_policy(seed=3)
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/files", split="train")
    examples = build_sft_examples(env, policy, max_examples=6, progress=False)
    group = [e for e in examples if e.input_ids[: e.head] == examples[0].input_ids[: examples[0].head]][:3]
    assert group[0].head > 0
    with torch.no_grad():
        plain = actor_token_loss(policy.model, _collate(group, policy.engine.pad_id, 768))
        shared = _collate(group, policy.engine.pad_id, 768, shared_head=True)
        assert "head_ids" in shared
        assert torch.allclose(plain, actor_token_loss(policy.model, shared), atol=1e-5)


def test_env_role_examples_target_the_real_result():
    policy = tiny_policy(seed=4)
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    examples = build_sft_examples(env, policy, max_examples=6, progress=False, roles=["actor", "env_role"])
    task_ids = {e.task_id for e in examples}
    suite = env.unwrapped.suite
    env_role = [e for e in examples if "precise tool simulator" in policy.tokenizer.decode(e.input_ids[: e.head])]
    assert len(env_role) == sum(len(suite.get(t).reference_calls) for t in task_ids)
    first = env_role[0]
    target = policy.tokenizer.decode([t for t, m in zip(first.input_ids, first.loss_mask, strict=True) if m])
    ref = suite.get(first.task_id).reference_calls[0]
    assert target == f"<execution_result>\n{json.dumps(ref.result, ensure_ascii=False)}\n</execution_result><|im_end|>"
    assert first.loss_mask[-1] == 1 and sum(first.loss_mask) < len(first.loss_mask)


def test_long_env_role_examples_keep_their_target():
    from envace_gym.agents.train.sft import SFTExample

    long = SFTExample("t", list(range(10, 2010)), [0] * 1990 + [1] * 10, head=5, keep_end=True)
    actor = SFTExample("t", list(range(10, 2010)), [1] * 2000, head=5)
    for shared in (False, True):
        batch = _collate([long], 0, 256, shared_head=shared)
        assert int((batch["labels"] != -100).sum()) == 10 and batch["input_ids"].shape[1] <= 256
        assert batch["input_ids"][0, -1].item() == 2009  # the end (the target) survived
    batch = _collate([actor], 0, 256)
    assert batch["input_ids"][0, 0].item() == 10 and batch["input_ids"].shape[1] == 256  # the start survived
