"""Builtin domain "travel": a personal calendar plus flight search, booking and cancellation.

Dates are ISO strings ("2026-03-14") and times 24-hour "HH:MM" strings ("14:30"); both are validated
strictly, so a malformed argument is a clear tool error rather than a silent mismatch.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envace_gym.backends import PythonBackend, Toolkit, tool
from envace_gym.tasks import Task

from ._common import LAST_NAMES, ReferenceRecorder, generate_tasks, pick_template

DOMAIN = "travel"
BACKEND = f"builtin/{DOMAIN}"
SYSTEM = (
    "You are a travel assistant. Use the tools to manage the user's calendar and to search, book and "
    "cancel flights exactly as asked."
)

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TIME = re.compile(r"^(?:[01]\d|2[0-3]):[0-5]\d$")


def _check_date(value: str) -> str:
    if not _DATE.match(value):
        raise ValueError(f"date must be an ISO date like 2026-03-14, got {value!r}")
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a valid calendar date") from None
    return value


def _minutes(value: str) -> int:
    if not _TIME.match(value):
        raise ValueError(f"time must be 24-hour HH:MM like 14:30, got {value!r}")
    return int(value[:2]) * 60 + int(value[3:])


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


class TravelToolkit(Toolkit):
    """A traveller's calendar and a small flight inventory.

    ``state = {"cities": [...], "flights": {id: {...}}, "bookings": {id: {...}}, "events": {id: {...}},
    "next_booking": int, "next_event": int}``. Booking and event ids come from the counters, so replaying
    the same successful calls always yields the same ids (and the same state hash).
    """

    run_inline = True  # bounded, pure tools over in-memory state: no watchdog thread needed

    # ------------------------------------------------------------------ lookups
    def _city(self, name: str) -> str:
        wanted = name.strip().lower()
        for city in self.state["cities"]:
            if city.lower() == wanted:
                return city
        raise ValueError(f"no airport served in {name!r}; served cities: {', '.join(self.state['cities'])}")

    def _flight(self, flight_id: str) -> dict[str, Any]:
        try:
            return self.state["flights"][flight_id]
        except KeyError:
            raise ValueError(f"no flight {flight_id!r}") from None

    def _booking(self, booking_id: str) -> dict[str, Any]:
        try:
            return self.state["bookings"][booking_id]
        except KeyError:
            raise ValueError(f"no booking {booking_id!r}") from None

    def _flight_view(self, flight_id: str) -> dict[str, Any]:
        return {"flight_id": flight_id, **self.state["flights"][flight_id]}

    def _event_view(self, event_id: str) -> dict[str, Any]:
        return {"event_id": event_id, **self.state["events"][event_id]}

    # ------------------------------------------------------------------ flights
    @tool
    def search_flights(self, origin: str, destination: str, date: str) -> list:
        """Find the flights between two cities on one day, earliest departure first.

        Args:
            origin: The departure city, e.g. "Lisbon".
            destination: The arrival city, e.g. "Oslo".
            date: The travel date, ISO format "YYYY-MM-DD".
        """
        src, dst = self._city(origin), self._city(destination)
        if src == dst:
            raise ValueError("origin and destination must be different cities")
        _check_date(date)
        found = [
            self._flight_view(fid)
            for fid, f in self.state["flights"].items()
            if f["origin"] == src and f["destination"] == dst and f["date"] == date
        ]
        return sorted(found, key=lambda f: (f["depart"], f["flight_id"]))

    @tool
    def book_flight(self, flight_id: str, passenger: str) -> dict:
        """Book one seat on a flight for a passenger.

        Args:
            flight_id: The flight id from search_flights, e.g. "SK482".
            passenger: The passenger's full name, e.g. "Ana Silva".
        """
        flight = self._flight(flight_id)
        name = " ".join(passenger.split())
        if not name:
            raise ValueError("passenger name must not be empty")
        if flight["seats_left"] <= 0:
            raise ValueError(f"flight {flight_id} is sold out")
        for bid, b in self.state["bookings"].items():
            if b["flight_id"] == flight_id and b["passenger"].lower() == name.lower() and b["status"] == "confirmed":
                raise ValueError(f"{name} already holds booking {bid} on flight {flight_id}")
        booking_id = f"BK-{self.state['next_booking']}"
        self.state["next_booking"] += 1
        flight["seats_left"] -= 1
        self.state["bookings"][booking_id] = {
            "flight_id": flight_id,
            "passenger": name,
            "status": "confirmed",
            "price": flight["price"],
        }
        return {
            "booking_id": booking_id,
            "flight_id": flight_id,
            "passenger": name,
            "price": flight["price"],
            "status": "confirmed",
        }

    @tool
    def get_booking(self, booking_id: str) -> dict:
        """Get a booking with the details of its flight.

        Args:
            booking_id: The booking reference, e.g. "BK-1042".
        """
        b = self._booking(booking_id)
        return {
            "booking_id": booking_id,
            "passenger": b["passenger"],
            "status": b["status"],
            "price": b["price"],
            "flight": self._flight_view(b["flight_id"]),
        }

    @tool
    def find_bookings(self, passenger: str) -> list:
        """List every booking (confirmed or cancelled) held by a passenger.

        Args:
            passenger: The passenger's full name, e.g. "Ana Silva".
        """
        wanted = " ".join(passenger.split()).lower()
        found = []
        for bid, b in sorted(self.state["bookings"].items()):
            if b["passenger"].lower() == wanted:
                f = self.state["flights"][b["flight_id"]]
                found.append(
                    {
                        "booking_id": bid,
                        "flight_id": b["flight_id"],
                        "origin": f["origin"],
                        "destination": f["destination"],
                        "date": f["date"],
                        "status": b["status"],
                    }
                )
        if not found:
            raise ValueError(f"no bookings for passenger {passenger!r}")
        return found

    @tool
    def cancel_booking(self, booking_id: str) -> dict:
        """Cancel a confirmed booking; the fare is refunded and the seat released.

        Args:
            booking_id: The booking reference, e.g. "BK-1042".
        """
        b = self._booking(booking_id)
        if b["status"] == "cancelled":
            raise ValueError(f"booking {booking_id} is already cancelled")
        b["status"] = "cancelled"
        self.state["flights"][b["flight_id"]]["seats_left"] += 1
        return {"booking_id": booking_id, "status": "cancelled", "refund": b["price"]}

    # ------------------------------------------------------------------ calendar
    @tool
    def list_events(self, date: str) -> list:
        """List the calendar events of one day, in order of start time.

        Args:
            date: The day, ISO format "YYYY-MM-DD".
        """
        _check_date(date)
        found = [self._event_view(eid) for eid, e in self.state["events"].items() if e["date"] == date]
        return sorted(found, key=lambda e: (e["start"], e["event_id"]))

    @tool
    def create_event(self, title: str, date: str, start: str, end: str) -> dict:
        """Add an event to the calendar; it may not overlap an existing event on the same day.

        Args:
            title: What the event is, e.g. "Team sync".
            date: The day, ISO format "YYYY-MM-DD".
            start: Start time, 24-hour "HH:MM".
            end: End time, 24-hour "HH:MM", later than start on the same day.
        """
        title = title.strip()
        if not title:
            raise ValueError("title must not be empty")
        _check_date(date)
        lo, hi = _minutes(start), _minutes(end)
        if hi <= lo:
            raise ValueError(f"end {end} must be after start {start}")
        for eid, e in sorted(self.state["events"].items()):
            # Half-open intervals: an event may start exactly when another ends.
            if e["date"] == date and lo < _minutes(e["end"]) and _minutes(e["start"]) < hi:
                raise ValueError(f"overlaps {eid} {e['title']!r} ({e['start']}-{e['end']}) on {date}")
        event_id = f"EV-{self.state['next_event']}"
        self.state["next_event"] += 1
        self.state["events"][event_id] = {"title": title, "date": date, "start": start, "end": end}
        return self._event_view(event_id)

    @tool
    def delete_event(self, event_id: str) -> dict:
        """Remove an event from the calendar.

        Args:
            event_id: The event id from list_events, e.g. "EV-311".
        """
        try:
            event = self.state["events"].pop(event_id)
        except KeyError:
            raise ValueError(f"no event {event_id!r}") from None
        return {"deleted": event_id, "title": event["title"], "date": event["date"]}


def make_backend(**kwargs: Any) -> PythonBackend:
    """A backend serving `TravelToolkit` (registered as ``builtin/travel``)."""
    return PythonBackend(TravelToolkit, **kwargs)


# ------------------------------------------------------------------------------ entity pools
# Disjoint train/test pools: the test split only sees cities, people and event titles never trained on.
_CITIES = {
    "train": [
        "Lisbon",
        "Oslo",
        "Madrid",
        "Vienna",
        "Prague",
        "Dublin",
        "Helsinki",
        "Athens",
        "Warsaw",
        "Budapest",
        "Copenhagen",
        "Brussels",
        "Zurich",
        "Milan",
        "Porto",
        "Seville",
        "Lyon",
        "Munich",
    ],
    "test": ["Reykjavik", "Tallinn", "Valletta", "Ljubljana", "Riga", "Bucharest", "Sofia", "Krakow"],
}
_FIRST = {
    "train": [
        "Ana",
        "Bruno",
        "Carla",
        "Diego",
        "Elena",
        "Farid",
        "Greta",
        "Hugo",
        "Ines",
        "Jonas",
        "Kira",
        "Luis",
        "Mona",
        "Nils",
        "Olga",
        "Pavel",
        "Rosa",
        "Sami",
    ],
    "test": ["Vera", "Wim", "Xenia", "Yusuf", "Zoe", "Anouk", "Bilal", "Chiara"],
}
_TITLES = {
    "train": [
        "Team sync",
        "Dentist appointment",
        "Yoga class",
        "Budget review",
        "Lunch with Marta",
        "Piano lesson",
        "Project kickoff",
        "Car service",
        "Book club",
        "Haircut",
        "Client call",
        "Gym session",
        "Design review",
        "Coffee with Jonas",
        "Tax advisor",
        "Sprint planning",
        "Swimming lesson",
        "Doctor visit",
        "Code review",
        "Spanish class",
        "Dinner with Tom",
        "Parent meeting",
        "Bike repair",
        "Museum tour",
    ],
    "test": [
        "Vet visit",
        "Board meeting",
        "Language exchange",
        "Pottery workshop",
        "Interview prep",
        "Dinner with Leila",
        "Physiotherapy",
        "Quarterly planning",
        "Choir rehearsal",
        "Wine tasting",
        "Passport renewal",
        "Chess club",
    ],
}
# Airlines are scenery, not held-out entities.
_AIRLINES = [
    ("SK", "Skandia Air"),
    ("TP", "Atlantica"),
    ("LX", "Alpina"),
    ("IB", "Iberjet"),
    ("AY", "Nordwing"),
    ("LO", "Vistula Air"),
]


# ------------------------------------------------------------------------------ world building
@dataclass
class _World:
    state: dict[str, Any]
    cities: list[str]
    dates: list[str]
    names: list[str]  # names[0:2] hold bookings; names[2] books new flights (so it never double-books)
    routes: list[tuple[str, str, str]]  # (origin, destination, date) with 2-4 flights each
    spare_titles: list[str]  # event titles not in the calendar yet


def _add_route(state: dict[str, Any], rng: random.Random, origin: str, destination: str, day: str) -> None:
    """2-4 flights on one route and day, with distinct departures and prices unique in the whole world."""
    flights = state["flights"]
    if any(f["origin"] == origin and f["destination"] == destination and f["date"] == day for f in flights.values()):
        return
    n = rng.randint(2, 4)
    used_prices = {f["price"] for f in flights.values()}
    prices: list[int] = []
    while len(prices) < n:  # rejection sampling: a world has at most a few dozen fares
        if (p := rng.randint(49, 479)) not in used_prices:
            used_prices.add(p)
            prices.append(p)
    departs = rng.sample(range(6 * 60, 19 * 60 + 31, 5), n)
    base = rng.randrange(70, 225, 5)
    for price, dep in zip(prices, departs, strict=True):
        code, airline = rng.choice(_AIRLINES)
        while (fid := f"{code}{rng.randint(100, 999)}") in flights:
            pass
        flights[fid] = {
            "airline": airline,
            "origin": origin,
            "destination": destination,
            "date": day,
            "depart": _clock(dep),
            "arrive": _clock(dep + base + rng.choice([-10, -5, 0, 5, 10, 15])),
            "price": price,
            "seats_left": rng.randint(1, 9),
        }


def _free_slot(
    rng: random.Random,
    state: dict[str, Any],
    day: str,
    duration: int,
    exclude: str | None = None,
    avoid_start: int | None = None,
) -> int:
    """A random start (on the half hour, 08:00-20:00) where ``duration`` minutes fit between the day's events."""
    busy = [
        (_minutes(e["start"]), _minutes(e["end"]))
        for eid, e in state["events"].items()
        if e["date"] == day and eid != exclude
    ]
    options = [
        s
        for s in range(8 * 60, 20 * 60 - duration + 1, 30)
        if s != avoid_start and all(s + duration <= lo or s >= hi for lo, hi in busy)
    ]
    if not options:
        raise RuntimeError(f"no free {duration}-minute slot on {day}")  # cannot happen with <= 3 short events
    return rng.choice(options)


