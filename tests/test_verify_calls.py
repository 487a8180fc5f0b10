"""The env role as a verifier (``VerifiedCalls``): a state-changing call predicted to fail is revised once
before it is sent for real; a predicted success, or a read-only call, goes out unchanged; the private note
never reaches the committed context."""

import json
import re

import gymnasium as gym
import pytest
from doubles import Recording

import envace_gym
from envace_gym import ToolCall, format_calls
from envace_gym.agents.rehearsal import VerifiedCalls
from envace_gym.agents.rehearsal.verify import REVISE_PROMPT, is_read_only, predicted_error
from envace_gym.agents.rollout import collect
from envace_gym.backends import make_backend
from envace_gym.calls import canonical_json

SUITE = envace_gym.load_suite("builtin/bank")
TASK = "bank-test-0001"  # move 900 from A-9692 to A-1179
GOOD = ("transfer", {"from_account": "A-9692", "to_account": "A-1179", "amount": 900})
BAD = ("transfer", {"from_account": "A-9692", "to_account": "A-1179", "amount": 90000})
LOOKUP = ("get_balance", {"account_id": "A-9692"})
NOTE_MARK = "A private check predicts"


# ------------------------------------------------------------------------------------------ test doubles
def real_env(calls):
    def backend(task):
        return Recording(make_backend(task.backend), calls)

    return gym.make("EnvACE-ToolCall-v0", tasks=list(SUITE), split=None, backend=backend, max_turns=3)


def recorded(call):
    return call[0], canonical_json(call[1])


class Oracle:
    """A scripted env role that predicts real results: a transfer over 10000 fails (the env's error shape),
    any other call succeeds. It records every request it answers."""

    def __init__(self):
        self.requests = []

    def imagine(self, request):
        self.requests.append(request)
        if request.tool == "transfer" and request.arguments.get("amount", 0) > 10000:
            payload = {"error": {"code": "TOOL_EXECUTION_ERROR", "message": "insufficient funds: balance is 950.00"}}
        elif request.tool == "transfer":
            payload = {"transaction_id": "T-1", "from_balance": 50.0, "to_balance": 1000.0}
        else:
            payload = {"account_id": "A-9692", "balance": 950.0, "currency": "EUR"}
        return f"<execution_result>\n{json.dumps(payload)}\n</execution_result>"


def scripted_lm(first, revised=(GOOD,), prompts=None):
    """The tiny model's tokenizer and chat format with a scripted generation: on a user turn the calls of
    ``first``, or of ``revised`` when the private note is in its prompt; after a tool result, "Done."."""
    from envace_gym.agents.lm.engine import Generation, SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=48, seed=0))
    tok = policy.tokenizer
    eot = tok.convert_tokens_to_ids("<|im_end|>")

    def reply(prompt):
        last = prompt.rsplit("<|im_start|>", 2)[1]
        if last.startswith("tool"):
            return "Done."
        calls = revised if NOTE_MARK in last else first
        return format_calls([ToolCall(name, args) for name, args in calls])

    def generate_ids(prompts_, keys=None, sampling=None, generator=None, prefix_lens=None):
        out = []
        for ids in prompts_:
            text = tok.decode(ids)
            if prompts is not None:
                prompts.append(text)
            answer = reply(text)
            token_ids = tok.encode(answer, add_special_tokens=False) + [eot]
            out.append(Generation(answer, token_ids, [0.0] * len(token_ids), "stop", stop_text="<|im_end|>"))
        return out

    policy.generate_ids = generate_ids
    return policy


def run(first, revised=(GOOD,), prompts=None, **kwargs):
    calls, oracle = [], Oracle()
    agent = VerifiedCalls(scripted_lm(first, revised, prompts), imaginer=oracle, **kwargs)
    (traj,) = collect([real_env(calls)], agent, 1, task_ids=[TASK], progress=False)
    return traj, calls, oracle, agent


