"""The call ledger: every tool call a training run makes is booked, by kind, and exactly the calls a real tool
ran are booked as such (a counting toolkit sees them). Pure imagination spends no live call."""

from __future__ import annotations

import dataclasses
import json
import threading
from types import SimpleNamespace

import gymnasium as gym
import pytest
from forced import ForcedTokens

import envace_gym  # noqa: F401
from envace_gym import ToolCall, format_calls
from envace_gym.agents.lm import engine as engine_module
from envace_gym.agents.lm.engine import SamplingConfig
from envace_gym.agents.lm.policy import tiny_policy
from envace_gym.agents.train.config import EnvACEConfig
from envace_gym.agents.train.envace import EnvACETrainer
from envace_gym.backends import LEDGER, CallLedger, PythonBackend, Toolkit, ToolLog, history_key, register_backend, tool
from envace_gym.env import ToolCallEnv
from envace_gym.imagination import SelfRehearsalEnv, format_execution_result
from envace_gym.tasks import RefCall, RefTurn, Task

RAN: list[str] = []  # every call a counting tool actually ran, in any backend of this process


class CounterToolkit(Toolkit):
    run_inline = True

    @tool
    def bump(self, by: int) -> dict:
        """Add to the counter.

        Args:
            by: How much.
        """
        RAN.append("bump")
        self.state["n"] = self.state.get("n", 0) + by
        return {"n": self.state["n"]}


register_backend("test/counter", lambda **kw: PythonBackend(CounterToolkit, **kw), overwrite=True)

TASK = Task(
    id="counter-1",
    user_turns=("Bump the counter by one.",),
    tools=tuple(s.to_openai() for s in CounterToolkit.tool_specs()),
    backend="test/counter",
    initial_state={"n": 0},
    reference=(RefTurn(steps=((RefCall("bump", {"by": 1}, {"n": 1}),),), answer="done"),),
    reward=("state_match",),  # scoring replays calls on a fresh real backend: verifier calls
    domain="counter",
    max_turns=1,  # one message per episode, then it is scored
)
# One message: a call the tool runs, and one the checks refuse (it never reaches a tool, so it is no call).
ACTION = format_calls([ToolCall("bump", {"by": 1}), ToolCall("no_such_tool", {})])


class Canned:
    """A scripted env role that answers every call with ``{"n": 1}`` and touches no backend."""

    def imagine(self, request):
        return SimpleNamespace(text=format_execution_result({"n": 1}))


def make_env() -> ToolCallEnv:
    return ToolCallEnv(tasks=[TASK], split=None)


@pytest.fixture
def policy(monkeypatch):
    """A tiny model whose every turn is ACTION (scripted tokens through the real engine)."""
    lm = tiny_policy(seed=0, sampling=SamplingConfig(1.0, 1.0, 64, 0))
    forced = ForcedTokens(lm, [ACTION] * 64)
    monkeypatch.setattr(engine_module, "_sample", forced.sample)
    return lm


def _config(**kw) -> EnvACEConfig:
    base = dict(steps=2, tasks_per_step=1, group_size=2, max_new_tokens=64, bf16=False, save_every=100)
    return EnvACEConfig(**{**base, **kw})


def _train(policy, cfg, out=None, **kw):
    """Train; returns the records, the ledger's change and the tool runs seen by the counting toolkit."""
    before, ran = LEDGER.snapshot(), len(RAN)
    trainer = EnvACETrainer(policy, make_env, cfg, out, env_role=lambda env: Canned(), progress=False, **kw)
    records = trainer.train()
    delta = {k: n - before[k] for k, n in LEDGER.snapshot().items()}
    return records, delta, len(RAN) - ran


def test_ledger_books_by_kind_thread_safely_and_charged_as_is_per_thread():
    ledger = CallLedger()
    threads = [threading.Thread(target=lambda: [ledger.record("live") for _ in range(500)]) for _ in range(4)]
    with ledger.charged_as("diagnostic"):  # this thread's override: the workers still book live
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ledger.record("verifier", 3)
        with ledger.charged_as("logged"):
            ledger.record("live")
        ledger.record("live")
    ledger.record("live")
    assert ledger.snapshot() == {"live": 2001, "logged": 1, "verifier": 0, "diagnostic": 4}
    with pytest.raises(ValueError, match="unknown call kind"):
        ledger.record("imagined")