def _world(rng: random.Random, split: str) -> _World:
    cities = rng.sample(_CITIES[split], 5)
    first = dt.date(2026, 1, 5) + dt.timedelta(days=rng.randrange(330))
    dates = [(first + dt.timedelta(days=d)).isoformat() for d in sorted(rng.sample(range(12), 3))]
    names: list[str] = []
    while len(names) < 4:
        name = f"{rng.choice(_FIRST[split])} {rng.choice(LAST_NAMES[split])}"
        if name not in names:
            names.append(name)
    state: dict[str, Any] = {
        "cities": sorted(cities),
        "flights": {},
        "bookings": {},
        "events": {},
        "next_booking": rng.randint(1000, 8999),
        "next_event": rng.randint(100, 899),
    }
    routes: list[tuple[str, str, str]] = []
    while len(routes) < 4:
        origin, destination = rng.sample(cities, 2)
        route = (origin, destination, rng.choice(dates))
        if route not in routes:
            _add_route(state, rng, *route)
            routes.append(route)

    titles = rng.sample(_TITLES[split], len(_TITLES[split]))
    for day in dates:  # every day has 1-3 events, so listing a day always reveals something specific
        for _ in range(rng.randint(1, 3)):
            duration = rng.choice([30, 45, 60, 90, 120])
            start = _free_slot(rng, state, day, duration)
            state["events"][f"EV-{state['next_event']}"] = {
                "title": titles.pop(),
                "date": day,
                "start": _clock(start),
                "end": _clock(start + duration),
            }
            state["next_event"] += 1

    flight_ids = sorted(state["flights"])
    for owner in names[:2]:
        # Distinct destinations per owner, so "my booking to X" names exactly one booking.
        seen: set[str] = set()
        for fid in rng.sample(flight_ids, rng.randint(1, 3)):
            dest = state["flights"][fid]["destination"]
            if dest in seen:
                continue
            status = "confirmed" if not seen or rng.random() < 0.7 else "cancelled"
            seen.add(dest)
            state["bookings"][f"BK-{state['next_booking']}"] = {
                "flight_id": fid,
                "passenger": owner,
                "status": status,
                "price": state["flights"][fid]["price"],
            }
            state["next_booking"] += 1
    return _World(state, cities, dates, names, routes, titles)


