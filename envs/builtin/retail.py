"""Builtin domain "retail": customers, products and orders -- lookups, cancellations, address changes, returns."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from envace_gym.backends import PythonBackend, Toolkit, tool
from envace_gym.tasks import Task

from ._common import FIRST_NAMES, LAST_NAMES, ReferenceRecorder, generate_tasks, pick_template, taken_ids

DOMAIN = "retail"
BACKEND = f"builtin/{DOMAIN}"
SYSTEM = (
    "You are an online shop's customer-service assistant. Use the shop's tools "
    "to look up and change orders exactly as asked."
)

CancelReason = Literal["no_longer_needed", "ordered_by_mistake", "found_better_price", "other"]
# How a user says each reason; the words map one-to-one onto the tool's enum values.
_REASON_TEXT = {
    "no_longer_needed": "I no longer need it",
    "ordered_by_mistake": "I ordered it by mistake",
    "found_better_price": "I found a better price elsewhere",
}

# Disjoint entity pools, so the test split only has people, products and places never seen in training.
_PRODUCTS = {
    "train": [
        "Desk Lamp",
        "Wireless Mouse",
        "Mechanical Keyboard",
        "Yoga Mat",
        "Water Bottle",
        "Backpack",
        "Running Shoes",
        "Coffee Mug",
        "Bluetooth Speaker",
        "Phone Case",
        "Notebook Set",
        "Table Fan",
        "Electric Kettle",
        "Bath Towel",
        "Chef Knife",
        "Wall Clock",
        "Throw Pillow",
        "Sunglasses",
        "Umbrella",
        "USB Charger",
        "Cutting Board",
        "Rain Jacket",
    ],
    "test": [
        "Espresso Grinder",
        "Hiking Poles",
        "Silk Scarf",
        "Desk Organizer",
        "Camping Lantern",
        "Garden Hose",
        "Bike Helmet",
        "Ceramic Teapot",
    ],
}
_STREETS = {
    "train": [
        "Elm Street",
        "Harbor Road",
        "Maple Avenue",
        "Station Lane",
        "Mill Road",
        "Park Avenue",
        "Church Street",
        "River Walk",
        "Oak Lane",
        "King Street",
    ],
    "test": ["Lantern Way", "Quarry Close", "Juniper Drive", "Orchard Row"],
}
_CITIES = {
    "train": ["Lisbon", "Porto", "Madrid", "Lyon", "Munich", "Krakow", "Vienna", "Turin", "Ghent", "Aarhus"],
    "test": ["Tallinn", "Ljubljana", "Bergen", "Cork"],
}


class RetailToolkit(Toolkit):
    """A small online shop.

    ``state = {"customers": {id: {name, email, address}}, "products": {id: {name, price, stock}},
    "orders": {id: {customer_id, status, items: [{product_id, quantity, price, returned}], total,
    shipping_address, refunded}}}``. Order statuses: pending, shipped, delivered, cancelled.
    """

    run_inline = True  # bounded, pure tools over in-memory state: no watchdog thread needed

    def _order(self, order_id: str) -> dict[str, Any]:
        try:
            return self.state["orders"][order_id]
        except KeyError:
            raise ValueError(f"no order {order_id!r}") from None

    def _product(self, product_id: str) -> dict[str, Any]:
        try:
            return self.state["products"][product_id]
        except KeyError:
            raise ValueError(f"no product {product_id!r}") from None

    @tool
    def find_customer(self, email: str) -> dict:
        """Find a customer by email address.

        Args:
            email: The customer's email address, e.g. "ana.silva@example.com".
        """
        wanted = email.strip().lower()
        for cid, cust in sorted(self.state["customers"].items()):
            if cust["email"] == wanted:
                return {"customer_id": cid, "name": cust["name"]}
        raise ValueError(f"no customer with email {email!r}")

    @tool
    def list_orders(self, customer_id: str) -> list:
        """List a customer's orders (id, status, total and number of items), oldest id first.

        Args:
            customer_id: The customer id, e.g. "C-1042".
        """
        if customer_id not in self.state["customers"]:
            raise ValueError(f"no customer {customer_id!r}")
        return [
            {"order_id": oid, "status": o["status"], "total": o["total"], "items": len(o["items"])}
            for oid, o in sorted(self.state["orders"].items())
            if o["customer_id"] == customer_id
        ]

    @tool
    def get_order(self, order_id: str) -> dict:
        """Get the full details of an order: status, items (with product ids and names), total and address.

        Args:
            order_id: The order id, e.g. "O-48213".
        """
        order = self._order(order_id)
        items = [
            {
                "product_id": it["product_id"],
                "name": self._product(it["product_id"])["name"],
                "quantity": it["quantity"],
                "price": it["price"],
                "returned": it["returned"],
            }
            for it in order["items"]
        ]
        return {
            "order_id": order_id,
            "customer_id": order["customer_id"],
            "status": order["status"],
            "items": items,
            "total": order["total"],
            "shipping_address": order["shipping_address"],
            "refunded": order["refunded"],
        }

    @tool
    def get_product(self, product_id: str) -> dict:
        """Get a product's name, current price and how many units are in stock.

        Args:
            product_id: The product id, e.g. "P-301".
        """
        product = self._product(product_id)
        return {"product_id": product_id, "name": product["name"], "price": product["price"], "stock": product["stock"]}

    @tool
    def cancel_order(self, order_id: str, reason: CancelReason) -> dict:
        """Cancel a pending order: its total is refunded and its items go back into stock.

        Args:
            order_id: The id of the order to cancel; only pending orders can be cancelled.
            reason: Why the customer cancels.
        """
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ValueError(f"order {order_id} is {order['status']}; only pending orders can be cancelled")
        for item in order["items"]:
            self._product(item["product_id"])["stock"] += item["quantity"]
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["refunded"] = order["total"]
        return {"order_id": order_id, "status": "cancelled", "refund": order["total"]}

    @tool
    def update_shipping_address(self, order_id: str, address: str) -> dict:
        """Change where a pending order will be shipped.

        Args:
            order_id: The id of the order; only pending (not yet shipped) orders can be changed.
            address: The new full address, e.g. "27 Harbor Road, Porto".
        """
        order = self._order(order_id)
        address = address.strip()
        if not address:
            raise ValueError("address must not be empty")
        if order["status"] != "pending":
            raise ValueError(f"order {order_id} is {order['status']}; only pending orders can change address")
        order["shipping_address"] = address
        return {"order_id": order_id, "shipping_address": address}

    @tool
    def return_item(self, order_id: str, product_id: str) -> dict:
        """Return one product (its whole line) from a delivered order; its price times quantity is refunded.

        Args:
            order_id: The id of the delivered order.
            product_id: The id of the product to return, as listed in the order.
        """
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ValueError(f"order {order_id} is {order['status']}; only delivered orders accept returns")
        item = next((it for it in order["items"] if it["product_id"] == product_id), None)
        if item is None:
            raise ValueError(f"product {product_id!r} is not in order {order_id}")
        if item["returned"]:
            raise ValueError(f"product {product_id} of order {order_id} was already returned")
        refund = _cents(item["price"] * item["quantity"])
        item["returned"] = True
        order["refunded"] = _cents(order["refunded"] + refund)
        self._product(product_id)["stock"] += item["quantity"]
        return {"order_id": order_id, "product_id": product_id, "refund": refund, "total_refunded": order["refunded"]}


def make_backend(**kwargs: Any) -> PythonBackend:
    """A backend serving `RetailToolkit` (registered as ``builtin/retail``)."""
    return PythonBackend(RetailToolkit, **kwargs)


def _cents(x: float) -> float:
    return round(x, 2)


def _money(x: float) -> str:
    return f"{x:.2f}"


# ------------------------------------------------------------------------------ task generation
def _unique_id(rng: random.Random, prefix: str, lo: int, hi: int, used: set[str]) -> str:
    taken = taken_ids()  # a held-in split's generation: the ids train (and val) already use
    while (ident := f"{prefix}-{rng.randint(lo, hi)}") in used or ident in taken:
        pass
    used.add(ident)
    return ident


def _address(rng: random.Random, split: str, avoid: str = "") -> str:
    while (address := f"{rng.randint(1, 99)} {rng.choice(_STREETS[split])}, {rng.choice(_CITIES[split])}") == avoid:
        pass
    return address


def _world(rng: random.Random, split: str) -> tuple[dict[str, Any], str]:
    """Three customers, six products and their orders; returns the state and the id of "me".

    "Me" (the first customer) always has exactly one pending, one shipped and one delivered order (plus
    maybe a cancelled one), so "my pending order" and the like always name a unique order.
    """
    used: set[str] = set()
    names: list[str] = []
    while len(names) < 3:
        name = f"{rng.choice(FIRST_NAMES[split])} {rng.choice(LAST_NAMES[split])}"
        if name not in names:
            names.append(name)
    customers = {}
    for name in names:
        customers[_unique_id(rng, "C", 1000, 9999, used)] = {
            "name": name,
            "email": name.lower().replace(" ", ".") + "@example.com",
            "address": _address(rng, split),
        }
    products = {
        _unique_id(rng, "P", 100, 999, used): {
            "name": pname,
            "price": _cents(rng.uniform(4, 250)),
            "stock": rng.randint(0, 40),
        }
        for pname in rng.sample(_PRODUCTS[split], 6)
    }
    me = next(iter(customers))
    orders: dict[str, Any] = {}
    for cid, cust in customers.items():
        if cid == me:
            statuses = ["pending", "shipped", "delivered"] + (["cancelled"] if rng.random() < 0.4 else [])
            rng.shuffle(statuses)
        else:
            statuses = [rng.choice(["pending", "shipped", "delivered", "cancelled"]) for _ in range(rng.randint(1, 3))]
        for status in statuses:
            items = [
                {"product_id": pid, "quantity": rng.randint(1, 3), "price": products[pid]["price"], "returned": False}
                for pid in rng.sample(sorted(products), rng.randint(1, 3))
            ]
            total = _cents(sum(it["price"] * it["quantity"] for it in items))
            orders[_unique_id(rng, "O", 10000, 99999, used)] = {
                "customer_id": cid,
                "status": status,
                "items": items,
                "total": total,
                "shipping_address": cust["address"],
                "refunded": total if status == "cancelled" else 0.0,
            }
    return {"customers": customers, "products": products, "orders": orders}, me


def _order_of(state: dict[str, Any], customer_id: str, status: str) -> str:
    return next(
        oid for oid, o in sorted(state["orders"].items()) if o["customer_id"] == customer_id and o["status"] == status
    )


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


_T = {
    "order_status": {
        "train": [
            "What's the status of order {order}, and what was its total?",
            "Can you check order {order} for me? I'd like its status and total.",
        ],
        "test": ["Please look up where order {order} stands and how much it came to."],
    },
    "product_info": {
        "train": [
            "How much does product {product} cost, and how many are in stock?",
            "What's the price of item {product} and how many units do you have left?",
        ],
        "test": ["Tell me the current price and the stock level of product {product}."],
    },
    "cancel_by_id": {
        "train": [
            "Please cancel order {order}; {reason}. How much will be refunded?",
            "Cancel my order {order} -- {reason}. Tell me the refund amount.",
        ],
        "test": ["I want order {order} cancelled because {reason}. What refund do I get?"],
    },
    "cancel_pending": {
        "train": [
            "I'm {email}. Please cancel my pending order -- {reason} -- and tell me the refund.",
            "Hi, my email is {email}. Cancel the order of mine that hasn't shipped "
            "yet ({reason}). How much do I get back?",
        ],
        "test": ["This is {email}: my one pending order should be cancelled, since {reason}. What's the refund?"],
    },
    "update_address": {
        "train": [
            "I'm {email}. Please ship my pending order to {address} instead.",
            "My email is {email}. Change the shipping address of my pending order to {address}.",
        ],
        "test": ["Account {email} here -- I've moved. Send my not-yet-shipped order to {address}, please."],
    },
    "shipped_total": {
        "train": [
            "I'm {email}. Which of my orders is currently shipped, and what's its total?",
            "My email is {email}. Give me the id and total of my order that is on its way (shipped).",
        ],
        "test": [
            "For {email}: what's the order id and amount of the order that's out for "
            "delivery right now (status shipped)?"
        ],
    },
    "return_by_name": {
        "train": [
            "I'm {email}. I'd like to return the {product} from my delivered order. How much is refunded?",
            "My email is {email}. Please process a return of the {product} in my "
            "delivered order and tell me the refund.",
        ],
        "test": ["{email} here: the {product} from my delivered order has to go back. What will I be refunded?"],
    },
    "two_orders": {
        "train": [
            "What are the status and total of orders {a} and {b}?",
            "Check orders {a} and {b} for me: what's the status and total of each?",
        ],
        "test": ["I need the current state and the amount of both order {a} and order {b}."],
    },
    "compare_products": {
        "train": [
            "Which is cheapest: products {ids}? Give me each price.",
            "Compare the prices of products {ids} and tell me which one costs the least.",
        ],
        "test": ["Out of items {ids}, what does each cost, and which has the lowest price?"],
    },
    "followup_cancel": {
        "train": [
            "I'm {email}. Do I have a pending order? What's its id and total?",
            "Hi, {email} here. Which of my orders is still pending, and how much is it?",
        ],
        "test": ["Account {email}: please find my pending order and tell me its id and amount."],
    },
    "followup_cancel_2": {
        "train": [
            "Please cancel it; {reason}. How much will be refunded?",
            "OK, cancel that one -- {reason}. What's the refund?",
        ],
        "test": ["Then I'd like it cancelled, as {reason}. Tell me what I get back."],
    },
    "followup_stock": {
        "train": ["What products are in order {order}?", "Which items did order {order} contain?"],
        "test": ["List the things that were bought in order {order}, please."],
    },
    "followup_stock_2": {
        "train": [
            "And how many units of the {product} are in stock right now?",
            "Thanks. Is the {product} still in stock? How many are left?",
        ],
        "test": ["Could you also see how many {product} units remain available?"],
    },
    "no_tool_echo": {
        "train": [
            "I'm writing down my details for a later call, no lookup needed. Just "
            "confirm back my order number: {order}.",
            "Nothing to do in the system for now; please simply repeat back the order "
            "number I'm about to give: {order}.",
        ],
        "test": ["Don't check anything yet -- only read this order number back to me so I know you have it: {order}."],
    },
    "no_tool_math": {
        "train": [
            "Without looking anything up: if I buy {qty} units at {price} each, what's the total?",
            "Quick arithmetic, no need to check the shop: {qty} items priced {price} apiece come to how much?",
        ],
        "test": ["No lookup please, just compute it: what do {qty} pieces at {price} per piece cost altogether?"],
    },
    "conditional_address": {
        "train": [
            "First check order {order}; if it is still pending, change its shipping "
            "address to {address}. Otherwise tell me its status.",
            "Look up order {order}. If it hasn't shipped yet (pending), update its "
            "address to {address}; if not, just tell me its status.",
        ],
        "test": [
            "Could you see whether order {order} is still pending? If so, send it to "
            "{address}; if not, report its status."
        ],
    },
}

# (kind, category, weight); categories follow docs/DOMAIN_GUIDE.md.
_KINDS = [
    ("order_status", "single", 7),
    ("product_info", "single", 7),
    ("cancel_by_id", "single", 6),
    ("cancel_pending", "multi_step", 9),
    ("update_address", "multi_step", 7),
    ("shipped_total", "multi_step", 6),
    ("return_by_name", "multi_step", 8),
    ("two_orders", "parallel", 8),
    ("compare_products", "parallel", 7),
    ("followup_cancel", "multi_turn", 8),
    ("followup_stock", "multi_turn", 7),
    ("no_tool_echo", "no_tool", 5),
    ("no_tool_math", "no_tool", 5),
    ("conditional_address", "lookup_then_change", 10),
]
KIND_CATEGORY = {kind: category for kind, category, _ in _KINDS}

READ = ["call_match", "answer_match"]
WRITE = ["call_match", "state_match", "answer_match"]


def _make(kind: str, rng: random.Random, split: str, task_id: str) -> Task:
    state, me = _world(rng, split)
    email = state["customers"][me]["email"]
    rec = ReferenceRecorder(RetailToolkit, state, BACKEND)
    t = lambda key, **kw: pick_template(rng, _T[key], split).format(**kw)  # noqa: E731
    reward = READ

    if kind == "order_status":
        order = rng.choice(sorted(state["orders"]))
        (res,) = rec.step(("get_order", {"order_id": order}))
        rec.turn(
            f"Order {order} is {res['status']}; its total was {_money(res['total'])}.",
            [res["status"], _money(res["total"])],
        )
        turns = [t("order_status", order=order)]
    elif kind == "product_info":
        product = rng.choice(sorted(state["products"]))
        (res,) = rec.step(("get_product", {"product_id": product}))
        rec.turn(
            f"{res['name']} ({product}) costs {_money(res['price'])} and {res['stock']} units are in stock.",
            [_money(res["price"]), str(res["stock"])],
        )
        turns = [t("product_info", product=product)]
    elif kind == "cancel_by_id":
        pending = [oid for oid, o in sorted(state["orders"].items()) if o["status"] == "pending"]
        order, reason = rng.choice(pending), rng.choice(sorted(_REASON_TEXT))
        (res,) = rec.step(("cancel_order", {"order_id": order, "reason": reason}))
        rec.turn(f"Order {order} is cancelled; {_money(res['refund'])} will be refunded.", [_money(res["refund"])])
        turns = [t("cancel_by_id", order=order, reason=_REASON_TEXT[reason])]
        reward = WRITE
    elif kind == "cancel_pending":
        reason = rng.choice(sorted(_REASON_TEXT))
        (cust,) = rec.step(("find_customer", {"email": email}))
        (orders,) = rec.step(("list_orders", {"customer_id": cust["customer_id"]}))
        order = next(o["order_id"] for o in orders if o["status"] == "pending")
        (res,) = rec.step(("cancel_order", {"order_id": order, "reason": reason}))
        rec.turn(
            f"I cancelled your pending order {order}; {_money(res['refund'])} will be refunded.",
            [_money(res["refund"])],
        )
        turns = [t("cancel_pending", email=email, reason=_REASON_TEXT[reason])]
        reward = WRITE
    elif kind == "update_address":
        address = _address(rng, split, avoid=state["customers"][me]["address"])
        (cust,) = rec.step(("find_customer", {"email": email}))
        (orders,) = rec.step(("list_orders", {"customer_id": cust["customer_id"]}))
        order = next(o["order_id"] for o in orders if o["status"] == "pending")
        rec.step(("update_shipping_address", {"order_id": order, "address": address}))
        # Nothing was asked for, so the answer is not graded on its wording.
        rec.turn(f"Your pending order {order} will now ship to {address}.")
        turns = [t("update_address", email=email, address=address)]
        reward = ["call_match", "state_match"]
    elif kind == "shipped_total":
        (cust,) = rec.step(("find_customer", {"email": email}))
        (orders,) = rec.step(("list_orders", {"customer_id": cust["customer_id"]}))
        shipped = next(o for o in orders if o["status"] == "shipped")
        rec.turn(
            f"Your shipped order is {shipped['order_id']}, total {_money(shipped['total'])}.",
            [shipped["order_id"], _money(shipped["total"])],
        )
        turns = [t("shipped_total", email=email)]
    elif kind == "return_by_name":
        delivered = _order_of(state, me, "delivered")
        product_name = state["products"][rng.choice(state["orders"][delivered]["items"])["product_id"]]["name"]
        (cust,) = rec.step(("find_customer", {"email": email}))
        (orders,) = rec.step(("list_orders", {"customer_id": cust["customer_id"]}))
        order = next(o["order_id"] for o in orders if o["status"] == "delivered")
        (details,) = rec.step(("get_order", {"order_id": order}))
        product = next(it["product_id"] for it in details["items"] if it["name"] == product_name)
        (res,) = rec.step(("return_item", {"order_id": order, "product_id": product}))
        rec.turn(
            f"The {product_name} from order {order} is returned; {_money(res['refund'])} will be refunded.",
            [_money(res["refund"])],
        )
        turns = [t("return_by_name", email=email, product=product_name)]
        reward = WRITE
    elif kind == "two_orders":
        a, b = rng.sample(sorted(state["orders"]), 2)
        ra, rb = rec.step(("get_order", {"order_id": a}), ("get_order", {"order_id": b}))
        rec.turn(
            f"{a}: {ra['status']}, total {_money(ra['total'])}; {b}: {rb['status']}, total {_money(rb['total'])}.",
            [_money(ra["total"]), _money(rb["total"])],
        )
        turns = [t("two_orders", a=a, b=b)]
    elif kind == "compare_products":
        # Distinct prices, so "the cheapest" is unique.
        by_price = {p["price"]: pid for pid, p in sorted(state["products"].items())}
        ids = rng.sample(sorted(by_price.values()), rng.choice([2, 3]))
        results = rec.step(*[("get_product", {"product_id": pid}) for pid in ids])
        cheapest = min(results, key=lambda r: r["price"])
        listing = "; ".join(f"{r['product_id']} ({r['name']}) costs {_money(r['price'])}" for r in results)
        rec.turn(
            f"{listing}. The cheapest is {cheapest['product_id']}.",
            [*(_money(r["price"]) for r in results), cheapest["product_id"]],
        )
        turns = [t("compare_products", ids=_join(ids))]
    elif kind == "followup_cancel":
        reason = rng.choice(sorted(_REASON_TEXT))
        (cust,) = rec.step(("find_customer", {"email": email}))
        (orders,) = rec.step(("list_orders", {"customer_id": cust["customer_id"]}))
        pending = next(o for o in orders if o["status"] == "pending")
        rec.turn(
            f"Yes: order {pending['order_id']} is pending, total {_money(pending['total'])}.",
            [pending["order_id"], _money(pending["total"])],
        )
        (res,) = rec.step(("cancel_order", {"order_id": pending["order_id"], "reason": reason}))
        rec.turn(
            f"Order {pending['order_id']} is cancelled; {_money(res['refund'])} will be refunded.",
            [_money(res["refund"])],
        )
        turns = [t("followup_cancel", email=email), t("followup_cancel_2", reason=_REASON_TEXT[reason])]
        reward = WRITE
    elif kind == "followup_stock":
        order = rng.choice(sorted(state["orders"]))
        (details,) = rec.step(("get_order", {"order_id": order}))
        names = [it["name"] for it in details["items"]]
        rec.turn(f"Order {order} contains: {_join(names)}.", names)
        item = rng.choice(details["items"])
        (res,) = rec.step(("get_product", {"product_id": item["product_id"]}))
        rec.turn(f"{res['stock']} units of the {res['name']} are in stock.", [str(res["stock"])])
        turns = [t("followup_stock", order=order), t("followup_stock_2", product=item["name"])]
    elif kind == "no_tool_echo":
        order = rng.choice(sorted(state["orders"]))
        rec.turn(f"Your order number is {order}.", [order])
        turns = [t("no_tool_echo", order=order)]
    elif kind == "no_tool_math":
        qty, price = rng.randint(2, 9), _cents(rng.uniform(3, 120))
        total = _money(_cents(qty * price))
        rec.turn(f"{qty} x {_money(price)} = {total}.", [total])
        turns = [t("no_tool_math", qty=qty, price=_money(price))]
    elif kind == "conditional_address":
        order = rng.choice(sorted(state["orders"]))
        address = _address(rng, split, avoid=state["orders"][order]["shipping_address"])
        (res,) = rec.step(("get_order", {"order_id": order}))
        if res["status"] == "pending":
            rec.step(("update_shipping_address", {"order_id": order, "address": address}))
            rec.turn(f"Order {order} was pending, so it will now ship to {address}.")
        else:
            rec.turn(f"Order {order} is {res['status']}, so its address can no longer be changed.", [res["status"]])
        turns = [t("conditional_address", order=order, address=address)]
        reward = WRITE
    else:  # pragma: no cover - _KINDS and this switch are kept in step
        raise ValueError(kind)
    return rec.build(
        id=task_id,
        domain=DOMAIN,
        split=split,
        user_turns=turns,
        reward=reward,
        system=SYSTEM,
        metadata={"kind": kind, "category": KIND_CATEGORY[kind]},
    )


def generate(split: str, count: int, exclude: Sequence[Task] = ()) -> list[Task]:
    """``count`` deterministic tasks of ``split`` (one of ``_common.SPLITS``), none overlapping ``exclude``
    (``_common.generate_tasks``)."""
    return generate_tasks(DOMAIN, split, count, [k for k, _, _ in _KINDS], [w for _, _, w in _KINDS], _make, exclude)
