"""Builtin domain "bank": accounts, balances, transfers, transaction history and currency conversion."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from envace_gym.backends import PythonBackend, Toolkit, tool
from envace_gym.tasks import Task

from ._common import FIRST_NAMES, LAST_NAMES, ReferenceRecorder, generate_tasks, pick_template, taken_ids

DOMAIN = "bank"
BACKEND = f"builtin/{DOMAIN}"
SYSTEM = "You are a banking assistant. Use the bank's tools to look up accounts and move money exactly as asked."

RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85, "CHF": 0.95, "JPY": 162.0}  # units per 1 EUR

# Disjoint pools (names: _common.FIRST_NAMES), so the test split only has payees never seen in training.
_PAYEES = {"train": ["landlord", "gym", "plumber", "school"], "test": ["dentist", "florist"]}


class BankToolkit(Toolkit):
    """A small bank: ``state = {"accounts": {id: {...}}, "transactions": [...], "next_txn": int}``."""

    run_inline = True  # bounded, pure tools over in-memory state: no watchdog thread needed

    def _account(self, account_id: str) -> dict[str, Any]:
        try:
            return self.state["accounts"][account_id]
        except KeyError:
            raise ValueError(f"no account {account_id!r}") from None

    @tool
    def find_accounts(self, owner: str) -> list:
        """List the accounts held by a customer.

        Args:
            owner: The customer's full name, e.g. "Ana Silva".
        """
        wanted = owner.strip().lower()
        found = [
            {"account_id": aid, "type": acc["type"], "currency": acc["currency"]}
            for aid, acc in sorted(self.state["accounts"].items())
            if acc["owner"].lower() == wanted
        ]
        if not found:
            raise ValueError(f"no customer named {owner!r}")
        return found

    @tool
    def get_balance(self, account_id: str) -> dict:
        """Get the current balance of an account.

        Args:
            account_id: The account id, e.g. "A-1234".
        """
        acc = self._account(account_id)
        return {"account_id": account_id, "balance": acc["balance"], "currency": acc["currency"]}

    @tool
    def transfer(self, from_account: str, to_account: str, amount: float, memo: str = "") -> dict:
        """Move money between two accounts of the same currency.

        Args:
            from_account: The id of the account to take the money from.
            to_account: The id of the account to pay into.
            amount: How much to move, in the accounts' currency; must be positive.
            memo: An optional note stored with the transaction.
        """
        src, dst = self._account(from_account), self._account(to_account)
        amount = round(float(amount), 2)
        if amount <= 0:
            raise ValueError("amount must be positive")
        if from_account == to_account:
            raise ValueError("cannot transfer to the same account")
        if src["currency"] != dst["currency"]:
            raise ValueError(f"currency mismatch: {src['currency']} -> {dst['currency']}")
        if src["balance"] < amount:
            raise ValueError(f"insufficient funds: balance is {src['balance']:.2f}")
        src["balance"] = round(src["balance"] - amount, 2)
        dst["balance"] = round(dst["balance"] + amount, 2)
        txn_id = f"T-{self.state['next_txn']}"
        self.state["next_txn"] += 1
        self.state["transactions"].append(
            {"id": txn_id, "from": from_account, "to": to_account, "amount": amount, "memo": memo}
        )
        return {"transaction_id": txn_id, "from_balance": src["balance"], "to_balance": dst["balance"]}

    @tool
    def list_transactions(self, account_id: str, limit: int = 3) -> list:
        """The most recent transactions touching an account, newest first.

        Args:
            account_id: The account id.
            limit: How many transactions to return (1-20).
        """
        self._account(account_id)
        if not 1 <= limit <= 20:
            raise ValueError("limit must be between 1 and 20")
        mine = [t for t in self.state["transactions"] if account_id in (t["from"], t["to"])]
        return list(reversed(mine))[:limit]

    @tool
    def convert_currency(self, amount: float, from_currency: str, to_currency: str) -> dict:
        """Convert an amount between currencies at today's rate.

        Args:
            amount: The amount to convert.
            from_currency: ISO code of the source currency, e.g. "USD".
            to_currency: ISO code of the target currency, e.g. "EUR".
        """
        rates = self.state["rates"]
        for code in (from_currency, to_currency):
            if code not in rates:
                raise ValueError(f"unknown currency {code!r}; known: {', '.join(sorted(rates))}")
        converted = round(float(amount) / rates[from_currency] * rates[to_currency], 2)
        return {"amount": converted, "currency": to_currency}


def make_backend(**kwargs: Any) -> PythonBackend:
    """A real backend for this domain (kwargs go to `PythonBackend`, e.g. ``timeout``)."""
    return PythonBackend(BankToolkit, **kwargs)


# ------------------------------------------------------------------------------ task generation
def _world(rng: random.Random, split: str, people: int = 3) -> tuple[dict[str, Any], list[str]]:
    names: list[str] = []
    while len(names) < people:
        name = f"{rng.choice(FIRST_NAMES[split])} {rng.choice(LAST_NAMES[split])}"
        if name not in names:
            names.append(name)
    accounts: dict[str, Any] = {}
    used_ids: set[int] = set()
    taken = taken_ids()  # a held-in split's generation: the ids train (and val) already use
    for name in names:
        currency = rng.choice(["EUR", "EUR", "USD", "GBP"])
        for kind in ("checking", "savings"):
            while (num := rng.randint(1000, 9999)) in used_ids or f"A-{num}" in taken:
                pass
            used_ids.add(num)
            accounts[f"A-{num}"] = {
                "owner": name,
                "type": kind,
                "currency": currency,
                "balance": round(rng.uniform(50, 5000), 2),
            }
    transactions = []
    ids = sorted(accounts)
    for n in range(1, rng.randint(3, 6)):
        src, dst = rng.sample(ids, 2)
        transactions.append(
            {
                "id": f"T-{n}",
                "from": src,
                "to": dst,
                "amount": round(rng.uniform(5, 300), 2),
                "memo": rng.choice(["rent", "dinner", "refund", "gift", ""]),
            }
        )
    state = {
        "accounts": accounts,
        "transactions": transactions,
        "next_txn": len(transactions) + 1,
        "rates": dict(RATES),
    }
    return state, names


def _account_of(state: dict[str, Any], owner: str, kind: str) -> str:
    return next(a for a, acc in sorted(state["accounts"].items()) if acc["owner"] == owner and acc["type"] == kind)


def _money(x: float) -> str:
    return f"{x:.2f}"


_T = {
    "balance": {
        "train": ["What's the balance of account {acc}?", "How much money is in account {acc} right now?"],
        "test": ["Could you check what account {acc} currently holds?"],
    },
    "my_balance": {
        "train": [
            "I'm {name}. What's the balance of my {kind} account?",
            "This is {name} -- how much is in my {kind} account?",
        ],
        "test": ["Hello, {name} here. Please tell me how much my {kind} account holds."],
    },
    "both_balances": {
        "train": [
            "What are the balances of accounts {a} and {b}?",
            "Check accounts {a} and {b} for me: how much is in each?",
        ],
        "test": ["I need the current balances for {a} as well as {b}."],
    },
    "pay_person": {
        "train": [
            "I'm {name}. Send {amount} from my checking account to {other}'s checking account.",
            "Please transfer {amount} from my checking to the checking account of {other}. My name is {name}.",
        ],
        "test": ["{name} speaking: move {amount} out of my checking into {other}'s checking, please."],
    },
    "half_to_savings": {
        "train": [
            "I'm {name}. Move half of my checking balance into my savings account.",
            "My name is {name}; transfer 50% of what's in my checking account to my savings.",
        ],
        "test": ["{name} here -- put exactly half of my checking money into savings."],
    },
    "convert": {
        "train": ["How much is {amount} {src} in {dst}?", "Convert {amount} {src} to {dst}, please."],
        "test": ["If I exchange {amount} {src}, how many {dst} do I get?"],
    },
    "last_txn": {
        "train": [
            "What was the most recent transaction on account {acc}? Give me its id.",
            "Tell me the id of the latest transaction involving account {acc}.",
        ],
        "test": ["Which transaction id is the newest one on account {acc}?"],
    },
    "no_tool": {
        "train": [
            "I plan to pay my {payee} {amount} next week. Don't do anything yet, just repeat the amount back to me.",
            "Note for later: the {payee} bill is {amount}. No action needed now, only confirm the amount.",
        ],
        "test": ["Just echo this back, no transfers: my {payee} wants {amount}."],
    },
    "followup": {
        "train": ["I'm {name}. How much is in my savings account?", "Hi, {name} here. What's my savings balance?"],
        "test": ["{name} calling: could you look up my savings balance?"],
    },
    "followup_2": {
        "train": [
            "Thanks. Now move {amount} from my checking into that savings account.",
            "Great, please also transfer {amount} from my checking to it.",
        ],
        "test": ["OK -- top it up with {amount} from my checking account."],
    },
}

_KINDS = [
    ("balance", 15),
    ("my_balance", 15),
    ("both_balances", 15),
    ("pay_person", 15),
    ("half_to_savings", 10),
    ("convert", 8),
    ("last_txn", 7),
    ("no_tool", 10),
    ("followup", 15),
]


def _make(kind: str, rng: random.Random, split: str, task_id: str) -> Task:
    state, names = _world(rng, split)
    me, other = names[0], names[1]
    # Keep "me" and "other" in the same currency so transfers are valid.
    other_checking = _account_of(state, other, "checking")
    state["accounts"][other_checking]["currency"] = state["accounts"][_account_of(state, me, "checking")]["currency"]
    rec = ReferenceRecorder(BankToolkit, state, BACKEND)
    t = lambda key, **kw: pick_template(rng, _T[key], split).format(**kw)  # noqa: E731
    turns: list[str]
    reward = ["call_match", "answer_match"]

    if kind == "balance":
        acc = rng.choice(sorted(state["accounts"]))
        (res,) = rec.step(("get_balance", {"account_id": acc}))
        rec.turn(f"Account {acc} holds {_money(res['balance'])} {res['currency']}.", [_money(res["balance"])])
        turns = [t("balance", acc=acc)]
    elif kind == "my_balance":
        acc_kind = rng.choice(["checking", "savings"])
        (found,) = rec.step(("find_accounts", {"owner": me}))
        acc = next(a["account_id"] for a in found if a["type"] == acc_kind)
        (res,) = rec.step(("get_balance", {"account_id": acc}))
        rec.turn(
            f"Your {acc_kind} account {acc} holds {_money(res['balance'])} {res['currency']}.", [_money(res["balance"])]
        )
        turns = [t("my_balance", name=me, kind=acc_kind)]
    elif kind == "both_balances":
        a, b = rng.sample(sorted(state["accounts"]), 2)
        ra, rb = rec.step(("get_balance", {"account_id": a}), ("get_balance", {"account_id": b}))
        rec.turn(
            f"{a}: {_money(ra['balance'])} {ra['currency']}; {b}: {_money(rb['balance'])} {rb['currency']}.",
            [_money(ra["balance"]), _money(rb["balance"])],
        )
        turns = [t("both_balances", a=a, b=b)]
    elif kind == "pay_person":
        src = _account_of(state, me, "checking")
        amount = round(min(state["accounts"][src]["balance"] * rng.uniform(0.1, 0.6), 900), 0)
        mine, theirs = rec.step(("find_accounts", {"owner": me}), ("find_accounts", {"owner": other}))
        src = next(a["account_id"] for a in mine if a["type"] == "checking")
        dst = next(a["account_id"] for a in theirs if a["type"] == "checking")
        (res,) = rec.step(("transfer", {"from_account": src, "to_account": dst, "amount": amount}))
        rec.turn(
            f"Done: transaction {res['transaction_id']} sent {_money(amount)} to {other}.", [res["transaction_id"]]
        )
        turns = [t("pay_person", name=me, other=other, amount=_money(amount))]
        reward = ["call_match", "state_match", "answer_match"]
    elif kind == "half_to_savings":
        (found,) = rec.step(("find_accounts", {"owner": me}))
        src = next(a["account_id"] for a in found if a["type"] == "checking")
        dst = next(a["account_id"] for a in found if a["type"] == "savings")
        (bal,) = rec.step(("get_balance", {"account_id": src}))
        half = round(bal["balance"] / 2, 2)
        (res,) = rec.step(("transfer", {"from_account": src, "to_account": dst, "amount": half}))
        rec.turn(f"Moved {_money(half)} to savings; checking now holds {_money(res['from_balance'])}.", [_money(half)])
        turns = [t("half_to_savings", name=me)]
        reward = ["call_match", "state_match", "answer_match"]
    elif kind == "convert":
        src_cur, dst_cur = rng.sample(sorted(RATES), 2)
        amount = float(rng.choice([20, 50, 75, 100, 120, 250, 400, 1000]))
        (res,) = rec.step(("convert_currency", {"amount": amount, "from_currency": src_cur, "to_currency": dst_cur}))
        rec.turn(f"{amount:g} {src_cur} is {_money(res['amount'])} {dst_cur}.", [_money(res["amount"])])
        turns = [t("convert", amount=f"{amount:g}", src=src_cur, dst=dst_cur)]
    elif kind == "last_txn":
        touched = sorted({x for txn in state["transactions"] for x in (txn["from"], txn["to"])})
        acc = rng.choice(touched)
        (res,) = rec.step(("list_transactions", {"account_id": acc, "limit": 1}))
        rec.turn(f"The latest transaction on {acc} is {res[0]['id']}.", [res[0]["id"]])
        turns = [t("last_txn", acc=acc)]
    elif kind == "no_tool":
        amount = _money(round(rng.uniform(20, 900), 2))
        payee = rng.choice(_PAYEES[split])
        rec.turn(f"Noted: {amount} for your {payee}. Nothing has been transferred.", [amount])
        turns = [t("no_tool", payee=payee, amount=amount)]
    elif kind == "followup":
        (found,) = rec.step(("find_accounts", {"owner": me}))
        src = next(a["account_id"] for a in found if a["type"] == "checking")
        dst = next(a["account_id"] for a in found if a["type"] == "savings")
        (bal,) = rec.step(("get_balance", {"account_id": dst}))
        rec.turn(f"Your savings account {dst} holds {_money(bal['balance'])}.", [_money(bal["balance"])])
        amount = round(min(state["accounts"][src]["balance"] * 0.3, 500), 0)
        (res,) = rec.step(("transfer", {"from_account": src, "to_account": dst, "amount": amount}))
        rec.turn(
            f"Transferred {_money(amount)}; savings now holds {_money(res['to_balance'])}.", [_money(res["to_balance"])]
        )
        turns = [t("followup", name=me), t("followup_2", amount=_money(amount))]
        reward = ["call_match", "state_match", "answer_match"]
    else:  # pragma: no cover - _KINDS and this switch are kept in step
        raise ValueError(kind)
    return rec.build(
        id=task_id, domain=DOMAIN, split=split, user_turns=turns, reward=reward, system=SYSTEM, metadata={"kind": kind}
    )


def generate(split: str, count: int, exclude: Sequence[Task] = ()) -> list[Task]:
    """``count`` deterministic tasks of ``split`` (one of ``_common.SPLITS``), none overlapping ``exclude``
    (``_common.generate_tasks``)."""
    kinds, weights = zip(*_KINDS, strict=True)
    return generate_tasks(DOMAIN, split, count, kinds, weights, _make, exclude)