# ------------------------------------------------------------------------------ phrasings
_T = {
    "list_day": {
        "train": ["What's on my calendar on {date}?", "Which events do I have on {date}?"],
        "test": ["Could you run me through my schedule for {date}?"],
    },
    "add_event": {
        "train": [
            'Add "{title}" to my calendar on {date} from {start} to {end}.',
            'Please put "{title}" in my calendar: {date}, {start}-{end}.',
        ],
        "test": ['Block {start} to {end} on {date} for "{title}", please.'],
    },
    "booking_lookup": {
        "train": [
            "Which flight is booking {bid} for, and when does it depart?",
            "Look up booking {bid}: what's the flight number and departure time?",
        ],
        "test": ["I have reservation {bid}. Remind me of its flight and what time it leaves."],
    },
    "book_cheapest": {
        "train": [
            "Book me the cheapest flight from {origin} to {destination} on {date}. The passenger is {name}.",
            "Please book the lowest-fare flight {origin} -> {destination} on {date} for {name} and give "
            "me the booking reference.",
        ],
        "test": [
            "{name} needs to get from {origin} to {destination} on {date}; reserve whichever flight costs the least."
        ],
    },
    "book_earliest": {
        "train": [
            "Book the earliest flight from {origin} to {destination} on {date} for {name}.",
            "I need the first departure of the day from {origin} to {destination} on {date}. Book it "
            "for {name}, please.",
        ],
        "test": ["Get {name} a seat on the first flight leaving {origin} for {destination} on {date}."],
    },
    "cancel_booking": {
        "train": [
            "I'm {name}. Cancel my booking for the flight to {destination} and tell me the refund.",
            "This is {name}: my trip to {destination} is off. Please cancel that booking and let me know "
            "how much I get back.",
        ],
        "test": [
            "{name} here. I won't be flying to {destination} after all -- cancel it and tell me what gets refunded."
        ],
    },
    "delete_event": {
        "train": ['Delete "{title}" from my calendar on {date}.', 'Please remove the "{title}" event on {date}.'],
        "test": ['"{title}" on {date} is cancelled; take it off my calendar.'],
    },
    "compare_routes": {
        "train": [
            "On {date}, what's the cheapest fare from {origin} to {destinations}? Give me the price for each.",
            "Compare the lowest prices for flights from {origin} to {destinations} on {date}.",
        ],
        "test": [
            "I'm flexible on where to go from {origin} on {date}: how much is the cheapest ticket to {destinations}?"
        ],
    },
    "two_days": {
        "train": ["What do I have on my calendar on {dates}?", "List my events for {dates}."],
        "test": ["Give me an overview of my appointments on {dates}."],
    },
    "followup_book": {
        "train": [
            "Which is the cheapest flight from {origin} to {destination} on {date}?",
            "What's the lowest fare from {origin} to {destination} on {date}, and which flight is it?",
        ],
        "test": ["Find me the least expensive flight {origin} to {destination} for {date}."],
    },
    "followup_book_2": {
        "train": ["Great, book it for {name}.", "Perfect. Now also book that flight for {name}, please."],
        "test": ["Sounds good -- reserve it in the name of {name}."],
    },
    "followup_calendar": {
        "train": ["What's on my calendar on {date}?", "Show me my events on {date}."],
        "test": ["How does my day look on {date}?"],
    },
    "followup_calendar_2": {
        "train": [
            'And now also add "{title}" that day from {start} to {end}.',
            'Thanks. Please also put "{title}" on the same day, {start} to {end}.',
        ],
        "test": ['OK, then squeeze in "{title}" from {start} until {end} that day.'],
    },
    "no_tool": {
        "train": [
            "My booking reference for the {city} trip is {ref}. No need to look anything up -- just read the "
            "reference back to me.",
            "Note this down: my {city} flight reference is {ref}. Don't search or book anything, just "
            "confirm the reference.",
        ],
        "test": ["Please simply repeat my {city} booking code back to me, no lookups: {ref}."],
    },
    "book_and_calendar": {
        "train": [
            "Book the cheapest flight from {origin} to {destination} on {date} for {name}, and add it to "
            'my calendar as "{title}" from departure to arrival.',
            "Reserve the lowest-priced {origin} to {destination} flight on {date} for {name}, then put "
            'it in my calendar titled "{title}", spanning its departure to arrival time.',
        ],
        "test": [
            "{name} wants the least expensive flight {origin}-{destination} on {date}. Book it and block "
            'its flight time in my calendar as "{title}".'
        ],
    },
    "reschedule": {
        "train": [
            'Move "{title}" on {date} so that it starts at {start}; keep the same length.',
            'Please reschedule my "{title}" on {date} to begin at {start} instead, same duration.',
        ],
        "test": ['Shift "{title}" ({date}) to a {start} start, keeping how long it lasts.'],
    },
}

