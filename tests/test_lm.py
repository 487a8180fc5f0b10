"""The language-model policy, engine, rollout and warm start, on a tiny random model with the real tokenizer."""

import json
import os

import gymnasium as gym
import pytest
import torch

import envace_gym
from envace_gym.agents.lm.chat import ChatFormat, encode_conversation
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.rollout import Trajectory, collect, load_trajectories, save_trajectories


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=0)


def bank_envs(n, max_turns=4):
    return [gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=max_turns) for _ in range(n)]


def teacher_forced_logprobs(policy, ids):
    with torch.no_grad():
        logits = policy.model(torch.tensor([ids])).logits.float()[0]
    return torch.log_softmax(logits, dim=-1)


def test_offline_flag_is_set():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


def test_recorded_logprobs_match_teacher_forcing(policy):
    # Sampled at temperature 1 over several turns: every actor token's recorded logprob equals a
    # teacher-forced forward pass over the whole trajectory.
    trajs = collect(
        bank_envs(3), policy, 3, sampling=SamplingConfig(temperature=1.0, max_new_tokens=16, seed=1), progress=False
    )
    for traj in trajs:
        logp = teacher_forced_logprobs(policy, traj.token_ids)
        actor = [i for i, r in enumerate(traj.roles) if r == "actor"]
        assert actor
        expected = torch.tensor([float(logp[i - 1, traj.token_ids[i]]) for i in actor])
        recorded = torch.tensor([traj.logprobs[i] for i in actor])
        assert torch.allclose(expected, recorded, atol=1e-4), (expected - recorded).abs().max()
        assert all(traj.logprobs[i] == 0.0 for i, r in enumerate(traj.roles) if r != "actor")


def test_roles_line_up_and_decode_to_the_transcript(policy):
    traj = collect(
        bank_envs(1, max_turns=3),
        policy,
        1,
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=12, seed=5),
        progress=False,
    )[0]
    assert len(traj.token_ids) == len(traj.roles) == len(traj.logprobs)
    text = policy.tokenizer.decode(traj.token_ids)
    final = policy.chat.render(
        traj.messages,
        traj.messages and envace_gym.load_suite("builtin/bank").get(traj.task_id).tools,
        add_generation_prompt=False,
    )
    # what is left is the end-of-turn marker the template adds (absent from the stream when the last
    # generation ran out of tokens) and whitespace
    assert final.startswith(text) and final[len(text) :].strip() in ("", "<|im_end|>")
    # each run of actor tokens decodes to one assistant message (plus its end-of-turn token)
    runs, current = [], []
    for tok, role in zip(traj.token_ids, traj.roles, strict=True):
        if role == "actor":
            current.append(tok)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    assistant = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    assert len(runs) == len(assistant)
    for ids, content in zip(runs, assistant, strict=True):
        assert policy.tokenizer.decode(ids).removesuffix("<|im_end|>") == content
    if any(m["role"] == "tool" for m in traj.messages):
        assert "external" in traj.roles


def test_greedy_batch_equals_single(policy):
    env = bank_envs(1)[0]
    convs = []
    for seed in range(4):
        _, info = env.reset(seed=seed)
        convs.append((info["messages"], info["tools"]))
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=10)
    batched = policy.act_batch(convs, greedy)
    single = [policy.act(m, t, greedy) for m, t in convs]
    assert [g.token_ids for g in batched] == [g.token_ids for g in single]


def test_kv_reuse_encodes_only_new_tokens_and_changes_nothing(policy):
    env = bank_envs(1)[0]
    _, info = env.reset(seed=3)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=8)
    ids, head = policy.encode_prompt(info["messages"], info["tools"])
    first = policy.generate_ids([ids], keys=["conv"], sampling=greedy, prefix_lens=[head])[0]
    follow = (
        ids
        + first.token_ids
        + policy.chat.encode('\n<|im_start|>tool\n{"balance": 3}<|im_end|>\n<|im_start|>assistant\n')
    )
    reused = policy.generate_ids([follow], keys=["conv"], sampling=greedy)[0]
    assert reused.prompt_tokens == len(follow) - (len(ids) + len(first.token_ids) - 1)
    fresh = policy.generate_ids([follow], sampling=greedy)[0]
    assert fresh.prompt_tokens == len(follow) and fresh.token_ids == reused.token_ids
    policy.engine.drop("conv")


def test_same_seed_same_trajectories(policy):
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=7)
    a = collect(bank_envs(2), policy, 3, sampling=cfg, progress=False)
    b = collect(bank_envs(2), policy, 3, sampling=cfg, progress=False)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    c = collect(
        bank_envs(2), policy, 3, sampling=SamplingConfig(temperature=1.0, max_new_tokens=12, seed=8), progress=False
    )
    assert [t.token_ids for t in a] != [t.token_ids for t in c]


def test_trajectory_jsonl_round_trip(policy, tmp_path):
    trajs = collect(
        bank_envs(2), policy, 2, sampling=SamplingConfig(temperature=1.0, max_new_tokens=8, seed=2), progress=False
    )
    path = save_trajectories(trajs, tmp_path / "t.jsonl")
    assert [t.to_dict() for t in load_trajectories(path)] == [t.to_dict() for t in trajs]
    line = json.loads(path.read_text().splitlines()[0])
    line["roles"] = line["roles"][:-1]
    (tmp_path / "bad.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: .*differ in length"):
        load_trajectories(tmp_path / "bad.jsonl")


