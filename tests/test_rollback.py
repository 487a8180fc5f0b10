"""Rollback, isolation and copies of PythonBackend state, on both rollback paths (copy-on-write and deepcopy).

A call that is rejected, raises, returns non-JSON or times out must leave ``state()`` and ``state_hash()``
exactly as before, whatever the tool mutated first; results, copies and tasks never share state.
"""

import copy
import heapq
import threading

import pytest
from kv_domain import KVToolkit, kv_task

from envace_gym.agents.scripted import RandomPolicy
from envace_gym.backends import PythonBackend, Toolkit, make_backend, state_digest, tool
from envace_gym.calls import ErrorCode, ToolCall, parse_calls
from envace_gym.envs.builtin import DOMAINS, load_domain

ROLLBACKS = ("cow", "deepcopy")

# Every builtin tool whose successful reference calls change the state (checked, not assumed, below).
MUTATING = {
    "bank": {"transfer"},
    "files": {"write_file", "make_dir", "move", "delete"},
    "retail": {"cancel_order", "update_shipping_address", "return_item"},
    "travel": {"book_flight", "cancel_booking", "create_event", "delete_event"},
}


def _reference_points(domain):
    """(task, index of the call, call) for the first successful reference call of each tool in the domain."""
    seen = {}
    for task in load_domain(domain):
        for i, ref in enumerate(task.reference_calls):
            seen.setdefault(ref.name, (task, i, ref.call))
    return seen


def _backend_before(domain, task, index, rollback):
    backend = make_backend(f"builtin/{domain}", timeout=None, rollback=rollback)
    backend.reset(task)
    for ref in task.reference_calls[:index]:
        assert backend.execute(ref.call).ok
    return backend


@pytest.mark.parametrize("domain", DOMAINS)
def test_mutating_tools_are_the_expected_ones(domain):
    found = set()
    for name, (task, index, call) in _reference_points(domain).items():
        backend = _backend_before(domain, task, index, "cow")
        before = backend.state_hash()
        assert backend.execute(call).ok
        if backend.state_hash() != before:
            found.add(name)
    assert found == MUTATING[domain]


@pytest.mark.parametrize("rollback", ROLLBACKS)
@pytest.mark.parametrize("domain", DOMAINS)
def test_a_mutating_tool_that_then_raises_changes_nothing(domain, rollback, monkeypatch):
    points = _reference_points(domain)
    for name in sorted(MUTATING[domain]):
        task, index, call = points[name]
        backend = _backend_before(domain, task, index, rollback)
        method_name, _ = backend.toolkit_cls.tool_methods()[name]
        original = getattr(backend.toolkit_cls, method_name)
        seen = {}

        def mutate_then_raise(self, *args, _original=original, _seen=seen, **kwargs):
            _original(self, *args, **kwargs)
            _seen["inside"] = state_digest(self.state)  # the tool did mutate what it holds
            raise RuntimeError("failure after the mutation")

        before_hash, before_state = backend.state_hash(), backend.state()
        with monkeypatch.context() as m:
            m.setattr(backend.toolkit_cls, method_name, mutate_then_raise)
            result = backend.execute(call)
        assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR, name
        assert seen["inside"] != before_hash, f"{name} did not mutate: the test would prove nothing"
        assert backend.state_hash() == before_hash, name
        assert backend.state() == before_state, name
        # and the untouched backend still works from there: the real call succeeds and changes the state
        assert backend.execute(call).ok and backend.state_hash() == seen["inside"], name


