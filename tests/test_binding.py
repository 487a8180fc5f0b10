"""The reward bound to observations (`envace_gym.binding`): it equals today's reward wherever the results are
real, and under imagination it scores an actor that acts on what it was shown, where today's reward scores
it against real values it never saw."""

from __future__ import annotations

import dataclasses
import json
import random
import re

import gymnasium as gym
import pytest

import envace_gym  # noqa: F401
from envace_gym.agents.scripted import OraclePolicy, RandomPolicy
from envace_gym.binding import bound_score, checklist_of
from envace_gym.calls import ToolCall, format_calls
from envace_gym.imagination import SelfRehearsalEnv, format_execution_result
from envace_gym.rewards import EpisodeRecord

DOMAINS = ("bank", "files", "retail", "travel")


def _env(domain: str, **kwargs):
    return gym.make("EnvACE-ToolCall-v0", suite=f"builtin/{domain}", split=None, **kwargs)


def _play(env, task, next_action):
    """One episode of ``task``: ``next_action(obs, info)`` until it ends; (reward, last info)."""
    obs, info = env.reset(options={"task_id": task.id})
    while True:
        obs, reward, terminated, truncated, info = env.step(next_action(obs, info))
        if terminated or truncated:
            return reward, info


def _mutant_plan(task, rng: random.Random) -> list[str]:
    """The oracle's messages with one slip: a message dropped or repeated, or a digit changed in one."""
    plan = OraclePolicy.plan(OraclePolicy(None), task)
    i = rng.randrange(len(plan))
    roll = rng.random()
    if roll < 0.3:
        plan.pop(i)
    elif roll < 0.6:
        plan.insert(i, plan[i])
    else:
        plan[i] = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), plan[i], count=1)
    return plan


def _scripted(plan: list[str]):
    return lambda obs, info: plan.pop(0) if plan else "Done."


@pytest.mark.parametrize("domain", DOMAINS)
def test_on_real_results_the_bound_reward_is_todays_reward(domain):
    """Oracle, slipped-oracle and random episodes on the real backend: the checklist's reward equals the
    task reward on every one (one task in four of the domain, all splits)."""
    env = _env(domain)
    base = env.unwrapped
    tally = {"episodes": 0, "solved": 0, "bound": 0}
    for k, task in enumerate(base.pool[::4]):
        rng = random.Random(k)
        random_policy = RandomPolicy(seed=k)
        random_policy.reset()
        for next_action in (
            _scripted(OraclePolicy.plan(OraclePolicy(None), task)),
            _scripted(_mutant_plan(task, rng) if task.reference else []),
            random_policy.act,
        ):
            reward, _ = _play(env, task, next_action)
            bound, _ = bound_score(task, base.record)
            assert bound == reward, (task.id, reward, bound)
            tally["episodes"] += 1
            tally["solved"] += reward == 1.0
            tally["bound"] += reward == 1.0 and task.checklist.bound_values > 0
    # the comparison covered solved episodes whose checks read observations, and failed ones
    assert 0 < tally["bound"] <= tally["solved"] < tally["episodes"]


def test_on_recorded_results_the_bound_reward_is_todays_reward(tmp_path):
    cache = tmp_path / "bank.jsonl"
    tasks = _env("bank").unwrapped.pool[:40]
    recording = _env("bank", backend=f"cache:{cache}")
    for task in tasks:
        _play(recording, task, _scripted(OraclePolicy.plan(OraclePolicy(None), task)))
    replay = _env("bank", backend=f"replay:{cache}")
    for k, task in enumerate(tasks):
        reward, _ = _play(replay, task, _scripted(_mutant_plan(task, random.Random(k)) if task.reference else []))
        assert bound_score(task, replay.unwrapped.record)[0] == reward


# ------------------------------------------------------------------------------------------ imagination
_ID = re.compile(r"^(?:[A-Z]{1,2}-\d+|[A-Z]{2}\d{3})$")  # A-7079, T-4, BK-8304, EV-527, O-76928, LO245


