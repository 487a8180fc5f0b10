"""The SB3 wrappers: Discrete candidate actions and hashed-feature observations over the text env."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.vec_env import DummyVecEnv

import envace_gym
from envace_gym import TaskSuite
from envace_gym.calls import parse_calls
from envace_gym.rewards import call_match
from envace_gym.wrappers import (
    PAD_ANSWER,
    CandidateActions,
    FeatureObservation,
    build_candidates,
    hashed_ngrams,
    param_shape,
    visible_values,
)


def _bank(split: str = "test", **kw) -> gym.Env:
    return gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split=split, **kw)


def _stack(split: str = "test", k: int = 16, dim: int = 256) -> gym.Env:
    return FeatureObservation(CandidateActions(_bank(split, max_turns=3), k=k), dim=dim)


def _covers(task, candidates) -> bool:
    return any(call_match(parse_calls(text).calls, [task.expected_calls[0]]) == 1.0 for text in candidates)


# ---------------------------------------------------------------------------- spaces and SB3
def test_sb3_check_env_passes_on_the_wrapped_env():
    env = _stack()
    check_env(env, warn=True)
    assert env.action_space == gym.spaces.Discrete(16)
    assert env.observation_space.shape == (256,) and env.observation_space.dtype == np.float32


def test_a_256_step_ppo_run_trains_and_acts_in_the_space():
    venv = DummyVecEnv([lambda: _stack("train") for _ in range(2)])
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    assert any(not np.allclose(a, b.detach()) for a, b in zip(before, model.policy.parameters(), strict=True))
    obs, _ = _stack().reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert 0 <= int(action) < 16


# ---------------------------------------------------------------------------- candidates
@pytest.mark.parametrize(
    "domain, k, floor", [("bank", 16, 0.95), ("retail", 24, 0.9), ("files", 24, 0.85), ("travel", 24, 0.9)]
)
def test_the_oracle_first_call_is_usually_among_the_candidates(domain, k, floor):
    suite = envace_gym.load_suite(f"builtin/{domain}").filter(split="test")
    tasks = [t for t in suite if t.reference_calls][:40]
    hits = 0
    for task in tasks:
        blind = dataclasses.replace(task, reference=())  # what the builder may use: no reference at all
        env = CandidateActions(gym.make("EnvACE-ToolCall-v0", tasks=[blind], split=None), k=k)
        _, info = env.reset(options={"task_id": task.id})
        hits += _covers(task, info["candidates"])  # the reference is read only here, to score
    assert hits / len(tasks) >= floor


def test_candidates_ignore_the_reference_and_are_deterministic():
    task = envace_gym.load_suite("builtin/bank").get("bank-test-0008")
    blind = dataclasses.replace(task, reference=())
    seen = []
    for t in (task, blind, task):
        env = CandidateActions(gym.make("EnvACE-ToolCall-v0", tasks=[t], split=None), k=16)
        _, info = env.reset(options={"task_id": task.id})
        seen.append((info["candidates"], info["action_mask"].tolist()))
    assert seen[0] == seen[1] == seen[2]
    assert any('"get_balance"' in c and "A-5247" in c for c in seen[0][0])


def test_index_to_text_mapping_is_what_the_env_executes():
    env = CandidateActions(_bank(max_turns=3), k=16)
    for index in range(16):
        _, info = env.reset(options={"task_id": "bank-test-0008"})
        text = info["candidates"][index]
        _, _, _, _, after = env.step(index)
        assert after["action_text"] == text
        sent = [m for m in after["messages"] if m["role"] == "assistant"][-1]
        assert sent["content"] == text
        calls = parse_calls(text).calls
        if calls:  # the call the env ran is the candidate's call
            assert [c["function"]["name"] for c in sent["tool_calls"]] == [c.name for c in calls]
            assert [json.loads(c["function"]["arguments"]) for c in sent["tool_calls"]] == [c.arguments for c in calls]
        else:
            assert after["tool_results"] == []


def test_after_a_call_the_first_answer_quotes_the_result_and_solves_the_task():
    env = CandidateActions(_bank(), k=16)
    _, info = env.reset(options={"task_id": "bank-test-0008"})
    index = next(i for i, c in enumerate(info["candidates"]) if '"get_balance"' in c)
    _, _, terminated, _, info = env.step(index)
    assert not terminated and "2215.7" in info["candidates"][0]
    _, reward, terminated, _, info = env.step(0)
    assert terminated and reward == 1.0 and info["success"]


def test_padding_is_a_masked_harmless_answer():
    suite = envace_gym.load_suite("builtin/bank").filter(split="test")
    task = next(t for t in suite if t.metadata["kind"] == "no_tool")
    env = CandidateActions(_bank(), k=16)
    _, info = env.reset(options={"task_id": task.id})
    mask = info["action_mask"]
    assert mask.dtype == bool and 0 < mask.sum() < 16 and (env.action_masks() == mask).all()
    assert all(c == PAD_ANSWER for c, real in zip(info["candidates"], mask, strict=True) if not real)
    assert not any("<tool_call>" in c for c in info["candidates"])  # no id, name or code: no call to guess
    state = env.unwrapped.backend.state_hash()
    env.step(int(np.flatnonzero(~mask)[0]))
    assert env.unwrapped.backend.state_hash() == state


def test_bad_arguments_are_refused_with_one_line():
    with pytest.raises(ValueError, match="k must be at least"):
        CandidateActions(_bank(), k=3)
    env = CandidateActions(_bank(), k=8)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(8)
    with pytest.raises(ValueError, match="dim"):
        FeatureObservation(env, dim=0)


def test_values_and_shapes():
    messages = [
        {"role": "user", "content": "I'm Vera Okafor. Send 120.50 from A-1234 to A-9876 and convert it to USD."},
        {"role": "tool", "content": json.dumps({"transaction_id": "T-7", "from_balance": 99.5})},
    ]
    got = [(v.value, v.shape) for v in visible_values(messages)]
    assert got[:5] == [("Vera Okafor", "name"), (120.5, "number"), ("A-1234", "id"), ("A-9876", "id"), ("USD", "code")]
    assert ("T-7", "id") in got and (99.5, "number") in got
    assert param_shape("account_id", {"type": "string", "description": 'The account id, e.g. "A-1234".'}) == "id"
    assert param_shape("from_currency", {"type": "string"}) == "code"
    assert param_shape("amount", {"type": "number"}) == "number"


def test_no_value_is_used_twice_in_one_call():
    tool = envace_gym.load_suite("builtin/bank").get("bank-test-0008").tools
    messages = [{"role": "user", "content": "Move 50 from A-1111 to A-2222."}]
    texts, _ = build_candidates(tool, messages, k=24)
    transfers = [parse_calls(t).calls[0].arguments for t in texts if '"transfer"' in t]
    assert transfers and all(a["from_account"] != a["to_account"] for a in transfers)
    assert transfers[0] == {"from_account": "A-1111", "to_account": "A-2222", "amount": 50}


# ---------------------------------------------------------------------------- features
def test_features_have_the_space_shape_dtype_and_are_deterministic():
    env = _stack(dim=512)
    a, _ = env.reset(options={"task_id": "bank-test-0008"})
    b, _ = env.reset(options={"task_id": "bank-test-0008"})
    c, _ = env.reset(options={"task_id": "bank-test-0010"})
    assert a.shape == (512,) and a.dtype == np.float32 and env.observation_space.contains(a)
    assert np.array_equal(a, b) and not np.array_equal(a, c) and a.sum() > 5
    obs, *_ = env.step(0)  # the observation moves with the history
    assert env.observation_space.contains(obs)


def test_feature_hashing_is_the_same_in_another_process():
    fields = [("user", "Check account A-5247 for me"), ("action", "<none>")]
    here = np.flatnonzero(hashed_ngrams(fields, 4096)).tolist()
    code = (
        "import json; from envace_gym.wrappers import hashed_ngrams; import numpy as np; "
        f"print(json.dumps(np.flatnonzero(hashed_ngrams({fields!r}, 4096)).tolist()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(out.stdout) == here
    # digits are shapes: another account id gives the same features
    assert np.array_equal(
        hashed_ngrams(fields, 4096), hashed_ngrams([("user", "Check account A-1180 for me"), fields[1]], 4096)
    )


def test_an_embedding_is_appended():
    env = FeatureObservation(CandidateActions(_bank(), k=8), dim=64, embed=lambda text: np.array([len(text), 1.0]))
    obs, _ = env.reset(options={"task_id": "bank-test-0008"})
    assert obs.shape == (66,) and env.observation_space.contains(obs) and obs[-1] == 1.0 and obs[-2] > 0


def test_the_wrappers_leave_the_wrapped_env_as_it_was():
    inner = _bank()
    base = inner.unwrapped
    before = {k: v for k, v in vars(base).items()}
    env = FeatureObservation(CandidateActions(inner, k=16), dim=64)
    assert vars(base) == before and inner.action_space is base.action_space
    assert env.get_wrapper_attr("k") == 16 and env.unwrapped is base
    env.reset(options={"task_id": "bank-test-0008"})
    _, _, _, _, info = inner.step("It holds 2215.70 EUR.")  # the text env underneath still takes text
    assert info["messages"][-1]["role"] in ("assistant", "user")


def test_the_stack_accepts_a_custom_task_list():
    tasks = [t for t in envace_gym.load_suite("builtin/bank").filter(split="train") if t.metadata["kind"] == "no_tool"]
    env = FeatureObservation(CandidateActions(gym.make("EnvACE-ToolCall-v0", tasks=TaskSuite(tasks[:5], "x")), k=8), 64)
    obs, info = env.reset(seed=0)
    assert info["task_id"] in {t.id for t in tasks[:5]} and obs.shape == (64,)


def test_a_sentence_initial_verb_is_not_part_of_a_name_and_cities_are_found():
    messages = [{"role": "user", "content": "Get Anouk Petrov a seat from Valletta -> Tallinn on 2026-04-10."}]
    got = [(v.value, v.shape) for v in visible_values(messages)]
    assert got == [("Anouk Petrov", "name"), ("Valletta", "name"), ("Tallinn", "name"), ("2026-04-10", "date")]