# Kind -> weight. Single call 20, multi-step dependent 30, parallel 15, multi-turn 15, no tool 10, other 10.
_KINDS = [
    ("list_day", 7),
    ("add_event", 7),
    ("booking_lookup", 6),
    ("book_cheapest", 12),
    ("book_earliest", 6),
    ("cancel_booking", 6),
    ("delete_event", 6),
    ("compare_routes", 8),
    ("two_days", 7),
    ("followup_book", 8),
    ("followup_calendar", 7),
    ("no_tool", 10),
    ("book_and_calendar", 5),
    ("reschedule", 5),
]
CATEGORIES = {
    "single": ("list_day", "add_event", "booking_lookup"),
    "dependent": ("book_cheapest", "book_earliest", "cancel_booking", "delete_event"),
    "parallel": ("compare_routes", "two_days"),
    "multi_turn": ("followup_book", "followup_calendar"),
    "no_tool": ("no_tool",),
    "other": ("book_and_calendar", "reschedule"),
}

READ = ["call_match", "answer_match"]
WRITE = ["call_match", "state_match"]
WRITE_REPORT = ["call_match", "state_match", "answer_match"]


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _events_text(events: list[dict[str, Any]]) -> str:
    return "; ".join(f"{e['title']} ({e['start']}-{e['end']})" for e in events)