class OtherWorld:
    """A scripted env role whose world is the real one with every id and amount changed: each id's digits
    shifted, every number raised (ints by 7, others by 11.11). The actor's calls are mapped back to the real
    ids before they run on a shadow real backend, so the imagined world is consistent with itself."""

    def __init__(self, env) -> None:
        self.base = env.unwrapped
        self.shadow = None
        self.episode = None
        self.fake: dict[str, str] = {}  # real id -> the id this world shows

    def _id(self, real: str) -> str:
        if real not in self.fake:
            self.fake[real] = re.sub(r"\d", lambda m: str((int(m.group()) + 7) % 10), real)
        return self.fake[real]

    def _change(self, value):
        if isinstance(value, dict):
            return {k: self._change(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._change(v) for v in value]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            return value + 7
        if isinstance(value, float):
            return round(value + 11.11, 2)
        if isinstance(value, str) and _ID.match(value):
            return self._id(value)
        return value

    def imagine(self, request) -> str:
        if self.episode != self.base.episode_index:
            self.episode = self.base.episode_index
            self.shadow = self.base.real_backend_for(self.base.task)
            self.shadow.reset(self.base.task, seed=0)
        real = {fake: real for real, fake in self.fake.items()}
        arguments = {k: real.get(v, v) if isinstance(v, str) else v for k, v in request.arguments.items()}
        result = self.shadow.execute(ToolCall(request.tool, arguments))
        return format_execution_result(self._change(result.payload()))


class ReadingActor:
    """Acts on what it observes: the values the user gave come from the task (they are the same in any
    world), every other one is read from the results it was shown. One script per task kind it solves."""

    def __init__(self, task) -> None:
        self.task = task
        self.script = getattr(self, task.metadata["kind"])(self._given())
        self.shown: list = []
        self.action = next(self.script)

    def _given(self) -> dict:
        return {k: v for c in self.task.reference_calls for k, v in c.arguments.items()}

    def _text(self) -> str:
        return " ".join(self.task.user_turns).lower()

    def act(self, obs, info) -> str:
        if self.action is None:
            return "Done."
        action, self.action = self.action, None
        return action

    def feed(self, info) -> None:
        """The results of the step just played, parsed, then the script's next message."""
        messages = info["messages"]
        tail = []
        for m in reversed(messages):
            if m["role"] != "tool":
                break
            tail.insert(0, json.loads(m["content"]))
        try:
            self.action = self.script.send(tail)
        except StopIteration:
            self.action = None

    @staticmethod
    def _call(tool, **arguments) -> str:
        return format_calls([ToolCall(tool, arguments)])

    @staticmethod
    def _calls(*calls) -> str:
        return format_calls([ToolCall(n, a) for n, a in calls])

    # bank
    def balance(self, g):
        (shown,) = yield self._call("get_balance", account_id=g["account_id"])
        yield f"It holds {shown['balance']}."

    def both_balances(self, g):
        ids = [c.arguments["account_id"] for c in self.task.reference_calls]
        shown = yield self._calls(*[("get_balance", {"account_id": i}) for i in ids])
        yield "Balances: " + " and ".join(str(s["balance"]) for s in shown) + "."

    def my_balance(self, g):
        (accounts,) = yield self._call("find_accounts", owner=g["owner"])
        kind = "checking" if "checking" in self._text() else "savings"
        account = next(a for a in accounts if a["type"] == kind)
        (shown,) = yield self._call("get_balance", account_id=account["account_id"])
        yield f"Your {kind} account holds {shown['balance']}."

    def last_txn(self, g):
        (shown,) = yield self._call("list_transactions", account_id=g["account_id"], limit=1)
        yield f"The latest is {shown[0]['id']}."

    def convert(self, g):
        (shown,) = yield self._call("convert_currency", **self.task.reference_calls[0].arguments)
        yield f"That is {shown['amount']}."

    def half_to_savings(self, g):
        (accounts,) = yield self._call("find_accounts", owner=g["owner"])
        checking = next(a["account_id"] for a in accounts if a["type"] == "checking")
        savings = next(a["account_id"] for a in accounts if a["type"] == "savings")
        (shown,) = yield self._call("get_balance", account_id=checking)
        half = round(shown["balance"] / 2, 2)
        yield self._call("transfer", from_account=checking, to_account=savings, amount=half)
        yield f"Moved {half} to savings."

    # retail
    def shipped_total(self, g):
        (customer,) = yield self._call("find_customer", email=g["email"])
        (orders,) = yield self._call("list_orders", customer_id=customer["customer_id"])
        order = next(o for o in orders if o["status"] == "shipped")
        yield f"Order {order['order_id']}, total {order['total']}."

    def update_address(self, g):
        (customer,) = yield self._call("find_customer", email=g["email"])
        (orders,) = yield self._call("list_orders", customer_id=customer["customer_id"])
        order = next(o for o in orders if o["status"] == "pending")
        yield self._call("update_shipping_address", order_id=order["order_id"], address=g["address"])
        yield "Done."

    # travel
    def book_cheapest(self, g):
        search = self.task.reference_calls[0].arguments
        (flights,) = yield self._call("search_flights", **search)
        cheapest = min(flights, key=lambda f: f["price"])
        (booking,) = yield self._call("book_flight", flight_id=cheapest["flight_id"], passenger=g["passenger"])
        yield f"Booked: {booking['booking_id']}."

    def cancel_booking(self, g):
        (bookings,) = yield self._call("find_bookings", passenger=g["passenger"])
        trip = next(b for b in bookings if b["destination"].lower() in self._text())
        (shown,) = yield self._call("cancel_booking", booking_id=trip["booking_id"])
        yield f"Cancelled; you get {shown['refund']} back."

    # files
    def find_size(self, g):
        (paths,) = yield self._call("find", name=g["name"])
        (shown,) = yield self._call("file_info", path=paths[0])
        yield f"It has {shown['size']} characters."


KINDS = {
    "bank": ("balance", "both_balances", "my_balance", "last_txn", "convert", "half_to_savings"),
    "retail": ("shipped_total", "update_address"),
    "travel": ("book_cheapest", "cancel_booking"),
    "files": ("find_size",),
}


def _imagined(domain: str, imagined_reward: str = "bound"):
    env = _env(domain, imagined_reward=imagined_reward)
    return env, SelfRehearsalEnv(env, OtherWorld(env), grounding="none")


@pytest.mark.parametrize("domain", sorted(KINDS))
def test_under_imagination_an_actor_that_acts_on_what_it_was_shown_scores_1(domain):
    """In a world where every id and amount differs from the real one, the reading actor solves each task:
    the bound reward gives 1 on every episode, today's reward (``info["reward_reference"]``) 0 on all."""
    env, imagined = _imagined(domain)
    played = 0
    for kind in KINDS[domain]:
        tasks = [t for t in env.unwrapped.pool if t.metadata.get("kind") == kind][:4]
        assert tasks, kind
        for task in tasks:
            actor = ReadingActor(task)
            obs, info = imagined.reset(options={"task_id": task.id})
            while True:
                obs, reward, terminated, truncated, info = imagined.step(actor.act(obs, info))
                if terminated or truncated:
                    break
                actor.feed(info)
            assert "aborted" not in info, info.get("aborted")
            assert reward == 1.0, (task.id, info["reward_components"], info["messages"][-1])
            assert info["reward_reference"] == 0.0, task.id
            played += 1
    assert played == 4 * len(KINDS[domain])


def test_imagined_reward_reference_scores_as_a_real_episode_would():
    env, imagined = _imagined("bank", imagined_reward="reference")
    task = next(t for t in env.unwrapped.pool if t.metadata.get("kind") == "my_balance")
    actor = ReadingActor(task)
    obs, info = imagined.reset(options={"task_id": task.id})
    while True:
        obs, reward, terminated, truncated, info = imagined.step(actor.act(obs, info))
        if terminated or truncated:
            break
        actor.feed(info)
    assert reward == 0.0 and "reward_reference" not in info


def test_imagined_reward_must_be_a_known_name():
    with pytest.raises(ValueError, match="imagined_reward must be one of"):
        _env("bank", imagined_reward="judge")


# ------------------------------------------------------------------------------------------ the scorer alone
def _my_balance_task():
    return next(t for t in _env("bank").unwrapped.pool if t.metadata.get("kind") == "my_balance")


def _record(task, accounts, balance_shown, id_sent, answer):
    owner = task.reference_calls[0].arguments["owner"]
    calls = [ToolCall("find_accounts", {"owner": owner}), ToolCall("get_balance", {"account_id": id_sent})]
    results = [accounts, {"account_id": id_sent, "balance": balance_shown}]
    return EpisodeRecord(calls=calls, results=results, turn_answers=[answer])


def test_a_bound_argument_must_be_the_value_shown():
    task = _my_balance_task()
    kind = "checking" if "checking" in task.user_turns[0] else "savings"
    other = "savings" if kind == "checking" else "checking"
    accounts = [{"account_id": "A-1111", "type": other}, {"account_id": "A-2222", "type": kind}]
    assert bound_score(task, _record(task, accounts, 12.5, "A-2222", "It holds 12.50."))[0] == 1.0
    # the other account's id, or the real id it was never shown: not the step
    assert bound_score(task, _record(task, accounts, 12.5, "A-1111", "It holds 12.50."))[0] == 0.0
    real_id = task.reference_calls[1].arguments["account_id"]
    assert bound_score(task, _record(task, accounts, 12.5, real_id, "It holds 12.50."))[0] == 0.0
    # an answer with another amount than the one shown
    assert bound_score(task, _record(task, accounts, 12.5, "A-2222", "It holds 13.00."))[0] == 0.0


def test_a_result_the_actor_cannot_use_fails_the_step():
    task = _my_balance_task()
    no_ids = [{"type": "checking"}, {"type": "savings"}]  # lacks the field the next step reads
    assert bound_score(task, _record(task, no_ids, 12.5, "A-2222", "It holds 12.5."))[0] == 0.0
    unparsed = "not a list"
    assert bound_score(task, _record(task, unparsed, 12.5, "A-2222", "It holds 12.5."))[0] == 0.0


def test_scoring_reads_no_backend_and_no_reference_result(monkeypatch):
    """The score is a function of the checklist and the episode: with the task's reference results erased
    (the checklist kept) and every backend factory broken, it is unchanged."""
    task = _my_balance_task()
    checklist = checklist_of(task)
    erased_turns = tuple(
        dataclasses.replace(
            turn, steps=tuple(tuple(dataclasses.replace(c, result=None) for c in s) for s in turn.steps)
        )
        for turn in task.reference
    )
    erased = dataclasses.replace(task, reference=erased_turns)
    erased.__dict__["checklist"] = checklist  # the cached checklist, built before the results were erased
    for where in (
        "envace_gym.backends.make_backend",
        "envace_gym.env.make_backend",
        "envace_gym.imagination.backend.make_backend",
    ):
        monkeypatch.setattr(where, lambda *a, **k: pytest.fail("read a backend"))
    accounts = [{"account_id": "A-2222", "type": "checking"}, {"account_id": "A-1111", "type": "savings"}]
    kind = "checking" if "checking" in task.user_turns[0] else "savings"
    right = "A-2222" if kind == "checking" else "A-1111"
    record = _record(task, accounts, 99.99, right, "99.99")
    assert bound_score(erased, record) == bound_score(task, record)
    assert bound_score(erased, record)[0] == 1.0


def test_checklist_names_what_it_reads_and_what_it_keeps_literal():
    task = _my_balance_task()
    checklist = task.checklist
    find, balance = checklist.calls
    assert find.arguments["owner"].kind == "given"  # the name is in the user's text
    account = balance.arguments["account_id"]
    assert account.kind == "read" and account.source.call == 0
    kind = "checking" if "checking" in task.user_turns[0] else "savings"
    assert account.source.path == (("where", "type", kind), ("key", "account_id"))
    ((amount,),) = checklist.answers
    assert amount.kind == "read" and amount.source.path == (("key", "balance"),)
    assert checklist.constants == ()


def test_tasks_graded_on_other_bases_keep_their_checker():
    task = dataclasses.replace(_my_balance_task(), reward=("call_match",))
    assert bound_score(task, EpisodeRecord())[0] == 0.0
    from envace_gym.rewards import register_reward_basis

    register_reward_basis("always_one_for_binding_test", lambda ctx: 1.0, overwrite=True)
    odd = dataclasses.replace(task, reward=("always_one_for_binding_test",))
    with pytest.raises(ValueError, match="cannot be bound"):
        bound_score(odd, EpisodeRecord())
