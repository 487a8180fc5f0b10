"""`envace eval` counts calls by what answered them (the call ledger's kinds: live, logged, imagined, rejected),
and its table shows the truncated and aborted episodes beside success and valid calls."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import gymnasium as gym

import envace_gym  # noqa: F401
from envace_gym.agents.eval.evaluate import CALL_FIELDS, evaluate
from envace_gym.agents.scripted import make_scripted_policy
from envace_gym.backends import LEDGER, ToolLog
from envace_gym.cli import main
from envace_gym.imagination import SelfRehearsalEnv
from envace_gym.suites import load_suite


def run(capsys, *argv):
    code = main(list(argv))
    out, _ = capsys.readouterr()
    return code, out


def eval_json(capsys, *argv):
    code, out = run(capsys, "eval", "--suite", "builtin/bank", "--json", "--no-progress", *argv)
    assert code == 0
    return json.loads(out)


def test_a_replayed_run_spends_no_live_call(capsys, tmp_path):
    cache = tmp_path / "wcache.jsonl"
    ToolLog.from_reference(list(load_suite("builtin/bank").filter(split="test")), cache)
    summary = eval_json(capsys, "--backend", f"replay:{cache}", "--episodes", "4", "--out", str(tmp_path / "o"))
    assert summary["success_rate"] == 1.0
    assert summary["live_calls_per_episode"] == 0 < summary["logged_calls_per_episode"]
    assert summary["imagined_calls_per_episode"] == summary["rejected_calls_per_episode"] == 0
    assert not any("real" in key for key in summary)  # no tool ran for the agent: nothing is called real
    episodes = [json.loads(line) for line in (tmp_path / "o" / "episodes.jsonl").read_text().splitlines()]
    assert [e["calls_live"] for e in episodes] == [0] * 4 and all(e["calls_logged"] == e["calls_ok"] for e in episodes)


def test_random_calls_count_rejected_apart_from_those_that_reached_a_backend(capsys, tmp_path):
    summary = eval_json(capsys, "--policy", "random", "--episodes", "8", "--seed", "0", "--out", str(tmp_path))
    rejected, reached = summary["rejected_calls_per_episode"], summary["live_calls_per_episode"]
    assert 0 < reached < rejected  # most random calls do not parse or fail the checks: they reach no backend
    assert summary["logged_calls_per_episode"] == summary["imagined_calls_per_episode"] == 0
    assert abs(summary["valid_call_rate"] - reached / (reached + rejected)) < 1e-9
    for line in (tmp_path / "episodes.jsonl").read_text().splitlines():
        e = json.loads(line)
        assert e["calls_live"] == e["calls_ok"]  # the real backend ran every call that passed the checks
    assert set(CALL_FIELDS) <= set(summary) and set(CALL_FIELDS) <= set(summary["by_domain"]["bank"])


class Garbage:
    """A scripted env role whose every answer is unusable: the episode is aborted."""

    def imagine(self, request):
        return SimpleNamespace(text="no result here")


def test_imagined_calls_are_counted_and_an_unusable_answer_aborts():
    suite = load_suite("builtin/bank")
    env = SelfRehearsalEnv(gym.make("EnvACE-ToolCall-v0", suite="builtin/bank", split="test"), Garbage())
    report = evaluate(env, make_scripted_policy("oracle", suite), 3, progress=False)
    s = report.summary()
    assert s["aborted"] == 3 and s["imagined_calls_per_episode"] == 1.0 and s["live_calls_per_episode"] == 0
    assert all(r.aborted.startswith("imagined result unusable: ") for r in report.results)
    assert [row["imagined_calls"] for row in report.per_episode()] == [1, 1, 1]


def test_the_table_says_when_every_episode_was_truncated(capsys):
    argv = ("eval", "--suite", "builtin/bank", "--no-progress")
    code, out = run(capsys, *argv, "--max-turns", "3", "--episodes", "2")
    table = out.split("every episode")[0]
    assert code == 0 and all(col in table for col in ("success", "truncated", "aborted", "valid"))
    assert "every episode was truncated: all 2 hit the turn limit (--max-turns 3)" in " ".join(out.split())
    assert "0.00 live" not in out and "0.00 logged, 0.00 imagined, 0.00 rejected" in out
    code, out = run(capsys, *argv, "--episodes", "2")
    assert code == 0 and "truncated" in out and "every episode was truncated" not in out


def test_a_tally_sees_this_threads_bookings_only():
    outer, inner = {}, {}
    with LEDGER.tally(outer):
        LEDGER.record("live")
        with LEDGER.tally(inner):
            LEDGER.record("logged", 2)
        thread = threading.Thread(target=LEDGER.record, args=("live",))
        thread.start()
        thread.join()
    LEDGER.record("live")
    assert outer == {"live": 1, "logged": 2} and inner == {"logged": 2}
