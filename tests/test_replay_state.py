"""State-exact record/replay: a recorded result is replayed (or grounds the env role) only in the state it
was recorded in, keyed by the calls the episode ran before it."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from envace_gym import ToolCall, format_calls
from envace_gym.backends import ReplayFileError, ToolLog, history_key
from envace_gym.suites import load_suite


def _bank_task():
    """A bank task and two of its accounts (one with money to move)."""
    suite = load_suite("builtin/bank")
    task = next(t for t in suite.filter(split="train") if any(c.name == "transfer" for c in t.reference_calls))
    transfer = next(c for c in task.reference_calls if c.name == "transfer")
    return suite, task, transfer.arguments["from_account"], transfer.arguments["to_account"]


def _play(backend: str, task_id: str, actions: list[list[ToolCall]]) -> list[list[dict]]:
    env = gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split=None, backend=backend, max_turns=10)
    env.reset(options={"task_id": task_id})
    results = []
    for calls in actions:
        *_, info = env.step(format_calls(calls))
        results.append(info["tool_results"] + [{"error": e} for e in info["errors"]])
    return results


def test_a_balance_recorded_after_a_transfer_is_not_replayed_where_no_transfer_was_made(tmp_path):
    _, task, src, dst = _bank_task()
    cache = tmp_path / "cache.jsonl"
    recorded = [
        [ToolCall("transfer", {"from_account": src, "to_account": dst, "amount": 1.0})],
        [ToolCall("get_balance", {"account_id": src})],
    ]
    live = _play(f"cache:{cache}", task.id, recorded)  # records both results from the real backend
    assert len(cache.read_text().splitlines()) == 2
    # The same history replays exactly, with no real backend behind it.
    assert _play(f"replay:{cache}", task.id, recorded) == live
    # Another history (no transfer): the balance recorded after the transfer is never returned.
    (miss,) = _play(f"replay:{cache}", task.id, [[ToolCall("get_balance", {"account_id": src})]])
    assert "replay miss" in json.dumps(miss) and "in this state" in json.dumps(miss)
    # With the real backend behind the cache, that miss is answered by it: the real pre-transfer balance.
    (real,) = _play(f"cache:{cache}", task.id, [[ToolCall("get_balance", {"account_id": src})]])
    before = real[0]["content"]["balance"]
    after = live[1][0]["content"]["balance"]
    assert before == pytest.approx(after + 1.0)  # the two states' balances differ by the transfer


def test_the_tool_log_grounds_a_call_only_from_the_state_it_was_recorded_in():
    _, task, *_ = _bank_task()
    log = ToolLog.from_reference([task])
    calls = [(c.name, c.arguments) for c in task.reference_calls]
    assert len(calls) >= 2  # the last call has calls before it
    last_name, last_args = calls[-1]
    assert log.get(task.id, calls[:-1], last_name, last_args) is not None  # after the reference's own calls
    assert log.get(task.id, [], last_name, last_args) is None  # from the initial state: refused
    assert log.get(task.id, calls[:-1] + calls[:1], last_name, last_args) is None  # after one call too many


def test_an_old_cache_keyed_by_occurrence_is_refused_with_what_to_do(tmp_path):
    from envace_gym.backends import ReplayBackend

    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"task_id": "t", "name": "f", "arguments": {}, "occurrence": 0, "payload": 1}) + "\n")
    with pytest.raises(ReplayFileError, match=r"old\.jsonl:1: .*keyed by occurrence.*--backend cache:NEW\.jsonl"):
        ReplayBackend(old)
    assert history_key([]) != history_key([("f", {})])  # the empty history is a key of its own
