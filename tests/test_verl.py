"""verl's agent loop over our envs, run by verl's own ``AgentLoopWorker`` on CPU.

verl's rollout servers (Ray actors around vLLM) are replaced by a stand-in ``LLMServerClient`` driven by our HF
engine on the tiny random model, whose sampled tokens follow a script per episode (``ForcedTokens``: the
real engine and logprobs, only the chosen token is scripted); everything else is verl's: its trainer config
(the worked example, composed over verl's defaults), its dataset class and collate function, its worker's
batching, padding and reward placement.

verl 0.9.1 cannot go into the pinned .venv (it requires transformers<5.11); ``make test-verl`` runs this
file in .venv-verl, where it is installed beside the pinned stack (docs/verl.md).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip(
    "verl.experimental.agent_loop",
    reason="verl 0.9 is not installed beside the pinned stack: `make test-verl` runs these tests in .venv-verl",
)

from forced import ForcedTokens
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopWorker,
    DictConfigWrap,
    _agent_loop_registry,
)
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

import envace_gym
from envace_gym import ToolCall, format_calls
from envace_gym.agents.integrations import verl as adapter
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "verl"


class ScriptedServer(LLMServerClient):
    """verl's LLM server client with our HF engine behind it instead of Ray actors and vLLM: each episode
    (verl's sticky ``request_id``) takes the next script, one text per generation; the engine keeps each
    episode's KV cache under its request id, as vLLM's prefix cache would."""

    def __init__(self, config, policy, scripts, monkeypatch):
        super().__init__(config)
        self.policy = policy
        self.scripts = [list(s) for s in scripts]
        self.script_of: dict[str, int] = {}
        self.generated: dict[int, list[list[int]]] = defaultdict(list)  # per script: the token ids it sent back
        self.params: list[dict] = []
        self.forced = ForcedTokens(policy, [])
        monkeypatch.setattr(engine_module, "_sample", self.forced.sample)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.params.append(dict(sampling_params))
        k = self.script_of.setdefault(request_id, len(self.script_of))
        self.forced.queue.append(self.policy.chat.encode(self.scripts[k].pop(0)))
        sampling = SamplingConfig(
            sampling_params["temperature"], sampling_params["top_p"], sampling_params["max_tokens"]
        )
        gen = self.policy.generate_ids([prompt_ids], keys=[request_id], sampling=sampling)[0]
        self.generated[k].append(gen.token_ids)
        logprobs = gen.logprobs if sampling_params.get("logprobs") else None
        return TokenOutput(token_ids=gen.token_ids, log_probs=logprobs, stop_reason="completed")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """The tiny model and its tokenizer on disk: verl's model config loads both from a path."""
    policy = tiny_policy()
    out = tmp_path_factory.mktemp("tiny")
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    return out


def _config(tiny_dir, *overrides):
    """The worked example (examples/verl/envace_grpo.yaml over verl's defaults), on the tiny model."""
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(
            "envace_grpo",
            overrides=[
                f"actor_rollout_ref.model.path={tiny_dir}",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={EXAMPLES / 'agent_loops.yaml'}",
                "actor_rollout_ref.rollout.temperature=1.0",
                *overrides,
            ],
        )


def _one_call_task():
    return next(
        t
        for t in envace_gym.load_suite("builtin/bank")
        if len(t.reference) == 1 and len(t.reference[0].steps) == 1 and len(t.reference[0].steps[0]) == 1
    )


def _wrong_call(task) -> str:
    other = next(t for t in task.tools if t["function"]["name"] != task.reference_calls[0].name)
    return format_calls([ToolCall(other["function"]["name"], {})])


def _batch(cfg, tmp_path, task, agent_name, rows):
    """``rows`` copies of ``task``'s row, as verl's trainer builds a rollout batch: our parquet (verl_dataset),
    verl's RLHFDataset and collate function."""
    path = adapter.verl_dataset("builtin/bank", task.split, tmp_path / "data.parquet", agent_name=agent_name)
    dataset = RLHFDataset(str(path), tokenizer=tiny_policy().tokenizer, config=cfg.data)
    row = dataset.dataframe["task_id"].index(task.id)
    return DataProto.from_single_dict(collate_fn([dataset[row]] * rows))


def _run(cfg, server, batch, monkeypatch):
    """verl's worker plays the batch; returns its output and our trajectories (by script, i.e. episode)."""
    trajs = {}

    def recording_collect(envs, policy, *args, **kwargs):
        out = collect(envs, policy, *args, **kwargs)
        trajs[server.script_of[policy.engine.request_id]] = out[0]
        return out

    collect = adapter.collect
    monkeypatch.setattr(adapter, "collect", recording_collect)
    worker = AgentLoopWorker(cfg, server)
    output = asyncio.run(worker.generate_sequences(batch))
    return output, trajs


def _unpadded(output, i):
    """Row ``i`` of verl's padded batch, without its padding: prompt, response, response mask, logprobs, score."""
    b = output.batch
    p = b["prompts"].shape[1]
    keep_p = b["attention_mask"][i, :p].bool()
    keep_r = b["attention_mask"][i, p:].bool()
    return (
        b["prompts"][i][keep_p].tolist(),
        b["responses"][i][keep_r].tolist(),
        b["response_mask"][i][keep_r].tolist(),
        b["rollout_log_probs"][i][keep_r].tolist(),
        float(b["rm_scores"][i].sum()),
        int(keep_r.sum()),
    )


def test_worker_plays_real_episodes_with_our_masks_and_rewards(tiny_dir, tmp_path, monkeypatch):
    task = _one_call_task()
    good, answer = format_calls([task.reference_calls[0].call]), task.reference[0].answer
    cfg = _config(tiny_dir)
    policy = tiny_policy()
    # Two episodes of one task (a GRPO group): one calls right and answers, the other calls a wrong tool.
    server = ScriptedServer(cfg, policy, [[good, answer], [_wrong_call(task), answer]], monkeypatch)
    output, trajs = _run(cfg, server, _batch(cfg, tmp_path, task, "envace", 2), monkeypatch)

    assert sorted(trajs) == [0, 1] and not any(server.scripts)
    assert list(output.non_tensor_batch["task_id"]) == [task.id] * 2
    for i in range(2):
        prompt, response, mask, logprobs, score, n = _unpadded(output, i)
        traj = next(t for t in trajs.values() if t.token_ids == prompt + response)  # each row is one episode
        k = next(k for k, t in trajs.items() if t is traj)
        n_prompt = len(prompt)
        assert set(traj.roles[:n_prompt]) == {"prompt"} and "prompt" not in traj.roles[n_prompt:]
        # Policy tokens 1, tool results and everything else 0: our actor tags, as TRL's env_mask gets them.
        assert mask == traj.mask("actor")[n_prompt:]
        assert 0 in mask and 1 in mask
        # ...and the 1s are exactly the tokens the server generated for this episode, in order.
        assert [t for t, m in zip(response, mask, strict=True) if m] == sum(server.generated[k], [])
        assert logprobs == pytest.approx(traj.logprobs[n_prompt:])
        # The env's reward is verl's score, on the row's last response token.
        assert score == traj.reward == (1.0 if k == 0 else 0.0)
        assert output.batch["rm_scores"][i, n - 1] == traj.reward
        assert output.non_tensor_batch["envace_success"][i] == float(traj.success)
        assert output.non_tensor_batch["envace_task_id"][i] == task.id
    # verl's sampling params reached the server; ours set the token budget and the turn's stop tokens.
    assert {p["max_tokens"] for p in server.params} == {256}
    assert all(set(policy.engine.stop_token_ids) <= set(p["stop_token_ids"]) for p in server.params)
    assert all(p["logprobs"] and p["top_k"] == -1 for p in server.params)


@pytest.mark.parametrize("train_env_role", [False, True])
def test_inline_imagination_env_role_tokens_follow_train_env_role(tiny_dir, tmp_path, monkeypatch, train_env_role):
    """self-inline: the served model writes the tool result in the actor's context (a second server call of the
    same episode); its tokens get response_mask 0, or 1 with train_env_role, by the role tags TRL uses."""
    task = _one_call_task()
    call = task.reference_calls[0]
    cfg = _config(tiny_dir)
    loops = OmegaConf.load(EXAMPLES / "agent_loops.yaml")
    entry = next(e for e in loops if e.name == "envace_inline")
    entry.train_env_role = train_env_role
    loops_path = tmp_path / "loops.yaml"
    OmegaConf.save(loops, loops_path)
    cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(loops_path)
    policy = tiny_policy()
    script = [format_calls([call.call]), json.dumps(call.result), task.reference[0].answer]
    server = ScriptedServer(cfg, policy, [script], monkeypatch)
    output, trajs = _run(cfg, server, _batch(cfg, tmp_path, task, "envace_inline", 1), monkeypatch)

    traj = trajs[0]
    prompt, response, mask, _, score, _ = _unpadded(output, 0)
    assert traj.token_ids == prompt + response
    n = len(prompt)
    env_role = [int(r == "env_role") for r in traj.roles[n:]]
    assert sum(env_role) > 0 and traj.env_role_samples[0].valid
    assert mask == traj.mask(*(("actor", "env_role") if train_env_role else ("actor",)))[n:]
    assert [m for m, e in zip(mask, env_role, strict=True) if e] == [int(train_env_role)] * sum(env_role)
    # The imagined result is the server's second generation of this episode, spliced in as generated.
    imagined = [t for t, e in zip(response, env_role, strict=True) if e]
    assert imagined == server.generated[0][1]
    assert score == traj.reward == 1.0  # imagined == real result: the episode succeeds


def test_long_episodes_are_cut_to_response_length_with_their_reward(tiny_dir, tmp_path, monkeypatch):
    task = _one_call_task()
    good, answer = format_calls([task.reference_calls[0].call]), task.reference[0].answer
    cfg = _config(tiny_dir, "data.max_response_length=40")
    server = ScriptedServer(cfg, tiny_policy(), [[good, answer]], monkeypatch)
    output, trajs = _run(cfg, server, _batch(cfg, tmp_path, task, "envace", 1), monkeypatch)
    prompt, response, mask, _, score, _ = _unpadded(output, 0)
    assert len(trajs[0].token_ids) - len(prompt) > 40  # the episode was longer than verl's rows
    assert response == trajs[0].token_ids[len(prompt) :][:40] and mask == trajs[0].mask("actor")[len(prompt) :][:40]
    assert score == trajs[0].reward == 1.0
    assert output.non_tensor_batch["envace_truncated"][0] == 1.0


def test_example_config_sets_only_keys_verl_has(tiny_dir):
    """Every key the worked example sets exists in verl's own trainer config (a typo would be a new key)."""
    import verl

    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"), version_base=None
    ):
        base = OmegaConf.to_container(compose("ppo_trainer"), resolve=False)
    ours = OmegaConf.to_container(OmegaConf.load(EXAMPLES / "envace_grpo.yaml"), resolve=False)

    def leaves(node, prefix=()):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from leaves(value, (*prefix, key))
            else:
                yield (*prefix, key)

    def present(path):
        node = base
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True

    keys = [k for k in leaves(ours) if k[0] not in ("hydra", "defaults")]
    assert keys and [k for k in keys if not present(k)] == []
    assert OmegaConf.load(EXAMPLES / "agent_loops.yaml")[0]._target_ == _agent_loop_registry["envace"]["_target_"]


def test_loop_refuses_what_one_row_per_episode_cannot_train(tiny_dir):
    cfg = _config(tiny_dir)
    args = dict(
        trainer_config=DictConfigWrap(cfg),
        server_manager=None,
        tokenizer=tiny_policy().tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data),
    )
    with pytest.raises(ValueError, match="self-inline"):
        adapter.EnvACEAgentLoop(**args, backend="self", train_env_role=True)
    with pytest.raises(ValueError, match="imagined backend"):
        adapter.EnvACEAgentLoop(**args, backend="real", train_env_role=True)
    with pytest.raises(ValueError, match="simulator model"):
        adapter.EnvACEAgentLoop(**args, backend="simulator")
    loop = adapter.EnvACEAgentLoop(**args)
    with pytest.raises(ValueError, match="task_id"):
        asyncio.run(loop.run({"temperature": 1.0}, raw_prompt=[]))
