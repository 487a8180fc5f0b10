"""The builtin "travel" domain: toolkit behaviour, task generation, held-out splits and reference replay."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from domain_checks import reference_hash

from envace_gym.backends import PythonBackend
from envace_gym.calls import ErrorCode, ToolCall
from envace_gym.envs.builtin import travel
from envace_gym.envs.builtin._common import LAST_NAMES
from envace_gym.rewards import EpisodeRecord, score_episode
from envace_gym.tasks import Task

# ------------------------------------------------------------------------------ a small hand-made world
STATE = {
    "cities": ["Lisbon", "Madrid", "Oslo"],
    "flights": {
        "SK101": {
            "airline": "Skandia Air",
            "origin": "Lisbon",
            "destination": "Oslo",
            "date": "2026-03-14",
            "depart": "14:30",
            "arrive": "18:40",
            "price": 210,
            "seats_left": 3,
        },
        "TP202": {
            "airline": "Atlantica",
            "origin": "Lisbon",
            "destination": "Oslo",
            "date": "2026-03-14",
            "depart": "07:05",
            "arrive": "11:20",
            "price": 145,
            "seats_left": 1,
        },
        "IB303": {
            "airline": "Iberjet",
            "origin": "Lisbon",
            "destination": "Oslo",
            "date": "2026-03-15",
            "depart": "09:00",
            "arrive": "13:10",
            "price": 99,
            "seats_left": 5,
        },
        "LX404": {
            "airline": "Alpina",
            "origin": "Oslo",
            "destination": "Lisbon",
            "date": "2026-03-14",
            "depart": "10:00",
            "arrive": "14:00",
            "price": 180,
            "seats_left": 0,
        },
    },
    "bookings": {
        "BK-1000": {"flight_id": "SK101", "passenger": "Ana Silva", "status": "confirmed", "price": 210},
        "BK-1001": {"flight_id": "IB303", "passenger": "Ana Silva", "status": "cancelled", "price": 99},
    },
    "events": {
        "EV-10": {"title": "Team sync", "date": "2026-03-14", "start": "13:00", "end": "14:00"},
        "EV-11": {"title": "Yoga class", "date": "2026-03-14", "start": "08:00", "end": "09:00"},
        "EV-12": {"title": "Haircut", "date": "2026-03-15", "start": "10:00", "end": "10:30"},
    },
    "next_booking": 1002,
    "next_event": 13,
}


@pytest.fixture
def backend() -> PythonBackend:
    b = travel.make_backend(timeout=None)
    b.reset(Task(id="t", user_turns=("hi",), initial_state=STATE))
    return b


def ok(backend: PythonBackend, name: str, **arguments):
    result = backend.execute(ToolCall(name, arguments))
    assert result.ok, result.error
    return result.content


def fails(backend: PythonBackend, name: str, **arguments) -> str:
    """Run a call that must fail with a domain error and leave the state exactly as it was."""
    before = backend.state_hash()
    result = backend.execute(ToolCall(name, arguments))
    assert not result.ok
    assert result.error.code == ErrorCode.TOOL_EXECUTION_ERROR
    assert backend.state_hash() == before
    return result.error.message


# ------------------------------------------------------------------------------ toolkit
def test_tool_specs_are_strict_and_documented():
    specs = {s.name: s for s in travel.TravelToolkit.tool_specs()}
    assert set(specs) == {
        "search_flights",
        "book_flight",
        "get_booking",
        "find_bookings",
        "cancel_booking",
        "list_events",
        "create_event",
        "delete_event",
    }
    for spec in specs.values():
        assert spec.description
        assert spec.parameters["additionalProperties"] is False
        for pname, prop in spec.parameters["properties"].items():
            assert prop.get("description"), (spec.name, pname)
    assert specs["create_event"].parameters["required"] == ["title", "date", "start", "end"]


def test_search_flights_filters_by_route_and_date_earliest_first(backend):
    found = ok(backend, "search_flights", origin="lisbon", destination="OSLO", date="2026-03-14")
    assert [f["flight_id"] for f in found] == ["TP202", "SK101"]
    assert found[0] == {"flight_id": "TP202", **STATE["flights"]["TP202"]}
    assert ok(backend, "search_flights", origin="Madrid", destination="Oslo", date="2026-03-14") == []


def test_search_flights_errors(backend):
    assert "Paris" in fails(backend, "search_flights", origin="Paris", destination="Oslo", date="2026-03-14")
    assert "different" in fails(backend, "search_flights", origin="Oslo", destination="oslo", date="2026-03-14")
    assert "ISO" in fails(backend, "search_flights", origin="Lisbon", destination="Oslo", date="14/03/2026")
    assert "not a valid" in fails(backend, "search_flights", origin="Lisbon", destination="Oslo", date="2026-02-30")


def test_book_flight_takes_a_seat_and_numbers_the_booking(backend):
    res = ok(backend, "book_flight", flight_id="TP202", passenger="  Bruno   Costa ")
    assert res == {
        "booking_id": "BK-1002",
        "flight_id": "TP202",
        "passenger": "Bruno Costa",
        "price": 145,
        "status": "confirmed",
    }
    state = backend.state()
    assert state["flights"]["TP202"]["seats_left"] == 0
    assert state["next_booking"] == 1003
    assert state["bookings"]["BK-1002"]["passenger"] == "Bruno Costa"
    # That was the last seat.
    assert "sold out" in fails(backend, "book_flight", flight_id="TP202", passenger="Carla Novak")


def test_book_flight_errors(backend):
    assert "no flight" in fails(backend, "book_flight", flight_id="XX999", passenger="Ana Silva")
    assert "sold out" in fails(backend, "book_flight", flight_id="LX404", passenger="Ana Silva")
    assert "BK-1000" in fails(backend, "book_flight", flight_id="SK101", passenger="ana silva")
    assert "empty" in fails(backend, "book_flight", flight_id="SK101", passenger="   ")
    # A cancelled booking does not block booking the same flight again.
    assert ok(backend, "book_flight", flight_id="IB303", passenger="Ana Silva")["booking_id"] == "BK-1002"


def test_get_and_find_bookings(backend):
    res = ok(backend, "get_booking", booking_id="BK-1000")
    assert res["status"] == "confirmed" and res["price"] == 210
    assert res["flight"]["flight_id"] == "SK101" and res["flight"]["depart"] == "14:30"
    assert "no booking" in fails(backend, "get_booking", booking_id="BK-9")

    mine = ok(backend, "find_bookings", passenger="Ana Silva")
    assert [(b["booking_id"], b["destination"], b["status"]) for b in mine] == [
        ("BK-1000", "Oslo", "confirmed"),
        ("BK-1001", "Oslo", "cancelled"),
    ]
    assert "Zoe" in fails(backend, "find_bookings", passenger="Zoe Tanaka")


def test_cancel_booking_refunds_and_releases_the_seat(backend):
    assert ok(backend, "cancel_booking", booking_id="BK-1000") == {
        "booking_id": "BK-1000",
        "status": "cancelled",
        "refund": 210,
    }
    state = backend.state()
    assert state["bookings"]["BK-1000"]["status"] == "cancelled"
    assert state["flights"]["SK101"]["seats_left"] == 4
    assert "already cancelled" in fails(backend, "cancel_booking", booking_id="BK-1000")
    assert "no booking" in fails(backend, "cancel_booking", booking_id="BK-7777")


def test_list_events_sorted_by_start(backend):
    events = ok(backend, "list_events", date="2026-03-14")
    assert [(e["event_id"], e["title"]) for e in events] == [("EV-11", "Yoga class"), ("EV-10", "Team sync")]
    assert ok(backend, "list_events", date="2026-03-16") == []
    assert "ISO" in fails(backend, "list_events", date="March 14")


def test_create_event_and_overlap_rules(backend):
    # Touching intervals are fine: 09:00 is when Yoga ends and 13:00 when Team sync starts.
    ev = ok(backend, "create_event", title="Lunch", date="2026-03-14", start="09:00", end="13:00")
    assert ev == {"event_id": "EV-13", "title": "Lunch", "date": "2026-03-14", "start": "09:00", "end": "13:00"}
    assert backend.state()["next_event"] == 14
    msg = fails(backend, "create_event", title="Call", date="2026-03-14", start="13:30", end="15:00")
    assert "EV-10" in msg and "Team sync" in msg
    assert "after start" in fails(backend, "create_event", title="Call", date="2026-03-16", start="15:00", end="15:00")
    assert "HH:MM" in fails(backend, "create_event", title="Call", date="2026-03-16", start="9:00", end="10:00")
    assert "HH:MM" in fails(backend, "create_event", title="Call", date="2026-03-16", start="09:00", end="24:00")
    assert "empty" in fails(backend, "create_event", title=" ", date="2026-03-16", start="09:00", end="10:00")
    # Same times on another day do not clash.
    assert (
        ok(backend, "create_event", title="Call", date="2026-03-16", start="13:30", end="15:00")["event_id"] == "EV-14"
    )


def test_delete_event(backend):
    assert ok(backend, "delete_event", event_id="EV-12") == {
        "deleted": "EV-12",
        "title": "Haircut",
        "date": "2026-03-15",
    }
    assert ok(backend, "list_events", date="2026-03-15") == []
    assert "no event" in fails(backend, "delete_event", event_id="EV-12")


def test_failed_call_rolls_back_and_backend_keeps_working(backend):
    before = backend.state()
    result = backend.execute(ToolCall("book_flight", {"flight_id": "LX404", "passenger": "Ana Silva"}))
    assert not result.ok and "sold out" in result.error.message
    assert backend.state() == before
    # Schema violations are rejected before execution, also without touching state.
    bad = backend.execute(ToolCall("list_events", {"date": "2026-03-14", "extra": 1}))
    assert bad.error.code == ErrorCode.INVALID_PARAMETERS
    assert backend.state() == before
    assert ok(backend, "book_flight", flight_id="IB303", passenger="Hugo Berg")["booking_id"] == "BK-1002"


def test_reset_restores_the_initial_state(backend):
    ok(backend, "delete_event", event_id="EV-10")
    backend.reset(Task(id="t", user_turns=("hi",), initial_state=STATE))
    assert backend.state() == STATE


# ------------------------------------------------------------------------------ generation
@pytest.fixture(scope="module")
def suites() -> dict[str, list[Task]]:
    return {"train": travel.generate("train", 600), "test": travel.generate("test", 150)}


def all_tasks(suites):
    return [t for split in ("train", "test") for t in suites[split]]


def test_generation_is_deterministic_and_well_formed(suites):
    again = travel.generate("test", 150)
    assert [t.to_dict() for t in again] == [t.to_dict() for t in suites["test"]]
    assert [t.to_dict() for t in travel.generate("train", 40)] == [t.to_dict() for t in suites["train"][:40]]
    for split, n in (("train", 600), ("test", 150)):
        tasks = suites[split]
        assert [t.id for t in tasks] == [f"travel-{split}-{i:04d}" for i in range(n)]
        for t in tasks:
            assert t.split == split and t.domain == "travel" and t.backend == "builtin/travel"
            assert t.system and t.tools
            assert Task.from_dict(json.loads(json.dumps(t.to_dict()))).to_dict() == t.to_dict()
    with pytest.raises(ValueError):
        travel.generate("dev", 1)


def test_every_kind_is_present_with_roughly_the_intended_mix(suites):
    counts = Counter(t.metadata["kind"] for t in suites["train"])
    assert set(counts) == {k for k, _ in travel._KINDS}
    assert set(
        travel.CATEGORIES["single"]
        + travel.CATEGORIES["dependent"]
        + travel.CATEGORIES["parallel"]
        + travel.CATEGORIES["multi_turn"]
        + travel.CATEGORIES["no_tool"]
        + travel.CATEGORIES["other"]
    ) == set(counts)
    share = {cat: sum(counts[k] for k in kinds) / 600 for cat, kinds in travel.CATEGORIES.items()}
    for cat, target in {
        "single": 0.20,
        "dependent": 0.30,
        "parallel": 0.15,
        "multi_turn": 0.15,
        "no_tool": 0.10,
    }.items():
        assert abs(share[cat] - target) < 0.06, (cat, share[cat])
    assert Counter(t.metadata["kind"] for t in suites["test"]).keys() >= {"book_cheapest", "no_tool", "two_days"}


def test_kinds_have_their_shape(suites):
    for t in all_tasks(suites):
        kind = t.metadata["kind"]
        steps = [s for turn in t.reference for s in turn.steps]
        if kind in travel.CATEGORIES["single"]:
            assert len(steps) == 1 and len(steps[0]) == 1
        elif kind in travel.CATEGORIES["parallel"]:
            assert len(steps) == 1 and 2 <= len(steps[0]) <= 3
        elif kind in travel.CATEGORIES["multi_turn"]:
            assert len(t.user_turns) == 2 and all(turn.steps for turn in t.reference)
        elif kind == "no_tool":
            assert not steps
            assert all(s in t.user_turns[0] for s in t.reference[0].answer_contains)
        else:  # dependent and other: several sequential steps
            assert len(steps) >= 2
        if kind not in travel.CATEGORIES["multi_turn"]:
            assert len(t.user_turns) == 1


def test_dependent_ids_come_only_from_results(suites):
    """The id a later call needs appears in an earlier result, never in the user's message."""
    for t in all_tasks(suites):
        if t.metadata["kind"] not in travel.CATEGORIES["dependent"] + travel.CATEGORIES["other"]:
            continue
        first, *later = [c for turn in t.reference for c in turn.calls]
        for call in later:
            for key in ("flight_id", "booking_id", "event_id"):
                if key in call.arguments:
                    value = call.arguments[key]
                    assert value not in " ".join(t.user_turns)
                    assert value in json.dumps(first.result)