# ---------------------------------------------------------------------------------------------- the rule
def test_read_only_tools_by_annotation_else_by_name():
    assert is_read_only("get_balance") and is_read_only("find_accounts") and is_read_only("math.list_primes")
    assert not is_read_only("transfer") and not is_read_only("cancel_order") and not is_read_only("convert_currency")
    marked = {"type": "function", "function": {"name": "get_or_create", "annotations": {"readOnlyHint": False}}}
    assert not is_read_only("get_or_create", marked)
    assert is_read_only("convert_currency", {"name": "convert_currency", "annotations": {"readOnlyHint": True}})


def test_predicted_errors_in_the_envs_shape_or_as_text():
    error = {"error": {"code": "TOOL_EXECUTION_ERROR", "message": "no"}}
    assert predicted_error(error) == ("TOOL_EXECUTION_ERROR", "no")
    assert predicted_error({"error": "unknown account"}) == ("error", "unknown account")
    assert predicted_error({"balance": 3.0}) is None and predicted_error([{"error": "x"}]) is None
    assert predicted_error({"error": None, "ok": True}) is None


# ------------------------------------------------------------------------------------------ the verifier
def test_a_call_predicted_to_fail_is_revised_and_only_the_revision_runs_for_real():
    traj, calls, oracle, _ = run([BAD])
    assert calls == [recorded(GOOD)]  # the bad transfer never reached the real backend
    assert traj.components["state_match"] == 1.0  # the money moved as asked
    first, second = traj.notes  # one stats-only note per decision
    assert first["text"] == "" and first["use"] == "verify" and first["fired"] == 1 and first["predicted"] == 1
    assert first["error_code"] == "TOOL_EXECUTION_ERROR" and first["revision_tokens"] > 0
    assert first["verifier_tokens"] == first["env_role_tokens"] + first["revision_tokens"]
    assert second["calls"] == 0 and second["predicted"] == 0 and second["fired"] == 0  # "Done."
    assert [r.arguments["amount"] for r in oracle.requests] == [90000]  # the revision is not verified again


def test_a_predicted_success_goes_out_unchanged():
    prompts = []
    traj, calls, oracle, _ = run([GOOD], prompts=prompts)
    assert calls == [recorded(GOOD)] and traj.components["state_match"] == 1.0
    assert traj.notes[0]["fired"] == 0 and traj.notes[0]["predicted"] == 1 and traj.notes[0]["revision_tokens"] == 0
    assert len(oracle.requests) == 1 and not any(NOTE_MARK in p for p in prompts)  # no revision was asked


def test_read_only_calls_are_not_verified():
    traj, calls, oracle, _ = run([LOOKUP, BAD])
    assert oracle.requests and all(r.tool == "transfer" for r in oracle.requests)  # get_balance was not predicted
    assert traj.notes[0]["calls"] == 2 and traj.notes[0]["predicted"] == 1 and traj.notes[0]["fired"] == 1
    assert calls == [recorded(GOOD)]  # the revision: the transfer alone
    traj, calls, oracle, _ = run([LOOKUP], revised=(LOOKUP,))
    assert oracle.requests == [] and traj.notes[0]["predicted"] == 0 and calls[0] == recorded(LOOKUP)


def test_the_env_role_is_asked_as_the_env_asks_blind_and_with_the_draft():
    _, _, oracle, _ = run([BAD])
    (request,) = oracle.requests
    prompt = request.messages[-1]["content"]
    assert request.mode == "prompted" and "## Examples of real calls and results\n<unavailable>" in prompt
    assert "## The assistant's last message\n" + format_calls([ToolCall(*BAD)]) in prompt
    assert "A-9692" in prompt and "90000" in prompt


def test_the_private_note_and_the_draft_never_reach_the_committed_context():
    traj, _, _, agent = run([BAD])
    text = agent.policy.tokenizer.decode(traj.token_ids)
    assert NOTE_MARK not in text and "90000" not in text and "insufficient funds" not in text
    assert NOTE_MARK not in json.dumps(traj.messages) and "90000" not in json.dumps(traj.messages)
    actor = agent.policy.tokenizer.decode([t for t, r in zip(traj.token_ids, traj.roles, strict=True) if r == "actor"])
    assert actor == "".join(m["content"] + "<|im_end|>" for m in traj.messages if m["role"] == "assistant")
    assert format_calls([ToolCall(*GOOD)]) in actor


