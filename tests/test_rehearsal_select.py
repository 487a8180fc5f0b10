"""Private rehearsal in select mode: rehearsals propose, the agent commits the chosen first message for real
(by agreement, or by the judge), re-plans from the real state before every turn, and nothing of the
rehearsals enters the actor's context."""

import json
import re
from types import SimpleNamespace

import gymnasium as gym
import pytest
from doubles import Recording

import envace_gym
from envace_gym import ToolCall, format_calls
from envace_gym.agents.rehearsal import PrivateRehearsal
from envace_gym.agents.rehearsal.memory import MEMORY_HEADER
from envace_gym.agents.rollout import collect
from envace_gym.backends import make_backend
from envace_gym.calls import canonical_json

TASK = "bank-test-0008"  # "Could you check what account A-5247 currently holds?" (one get_balance call)
SUITE = envace_gym.load_suite("builtin/bank")
RIGHT = ("get_balance", {"account_id": "A-5247"})
WRONG = ("get_balance", {"account_id": "A-1111"})
MISSPELT = ("get_balanse", {"account_id": "A-5247"})  # an unknown tool: REJECTED, in rehearsal and for real
IMAGINED = 9999.99  # what the env role imagines A-5247 holds; the real backend says 2215.7


# ------------------------------------------------------------------------------------------ test doubles
def real_env(calls, **kwargs):
    def backend(task):
        return Recording(make_backend(task.backend), calls)

    return gym.make("EnvACE-ToolCall-v0", tasks=list(SUITE), split=None, backend=backend, **kwargs)


def as_recorded(call):
    return call[0], canonical_json(call[1])


class WrongWorld:
    """A scripted env role that imagines a wrong balance for A-5247 (and an error for anything else)."""

    def imagine(self, request):
        if request.tool == "get_balance" and request.arguments.get("account_id") == "A-5247":
            payload = {"account_id": "A-5247", "balance": IMAGINED, "currency": "EUR"}
        else:
            payload = {"error": "unknown account"}
        return f"<execution_result>\n{json.dumps(payload)}\n</execution_result>"


def _balance(content):
    try:
        return json.loads(content).get("balance")
    except (ValueError, AttributeError):
        return None


class Planner:
    """A text policy that decides from the conversation alone (rehearsals act through fresh copies): on a user
    message it calls the next plan of ``Planner.plans`` (shared, in the order rehearsals act; the right call
    once they are spent), after a tool result it reports the balance it shows. It records every conversation
    it acts on."""

    plans: list = []
    seen: list = []

    def reset(self):
        pass

    def act(self, obs, info):
        messages = info["messages"]
        Planner.seen.append(json.dumps(messages))
        if messages[-1]["role"] == "user":
            name, args = Planner.plans.pop(0) if Planner.plans else RIGHT
            return format_calls([ToolCall(name, args)])
        balance = _balance(messages[-1]["content"])
        return f"Account A-5247 holds {balance:.2f} EUR." if balance is not None else "I do not know."


class Judge:
    """A scripted judge: always the same verdict; records the prompts it was shown."""

    def __init__(self, verdict):
        self.verdict, self.prompts = verdict, []

    def act(self, messages, tools, sampling):
        self.prompts.append(messages[-1]["content"])
        return SimpleNamespace(text=self.verdict, token_ids=[0, 0, 0])


@pytest.fixture(autouse=True)
def _fresh_planner():
    Planner.plans, Planner.seen = [], []


def run_select(plans, calls=None, **kwargs):
    Planner.plans = list(plans)
    calls = [] if calls is None else calls
    agent = PrivateRehearsal(Planner(), use="select", imaginer=WrongWorld(), **kwargs)
    (traj,) = collect([real_env(calls)], agent, 1, task_ids=[TASK], progress=False)
    return traj, calls


# ---------------------------------------------------------------------------------- choosing what to commit
def test_the_agreed_first_message_is_the_one_executed_for_real():
    traj, calls = run_select([RIGHT, RIGHT, WRONG], budget=3)
    assert calls == [as_recorded(RIGHT)]  # plan A (2 of 3) ran for real; plan B never did
    assert traj.success and traj.messages[-1]["content"] == "Account A-5247 holds 2215.70 EUR."
    first, second = traj.notes  # one stats-only note per decision
    assert first["text"] == "" and first["choice"] == "agreement" and first["votes"] == 2 and first["chosen"] == 1
    assert second["choice"] == "agreement" and second["votes"] == 3  # every rehearsal gave the same answer
    assert first["rehearsals"] == second["rehearsals"] == 3 and first["at"] == 2 and second["at"] == 4