def test_sync_vector_env_is_accepted(policy):
    venv = gym.vector.SyncVectorEnv(
        [lambda: gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test", max_turns=2)] * 2
    )
    trajs = collect(venv, policy, 3, sampling=SamplingConfig(temperature=1.0, max_new_tokens=6), progress=False)
    assert len(trajs) == 3 and all(isinstance(t, Trajectory) for t in trajs)


def test_encode_conversation_tags_assistant_text_as_actor(policy):
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="train")
    task = next(t for t in env.unwrapped.pool if t.reference_calls)
    from envace_gym.agents.scripted import OraclePolicy, play_episode

    info = play_episode(env, OraclePolicy(env.unwrapped.suite), task.id)
    stream = encode_conversation(policy.chat, info["messages"], info["tools"])
    actor_text = policy.tokenizer.decode([t for t, r in zip(stream.ids, stream.roles, strict=True) if r == "actor"])
    assert actor_text == "".join(m["content"] + "<|im_end|>" for m in info["messages"] if m["role"] == "assistant")
    assert policy.tokenizer.decode(stream.ids) == policy.chat.render(
        info["messages"], info["tools"], add_generation_prompt=False
    ).rstrip("\n")


def test_hermes_tool_block_for_templates_without_tools(policy):
    tools = envace_gym.load_suite("builtin/bank")[0].tools
    compact = ChatFormat(policy.tokenizer).render([{"role": "user", "content": "hi"}], tools)
    hermes = ChatFormat(policy.tokenizer, tool_format="hermes").render([{"role": "user", "content": "hi"}], tools)
    assert "- get_balance(account_id: string)" in compact and "<tool_call>" in compact
    assert "<tools>" in hermes and '"name": "get_balance"' in hermes
    assert len(hermes) > 2 * len(compact)


def test_the_converted_model_cache_is_keyed_by_the_file_not_its_path(tmp_path):
    """Two installs of the same model package (worktrees, a CI clone) share one converted copy: a path in the
    key made each re-convert and swap the folder out under processes reading it."""
    from envace_gym.agents.lm.models import _source_fingerprint

    a, b = tmp_path / "venv-a" / "m.gguf", tmp_path / "venv-b" / "m.gguf"
    for path, data in ((a, b"x" * 10), (b, b"y" * 10)):
        path.parent.mkdir()
        path.write_bytes(data)
    assert _source_fingerprint(a) == _source_fingerprint(b)
    b.write_bytes(b"y" * 11)  # another file: another key
    assert _source_fingerprint(a) != _source_fingerprint(b)


# ------------------------------------------------------------------------------------ typed seams
def test_both_engines_implement_the_engine_protocol_and_vllm_declares_no_field_of_its_own(policy):
    import ast
    import inspect

    from envace_gym.agents.lm.engine import HFEngine, VLLMEngine, _EngineBase
    from envace_gym.agents.lm.protocols import Engine, WeightSyncingEngine

    assert isinstance(policy.engine, HFEngine) and isinstance(policy.engine, Engine)
    assert not isinstance(policy.engine, WeightSyncingEngine)  # it runs the trained model itself
    fields = {"tokenizer", "stop_token_ids", "pad_id", "bf16", "stats"}
    source = ast.parse(inspect.getsource(VLLMEngine).strip())
    assigned = {t.attr for n in ast.walk(source) if isinstance(n, ast.Assign) for t in n.targets if hasattr(t, "attr")}
    assert assigned == {"llm"}  # the shared fields come from the common base, as HFEngine's do
    assert issubclass(VLLMEngine, _EngineBase) and issubclass(HFEngine, _EngineBase)
    assert all(callable(getattr(VLLMEngine, m)) for m in ("generate", "drop", "clear", "sync_weights"))
    assert fields <= set(vars(policy.engine))


def test_a_generation_is_immutable_and_an_inline_answer_is_a_new_one(policy):
    import dataclasses

    from envace_gym.imagination import ImagineRequest

    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "call"}]
    gen = policy.imagine(ImagineRequest(messages, "f", {}, mode="inline"), SamplingConfig(0.0, 1.0, 4, 0))
    assert gen.prompt_text  # set by building a new Generation, not by mutating the engine's
    with pytest.raises(dataclasses.FrozenInstanceError):
        gen.text = "changed"


def test_an_lm_policy_is_told_apart_by_what_its_class_declares_not_by_forwarded_attributes(policy):
    from envace_gym.agents.lm.chat import GENERATED_ROLES, ROLES
    from envace_gym.agents.lm.protocols import is_lm_policy
    from envace_gym.agents.rehearsal import PrivateRehearsal, VerifiedCalls
    from envace_gym.agents.rollout import PolicyHooks
    from envace_gym.agents.scripted import OraclePolicy

    class Forwarding:  # an object that forwards the LM's methods through __getattr__ is not an LM policy
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

    assert is_lm_policy(policy) and not is_lm_policy(Forwarding(policy))  # on 3.11 and 3.12 alike
    assert not is_lm_policy(OraclePolicy(envace_gym.load_suite("builtin/bank")))
    # The composed policies hold the LM policy explicitly and are not LM policies themselves.
    for composed in (PrivateRehearsal(policy, budget=1), VerifiedCalls(policy)):
        assert isinstance(composed, PolicyHooks) and composed.policy is policy and not is_lm_policy(composed)
        assert not any("__getattr__" in vars(cls) for cls in type(composed).__mro__)
    assert set(GENERATED_ROLES) < set(ROLES)


def test_a_policy_moves_to_a_torch_device_as_accelerate_names_it():
    import torch

    from envace_gym.agents.lm.device import resolve_device

    assert resolve_device(torch.device("cpu", 0)) == torch.device("cpu", 0)  # accelerate's CPU device
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="must be auto, cpu, cuda or cuda:N"):
        resolve_device("cpu:0")  # as a setting, only the names listed
    policy = tiny_policy().to(torch.device("cpu", 0))
    assert policy.engine.device.type == "cpu"
