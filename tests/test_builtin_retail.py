"""The builtin "retail" domain: toolkit behaviour, and the generated tasks' determinism, splits and rewards."""

import json
import re
from collections import Counter

import pytest
from domain_checks import reference_hash, score

import envace_gym
from envace_gym.calls import ErrorCode, ToolCall
from envace_gym.envs.builtin.retail import RetailToolkit, generate, make_backend
from envace_gym.tasks import Task


def small_state():
    return {
        "customers": {
            "C-1042": {"name": "Ana Silva", "email": "ana.silva@example.com", "address": "12 Elm Street, Lisbon"},
            "C-2001": {"name": "Hugo Berg", "email": "hugo.berg@example.com", "address": "3 Mill Road, Porto"},
        },
        "products": {
            "P-301": {"name": "Desk Lamp", "price": 34.99, "stock": 5},
            "P-302": {"name": "Yoga Mat", "price": 20.5, "stock": 0},
        },
        "orders": {
            "O-10001": {
                "customer_id": "C-1042",
                "status": "pending",
                "total": 90.48,
                "items": [
                    {"product_id": "P-301", "quantity": 2, "price": 34.99, "returned": False},
                    {"product_id": "P-302", "quantity": 1, "price": 20.5, "returned": False},
                ],
                "shipping_address": "12 Elm Street, Lisbon",
                "refunded": 0.0,
            },
            "O-10002": {
                "customer_id": "C-1042",
                "status": "delivered",
                "total": 61.5,
                "items": [{"product_id": "P-302", "quantity": 3, "price": 20.5, "returned": False}],
                "shipping_address": "12 Elm Street, Lisbon",
                "refunded": 0.0,
            },
            "O-10003": {
                "customer_id": "C-2001",
                "status": "shipped",
                "total": 34.99,
                "items": [{"product_id": "P-301", "quantity": 1, "price": 34.99, "returned": False}],
                "shipping_address": "3 Mill Road, Porto",
                "refunded": 0.0,
            },
        },
    }


@pytest.fixture
def kit():
    return RetailToolkit(small_state())


@pytest.fixture
def backend():
    b = make_backend(timeout=None)
    b.reset(Task(id="retail-unit", user_turns=("hi",), initial_state=small_state()))
    return b


# ------------------------------------------------------------------------------ toolkit
def test_tools_and_schemas():
    specs = {s.name: s for s in RetailToolkit.tool_specs()}
    assert set(specs) == {
        "find_customer",
        "list_orders",
        "get_order",
        "get_product",
        "cancel_order",
        "update_shipping_address",
        "return_item",
    }
    for spec in specs.values():
        assert spec.description and spec.parameters["additionalProperties"] is False
        assert all(p.get("description") for p in spec.parameters["properties"].values()), spec.name
    assert specs["cancel_order"].parameters["properties"]["reason"]["enum"] == [
        "no_longer_needed",
        "ordered_by_mistake",
        "found_better_price",
        "other",
    ]
    assert specs["return_item"].parameters["required"] == ["order_id", "product_id"]


def test_find_customer(kit):
    assert kit.find_customer("  Ana.Silva@Example.com ") == {"customer_id": "C-1042", "name": "Ana Silva"}
    with pytest.raises(ValueError, match="no customer with email"):
        kit.find_customer("nobody@example.com")


def test_list_orders(kit):
    assert kit.list_orders("C-1042") == [
        {"order_id": "O-10001", "status": "pending", "total": 90.48, "items": 2},
        {"order_id": "O-10002", "status": "delivered", "total": 61.5, "items": 1},
    ]
    with pytest.raises(ValueError, match="no customer 'C-9999'"):
        kit.list_orders("C-9999")


def test_get_order_joins_product_names(kit):
    order = kit.get_order("O-10001")
    assert order["status"] == "pending" and order["total"] == 90.48 and order["customer_id"] == "C-1042"
    assert [(it["product_id"], it["name"], it["quantity"]) for it in order["items"]] == [
        ("P-301", "Desk Lamp", 2),
        ("P-302", "Yoga Mat", 1),
    ]
    assert order["shipping_address"] == "12 Elm Street, Lisbon"
    with pytest.raises(ValueError, match="no order 'O-1'"):
        kit.get_order("O-1")


def test_get_product(kit):
    assert kit.get_product("P-302") == {"product_id": "P-302", "name": "Yoga Mat", "price": 20.5, "stock": 0}
    with pytest.raises(ValueError, match="no product 'P-999'"):
        kit.get_product("P-999")