def test_rejected_first_messages_are_no_candidates_and_none_left_means_the_policy_acts():
    traj, calls = run_select([MISSPELT, MISSPELT, RIGHT], budget=3)
    assert calls == [as_recorded(RIGHT)] and traj.notes[0]["candidates"] == 1  # the one unrejected, outvoted
    Planner.seen = []
    traj, calls = run_select([MISSPELT, MISSPELT], budget=2)
    assert traj.notes[0]["choice"] == "fallback" and traj.notes[0]["chosen"] is None
    assert calls == [as_recorded(RIGHT)] and traj.success  # the policy's own act: its plans were spent


def test_a_tie_goes_to_the_judge_and_without_one_to_the_earliest_rehearsal():
    judge = Judge("Rehearsal 2 does.")
    traj, calls = run_select([WRONG, RIGHT], budget=2, judge=judge)
    assert calls == [as_recorded(RIGHT)] and traj.success
    first = traj.notes[0]
    assert first["choice"] == "tie->judge" and first["chosen"] == 2
    assert first["judge_tokens"] == 3 and first["rehearsal_tokens"] == 3  # the verdict's tokens are counted
    (prompt,) = judge.prompts  # asked once: the second decision's rehearsals all agreed
    assert "account A-5247" in prompt and "Rehearsal 1: get_balance" in prompt and "Rehearsal 2: get_balance" in prompt
    assert prompt.endswith("Which rehearsal reaches the user's goal? Answer with its number.")
    _, calls = run_select([WRONG, RIGHT], budget=2)
    assert calls == [as_recorded(WRONG)]  # no judge: the earliest rehearsal of the tie


def test_the_judge_overrules_the_majority_and_an_unusable_verdict_falls_back_to_agreement():
    traj, calls = run_select([WRONG, WRONG, RIGHT], budget=3, choose="judge", judge=Judge("3"))
    assert calls == [as_recorded(RIGHT)] and traj.notes[0]["choice"] == "judge"
    assert traj.notes[1]["choice"] == "agreement" and traj.notes[1]["judge_tokens"] == 0  # nothing to judge
    traj, calls = run_select([WRONG, WRONG, RIGHT], budget=3, choose="judge", judge=Judge("all of them"))
    assert calls == [as_recorded(WRONG)] and traj.notes[0]["choice"] == "judge->agreement"
    traj, _ = run_select([WRONG, RIGHT, RIGHT], budget=3, choose="judge", judge=Judge("7"))  # out of range
    assert traj.notes[0]["choice"] == "judge->agreement" and traj.notes[0]["chosen"] == 2


def test_the_policys_own_draft_is_a_vote_that_wins_ties_and_loses_to_agreeing_rehearsals():
    # Plans are taken in order: the draft's, rehearsal 1's, rehearsal 2's, then the policy's own act where the
    # draft stands (it acts itself, as at budget 0).
    traj, calls = run_select([WRONG, RIGHT, RIGHT], budget=2, choose="draft")
    assert calls == [as_recorded(RIGHT)] and traj.notes[0]["choice"] == "agreement"  # two against the draft
    assert traj.notes[0]["votes"] == 2 and traj.notes[0]["chosen"] == 1
    traj, calls = run_select([WRONG, WRONG, RIGHT, WRONG], budget=2, choose="draft")
    assert calls == [as_recorded(WRONG)] and traj.notes[0]["choice"] == "draft" and traj.notes[0]["votes"] == 2
    assert traj.notes[0]["chosen"] == 0  # 0: the draft, not a rehearsal
    traj, calls = run_select([WRONG, RIGHT, MISSPELT, WRONG], budget=2, choose="draft", judge=Judge("2"))
    assert calls == [as_recorded(WRONG)] and traj.notes[0]["choice"] == "draft-tie"  # one against one: the draft
    assert traj.notes[0]["judge_tokens"] == 0  # no judge is asked


def test_a_draft_that_would_fail_is_no_candidate_and_the_policy_acts_only_where_nothing_is():
    traj, calls = run_select([MISSPELT, WRONG, RIGHT], budget=2, choose="draft")
    assert calls == [as_recorded(WRONG)] and traj.notes[0]["choice"] == "tie->earliest"  # the draft: no vote
    traj, calls = run_select([MISSPELT, MISSPELT, MISSPELT, MISSPELT], budget=2, choose="draft")
    assert traj.notes[0]["choice"] == "fallback" and traj.notes[0]["chosen"] is None
    assert calls[0] == as_recorded(MISSPELT) and "get_balanse" in traj.messages[2]["content"]  # its own move