# ------------------------------------------------------------------------------ task kinds
@dataclass
class _Ctx:
    rng: random.Random
    split: str
    world: _World

    @property
    def state(self) -> dict[str, Any]:
        return self.world.state

    def t(self, key: str, **kw: Any) -> str:
        return pick_template(self.rng, _T[key], self.split).format(**kw)

    def recorder(self) -> ReferenceRecorder:
        # Created only once the initial state is final: the recorder snapshots it.
        return ReferenceRecorder(TravelToolkit, self.state, BACKEND)

    def event_on(self, day: str | None = None) -> tuple[str, dict[str, Any]]:
        pool = sorted((eid, e) for eid, e in self.state["events"].items() if day is None or e["date"] == day)
        return self.rng.choice(pool)


_Built = tuple[ReferenceRecorder, list[str], list[str]]


def _k_list_day(c: _Ctx) -> _Built:
    day = c.rng.choice(c.world.dates)
    rec = c.recorder()
    (events,) = rec.step(("list_events", {"date": day}))
    rec.turn(f"On {day} you have: {_events_text(events)}.", [e["title"] for e in events])
    return rec, [c.t("list_day", date=day)], READ


def _k_add_event(c: _Ctx) -> _Built:
    day, title = c.rng.choice(c.world.dates), c.world.spare_titles[0]
    duration = c.rng.choice([30, 60, 90])
    start = _free_slot(c.rng, c.state, day, duration)
    args = {"title": title, "date": day, "start": _clock(start), "end": _clock(start + duration)}
    rec = c.recorder()
    (ev,) = rec.step(("create_event", args))
    rec.turn(f'Added "{title}" on {day}, {ev["start"]}-{ev["end"]} (event {ev["event_id"]}).')
    return rec, [c.t("add_event", **args)], WRITE