class Shop(Toolkit):
    """A toolkit whose tools reach state in every way a dict/list offers, then may fail."""

    @tool
    def churn(self, fail: str = "") -> dict:
        """Mutate through many access paths, then fail as asked.

        Args:
            fail: "" (succeed), "raise" or "json" (return something that is not JSON).
        """
        s = self.state
        s["orders"]["o1"]["items"].append({"sku": "new"})
        s.get("orders")["o2"]["qty"] += 1
        s.setdefault("log", []).append("churn")
        for item in s["orders"]["o1"]["items"]:
            item["seen"] = True
        for _, order in s["orders"].items():
            order["touched"] = True
        for order in s["orders"].values():
            order.setdefault("tags", []).append("t")
        merged = {**s["meta"]}
        merged["nested"]["x"] = "via {**d}"
        dict(s["meta"])["nested"]["y"] = "via dict(d)"
        s["meta"].copy()["nested"]["z"] = "via d.copy()"
        (s["stack"] + [])[0]["v"] = "via +"
        ([] + s["stack"])[1]["v"] = "via radd"
        s["stack"][:1][0]["w"] = "via slice"
        next(reversed(s["stack"]))["r"] = "via reversed"
        s["stack"].pop()["popped"] = True
        s["meta"].pop("nested")["gone"] = True
        s.update({"fresh": {"k": [1]}})
        s["fresh"]["k"].append(2)
        mine = {"alias": []}
        s["alias_holder"] = mine
        mine["alias"].append("seen through the alias")  # a container the call made stays the one stored
        del s["orders"]["o2"]
        if fail == "raise":
            raise ValueError("after mutating everything")
        if fail == "json":
            return {"bad": object()}
        return {"orders": s["orders"], "alias": s["alias_holder"]["alias"]}


SHOP = {
    "orders": {"o1": {"items": [{"sku": "a"}, {"sku": "b"}]}, "o2": {"qty": 1}},
    "meta": {"nested": {"x": 0}},
    "stack": [{"v": 1}, {"v": 2}, {"v": 3}],
}


def _shop(rollback, timeout=None):
    task = kv_task()
    task = type(task)(**{**task.__dict__, "tools": (), "initial_state": copy.deepcopy(SHOP)})
    backend = PythonBackend(Shop, timeout=timeout, rollback=rollback)
    backend.reset(task)
    return backend, task


class Probe(Toolkit):
    """Calls that change the state in ways equality misses, and calls that change nothing."""

    @tool
    def look(self) -> list:
        """Read through every container."""
        return [self.state["n"], self.state["order"]["a"], list(self.state["heap"]), dict(self.state["order"])]

    @tool
    def store_same_object(self) -> bool:
        """Store back the very object that is there (no change)."""
        self.state["order"]["a"] = self.state["order"]["a"]
        return True

    @tool
    def as_float(self) -> bool:
        """Rewrite n as an equal float (1 == 1.0, but the JSON differs)."""
        self.state["n"] = float(self.state["n"])
        return True

    @tool
    def move_to_end(self) -> bool:
        """Pop a key and put it back: the same items, another order."""
        self.state["order"]["a"] = self.state["order"].pop("a")
        return True

    @tool
    def heap_push(self, x: int) -> bool:
        """heapq writes a list through the C API, past CowList's methods.

        Args:
            x: the value pushed.
        """
        heapq.heappush(self.state["heap"], x)
        return True

    @tool
    def new_root(self) -> bool:
        """Replace the whole state with an equal dict."""
        self.state = dict(self.state)
        return True


def test_a_call_that_changes_nothing_keeps_the_committed_state_and_any_change_is_seen():
    """Copy-on-write keeps the committed state, and its known hash, after a call that changed nothing
    (`cow.unchanged`: identity, not equality); every kind of change, even one equality misses, is kept."""
    state = {"n": 1, "order": {"a": 1, "b": 2}, "heap": [3]}
    task = kv_task()
    task = type(task)(**{**task.__dict__, "tools": (), "initial_state": copy.deepcopy(state)})
    backend = PythonBackend(Probe, timeout=None, rollback="cow")
    backend.reset(task)
    assert backend._toolkit.state is task.initial_state  # reset: the task's state itself, hash shared
    for name in ("look", "store_same_object"):
        before = backend._toolkit.state
        assert backend.execute(ToolCall(name, {})).ok
        assert backend._toolkit.state is before, name
    hashes = {backend.state_hash()}
    changes = [
        ("as_float", {}, lambda s: type(s["n"]) is float),
        ("move_to_end", {}, lambda s: list(s["order"]) == ["b", "a"]),
        ("heap_push", {"x": 4}, lambda s: s["heap"] == [3, 4]),  # appended: only the length tells
        ("new_root", {}, lambda s: True),
    ]
    for name, args, holds in changes:
        before = backend._toolkit.state
        assert backend.execute(ToolCall(name, args)).ok
        assert backend._toolkit.state is not before and holds(backend.state()), name
        assert backend.state_hash() == state_digest(backend.state()), name
        hashes.add(backend.state_hash())
    assert len(hashes) == 3  # the start, as_float, heap_push (move_to_end and new_root write the same JSON)
    assert task.initial_state == state