def test_an_lm_policys_draft_is_generated_with_its_own_sampling_and_counted_apart():
    calls = []
    agent = PrivateRehearsal(scripted_lm([WRONG, RIGHT, RIGHT]), budget=2, use="select", choose="draft",
                             imaginer=WrongWorld())  # fmt: skip
    (traj,) = collect([real_env(calls)], agent, 1, task_ids=[TASK], progress=False)
    assert calls == [as_recorded(RIGHT)] and traj.success
    first = traj.notes[0]
    drafted = agent.policy.tokenizer.encode(format_calls([ToolCall(*WRONG)]), add_special_tokens=False)
    assert first["choice"] == "agreement" and first["draft_tokens"] == len(drafted) + 1  # and the end of turn
    (plain,) = collect([real_env([])], PrivateRehearsal(scripted_lm([RIGHT, RIGHT]), budget=2, use="select",
                       imaginer=WrongWorld()), 1, task_ids=[TASK], progress=False)  # fmt: skip
    assert first["rehearsal_tokens"] == plain.notes[0]["rehearsal_tokens"]  # the draft is counted apart
    assert traj.notes[1]["choice"] == "draft" and traj.notes[1]["votes"] == 3  # all three answer alike


def test_outcome_commits_the_plan_whose_rehearsals_reached_an_answer_without_an_imagined_error():
    # WrongWorld imagines an error for WRONG's account and a balance for RIGHT's: only RIGHT's rehearsal reaches
    # an answer with no error result. Plans in order: the draft's, rehearsal 1's, 2's, then the policy's own act.
    traj, calls = run_select([WRONG, WRONG, RIGHT], budget=2, choose="outcome")
    assert calls == [as_recorded(RIGHT)] and traj.success
    first = traj.notes[0]
    assert first["choice"] == "outcome" and first["chosen"] == 2 and first["reached"] == 1 and first["votes"] == 1
    traj, calls = run_select([WRONG, WRONG, RIGHT, WRONG], budget=2, choose="draft")  # by votes: WRONG, two to one
    assert calls == [as_recorded(WRONG)]
    traj, calls = run_select([RIGHT, WRONG, RIGHT, RIGHT], budget=2, choose="outcome")  # the draft's own plan reached
    assert calls == [as_recorded(RIGHT)] and traj.notes[0]["choice"] == "draft" and traj.notes[0]["chosen"] == 0
    traj, calls = run_select([WRONG, WRONG, WRONG, WRONG], budget=2, choose="outcome")  # none reached: the draft
    assert calls == [as_recorded(WRONG)] and traj.notes[0]["choice"] == "draft" and traj.notes[0]["reached"] == 0
    traj, calls = run_select([MISSPELT, WRONG, RIGHT], budget=2, choose="outcome")  # a draft that fails: no points
    assert calls == [as_recorded(RIGHT)] and traj.notes[0]["choice"] == "outcome"


# ------------------------------------------------------------------------------------------- re-planning
def test_each_decision_rehearses_from_the_real_state_not_the_imagined_one():
    traj, calls = run_select([], budget=2)
    imagined = [json.loads(s) for s in Planner.seen if json.loads(s)[-1]["role"] == "tool"]
    from_imagination = [m for m in imagined if _balance(m[-1]["content"]) == IMAGINED]
    from_reality = [m for m in imagined if _balance(m[-1]["content"]) == 2215.7]
    assert len(from_imagination) == 2  # decision 1: each rehearsal saw its imagined result
    assert len(from_reality) == 2  # decision 2: each rehearsal started from the real result
    assert from_reality[0][: len(traj.messages) - 1] == traj.messages[:-1]  # the real conversation, as it stood
    assert traj.success and str(IMAGINED) not in json.dumps(traj.messages)
    assert [n["rehearsals"] for n in traj.notes] == [2, 2]


def test_adaptive_stops_when_two_first_messages_agree():
    traj, _ = run_select([WRONG, RIGHT, RIGHT, WRONG], budget="adaptive", max_budget=4, mode="sequential")
    assert traj.notes[0]["rehearsals"] == 3 and traj.notes[0]["agreed"] is True and traj.notes[0]["chosen"] == 2
    assert traj.notes[1]["rehearsals"] == 2  # the answers agree at once