def test_cheapest_and_earliest_are_unique_and_chosen(suites):
    seen = Counter()
    for t in all_tasks(suites):
        kind = t.metadata["kind"]
        if kind not in ("book_cheapest", "book_earliest", "followup_book", "book_and_calendar"):
            continue
        search, book = t.reference_calls[0], t.reference_calls[1]
        assert search.name == "search_flights" and book.name == "book_flight"
        flights = search.result
        assert len(flights) >= 2
        key = (lambda f: f["depart"]) if kind == "book_earliest" else (lambda f: f["price"])
        best = sorted(flights, key=key)
        assert key(best[0]) != key(best[1])  # unique optimum
        assert book.arguments["flight_id"] == best[0]["flight_id"]
        seen[kind] += 1
    assert len(seen) == 4


def test_compare_routes_reports_each_cheapest_fare(suites):
    tasks = [t for t in all_tasks(suites) if t.metadata["kind"] == "compare_routes"]
    assert tasks
    for t in tasks:
        step = t.reference[0].steps[0]
        origins = {c.arguments["origin"] for c in step}
        assert len(origins) == 1 and len({c.arguments["destination"] for c in step}) == len(step)
        assert list(t.reference[0].answer_contains) == [str(min(f["price"] for f in c.result)) for c in step]