def test_revision_happens_at_most_once_a_turn():
    traj, calls, oracle, _ = run([BAD], revised=(BAD,))  # the policy writes the bad call again
    assert len(oracle.requests) == 1 and traj.notes[0]["fired"] == 1
    assert calls == [recorded(BAD)]  # the revised message is committed as it is: the real env answers it
    assert traj.components["state_match"] == 0.0


def test_the_revision_sees_its_draft_and_the_predicted_error_privately():
    prompts = []
    run([BAD], prompts=prompts)
    (revision,) = [p for p in prompts if NOTE_MARK in p]
    expected = REVISE_PROMPT.format(errors="transfer(" + canonical_json(BAD[1]) + ") -> TOOL_EXECUTION_ERROR: "
                                    "insufficient funds: balance is 950.00")  # fmt: skip
    assert expected in revision and format_calls([ToolCall(*BAD)]) in revision


def test_eval_report_counts_what_the_verifier_did():
    from envace_gym.agents.eval.evaluate import EvalReport

    traj, _, _, _ = run([BAD])
    report = EvalReport.from_trajectories([traj])
    (row,) = report.per_episode()
    assert row["verifier_fired"] == 1 and row["verifier_predicted"] == 1 and row["verifier_tokens"] > 0
    assert row["rehearsals"] == 0  # not counted as rehearsal: the verifier's notes keep their time apart
    assert all("seconds" not in note and "verifier_seconds" in note for note in traj.notes)
    verifier = report.summary()["verified_calls"]
    assert verifier["fired_per_episode"] == 1 and verifier["episodes_fired"] == 1
    assert verifier["success_rate_fired"] == 0  # state right, but the scripted answer "Done." names no amount


def test_bad_settings_are_one_line_errors():
    from envace_gym.agents.rehearsal import PrivateRehearsal
    from envace_gym.agents.scripted import NoopPolicy

    with pytest.raises(ValueError, match="language-model policy"):
        VerifiedCalls(NoopPolicy())
    policy = scripted_lm([GOOD])
    with pytest.raises(ValueError, match="hooks of its own"):
        VerifiedCalls(PrivateRehearsal(policy, budget=1))
    with pytest.raises(ValueError, match="errors"):
        VerifiedCalls(policy, revise_prompt="try again")


# ---------------------------------------------------------------------------------- the tiny model, end to end
def test_eval_cli_verifies_calls_with_the_tiny_model(capsys):
    from envace_gym.cli import main

    code = main(["eval", "--policy", "tiny", "--suite", "builtin/bank", "--verify-calls", "--episodes", "2",
                 "--max-turns", "2", "--max-new-tokens", "8", "--json", "--no-progress"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["verify_calls"] is True and "verified_calls" in summary
    assert len(summary["per_episode"]) == 2 and all("verifier_fired" in row for row in summary["per_episode"])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--policy", "oracle", "--verify-calls"], "language-model"),
        (["--policy", "tiny", "--verify-calls", "--rehearsal-budget", "2"], "--rehearsal-budget"),
    ],
)
def test_eval_cli_refuses_bad_verify_flags_in_one_line(capsys, argv, says):
    from envace_gym.cli import main

    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and re.search("verify-calls", err)


def test_no_revision_where_it_would_not_fit_the_context(monkeypatch):
    from envace_gym.agents.lm.policy import LMPolicy

    policy = scripted_lm([BAD])
    env = real_env([])
    _, info = env.reset(options={"task_id": TASK})
    room = len(policy.encode_prompt(info["messages"], info["tools"])[0]) + policy.sampling.max_new_tokens + 8
    monkeypatch.setattr(LMPolicy, "max_context", property(lambda self: room))  # the turn fits, a revision not
    calls, oracle = [], Oracle()
    (traj,) = collect([real_env(calls)], VerifiedCalls(policy, imaginer=oracle), 1, task_ids=[TASK], progress=False)
    assert len(oracle.requests) == 1 and traj.notes[0]["too_long"] == 1 and traj.notes[0]["fired"] == 0
    assert calls == [recorded(BAD)]  # the draft went out, as without the verifier