def test_real_training_books_each_executed_call_as_live_and_reward_replays_as_verifier(policy, tmp_path):
    cfg = _config(backend="real", save_every=1)
    records, delta, ran = _train(policy, cfg, tmp_path / "run")
    episodes = cfg.steps * cfg.group_size
    assert [r["live_calls"] for r in records] == [cfg.group_size] * cfg.steps  # the refused call is not one
    assert delta["live"] == episodes and sum(r["verifier_calls"] for r in records) == delta["verifier"] > 0
    assert ran == delta["live"] + delta["verifier"]  # the tool ran exactly what the ledger booked
    assert delta["logged"] == delta["diagnostic"] == 0
    assert all(r["success_actor"] == 1.0 for r in records)
    assert records[-1]["live_calls_total"] == episodes
    # Resumed, the run's totals go on from the last kept metrics line.
    resumed = EnvACETrainer(
        policy, make_env, dataclasses.replace(cfg, steps=3), tmp_path / "run", resume=True, progress=False
    )
    assert resumed.call_totals["live_calls"] == episodes
    (last,) = resumed.train()
    assert last["live_calls_total"] == episodes + cfg.group_size
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["live_calls_total"] for r in lines] == [2, 4, 6]


@pytest.mark.parametrize("sim_to_real", [False, True])
def test_imagined_training_spends_no_live_call_and_sim_to_real_is_diagnostic(policy, sim_to_real):
    cfg = _config(backend="self", sim_to_real=sim_to_real)
    records, delta, ran = _train(policy, cfg)
    episodes = cfg.steps * cfg.group_size
    assert delta["live"] == 0 and all(r["live_calls"] == 0 and r["live_calls_total"] == 0 for r in records)
    assert all(r["n_env_role"] == cfg.group_size for r in records)  # the calls were imagined
    # Scored by the checklist bound to what the episode showed; the reward against the real values (kept beside
    # it) is the same here: the canned {"n": 1} is what the real tool answers.
    assert all(r["bound_episodes"] == cfg.group_size and r["binding_changed"] == 0 for r in records)
    # Scoring replays each episode's imagined calls (and the reference once per env) on a real backend.
    assert delta["verifier"] == sum(r["verifier_calls"] for r in records) >= episodes
    assert ran == delta["verifier"] + delta["diagnostic"]
    if not sim_to_real:
        assert delta["diagnostic"] == 0 and "sim_real_agreement" not in records[0]
        return
    # Each episode's action replayed for real (one bump each), plus its scoring there: all diagnostic.
    assert delta["diagnostic"] == sum(r["diagnostic_calls"] for r in records) >= episodes
    assert records[-1]["diagnostic_calls_total"] == delta["diagnostic"]
    for r in records:
        for key in ("real_reward_imagined", "real_success_imagined", "sim_real_agreement"):
            assert 0.0 <= r[key] <= 1.0
        # the imagined {"n": 1} is what the real tool answers: both runs succeed, and agree
        assert r["real_success_imagined"] == r["success_actor"] == r["sim_real_agreement"] == 1.0


def test_sim_to_real_replays_each_trajectorys_own_actions_on_the_real_backend(policy):
    """The diagnostic plays the trajectory's actions, not the task's: an action that succeeded in imagination
    but fails for real is reported as a real failure."""
    cfg = _config(backend="self", sim_to_real=True, steps=1)
    trainer = EnvACETrainer(policy, make_env, cfg, env_role=lambda env: Canned(), progress=False)
    trajs, _ = trainer.rollout(1)
    assert [t.success for t in trajs] == [True, True]
    # as if the first episode's imagined success had come from a double bump (n = 2 for real: state differs)
    trajs[0].episode.messages[2]["content"] = format_calls([ToolCall("bump", {"by": 2})])
    assert trainer.sim_to_real(trajs) == [(0.0, False), (1.0, True)]
    with pytest.raises(ValueError, match="--sim-to-real"):
        EnvACEConfig(backend="real", sim_to_real=True)