def test_splits_use_disjoint_entities(suites):
    def entities(tasks):
        cities, people, titles = set(), set(), set()
        for t in tasks:
            state = t.initial_state
            cities.update(state["cities"])
            people.update(b["passenger"] for b in state["bookings"].values())
            people.update(c.arguments["passenger"] for c in t.reference_calls if "passenger" in c.arguments)
            titles.update(e["title"] for e in state["events"].values())
            titles.update(
                c.arguments["title"]
                for c in t.reference_calls
                if c.name == "create_event" and not c.arguments["title"].startswith("Flight to ")
            )
        return cities, people, titles

    train, test = entities(suites["train"]), entities(suites["test"])
    for tr, te in zip(train, test, strict=True):
        assert tr and te and not tr & te
    for pool in (travel._CITIES, travel._FIRST, LAST_NAMES, travel._TITLES):
        assert not set(pool["train"]) & set(pool["test"])


def replay(task: Task) -> str:
    return reference_hash(task, travel.make_backend)


def test_state_changing_tasks_are_graded_on_state(suites):
    for t in all_tasks(suites):
        writes = any(
            c.name in ("book_flight", "cancel_booking", "create_event", "delete_event") for c in t.reference_calls
        )
        assert ("state_match" in t.reward) == writes, t.id
        if not writes:
            assert t.reward == ("call_match", "answer_match")
        # A reference that writes really changes the state.
        fresh = travel.make_backend(timeout=None)
        fresh.reset(t)
        assert (replay(t) != fresh.state_hash()) == writes


def test_wrong_choice_is_penalised(suites):
    """Booking a flight other than the cheapest fails call_match and state_match."""
    t = next(t for t in suites["train"] if t.metadata["kind"] == "book_cheapest")
    search, book = t.reference_calls
    wrong = next(f["flight_id"] for f in search.result if f["flight_id"] != book.arguments["flight_id"])
    b = travel.make_backend(timeout=None)
    b.reset(t)
    calls = [search.call, ToolCall("book_flight", {**book.arguments, "flight_id": wrong})]
    results = [b.execute(c) for c in calls]
    assert all(r.ok for r in results)
    record = EpisodeRecord(
        calls=calls,
        turn_answers=[f"Booked, reference {results[1].content['booking_id']}."],
        final_state_hash=b.state_hash(),
    )
    expected = replay(t)
    reward, parts = score_episode(t, record, expected_state_hash=lambda: expected)
    assert reward == 0.0 and parts["call_match"] == 0.0 and parts["state_match"] == 0.0