def test_cancel_order_refunds_and_restocks(kit):
    assert kit.cancel_order("O-10001", "ordered_by_mistake") == {
        "order_id": "O-10001",
        "status": "cancelled",
        "refund": 90.48,
    }
    order = kit.state["orders"]["O-10001"]
    assert (
        order["status"] == "cancelled" and order["refunded"] == 90.48 and order["cancel_reason"] == "ordered_by_mistake"
    )
    assert kit.state["products"]["P-301"]["stock"] == 7 and kit.state["products"]["P-302"]["stock"] == 1
    with pytest.raises(ValueError, match="only pending orders can be cancelled"):
        kit.cancel_order("O-10001", "other")  # already cancelled
    with pytest.raises(ValueError, match="is shipped"):
        kit.cancel_order("O-10003", "no_longer_needed")


def test_update_shipping_address(kit):
    assert kit.update_shipping_address("O-10001", " 9 Oak Lane, Ghent ") == {
        "order_id": "O-10001",
        "shipping_address": "9 Oak Lane, Ghent",
    }
    assert kit.state["orders"]["O-10001"]["shipping_address"] == "9 Oak Lane, Ghent"
    # The customer's own address is not the order's: only the order changes.
    assert kit.state["customers"]["C-1042"]["address"] == "12 Elm Street, Lisbon"
    with pytest.raises(ValueError, match="only pending orders can change address"):
        kit.update_shipping_address("O-10003", "9 Oak Lane, Ghent")
    with pytest.raises(ValueError, match="must not be empty"):
        kit.update_shipping_address("O-10001", "   ")


def test_return_item(kit):
    assert kit.return_item("O-10002", "P-302") == {
        "order_id": "O-10002",
        "product_id": "P-302",
        "refund": 61.5,
        "total_refunded": 61.5,
    }
    assert kit.state["orders"]["O-10002"]["items"][0]["returned"] is True
    assert kit.state["products"]["P-302"]["stock"] == 3
    assert kit.get_order("O-10002")["refunded"] == 61.5
    with pytest.raises(ValueError, match="already returned"):
        kit.return_item("O-10002", "P-302")
    with pytest.raises(ValueError, match="not in order"):
        kit.return_item("O-10002", "P-301")
    with pytest.raises(ValueError, match="only delivered orders accept returns"):
        kit.return_item("O-10001", "P-301")


def test_domain_errors_roll_back_through_the_backend(backend):
    before = backend.state_hash()
    for call in [
        ToolCall("cancel_order", {"order_id": "O-10003", "reason": "other"}),
        ToolCall("return_item", {"order_id": "O-10002", "product_id": "P-999"}),
        ToolCall("update_shipping_address", {"order_id": "O-404", "address": "1 Oak Lane, Ghent"}),
    ]:
        result = backend.execute(call)
        assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR and "ValueError" in result.error.message
        assert backend.state_hash() == before
    bad_reason = backend.execute(ToolCall("cancel_order", {"order_id": "O-10001", "reason": "bored"}))
    assert bad_reason.error.code is ErrorCode.INVALID_PARAMETERS
    assert backend.state()["orders"]["O-10001"]["status"] == "pending"
    ok = backend.execute(ToolCall("cancel_order", {"order_id": "O-10001", "reason": "other"}))
    assert ok.ok and ok.content["refund"] == 90.48 and backend.state_hash() != before


def test_partial_mutation_is_rolled_back():
    # return_item on a line whose product has vanished fails after the refund step would have run: the
    # backend must restore the snapshot rather than keep a half-applied return.
    state = small_state()
    del state["products"]["P-302"]
    b = make_backend(timeout=None)
    b.reset(Task(id="retail-partial", user_turns=("hi",), initial_state=state))
    before = b.state()
    result = b.execute(ToolCall("return_item", {"order_id": "O-10002", "product_id": "P-302"}))
    assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR and "no product" in result.error.message
    assert b.state() == before


def test_registered_backend_name():
    b = envace_gym.backends.make_backend("builtin/retail")
    assert {s.name for s in b.tools} >= {"find_customer", "return_item"}


# ------------------------------------------------------------------------------ generation
@pytest.fixture(scope="module")
def train():
    return generate("train", 600)


@pytest.fixture(scope="module")
def test_split():
    return generate("test", 150)


def test_generation_is_deterministic_and_well_formed(train, test_split):
    assert len(train) == 600 and len(test_split) == 150
    again = generate("train", 600)
    assert [json.dumps(t.to_dict(), sort_keys=True) for t in again] == [
        json.dumps(t.to_dict(), sort_keys=True) for t in train
    ]
    # A task does not depend on how many were generated.
    assert generate("test", 5)[4].to_dict() == test_split[4].to_dict()
    assert [t.id for t in train[:2]] == ["retail-train-0000", "retail-train-0001"]
    for task in train + test_split:
        assert task.backend == "builtin/retail" and task.domain == "retail" and task.system
        assert Task.from_dict(json.loads(json.dumps(task.to_dict()))).to_dict() == task.to_dict()
    assert len({t.id for t in train + test_split}) == 750
    with pytest.raises(ValueError, match="unknown split"):
        generate("dev", 1)