def _k_booking_lookup(c: _Ctx) -> _Built:
    bid = c.rng.choice(sorted(c.state["bookings"]))
    rec = c.recorder()
    (b,) = rec.step(("get_booking", {"booking_id": bid}))
    f = b["flight"]
    rec.turn(
        f"Booking {bid} ({b['status']}) is on flight {f['flight_id']} from {f['origin']} to "
        f"{f['destination']}, departing {f['date']} at {f['depart']}.",
        [f["flight_id"], f["depart"]],
    )
    return rec, [c.t("booking_lookup", bid=bid)], READ


def _k_book_by(criterion: str) -> Callable[[_Ctx], _Built]:
    # Cheapest is unique (prices are unique in a world); earliest is unique (departures are distinct).
    pick = (lambda fs: min(fs, key=lambda f: f["price"])) if criterion == "cheapest" else (lambda fs: fs[0])

    def build(c: _Ctx) -> _Built:
        origin, destination, day = c.rng.choice(c.world.routes)
        name = c.world.names[2]
        rec = c.recorder()
        (flights,) = rec.step(("search_flights", {"origin": origin, "destination": destination, "date": day}))
        best = pick(flights)
        (bk,) = rec.step(("book_flight", {"flight_id": best["flight_id"], "passenger": name}))
        rec.turn(
            f"Booked {best['flight_id']} ({best['depart']}-{best['arrive']}, {best['price']} EUR) for {name}; "
            f"booking reference {bk['booking_id']}.",
            [bk["booking_id"]],
        )
        turns = [c.t(f"book_{criterion}", origin=origin, destination=destination, date=day, name=name)]
        return rec, turns, WRITE_REPORT

    return build


def _k_cancel_booking(c: _Ctx) -> _Built:
    # World building gives each owner distinct destinations and a confirmed first booking.
    confirmed = sorted((bid, b) for bid, b in c.state["bookings"].items() if b["status"] == "confirmed")
    bid, b = c.rng.choice(confirmed)
    destination = c.state["flights"][b["flight_id"]]["destination"]
    rec = c.recorder()
    (mine,) = rec.step(("find_bookings", {"passenger": b["passenger"]}))
    target = next(x["booking_id"] for x in mine if x["destination"] == destination)
    (res,) = rec.step(("cancel_booking", {"booking_id": target}))
    rec.turn(f"Booking {target} to {destination} is cancelled; you get {res['refund']} EUR back.", [str(res["refund"])])
    return rec, [c.t("cancel_booking", name=b["passenger"], destination=destination)], WRITE_REPORT