@pytest.mark.parametrize("rollback", ROLLBACKS)
@pytest.mark.parametrize("fail", ["raise", "json"])
def test_every_access_path_is_rolled_back(rollback, fail):
    backend, task = _shop(rollback)
    before = backend.state_hash()
    result = backend.execute(ToolCall("churn", {"fail": fail}))
    assert result.error.code is ErrorCode.TOOL_EXECUTION_ERROR
    assert backend.state_hash() == before and backend.state() == SHOP
    assert task.initial_state == SHOP


def test_both_paths_agree_on_success():
    outcomes = []
    for rollback in ROLLBACKS:
        backend, task = _shop(rollback)
        result = backend.execute(ToolCall("churn", {}))
        assert result.ok
        outcomes.append((result.content, backend.state(), backend.state_hash()))
        assert task.initial_state == SHOP  # neither path writes into the task
    assert outcomes[0] == outcomes[1]
    state = outcomes[0][1]
    assert state["alias_holder"]["alias"] == ["seen through the alias"]
    assert state["meta"] == {} and "o2" not in state["orders"] and state["fresh"] == {"k": [1, 2]}
    # shallow copies share their children, as with plain dicts and lists
    assert state["stack"] == [{"v": "via +", "w": "via slice"}, {"v": "via radd"}]
    assert outcomes[0][0]["orders"]["o1"]["items"][-1] == {"sku": "new", "seen": True}


class Slow(Toolkit):
    """A tool that keeps running after its timeout and then writes into what it reached."""

    started = threading.Event()
    release = threading.Event()
    finished = threading.Event()

    @tool
    def slow_write(self, key: str) -> dict:
        """Write, wait past the timeout, write again.

        Args:
            key: The key.
        """
        data = self.state["data"]
        data[key] = "before the timeout"
        Slow.started.set()
        Slow.release.wait(30)
        data[key] = "after the timeout"
        data.setdefault("more", {})["late"] = True
        self.state["late_top_level"] = 1
        Slow.finished.set()
        return {"late": True}


@pytest.mark.parametrize("rollback", ROLLBACKS)
def test_a_timed_out_tool_that_keeps_writing_never_reaches_the_live_state(rollback):
    for event in (Slow.started, Slow.release, Slow.finished):
        event.clear()
    task = kv_task()
    task = type(task)(**{**task.__dict__, "tools": (), "initial_state": {"data": {"z": 1}}})
    backend = PythonBackend(Slow, timeout=0.05, rollback=rollback)
    backend.reset(task)
    before = backend.state_hash()
    result = backend.execute(ToolCall("slow_write", {"key": "a"}))
    assert result.error.code is ErrorCode.TOOL_TIMEOUT
    assert Slow.started.wait(30) and not Slow.finished.is_set()  # it wrote, and is still running
    assert backend.state_hash() == before
    Slow.release.set()
    assert Slow.finished.wait(30)
    assert backend.state_hash() == before and backend.state() == {"data": {"z": 1}}
    assert task.initial_state == {"data": {"z": 1}}


@pytest.mark.parametrize("rollback", ROLLBACKS)
def test_rejected_calls_change_nothing(rollback):
    backend = PythonBackend(KVToolkit, timeout=None, rollback=rollback)
    backend.reset(kv_task())
    before = backend.state_hash()
    assert backend.execute(ToolCall("put", {"key": "a"})).error.code is ErrorCode.INVALID_PARAMETERS
    assert backend.execute(ToolCall("nope", {})).error.code is ErrorCode.TOOL_NOT_AVAILABLE
    assert backend.state_hash() == before


class Leaky(Toolkit):
    @tool
    def data(self) -> dict:
        """Return the live data dict itself."""
        return self.state["data"]


