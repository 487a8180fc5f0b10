"""Properties every builtin domain must have, checked through the real env."""

import importlib
import json
from collections import Counter

import gymnasium as gym
import pytest
from domain_checks import reference_hash, score

import envace_gym
from envace_gym.agents.eval.evaluate import evaluate
from envace_gym.agents.scripted import NoopPolicy, OraclePolicy, RandomPolicy
from envace_gym.envs.builtin._common import SPLITS
from envace_gym.rewards import normalize_answer
from envace_gym.suites import load_suite
from envace_gym.tasks import TaskSuite

DOMAINS = envace_gym.registration.BUILTIN_DOMAINS


def test_mix_size_and_balance():
    mix = load_suite("builtin")
    assert len(mix.filter(split="train")) >= 2000 and len(mix.filter(split="test")) >= 500
    assert mix.domains == sorted(DOMAINS) and mix.splits == sorted(SPLITS)
    for split in SPLITS:  # interleaved, so any prefix of a split is a balanced mix
        assert {t.domain for t in mix.filter(split=split)[: len(DOMAINS)]} == set(DOMAINS), split


def _strings(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield str(value)


def _has_dependent_call(task):
    """A later call uses a value that only an earlier result revealed (not in any user turn)."""
    seen: set[str] = set()
    said = " ".join(task.user_turns)
    for turn in task.reference:
        for step in turn.steps:
            for call in step:
                if any(v in seen and v not in said for v in _strings(call.arguments)):
                    return True
            for call in step:
                seen.update(s for s in _strings(call.result) if len(s) >= 3)
    return False


@pytest.mark.parametrize("domain", DOMAINS)
def test_domain_has_every_task_kind(domain):
    train = load_suite(f"builtin/{domain}").filter(split="train")
    assert any(_has_dependent_call(t) for t in train), "no multi-step task with a revealed dependency"
    assert any(len(step) >= 2 for t in train for turn in t.reference for step in turn.steps), "no parallel calls"
    assert any(not t.reference_calls for t in train), "no task that needs no tool"
    assert any(len(t.user_turns) >= 2 for t in train), "no multi-turn follow-up"


@pytest.mark.parametrize("domain", ["files", "retail"])  # the domains that tag each task's category
def test_every_kind_present_with_roughly_the_guide_weights(domain):
    module = importlib.import_module(f"envace_gym.envs.builtin.{domain}")
    train = load_suite(f"builtin/{domain}").filter(split="train")
    assert {t.metadata["kind"] for t in train} == set(module.KIND_CATEGORY)
    share = Counter(t.metadata["category"] for t in train)
    expected = {"single": 0.20, "multi_step": 0.30, "parallel": 0.15, "multi_turn": 0.15, "no_tool": 0.10}
    for category, target in expected.items():
        assert abs(share[category] / len(train) - target) < 0.05, (category, share[category])


@pytest.mark.parametrize("domain", DOMAINS)
def test_test_split_phrasings_are_held_out(domain):
    for kind, templates in importlib.import_module(f"envace_gym.envs.builtin.{domain}")._T.items():
        assert len(templates["train"]) >= 2 and len(templates["test"]) >= 1, kind
        assert not set(templates["train"]) & set(templates["test"]), kind
    suite = load_suite(f"builtin/{domain}")
    train_texts = {u for t in suite.filter(split="train") for u in t.user_turns}
    assert not [u for t in suite.filter(split="test") for u in t.user_turns if u in train_texts]


@pytest.mark.parametrize("domain", DOMAINS)
def test_reference_answers_contain_their_required_strings(domain):
    for task in load_suite(f"builtin/{domain}"):
        for turn in task.reference:
            haystack = f" {normalize_answer(turn.answer)} "
            for s in turn.answer_contains:
                assert f" {normalize_answer(s)} " in haystack, (task.id, s, turn.answer)


@pytest.mark.parametrize("domain", DOMAINS)
def test_reference_scores_one_and_refusing_does_not(domain):
    make = importlib.import_module(f"envace_gym.envs.builtin.{domain}").make_backend
    tasks = list(load_suite(f"builtin/{domain}"))
    refused = 0
    for task in tasks:
        calls = [c.call for c in task.reference_calls]
        assert score(task, calls, [t.answer for t in task.reference], reference_hash(task, make), make) == 1.0, task.id
        fresh = make(timeout=None)
        fresh.reset(task)
        refusal = ["I'm sorry, I cannot help with that."] * len(task.user_turns)
        refused += score(task, [], refusal, fresh.state_hash(), make) < 1.0
    assert refused == len(tasks)


@pytest.mark.parametrize("domain", DOMAINS)
def test_oracle_solves_every_test_task(domain):
    env = gym.make("EnvACE-ToolCall-v0", suite=f"builtin/{domain}", split="test")
    pool = env.unwrapped.pool
    report = evaluate(env, OraclePolicy(env.unwrapped.suite), len(pool), progress=False)
    failures = [r.task_id for r in report.results if not r.success]
    assert not failures, f"oracle failed on {failures[:5]}"
    assert len({r.task_id for r in report.results}) == len(pool)


@pytest.mark.parametrize("policy", [NoopPolicy(), RandomPolicy(seed=1)], ids=["noop", "random"])
def test_baselines_score_low(policy):
    env = gym.make("EnvACE-ToolCall-v0", split="test")
    summary = evaluate(env, policy, 400, progress=False).summary()
    assert summary["success_rate"] < 0.3
    for domain, stats in summary["by_domain"].items():
        assert stats["success_rate"] < 0.3, domain


def test_builtin_suite_jsonl_round_trip(tmp_path):
    suite = load_suite("builtin").filter(split="test")
    loaded = TaskSuite.load_jsonl(suite.save_jsonl(tmp_path / "test.jsonl"))
    assert len(loaded) == len(suite)
    assert all(
        json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
        for a, b in zip(loaded, suite, strict=True)
    )


def test_generation_is_deterministic_across_processes():
    import subprocess
    import sys

    code = (
        "import envace_gym, hashlib, json; s = envace_gym.load_suite('builtin'); "
        "print(hashlib.sha256(json.dumps([t.to_dict() for t in s], sort_keys=True).encode()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(i), "PATH": ""},
        ).stdout
        for i in (1, 2)
    }
    assert len(digests) == 1