def _k_delete_event(c: _Ctx) -> _Built:
    _, ev = c.event_on()
    rec = c.recorder()
    (events,) = rec.step(("list_events", {"date": ev["date"]}))
    target = next(e["event_id"] for e in events if e["title"] == ev["title"])
    rec.step(("delete_event", {"event_id": target}))
    rec.turn(f'Deleted "{ev["title"]}" ({target}) from {ev["date"]}.')
    return rec, [c.t("delete_event", title=ev["title"], date=ev["date"])], WRITE


def _k_compare_routes(c: _Ctx) -> _Built:
    origin = c.rng.choice(c.world.cities)
    destinations = c.rng.sample([x for x in c.world.cities if x != origin], c.rng.choice([2, 2, 3]))
    day = c.rng.choice(c.world.dates)
    for destination in destinations:
        _add_route(c.state, c.rng, origin, destination, day)
    rec = c.recorder()
    results = rec.step(*[("search_flights", {"origin": origin, "destination": d, "date": day}) for d in destinations])
    cheapest = [min(fs, key=lambda f: f["price"]) for fs in results]
    parts = [f"{d}: {f['price']} EUR ({f['flight_id']})" for d, f in zip(destinations, cheapest, strict=True)]
    rec.turn(f"Cheapest fares from {origin} on {day}: " + "; ".join(parts) + ".", [str(f["price"]) for f in cheapest])
    return rec, [c.t("compare_routes", origin=origin, destinations=_join(destinations), date=day)], READ


def _k_two_days(c: _Ctx) -> _Built:
    days = sorted(c.rng.sample(c.world.dates, c.rng.choice([2, 2, 3])))
    rec = c.recorder()
    results = rec.step(*[("list_events", {"date": d}) for d in days])
    rec.turn(
        " ".join(f"{d}: {_events_text(evs)}." for d, evs in zip(days, results, strict=True)),
        [e["title"] for evs in results for e in evs],
    )
    return rec, [c.t("two_days", dates=_join(days))], READ


def _k_followup_book(c: _Ctx) -> _Built:
    origin, destination, day = c.rng.choice(c.world.routes)
    name = c.world.names[2]
    rec = c.recorder()
    (flights,) = rec.step(("search_flights", {"origin": origin, "destination": destination, "date": day}))
    best = min(flights, key=lambda f: f["price"])
    rec.turn(
        f"The cheapest is {best['flight_id']} ({best['airline']}), departing {best['depart']}, for "
        f"{best['price']} EUR.",
        [best["flight_id"], str(best["price"])],
    )
    (bk,) = rec.step(("book_flight", {"flight_id": best["flight_id"], "passenger": name}))
    rec.turn(f"Booked {best['flight_id']} for {name}: booking reference {bk['booking_id']}.", [bk["booking_id"]])
    turns = [c.t("followup_book", origin=origin, destination=destination, date=day), c.t("followup_book_2", name=name)]
    return rec, turns, WRITE_REPORT


def _k_followup_calendar(c: _Ctx) -> _Built:
    day, title = c.rng.choice(c.world.dates), c.world.spare_titles[0]
    duration = c.rng.choice([30, 45, 60, 90])
    start = _free_slot(c.rng, c.state, day, duration)
    rec = c.recorder()
    (events,) = rec.step(("list_events", {"date": day}))
    rec.turn(f"On {day} you have: {_events_text(events)}.", [e["title"] for e in events])
    args = {"title": title, "date": day, "start": _clock(start), "end": _clock(start + duration)}
    (ev,) = rec.step(("create_event", args))
    rec.turn(f'Added "{title}" on {day}, {ev["start"]}-{ev["end"]} ({ev["event_id"]}).')
    turns = [
        c.t("followup_calendar", date=day),
        c.t("followup_calendar_2", title=title, start=args["start"], end=args["end"]),
    ]
    return rec, turns, WRITE_REPORT


def _k_no_tool(c: _Ctx) -> _Built:
    # A reference that is in no booking table: only the user message holds it.
    ref = f"BK-{c.rng.randint(10000, 99999)}"
    city = c.rng.choice(c.world.cities)
    rec = c.recorder()
    rec.turn(f"Your {city} booking reference is {ref}.", [ref])
    return rec, [c.t("no_tool", city=city, ref=ref)], READ