# ---------------------------------------------------------------------------------- LM policy: the tokens
def scripted_lm(plans, verdict="1"):
    """The tiny model's tokenizer and chat format with a scripted generation: a call of the next plan on a
    user turn, the balance after a tool result, ``verdict`` to the judge prompt. Each reply is encoded as a
    sampled one would be: its tokens and the end-of-turn token."""
    from envace_gym.agents.lm.engine import Generation, SamplingConfig
    from envace_gym.agents.lm.policy import tiny_policy

    policy = tiny_policy(sampling=SamplingConfig(temperature=0.0, max_new_tokens=48, seed=0))
    tok, queue = policy.tokenizer, list(plans)
    eot = tok.convert_tokens_to_ids("<|im_end|>")

    def reply(prompt):
        if "Which rehearsal reaches" in prompt:
            return verdict
        if prompt.rsplit("<|im_start|>", 2)[1].startswith("tool"):
            found = re.findall(r'"balance": ([\d.]+)', prompt.rsplit("<|im_start|>", 2)[1])
            return f"Account A-5247 holds {float(found[-1]):.2f} EUR." if found else "I do not know."
        name, args = queue.pop(0) if queue else RIGHT
        return format_calls([ToolCall(name, args)])

    def generate_ids(prompts, keys=None, sampling=None, generator=None, prefix_lens=None):
        out = []
        for ids in prompts:
            text = reply(tok.decode(ids))
            token_ids = tok.encode(text, add_special_tokens=False) + [eot]
            out.append(Generation(text, token_ids, [0.0] * len(token_ids), "stop", stop_text="<|im_end|>"))
        return out

    policy.generate_ids = generate_ids
    return policy


def test_no_rehearsal_text_reaches_the_actors_tokens_and_committed_turns_read_as_generated_ones():
    calls = []
    agent = PrivateRehearsal(scripted_lm([]), budget=2, use="select", imaginer=WrongWorld())
    (traj,) = collect([real_env(calls)], agent, 1, task_ids=[TASK], progress=False)
    (plain,) = collect([real_env([])], scripted_lm([]), 1, task_ids=[TASK], progress=False)
    assert calls == [as_recorded(RIGHT)] and traj.success and [n["choice"] for n in traj.notes] == ["agreement"] * 2
    assert traj.token_ids == plain.token_ids and traj.roles == plain.roles  # as if the policy had generated them
    text = agent.policy.tokenizer.decode(traj.token_ids)
    assert "2215.7" in text and str(IMAGINED) not in text  # only the real result
    assert "Rehearsal" not in text and "rehears" not in text.lower() and MEMORY_HEADER not in text
    actor = agent.policy.tokenizer.decode([t for t, r in zip(traj.token_ids, traj.roles, strict=True) if r == "actor"])
    assert actor == "".join(m["content"] + "<|im_end|>" for m in traj.messages if m["role"] == "assistant")


def test_an_lm_policy_judges_a_tie_itself():
    calls = []
    agent = PrivateRehearsal(scripted_lm([WRONG, RIGHT], verdict="2"), budget=2, use="select", imaginer=WrongWorld())
    (traj,) = collect([real_env(calls)], agent, 1, task_ids=[TASK], progress=False)
    assert calls == [as_recorded(RIGHT)] and traj.notes[0]["choice"] == "tie->judge"
    assert traj.notes[0]["judge_tokens"] == 2  # "2" and the end of turn


def test_bad_select_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="use must be"):
        PrivateRehearsal(Planner(), use="both", imaginer=WrongWorld())
    with pytest.raises(ValueError, match="choose must be"):
        PrivateRehearsal(Planner(), use="select", choose="vote", imaginer=WrongWorld())
    with pytest.raises(ValueError, match="judge"):
        PrivateRehearsal(Planner(), use="select", choose="judge", imaginer=WrongWorld())


# ---------------------------------------------------------------------------------- the tiny model, end to end
def test_eval_cli_selects_with_the_tiny_model_and_reports_rehearsals_per_episode(capsys):
    from envace_gym.cli import main

    code = main(["eval", "--policy", "tiny", "--suite", "builtin/bank", "--rehearsal-use", "select",
                 "--rehearsal-budget", "2", "--episodes", "2", "--max-turns", "2", "--max-new-tokens", "8",
                 "--json", "--no-progress"])  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["rehearsal"]["use"] == "select" and summary["rehearsal"]["choose"] == "agreement"
    rows = summary["per_episode"]
    assert len(rows) == 2 and all(row["rehearsals"] in (2, 4) and row["rehearsal_tokens"] > 0 for row in rows)
    assert summary["rehearsal"]["rehearsals_per_episode"] == sum(row["rehearsals"] for row in rows) / 2


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rehearsal-budget", "2", "--rehearsal-use", "plan"], "--rehearsal-use"),
        (["--rehearsal-budget", "2", "--rehearsal-use", "select", "--rehearsal-choose", "vote"], "--rehearsal-choose"),
        (["--rehearsal-use", "select"], "needs --rehearsal-budget"),
    ],
)
def test_eval_cli_refuses_bad_select_flags_in_one_line(capsys, argv, says):
    from envace_gym.cli import main

    assert main(["eval", "--policy", "tiny", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