def _cache(path, *entries):
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_replay_hits_are_logged_and_fallback_executions_are_live(tmp_path):
    entry = {
        "task_id": TASK.id,
        "name": "bump",
        "arguments": {"by": 1},
        "history": history_key([]),
        "payload": {"n": 1},
    }
    two_bumps = format_calls([ToolCall("bump", {"by": 1})] * 2)

    def play(backend):
        before, ran = LEDGER.snapshot(), len(RAN)
        env = ToolCallEnv(tasks=[dataclasses.replace(TASK, reward=())], split=None, backend=backend)
        env.reset(options={"task_id": TASK.id})
        env.step(two_bumps)
        return {k: n - before[k] for k, n in LEDGER.snapshot().items()}, len(RAN) - ran

    # Replay only: the first bump is a hit (no tool runs), the second a miss (an error, no tool runs either).
    delta, ran = play(f"replay:{_cache(tmp_path / 'a.jsonl', entry)}")
    assert (delta["logged"], delta["live"], ran) == (1, 0, 0)
    # Cache with the real backend behind it: the hit keeps the real state in step, the miss asks it.
    delta, ran = play(f"cache:{_cache(tmp_path / 'b.jsonl', entry)}")
    assert (delta["logged"], delta["live"], ran) == (1, 2, 2)
    # Replay-only scoring on state replays the answered calls on a fresh real backend: verifier.
    env = ToolCallEnv(tasks=[TASK], split=None, backend=f"replay:{_cache(tmp_path / 'c.jsonl', entry)}")
    env.reset(options={"task_id": TASK.id})
    before, ran = LEDGER.snapshot(), len(RAN)
    *_, info = env.step(format_calls([ToolCall("bump", {"by": 1})]))
    assert info["success"] and LEDGER.snapshot()["verifier"] - before["verifier"] == len(RAN) - ran == 2


@pytest.mark.parametrize("grounding", ["none", "live", "log"])
def test_grounded_imagination_books_shadow_calls_live_and_tool_log_entries_logged(grounding, tmp_path):
    # No few-shot examples (grounding="none"): each real result shown as one is booked as logged too
    # (tests/test_grounding.py); here only the shadow calls and the log's targets are counted.
    kw = {"real_fraction": 1.0, "grounding": "none"} if grounding == "live" else {"grounding": "none"}
    if grounding == "log":  # the task's reference (bump by 1) as a recorded log: ACTION's bump is in it
        kw["log"] = ToolLog.from_reference([TASK], tmp_path / "log.jsonl")
    env = SelfRehearsalEnv(make_env(), Canned(), **kw)
    env.reset(options={"task_id": TASK.id})
    before, ran = LEDGER.snapshot(), len(RAN)
    env.unwrapped.scored = False  # leave the reward's replays out: this counts the episode's calls only
    *_, info = env.step(ACTION)
    delta = {k: n - before[k] for k, n in LEDGER.snapshot().items()}
    (sample,) = info["env_role_samples"]
    assert delta["live"] == len(RAN) - ran == (1 if grounding == "live" else 0)  # the refused call reached nothing
    assert delta["logged"] == (1 if grounding == "log" else 0)
    assert (sample.target is not None) == (grounding != "none")
    assert delta["verifier"] == delta["diagnostic"] == 0


def test_envace_train_cli_reports_call_totals_and_takes_sim_to_real(tmp_path, capsys):
    from envace_gym.cli import main

    argv = ["train", "--env", "EnvACE-ToolCall-v0", "--policy", "tiny", "--backend", "self", "--steps", "1"]
    argv += ["--group-size", "1", "--tasks-per-step", "1", "--max-new-tokens", "8", "--sim-to-real"]
    argv += ["--out", str(tmp_path / "t"), "--no-progress"]
    assert main([*argv, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["live_calls_total"] == 0
    for key in ("logged_calls_used_total", "verifier_calls_total", "diagnostic_calls_total"):
        assert isinstance(summary[key], int)
    (record,) = [json.loads(x) for x in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert record["diagnostic_calls_total"] == summary["diagnostic_calls_total"]
    assert 0.0 <= record["sim_real_agreement"] <= 1.0
    assert "sim_to_real = true" in (tmp_path / "t" / "config.toml").read_text()


class _DeviceCheckingUser:
    """A tau2 user that checks its phone's status bar once (a user-side tool call), then stops."""

    def __init__(self):
        self.turns = 0

    def reply(self, messages, tools):
        self.turns += 1
        if self.turns == 2:
            return format_calls([ToolCall("check_status_bar", {})])
        return "My phone has no data." if self.turns == 1 else "Fine, bye. ###STOP###"


@pytest.mark.parametrize("imagined", [False, True])
def test_tau2_user_tool_calls_are_live_and_scoring_replays_are_verifier(imagined):
    env = gym.make("EnvACE-Tau2-v0", domain="telecom", split=None, user=_DeviceCheckingUser())
    if imagined:  # the user's phone is then a private real environment kept in step with the episode
        env = SelfRehearsalEnv(env, Canned())
    env.reset(options={"task_id": env.unwrapped.suite[0].id})
    before = LEDGER.snapshot()
    *_, info = env.step("Please check your status bar.")
    delta = {k: n - before[k] for k, n in LEDGER.snapshot().items()}
    assert info["tau2"]["termination"] == "user_stop"
    assert delta["live"] == 1  # the user's one tool call ran on a real environment
    if imagined:  # scored by replaying the logged calls on a fresh environment
        assert delta["verifier"] >= 1