def _k_book_and_calendar(c: _Ctx) -> _Built:
    origin, destination, day = c.rng.choice(c.world.routes)
    name, title = c.world.names[2], f"Flight to {destination}"
    best_id = min(
        (
            fid
            for fid, f in c.state["flights"].items()
            if (f["origin"], f["destination"], f["date"]) == (origin, destination, day)
        ),
        key=lambda fid: c.state["flights"][fid]["price"],
    )
    best = c.state["flights"][best_id]
    lo, hi = _minutes(best["depart"]), _minutes(best["arrive"])
    # Clear the flight's time window in the calendar, so the requested event is valid.
    for eid, e in list(c.state["events"].items()):
        if e["date"] == day and lo < _minutes(e["end"]) and _minutes(e["start"]) < hi:
            del c.state["events"][eid]
    rec = c.recorder()
    (flights,) = rec.step(("search_flights", {"origin": origin, "destination": destination, "date": day}))
    cheapest = min(flights, key=lambda f: f["price"])
    bk, ev = rec.step(
        ("book_flight", {"flight_id": cheapest["flight_id"], "passenger": name}),
        ("create_event", {"title": title, "date": day, "start": cheapest["depart"], "end": cheapest["arrive"]}),
    )
    rec.turn(
        f"Booked {cheapest['flight_id']} for {name} (reference {bk['booking_id']}, {cheapest['price']} EUR) "
        f'and added "{title}" {ev["start"]}-{ev["end"]} on {day}.',
        [bk["booking_id"]],
    )
    turns = [c.t("book_and_calendar", origin=origin, destination=destination, date=day, name=name, title=title)]
    return rec, turns, WRITE_REPORT


def _k_reschedule(c: _Ctx) -> _Built:
    eid, ev = c.event_on()
    duration = _minutes(ev["end"]) - _minutes(ev["start"])
    start = _free_slot(c.rng, c.state, ev["date"], duration, exclude=eid, avoid_start=_minutes(ev["start"]))
    rec = c.recorder()
    (events,) = rec.step(("list_events", {"date": ev["date"]}))
    target = next(e["event_id"] for e in events if e["title"] == ev["title"])
    # Delete first: the new slot may overlap the old one.
    rec.step(("delete_event", {"event_id": target}))
    (new,) = rec.step(
        (
            "create_event",
            {"title": ev["title"], "date": ev["date"], "start": _clock(start), "end": _clock(start + duration)},
        )
    )
    rec.turn(f'"{ev["title"]}" on {ev["date"]} now runs {new["start"]}-{new["end"]} ({new["event_id"]}).')
    return rec, [c.t("reschedule", title=ev["title"], date=ev["date"], start=_clock(start))], WRITE


_BUILDERS: dict[str, Callable[[_Ctx], _Built]] = {
    "list_day": _k_list_day,
    "add_event": _k_add_event,
    "booking_lookup": _k_booking_lookup,
    "book_cheapest": _k_book_by("cheapest"),
    "book_earliest": _k_book_by("earliest"),
    "cancel_booking": _k_cancel_booking,
    "delete_event": _k_delete_event,
    "compare_routes": _k_compare_routes,
    "two_days": _k_two_days,
    "followup_book": _k_followup_book,
    "followup_calendar": _k_followup_calendar,
    "no_tool": _k_no_tool,
    "book_and_calendar": _k_book_and_calendar,
    "reschedule": _k_reschedule,
}


def _make(kind: str, rng: random.Random, split: str, task_id: str) -> Task:
    rec, turns, reward = _BUILDERS[kind](_Ctx(rng, split, _world(rng, split)))
    return rec.build(
        id=task_id, domain=DOMAIN, split=split, user_turns=turns, reward=reward, system=SYSTEM, metadata={"kind": kind}
    )


def generate(split: str, count: int, exclude: Sequence[Task] = ()) -> list[Task]:
    """``count`` deterministic tasks of ``split`` (one of ``_common.SPLITS``), none overlapping ``exclude``
    (``_common.generate_tasks``), each with its own small world."""
    kinds, weights = zip(*_KINDS, strict=True)
    return generate_tasks(DOMAIN, split, count, kinds, weights, _make, exclude)