@pytest.mark.parametrize("rollback", ROLLBACKS)
def test_results_are_detached(rollback):
    backend = PythonBackend(Leaky, timeout=None, rollback=rollback)
    task = kv_task()
    backend.reset(type(task)(**{**task.__dict__, "tools": (), "initial_state": {"data": {"z": [1]}}}))
    result = backend.execute(ToolCall("data", {}))
    result.content["z"].append(2)
    result.content["new"] = 1
    assert backend.state() == {"data": {"z": [1]}}
    again = backend.execute(ToolCall("data", {}))
    assert again.content == {"z": [1]} and type(again.content) is dict


@pytest.mark.parametrize("rollback", ROLLBACKS)
def test_builtin_results_are_detached(rollback):
    task, index, call = _reference_points("retail")["get_order"]
    backend = _backend_before("retail", task, index, rollback)
    before = backend.state_hash()
    result = backend.execute(call)
    result.content["items"][0]["quantity"] = 999
    result.content["status"] = "stolen"
    assert backend.state_hash() == before


@pytest.mark.parametrize("rollback", ROLLBACKS)
def test_copies_are_independent_both_ways(rollback):
    backend = PythonBackend(KVToolkit, timeout=None, rollback=rollback)
    task = kv_task()
    backend.reset(type(task)(**{**task.__dict__, "initial_state": {"data": {"z": 1}}}))
    assert backend.execute(ToolCall("put", {"key": "a", "value": 1})).ok
    clone = backend.copy()
    assert clone.state() == backend.state()
    assert clone.execute(ToolCall("put", {"key": "c", "value": 3})).ok
    assert backend.execute(ToolCall("put", {"key": "a", "value": 2})).ok
    assert backend.execute(ToolCall("put", {"key": "o", "value": 4})).ok
    assert backend.state()["data"] == {"z": 1, "a": 2, "o": 4}
    assert clone.state()["data"] == {"z": 1, "a": 1, "c": 3}
    assert clone.copy().state_hash() == clone.state_hash()


@pytest.mark.parametrize("rollback", ROLLBACKS)
@pytest.mark.parametrize("domain", DOMAINS)
def test_builtin_copies_are_independent(domain, rollback):
    points = _reference_points(domain)
    name = sorted(MUTATING[domain])[0]
    task, index, call = points[name]
    backend = _backend_before(domain, task, index, rollback)
    clone = backend.copy()
    before = clone.state_hash()
    assert backend.execute(call).ok and backend.state_hash() != before
    assert clone.state_hash() == before  # the original's call did not reach the copy
    after = backend.state_hash()
    assert clone.execute(call).ok and clone.state_hash() == after
    assert backend.state_hash() == after  # nor the copy's the original


@pytest.mark.parametrize("rollback", ROLLBACKS)
@pytest.mark.parametrize("domain", DOMAINS)
def test_reset_restores_the_initial_state_and_never_writes_the_task(domain, rollback):
    tasks = [t for t in load_domain(domain) if any(r.name in MUTATING[domain] for r in t.reference_calls)][:5]
    backend = make_backend(f"builtin/{domain}", timeout=None, rollback=rollback)
    for task in tasks:
        pristine = copy.deepcopy(task.initial_state)
        backend.reset(task)
        initial = backend.state_hash()
        assert initial == state_digest(pristine)
        for ref in task.reference_calls:
            backend.execute(ref.call)
        assert backend.state_hash() != initial
        backend.reset(task)
        assert backend.state_hash() == initial and backend.state() == pristine
        assert task.initial_state == pristine


@pytest.mark.parametrize("domain", DOMAINS)
def test_copy_on_write_agrees_with_deepcopy_on_random_calls(domain):
    """The same random (valid, invalid, failing) calls give the same results and states on both paths."""
    policy = RandomPolicy(seed=7, p_call=1.0, max_calls=10**9)
    backends = [make_backend(f"builtin/{domain}", timeout=None, rollback=r) for r in ROLLBACKS]
    tasks = list(load_domain(domain))[:40]
    for task in tasks:
        for b in backends:
            b.reset(task)
        info = {"tools": list(task.tools)}
        calls = [c for ref in task.reference_calls for c in [ref.call]]
        for _ in range(12):
            calls.extend(parse_calls(policy.act("", info)).calls)
        for call in calls:
            results = [b.execute(call) for b in backends]
            assert results[0].to_dict() == results[1].to_dict(), call
            assert backends[0].state_hash() == backends[1].state_hash(), call
        assert backends[0].state() == backends[1].state()