def _entities(tasks):
    out = {"names": set(), "emails": set(), "products": set(), "streets": set()}
    for task in tasks:
        st = task.initial_state
        out["names"] |= {c["name"] for c in st["customers"].values()}
        out["emails"] |= {c["email"] for c in st["customers"].values()}
        out["products"] |= {p["name"] for p in st["products"].values()}
        addresses = [c["address"] for c in st["customers"].values()]
        addresses += [a["address"] for c in task.reference_calls for a in [c.arguments] if "address" in a]
        out["streets"] |= {re.sub(r"^\d+ ", "", a) for a in addresses}
    return out


def test_splits_are_disjoint_in_entities(train, test_split):
    a, b = _entities(train), _entities(test_split)
    for key in a:
        assert a[key] and b[key], key
        assert not a[key] & b[key], key


def test_task_shapes_match_their_category(train):
    for task in train:
        category, calls = task.metadata["category"], task.reference_calls
        steps = [step for turn in task.reference for step in turn.steps]
        if category == "no_tool":
            assert not calls and task.reward == ("call_match", "answer_match")
            assert task.reference[0].answer_contains
        elif category == "parallel":
            assert len(steps) == 1 and 2 <= len(steps[0]) <= 3
        elif category == "multi_turn":
            assert len(task.user_turns) == 2 and all(turn.steps for turn in task.reference)
        elif category == "single":
            assert len(calls) == 1
        elif category == "multi_step":
            assert len(steps) >= 2 and all(len(s) == 1 for s in steps)
        changes = any(c.name in ("cancel_order", "update_shipping_address", "return_item") for c in calls)
        assert ("state_match" in task.reward) == (changes or task.metadata["kind"] == "conditional_address")


def test_dependent_ids_are_never_in_the_prompt(train):
    # In multi-step tasks the customer id and the order id must be discovered, not read off the message.
    for task in (t for t in train if t.metadata["category"] == "multi_step"):
        said = " ".join(task.user_turns)
        calls = task.reference_calls
        assert calls[0].name == "find_customer" and calls[0].arguments["email"] in said
        for i, call in enumerate(calls[1:], 1):
            ids = [v for k, v in call.arguments.items() if k.endswith("_id")]
            assert ids, call
            for value in ids:
                assert value not in said, (task.id, call)
                assert any(value in json.dumps(prev.result) for prev in calls[:i]), (task.id, call)


def test_references_are_unique_solutions(train):
    for task in train:
        state = task.initial_state
        kind = task.metadata["kind"]
        if kind in ("cancel_pending", "update_address", "followup_cancel", "shipped_total", "return_by_name"):
            # "my pending/shipped/delivered order" names exactly one order.
            cid = task.reference_calls[1].arguments["customer_id"]
            statuses = Counter(o["status"] for o in state["orders"].values() if o["customer_id"] == cid)
            assert statuses["pending"] == statuses["shipped"] == statuses["delivered"] == 1
        if kind == "compare_products":
            prices = [c.result["price"] for c in task.reference_calls]
            assert len(set(prices)) == len(prices)


def _reference_hash(task):
    return reference_hash(task, make_backend)


def _score(task, calls, answers, final_hash):
    return score(task, calls, answers, final_hash, make_backend)


def test_wrong_target_or_missing_lookup_fails(train):
    task = next(t for t in train if t.metadata["kind"] == "cancel_pending")
    calls = [c.call for c in task.reference_calls]
    answers = [t.answer for t in task.reference]
    # Skipping the lookups (even if the final call is right) breaks call_match.
    b = make_backend(timeout=None)
    b.reset(task)
    assert b.execute(calls[-1]).ok
    assert _score(task, calls[-1:], answers, b.state_hash()) == 0.0
    # Cancelling some other pending order breaks both call_match and state_match.
    other = next(
        (
            oid
            for oid, o in sorted(task.initial_state["orders"].items())
            if o["status"] == "pending" and oid != calls[-1].arguments["order_id"]
        ),
        None,
    )
    if other is not None:
        wrong = calls[:-1] + [ToolCall("cancel_order", {**calls[-1].arguments, "order_id": other})]
        b.reset(task)
        for c in wrong:
            assert b.execute(c).ok
        assert _score(task, wrong, answers, b.state_hash()) == 0.0


def test_echoing_the_prompt_start_does_not_solve_no_tool_tasks(train, test_split):
    # The random baseline sometimes answers with the first 40 characters of the prompt.
    for task in (t for t in train + test_split if t.metadata["category"] == "no_tool"):
        assert _score(task, [], [task.user_turns[0][:40]], None) == 0.0, task.id
